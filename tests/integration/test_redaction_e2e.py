"""Redaction through a real proxy: what reaches the sample files is what the policy says."""

from __future__ import annotations

import aiohttp
from helpers.agents import drained, proxy_url
from helpers.chat import CHAT

HEADERS = {
    "x-request-id": "req-for-jane.doe@corp.io",
    "x-llmwatch-conversation-id": "conv +14155550177",
    "x-llmwatch-category": "billing jane@corp.io",
}


async def post(agent, body) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(proxy_url(agent) + "/v1/chat/completions", json=body, headers=HEADERS) as resp:
            assert resp.status == 200
            await resp.read()


async def test_header_metadata_and_request_id_are_masked_in_stored_samples(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0})
    await post(agent, {**CHAT, "messages": [{"role": "user", "content": "I am jane@corp.io"}], "user": "jane@corp.io"})
    [record] = await drained(agent, 1)
    stored = str(record)
    # (The simulator's answer repeats a word of the prompt, "jane", which is no address.)
    assert "jane@" not in stored and "jane.doe" not in stored and "4155550177" not in stored
    assert record["metadata"] == {"conversation_id": "conv [PHONE]", "category": "billing [EMAIL]"}
    assert (
        record["client_request_id"] == "[EMAIL]"
    )  # the whole id is one address (its local part is "req-for-jane.doe")
    assert record["id"].startswith("llmw-")  # llmwatch's own id, which the scores refer to
    assert record["request"]["user"].startswith("sha256:")


async def test_scores_only_mode_stores_no_request_or_response_text(sim, make_agent):
    agent = await make_agent(
        sim.url,
        sampling={"rate": 1.0},
        redaction={"mode": "scores_only", "fields": {"metadata.conversation_id": "hash"}},
    )
    await post(agent, CHAT)
    [record] = await drained(agent, 1)
    assert record["request"] is None and record["response"] is None and record["redacted"] is True
    assert record["metadata"]["conversation_id"].startswith("sha256:")
    assert "roast" not in str(record)


async def test_a_bare_aws_secret_after_the_words_aws_secret_never_reaches_the_sample_files(sim, make_agent):
    # 40 base64 characters, no aws_secret_access_key= before them: found by the words before it.
    key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY9Xq2LmN8vT"
    agent = await make_agent(sim.url, sampling={"rate": 1.0})
    await post(agent, {**CHAT, "messages": [{"role": "user", "content": f"my aws secret is {key}, keep it safe"}]})
    [record] = await drained(agent, 1)
    assert key not in str(record) and "K7MDENG" not in str(record)
    assert "my aws secret is [SECRET], keep it safe" in str(record["request"])
