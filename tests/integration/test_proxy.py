"""The proxy is transparent: bodies, statuses, headers and streams pass untouched, through the real openai client."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import orjson
import pytest
from helpers.agents import drained, metric, proxy_url, scrape
from helpers.chat import CHAT, client
from helpers.engines import all_engines as proxy_engine  # noqa: F401  (every test on each engine, and C as a front door)
from helpers.engines import setting
from helpers.upstreams import echo_app, gated_stream_app, serve
from yarl import URL

from llmwatch.agent.apps.simulator.server import FAULT_HEADER


async def test_non_streaming_body_is_byte_identical_to_a_direct_call(sim, make_agent):
    agent = await make_agent(sim.url)
    direct = await client(sim.url).chat.completions.with_raw_response.create(**CHAT)
    proxied = await client(proxy_url(agent)).chat.completions.with_raw_response.create(**CHAT)
    assert proxied.status_code == direct.status_code == 200
    assert proxied.content == direct.content
    assert proxied.headers["content-type"] == direct.headers["content-type"]
    assert proxied.headers["x-model-version"] == "A"


async def test_streaming_body_is_byte_identical_to_a_direct_call(sim, make_agent):
    agent = await make_agent(sim.url)

    async def raw_stream(base: str) -> bytes:
        async with client(base).chat.completions.with_streaming_response.create(
            **CHAT, stream=True, stream_options={"include_usage": True}
        ) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            return b"".join([chunk async for chunk in resp.iter_bytes()])

    direct, proxied = await raw_stream(sim.url), await raw_stream(proxy_url(agent))
    assert proxied == direct
    assert proxied.endswith(b"data: [DONE]\n\n")


async def test_stream_is_relayed_chunk_by_chunk_not_buffered(make_agent):
    gate = asyncio.Event()
    runner, url = await serve(gated_stream_app(gate))
    try:
        agent = await make_agent(url)
        stream = await client(proxy_url(agent)).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        seen = []
        async for chunk in stream:
            seen.append(chunk.choices[0].delta.content)
            # Only now may the upstream finish: had the proxy waited for the whole body, we would never get here.
            gate.set()
        assert seen == ["first", " second"]
    finally:
        await runner.cleanup()


async def test_streamed_text_through_the_proxy_matches_the_non_streamed_answer(sim, make_agent):
    agent = await make_agent(sim.url)
    c = client(proxy_url(agent))
    whole = await c.chat.completions.create(**CHAT)
    parts = [
        ch.choices[0].delta.content or ""
        async for ch in await c.chat.completions.create(**CHAT, stream=True)
        if ch.choices
    ]
    assert "".join(parts) == whole.choices[0].message.content


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
async def test_error_statuses_and_bodies_pass_through(sim, make_agent, status):
    agent = await make_agent(sim.url)
    async with aiohttp.ClientSession() as http:
        results = []
        for base in (sim.url, proxy_url(agent)):
            async with http.post(
                base + "/v1/chat/completions", json=CHAT, headers={FAULT_HEADER: f"status={status}"}
            ) as resp:
                results.append((resp.status, resp.reason, await resp.read()))
    assert results[0] == results[1]
    assert results[1][0] == status
    with pytest.raises(openai.APIStatusError) as err:
        await client(proxy_url(agent)).chat.completions.create(**CHAT, extra_headers={FAULT_HEADER: f"status={status}"})
    assert err.value.status_code == status


async def test_unreachable_upstream_gives_502_with_a_clear_json_error(make_agent):
    agent = await make_agent("http://127.0.0.1:9")  # discard port: nothing listens there
    with pytest.raises(openai.APIStatusError) as err:
        await client(proxy_url(agent)).chat.completions.create(**CHAT)
    assert err.value.status_code == 502
    body = err.value.body
    assert body["type"] == "upstream_unavailable"
    assert "127.0.0.1:9" in body["message"] and "unreachable" in body["message"]
    samples = await scrape(agent)
    assert metric(samples, "llmwatch_proxy_errors_total", error_type="upstream_unavailable") == 1
    assert metric(samples, "gen_ai_client_operation_duration_seconds_count", error_type="upstream_unavailable") == 1


async def test_slow_upstream_beyond_read_timeout_gives_504(sim, make_agent):
    agent = await make_agent(sim.url, proxy={"read_timeout_s": 0.2})
    with pytest.raises(openai.APIStatusError) as err:
        await client(proxy_url(agent)).chat.completions.create(**CHAT, extra_headers={FAULT_HEADER: "slow_ms=1500"})
    assert err.value.status_code == 504
    assert err.value.body["type"] == "upstream_timeout"


async def test_every_method_path_query_header_and_body_is_forwarded_as_sent(make_agent):
    runner, url = await serve(echo_app())
    try:
        agent = await make_agent(url)
        body = b"\x00\x01 arbitrary \xff bytes"
        headers = {
            "Authorization": "Bearer sk-live-123",
            "X-Custom-Header": "Mixed Case Value",
            "Accept-Encoding": "gzip",
        }
        async with aiohttp.ClientSession(skip_auto_headers=("User-Agent", "Content-Type", "Accept")) as http:
            for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
                async with http.request(
                    method,
                    URL(proxy_url(agent) + "/custom/p%20ath?q=a%2Fb&x=1", encoded=True),
                    data=body if method != "GET" else None,
                    headers=headers,
                ) as resp:
                    assert resp.status == 200
                    seen = await resp.json()
                    assert resp.headers["X-Upstream-Custom"] == "Kept-As-Is"
                    assert resp.headers["Set-Cookie"] == "session=abc; Path=/"
                assert seen["method"] == method
                assert seen["raw_path"] == "/custom/p%20ath?q=a%2Fb&x=1"
                got = {k: v for k, v in seen["headers"] if k.lower() not in ("host", "content-length")}
                assert got == headers
                if method != "GET":
                    import hashlib

                    assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()
    finally:
        await runner.cleanup()


async def test_hop_by_hop_headers_are_not_forwarded(make_agent):
    runner, url = await serve(echo_app())
    try:
        agent = await make_agent(url)
        async with aiohttp.ClientSession() as http:
            async with http.get(
                proxy_url(agent) + "/x",
                headers={
                    "Connection": "keep-alive, X-Drop",
                    "Keep-Alive": "timeout=5",
                    "TE": "trailers",
                    "Proxy-Authorization": "Basic abc",
                },
            ) as resp:
                seen = await resp.json()
        names = {k.lower() for k, _ in seen["headers"]}
        assert not names & {"connection", "keep-alive", "te", "proxy-authorization"}
    finally:
        await runner.cleanup()


async def test_metrics_count_calls_tokens_ttft_and_cost(sim, make_agent):
    agent = await make_agent(sim.url)
    c = client(proxy_url(agent))
    usage_in = usage_out = 0
    for i in range(6):
        r = await c.chat.completions.create(**{**CHAT, "seed": i})
        usage_in += r.usage.prompt_tokens
        usage_out += r.usage.completion_tokens
    for i in range(4):
        async for ch in await c.chat.completions.create(
            **{**CHAT, "seed": 100 + i}, stream=True, stream_options={"include_usage": True}
        ):
            if ch.usage:
                usage_in += ch.usage.prompt_tokens
                usage_out += ch.usage.completion_tokens
    samples = await scrape(agent)
    labels = {"gen_ai_operation_name": "chat", "gen_ai_request_model": "sim-gpt-4o-mini", "model_version": "A"}
    assert metric(samples, "gen_ai_client_operation_duration_seconds_count", error_type="", **labels) == 10
    assert metric(samples, "gen_ai_server_time_to_first_token_seconds_count", **labels) == 4
    assert metric(samples, "gen_ai_client_token_usage_sum", gen_ai_token_type="input", **labels) == usage_in
    assert metric(samples, "gen_ai_client_token_usage_sum", gen_ai_token_type="output", **labels) == usage_out
    expected_cost = (usage_in * 0.15 + usage_out * 0.60) / 1e6
    assert metric(samples, "llmwatch_cost_usd_total", **labels) == pytest.approx(expected_cost, rel=1e-9)
    ttft_sum = metric(samples, "gen_ai_server_time_to_first_token_seconds_sum", **labels)
    duration_sum = metric(samples, "gen_ai_client_operation_duration_seconds_sum", **labels)
    assert 0 < ttft_sum < duration_sum


async def test_samples_carry_the_record_fields_and_no_secrets(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0})
    c = client(proxy_url(agent))
    prompt = "My email is jane@example.com, call +1 415-555-0134. How do I roast a chicken?"
    await c.chat.completions.create(
        model="sim-gpt-4o",
        messages=[{"role": "user", "content": prompt}],
        seed=3,
        extra_headers={"x-request-id": "req-abc"},
    )
    async for _ in await c.chat.completions.create(
        model="sim-gpt-4o", messages=[{"role": "user", "content": "Plan a trip"}], stream=True
    ):
        pass
    records = await drained(agent, 2)
    assert len(records) == 2
    first, second = sorted(records, key=lambda r: r["stream"])
    for field in ("request", "response", "model", "model_version", "status", "latency_ms", "ttft_ms", "timestamp"):
        assert field in first
    # The sample id is the proxy's own, one per call; the client's request id is kept beside it.
    assert first["client_request_id"] == "req-abc" and first["id"] != "req-abc" and first["id"] != second["id"]
    assert first["model"] == "sim-gpt-4o" and first["model_version"] == "A" and first["status"] == 200
    assert first["usage"]["input_tokens"] > 0 and first["cost_usd"] > 0
    assert (
        "jane@example.com" not in orjson.dumps(first).decode()
        and "[EMAIL]" in first["request"]["messages"][0]["content"]
    )
    assert "[PHONE]" in first["request"]["messages"][0]["content"]
    assert second["stream"] is True and second["ttft_ms"] > 0 and second["response"]["choices"][0]["message"]["content"]
    for record in records:
        text = orjson.dumps(record).decode()
        assert "sk-test-abcdefghijklmnopqrstuvwxyz" not in text and "authorization" not in text.lower()


async def test_redaction_can_be_turned_off(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, redaction={"enabled": False})
    await client(proxy_url(agent)).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "I am jane@example.com"}]
    )
    [record] = await drained(agent, 1)
    assert record["request"]["messages"][0]["content"] == "I am jane@example.com"
    assert record["redacted"] is False


async def test_errors_are_sampled_even_at_rate_zero(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 0.0})
    c = client(proxy_url(agent))
    await c.chat.completions.create(**CHAT)
    with pytest.raises(openai.APIStatusError):
        await c.chat.completions.create(**CHAT, extra_headers={FAULT_HEADER: "status=500"})
    [record] = await drained(agent, 1)
    assert record["status"] == 500 and record["sample_reason"] == "error" and record["error_type"] == "500"


async def test_embeddings_completions_and_responses_routes_are_captured(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0})
    c = client(proxy_url(agent))
    await c.embeddings.create(model="sim-text-embedding-3-small", input="hello world")
    await c.completions.create(model="sim-gpt-3.5-turbo-instruct", prompt="Once upon a time", max_tokens=20)
    await c.responses.create(model="sim-gpt-4o", input="Why is the sky blue?")
    records = await drained(agent, 3)
    ops = {r["operation"]: r for r in records}
    assert set(ops) == {"embeddings", "text_completion", "generate_content"}
    assert ops["embeddings"]["usage"]["input_tokens"] > 0
    assert ops["generate_content"]["usage"]["output_tokens"] > 0
    samples = await scrape(agent)
    assert (
        metric(samples, "gen_ai_client_operation_duration_seconds_count", gen_ai_operation_name="generate_content") == 1
    )


async def test_health_and_readiness_endpoints(sim, make_agent):
    agent = await make_agent(sim.url)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{agent.metrics_port}/healthz") as r:
            assert r.status == 200
        async with http.get(f"http://127.0.0.1:{agent.metrics_port}/readyz") as r:
            assert r.status == 200
            assert (await r.json())["checks"] == {"proxy_listening": True, "pipeline_alive": True}


async def test_the_engine_serving_calls_is_exposed(sim, make_agent, request):
    param = request.node.callspec.params["proxy_engine"]
    agent = await make_agent(sim.url)
    samples = await scrape(agent)
    engine, forward = setting(param)
    forwarding = "true" if forward else "false"
    assert metric(samples, "llmwatch_proxy_engine_info", engine=engine, forwarding=forwarding) == 1
    assert sum(v for (name, _), v in samples.items() if name == "llmwatch_proxy_engine_info") == 1
