"""The simulator, exercised through the real `openai` client and raw HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import openai
import pytest
from helpers.procs import Proc, simulator_url

from llmwatch.agent.apps.simulator.server import FAULT_HEADER, REFUSAL, SimProfile, start_simulator

ROOT = Path(__file__).resolve().parents[2]

# Zero rates so that answer-shape assertions never hit a random refusal or cut.
CLEAN = SimProfile(latency_scale=0, refusal_rate=0, invalid_json_rate=0, truncation_rate=0)

COOKING = "How do I cook a good tomato pasta sauce for dinner?"
COOKING_WORDS = {
    "simmer",
    "garlic",
    "pan",
    "oven",
    "recipe",
    "recipes",
    "roast",
    "pasta",
    "sauce",
    "salt",
    "baking",
    "onion",
    "chicken",
    "butter",
    "flour",
}


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@contextlib.asynccontextmanager
async def serve(profile: SimProfile = CLEAN, seed: int | None = 1234) -> AsyncIterator[Any]:
    sim = await start_simulator("127.0.0.1", 0, profile, seed=seed)
    client = openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="test", max_retries=0, timeout=10)
    try:
        yield sim, client
    finally:
        await client.close()
        await sim.close()


@pytest.fixture
async def sim_client() -> AsyncIterator[Any]:
    async with serve() as pair:
        yield pair


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


async def test_chat_non_streaming(sim_client: Any) -> None:
    sim, client = sim_client
    raw = await client.chat.completions.with_raw_response.create(model="sim-gpt-4o-mini", messages=user(COOKING))
    assert raw.headers["x-model-version"] == "A"
    resp = raw.parse()
    assert resp.object == "chat.completion"
    assert resp.id.startswith("chatcmpl-")
    assert resp.model == "sim-gpt-4o-mini"
    [choice] = resp.choices
    assert choice.index == 0 and choice.finish_reason == "stop"
    assert choice.message.role == "assistant" and len(choice.message.content.split()) > 20
    assert resp.usage.prompt_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


async def test_streaming_matches_non_streaming_and_usage(sim_client: Any) -> None:
    _, client = sim_client
    plain = await client.chat.completions.create(model="m", messages=user(COOKING), seed=7)
    stream = await client.chat.completions.create(
        model="m", messages=user(COOKING), seed=7, stream=True, stream_options={"include_usage": True}
    )
    chunks = [c async for c in stream]
    first, content, finals, usage_chunks = chunks[0], [], [], []
    for c in chunks[1:]:
        if not c.choices:
            usage_chunks.append(c)
        elif c.choices[0].finish_reason is not None:
            finals.append(c)
        else:
            content.append(c.choices[0].delta.content)
    assert first.object == "chat.completion.chunk"
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert "".join(content) == plain.choices[0].message.content
    assert [f.choices[0].finish_reason for f in finals] == ["stop"]
    [last] = usage_chunks
    assert chunks[-1] is last
    assert last.usage.completion_tokens == len(content) == plain.usage.completion_tokens
    assert last.usage.prompt_tokens == plain.usage.prompt_tokens
    assert {c.id for c in chunks} == {plain.id}


async def test_stream_without_include_usage_has_no_usage_chunk(sim_client: Any) -> None:
    _, client = sim_client
    stream = await client.chat.completions.create(model="m", messages=user("Plan a trip to Japan"), stream=True)
    chunks = [c async for c in stream]
    assert all(c.choices for c in chunks)
    assert all(getattr(c, "usage", None) is None for c in chunks)


async def test_n_choices(sim_client: Any) -> None:
    _, client = sim_client
    resp = await client.chat.completions.create(model="m", messages=user("Explain SQL joins"), n=3, seed=1)
    assert [c.index for c in resp.choices] == [0, 1, 2]
    stream = await client.chat.completions.create(
        model="m", messages=user("Explain SQL joins"), n=3, seed=1, stream=True, stream_options={"include_usage": True}
    )
    texts = ["", "", ""]
    async for c in stream:
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
    assert texts == [c.message.content for c in resp.choices]


async def test_legacy_completions(sim_client: Any) -> None:
    _, client = sim_client
    resp = await client.completions.create(model="m", prompt="Write SQL to join two tables", seed=3)
    assert resp.object == "text_completion" and resp.id.startswith("cmpl-")
    text = resp.choices[0].text
    assert words(text) & {"select", "join", "query", "table", "index", "rows", "transaction"}
    stream = await client.completions.create(
        model="m", prompt="Write SQL to join two tables", seed=3, stream=True, stream_options={"include_usage": True}
    )
    pieces, usage = [], None
    async for c in stream:
        if c.usage:
            usage = c.usage
        for ch in c.choices:
            if ch.finish_reason is None:
                pieces.append(ch.text)
    assert "".join(pieces) == text
    assert usage.completion_tokens == len(pieces) == resp.usage.completion_tokens


async def test_embeddings(sim_client: Any) -> None:
    _, client = sim_client
    # The client asks for base64 by default; ask for floats too.
    resp = await client.embeddings.create(model="m", input=["hello world", "goodbye", "hello world"])
    floats = await client.embeddings.create(model="m", input="hello world", encoding_format="float")
    assert [d.index for d in resp.data] == [0, 1, 2]
    assert all(d.object == "embedding" and len(d.embedding) == 8 for d in resp.data)
    assert resp.data[0].embedding == resp.data[2].embedding != resp.data[1].embedding
    assert floats.data[0].embedding == pytest.approx(resp.data[0].embedding, abs=1e-6)
    assert resp.usage.prompt_tokens == 5
    wide = await client.embeddings.create(model="m", input="hello", dimensions=64)
    assert len(wide.data[0].embedding) == 64


async def test_responses_api(sim_client: Any) -> None:
    _, client = sim_client
    # The Responses API has no `seed`; the simulator honours one sent as an extra.
    prompt = "How do telescopes help see distant galaxies?"
    resp = await client.responses.create(model="m", input=prompt, extra_body={"seed": 5})
    assert resp.object == "response" and resp.status == "completed" and resp.id.startswith("resp_")
    [message] = resp.output
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "output_text"
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens

    stream = await client.responses.create(model="m", input=prompt, extra_body={"seed": 5}, stream=True)
    events = [e async for e in stream]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(deltas) == resp.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == len(deltas)
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_responses_max_output_tokens(sim_client: Any) -> None:
    _, client = sim_client
    resp = await client.responses.create(model="m", input="Tell me about Saturn", max_output_tokens=16)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 16


async def test_models(sim_client: Any) -> None:
    _, client = sim_client
    ids = [m.id async for m in client.models.list()]
    assert "sim-gpt-4o-mini" in ids and "sim-gpt-4o" in ids


async def test_seed_gives_byte_identical_bodies(sim_client: Any, http: aiohttp.ClientSession) -> None:
    sim, _ = sim_client
    body = {"model": "m", "messages": user(COOKING), "seed": 42}
    stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}

    async def fetch(payload: dict[str, Any], path: str = "/v1/chat/completions") -> bytes:
        async with http.post(sim.url + path, json=payload) as r:
            assert r.status == 200
            return await r.read()

    assert await fetch(body) == await fetch(body)
    assert await fetch(stream_body) == await fetch(stream_body)
    assert await fetch({**body, "seed": 43}) != await fetch(body)
    responses_body = {"model": "m", "input": COOKING, "seed": 42, "stream": True}
    assert await fetch(responses_body, "/v1/responses") == await fetch(responses_body, "/v1/responses")
    # A simulator with another app seed agrees: the body and profile alone decide.
    async with serve(seed=999) as (other, _):
        async with http.post(other.url + "/v1/chat/completions", json=body) as r:
            assert await r.read() == await fetch(body)


async def test_json_mode_answers_parse(sim_client: Any) -> None:
    _, client = sim_client
    for seed in range(10):
        resp = await client.chat.completions.create(
            model="m",
            messages=user("Give me a budget tip as JSON"),
            seed=seed,
            response_format={"type": "json_object"},
        )
        obj = json.loads(resp.choices[0].message.content)
        assert isinstance(obj["answer"], str) and 0 < obj["confidence"] <= 1
        assert obj["topic"] == "finance"


async def test_invalid_json_rate() -> None:
    async with serve(replace(CLEAN, invalid_json_rate=1.0)) as (_, client):
        for seed in range(6):
            resp = await client.chat.completions.create(
                model="m", messages=user("Python list tips"), seed=seed, response_format={"type": "json_object"}
            )
            with pytest.raises(json.JSONDecodeError):
                json.loads(resp.choices[0].message.content)


async def test_max_tokens_truncates(sim_client: Any) -> None:
    _, client = sim_client
    resp = await client.chat.completions.create(model="m", messages=user(COOKING), max_tokens=5, seed=1)
    assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 5
    stream = await client.chat.completions.create(
        model="m",
        messages=user(COOKING),
        max_completion_tokens=5,
        seed=1,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 5
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


async def test_stop_sequence(sim_client: Any) -> None:
    _, client = sim_client
    full = await client.chat.completions.create(model="m", messages=user(COOKING), seed=2)
    word = full.choices[0].message.content.split()[3]
    cut = await client.chat.completions.create(model="m", messages=user(COOKING), seed=2, stop=[word])
    assert word not in cut.choices[0].message.content
    assert cut.choices[0].finish_reason == "stop"


async def test_fault_status(sim_client: Any) -> None:
    _, client = sim_client
    with pytest.raises(openai.InternalServerError) as err:
        await client.chat.completions.create(model="m", messages=user("hi"), extra_headers={FAULT_HEADER: "status=503"})
    assert err.value.status_code == 503
    assert err.value.response.headers["x-model-version"] == "A"
    assert err.value.body["type"] == "server_error"
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="m", messages=user("hi"), extra_headers={FAULT_HEADER: "status=429"})


async def test_fault_cut_after(sim_client: Any) -> None:
    _, client = sim_client
    stream = await client.chat.completions.create(
        model="m", messages=user(COOKING), stream=True, extra_headers={FAULT_HEADER: "cut_after=3"}
    )
    received = []
    with pytest.raises(openai.APIConnectionError):
        async for chunk in stream:
            received.append(chunk)
    assert [c.choices[0].delta.content is not None for c in received] == [True] * 4
    assert all(c.choices[0].finish_reason is None for c in received)
    with pytest.raises(openai.APIConnectionError):
        await client.chat.completions.create(
            model="m", messages=user(COOKING), extra_headers={FAULT_HEADER: "cut_after=3"}
        )
    # The server survives the cut connections.
    ok = await client.chat.completions.create(model="m", messages=user(COOKING))
    assert ok.choices[0].finish_reason == "stop"


async def test_fault_non_json(sim_client: Any, http: aiohttp.ClientSession) -> None:
    sim, _ = sim_client
    async with http.post(
        sim.url + "/v1/chat/completions",
        json={"model": "m", "messages": user("hi")},
        headers={FAULT_HEADER: "non_json"},
    ) as r:
        assert r.status == 200 and r.content_type == "text/plain"
        assert await r.text() == "upstream says hi"


async def test_fault_slow_and_no_usage(sim_client: Any) -> None:
    _, client = sim_client
    start = time.perf_counter()
    resp = await client.chat.completions.create(
        model="m", messages=user(COOKING), extra_headers={FAULT_HEADER: "slow_ms=150, no_usage"}
    )
    assert time.perf_counter() - start >= 0.15
    assert resp.usage is None and resp.choices[0].message.content
    stream = await client.chat.completions.create(
        model="m",
        messages=user(COOKING),
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={FAULT_HEADER: "no_usage"},
    )
    chunks = [c async for c in stream]
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


async def test_error_rate_and_refusal_rate() -> None:
    async with serve(replace(CLEAN, error_rate=1.0)) as (_, client):
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="m", messages=user("hi"))
    async with serve(replace(CLEAN, refusal_rate=1.0)) as (_, client):
        resp = await client.chat.completions.create(model="m", messages=user(COOKING))
        assert resp.choices[0].message.content == REFUSAL


async def test_bad_requests(sim_client: Any, http: aiohttp.ClientSession) -> None:
    sim, _ = sim_client
    async with http.post(
        sim.url + "/v1/chat/completions", data=b"{not json", headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 400
        body = await r.json()
    assert body["error"]["message"].startswith("We could not parse the JSON body of your request")
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"] is None and body["error"]["code"] is None
    for payload in ({"messages": user("hi")}, {"model": "m"}):
        async with http.post(sim.url + "/v1/chat/completions", json=payload) as r:
            assert r.status == 400
            assert (await r.json())["error"]["type"] == "invalid_request_error"
    async with http.post(sim.url + "/v1/nope", json={}) as r:
        assert r.status == 404 and "error" in await r.json()


async def test_profile_switch(sim_client: Any) -> None:
    sim, client = sim_client
    raw = await client.chat.completions.with_raw_response.create(model="m", messages=user("hi"))
    assert raw.headers["x-model-version"] == "A"
    sim.set_profile(replace(CLEAN, name="B"))
    raw = await client.chat.completions.with_raw_response.create(model="m", messages=user("hi"))
    assert raw.headers["x-model-version"] == "B"
    stream = await client.chat.completions.with_raw_response.create(model="m", messages=user("hi"), stream=True)
    assert stream.headers["x-model-version"] == "B"
    versions = iter(["C", "D"])
    sim.set_profile(lambda: replace(CLEAN, name=next(versions)))
    for expected in ("C", "D"):
        raw = await client.models.with_raw_response.list()
        assert raw.headers["x-model-version"] == expected


async def test_answers_are_on_topic_and_off_topic_is_not() -> None:
    async with serve() as (_, client):
        for seed in range(8):
            resp = await client.chat.completions.create(model="m", messages=user(COOKING), seed=seed)
            assert words(resp.choices[0].message.content) & COOKING_WORDS
    async with serve(replace(CLEAN, off_topic_rate=1.0)) as (_, client):
        for seed in range(8):
            resp = await client.chat.completions.create(model="m", messages=user(COOKING), seed=seed)
            assert not words(resp.choices[0].message.content) & COOKING_WORDS


async def test_on_topic_answers_name_what_was_asked_and_off_topic_ones_do_not() -> None:
    # The topic bank's paragraphs are about Python, not about tuples; the answer must say what it answers.
    question = "What is the difference between a list and a tuple in Python?"
    async with serve() as (_, client):
        for seed in range(4):
            resp = await client.chat.completions.create(model="m", messages=user(question), seed=seed)
            assert "tuple" in resp.choices[0].message.content
    async with serve(replace(CLEAN, off_topic_rate=1.0)) as (_, client):
        for seed in range(4):
            resp = await client.chat.completions.create(model="m", messages=user(question), seed=seed)
            assert "tuple" not in resp.choices[0].message.content.lower()


async def test_unknown_topic_restates_prompt(sim_client: Any) -> None:
    _, client = sim_client
    resp = await client.chat.completions.create(model="m", messages=user("What about zebras and quilts?"))
    assert "zebras" in resp.choices[0].message.content


async def test_answer_length_scale() -> None:
    async def mean_tokens(scale: float) -> float:
        async with serve(replace(CLEAN, answer_length_scale=scale)) as (_, client):
            totals = []
            for seed in range(30):
                r = await client.chat.completions.create(model="m", messages=user("Tips for a marathon"), seed=seed)
                totals.append(r.usage.completion_tokens)
            return sum(totals) / len(totals)

    ratio = await mean_tokens(0.7) / await mean_tokens(1.0)
    assert 0.55 < ratio < 0.85


async def test_latency_is_applied() -> None:
    profile = replace(CLEAN, latency_scale=1.0, ttft_ms=60.0, inter_token_ms=1.0)
    async with serve(profile) as (_, client):
        start = time.perf_counter()
        stream = await client.chat.completions.create(model="m", messages=user(COOKING), stream=True)
        first_content = None
        async for c in stream:
            if c.choices and c.choices[0].delta.content and first_content is None:
                first_content = time.perf_counter() - start
        assert first_content is not None and first_content > 0.02


async def test_standalone_process(http: aiohttp.ClientSession) -> None:
    proc = Proc(
        [
            sys.executable,
            "-m",
            "llmwatch.agent.apps.simulator",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--latency-scale",
            "0",
            "--profile",
            "B",
        ],
        cwd=str(ROOT),
    )
    try:
        url = await asyncio.to_thread(simulator_url, proc, 15)  # printed once it has bound port 0
        async with http.get(f"{url}/v1/models") as r:
            assert r.headers["x-model-version"] == "B"
    finally:
        proc.popen.terminate()
        code = proc.popen.wait(timeout=10)
        proc.stop()
    assert code == 0
