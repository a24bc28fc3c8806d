"""The ring of finished calls (design record 0067 step 3): a call C forwards reaches the proxy's
finish path and metrics as one the Python relay relays.

Each case goes once through the relay and once through the C front door with forwarding on, in
front of the same agent and scripted upstream (as tests/integration/test_native_forward.py). What
the proxy's finish path was handed (`CallFinished`: the `Exchange` and what the capture analysis read
of it) and what the metrics counted must be the same for both: the body bytes, status, the headers
captured, the request id and metadata, token counts, TTFT present for streams, the error types.
Only what cannot be equal is left out: the sample id (random), the times (but they must be on the
relay's clocks, in order) and where a body was split into pieces (the reads differ)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from time import perf_counter
from typing import Any

import orjson
import pytest
from helpers.agents import metric, scrape, wait_until
from helpers.native_forward import (
    ANSWERS,
    OK_HEAD,
    PLAIN,
    REQUESTS,
    SSE_HEAD,
    Respond,
    chunked,
    counted,
    fixed,
    forwarding_front,
    talk,
)
from helpers.raw_http import CHAT_BODY, OK_JSON, RawUpstream, post, read_body

from llmwatch.collectors.calls import CallFinished
from llmwatch.collectors.receivers.proxy import native

dataplane, why = native.load()
if dataplane is None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the extension is optional", allow_module_level=True)
    raise ImportError(why)

# The families the relay counts per call and per event.
COUNTED = (
    "llmwatch_proxy_errors_total",
    "llmwatch_capture_skipped_total",
    "gen_ai_client_operation_duration_seconds_count",
    "gen_ai_server_time_to_first_token_seconds_count",
    "gen_ai_client_token_usage_sum",
    "gen_ai_client_token_usage_count",
)


def counts(agent: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in agent.metrics.registry.collect()
        for s in family.samples
        if s.name in COUNTED
    }


def moved(before: dict, after: dict) -> dict:
    return {key: after[key] - before.get(key, 0.0) for key in after if after[key] != before.get(key, 0.0)}


def view(event: CallFinished) -> dict[str, Any]:
    """What must be the same through both engines."""
    ex, facts = event.exchange, event.facts
    return {
        "method": ex.method,
        "route": ex.route,
        # Without the client's or the upstream's id, the sampling hash reads the (random) sample id.
        "request_id": "<sample id>" if ex.request_id == ex.sample_id else ex.request_id,
        "client_request_id": ex.client_request_id,
        "request_body": ex.request_body,
        "request_encoding": ex.request_encoding,
        "metadata": ex.metadata,
        "notes": ex.notes,
        "status": ex.status,
        "response_headers": ex.response_headers,
        "body": b"".join(ex.response_chunks),
        "captured_bytes": ex.captured_bytes,
        "pieces_end_at": ex.chunk_ends[-1:] if ex.chunk_ends else [],
        "timed_pieces": len(ex.chunk_times) == len(ex.response_chunks) == len(ex.chunk_ends),
        "truncated": ex.response_truncated,
        "tail": ex.response_tail,
        "error_type": ex.error_type,
        "facts": {
            "operation": facts.operation,
            "model": facts.model,
            "response_model": facts.response_model,
            "stream": facts.stream,
            "status": facts.status,
            "error_type": facts.error_type,
            "ttft": facts.ttft_s is not None,
            "input_tokens": facts.input_tokens,
            "output_tokens": facts.output_tokens,
            "estimated": facts.tokens_estimated,
            "finish_reason": facts.finish_reason,
            "request": facts.request,
            "response": facts.response,
            "notes": facts.notes,
        },
    }


def on_the_relays_clocks(events: list[CallFinished], wall: tuple[float, float], mono: tuple[float, float]) -> None:
    """C's times are perf_counter's (CLOCK_MONOTONIC) and time.time()'s, in the relay's order."""
    for event in events:
        ex = event.exchange
        assert wall[0] <= ex.started_at <= wall[1]
        assert mono[0] <= ex.t0 <= ex.t_end <= mono[1]
        assert all(ex.t0 <= t <= ex.t_end for t in ex.chunk_times)
        assert ex.chunk_times == sorted(ex.chunk_times)


class Finished:
    """Every call the proxy finished, as its subscribers are told (the answer assembled, as for spans)."""

    def __init__(self, agent: Any) -> None:
        agent.proxy.flush()  # calls finished earlier and waiting for their batch are not this test's
        self.events: list[CallFinished] = []
        agent.proxy.finished.subscribe(self.events.append, wants_answer=True)

    def take(self) -> list[CallFinished]:
        taken, self.events[:] = list(self.events), []
        return taken


async def both(
    agent: Any, requests: list[bytes], calls: int, *, until: tuple[Any, ...] | None = None, **how: Any
) -> dict[str, Any]:
    """The requests once through the relay, once through C forwarding: what each client got, the
    calls the finish path was handed, and the metrics they moved (`until`: a series each pass
    must have moved, for calls that reach no finish path)."""
    finished = Finished(agent)
    before = counts(agent)
    expected = await talk(agent.proxy_port, requests, **how)
    await wait_until(lambda: len(finished.events) >= calls and (until is None or until in moved(before, counts(agent))))
    relay_events = finished.take()
    middle = counts(agent)
    wall0, mono0 = time.time(), perf_counter()
    async with forwarding_front(agent.proxy.relay) as (front, port):
        got = await talk(port, requests, **how)
        await wait_until(
            lambda: len(finished.events) >= calls and (until is None or until in moved(middle, counts(agent)))
        )
        stats = front.stats()
    c_events = finished.take()
    on_the_relays_clocks(c_events, (wall0, time.time()), (mono0, perf_counter()))
    return {
        "expected": expected,
        "got": got,
        "relay": [view(e) for e in relay_events],
        "c": [view(e) for e in c_events],
        "relay_counted": moved(before, middle),
        "c_counted": moved(middle, counts(agent)),
        "stats": stats,
    }


@pytest.mark.parametrize("case", sorted(ANSWERS))
async def test_each_answer_reaches_the_finish_path_as_the_relays_does(make_agent, case):
    answer, _ = ANSWERS[case]
    async with RawUpstream(answer) as upstream:
        agent = await make_agent(upstream.url)
        run = await both(agent, [PLAIN], 1)
    assert run["got"] == run["expected"]
    assert run["stats"]["handed"] == 0 and run["stats"]["captured"] == 1
    assert run["c"] == run["relay"] and len(run["relay"]) == 1
    assert run["c_counted"] == run["relay_counted"]


STREAM_USAGE = [
    b'data: {"id":"s","model":"m-1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
    *(b'data: {"id":"s","model":"m-1","choices":[{"index":0,"delta":{"content":"w%d "}}]}\n\n' % i for i in range(8)),
    b'data: {"id":"s","model":"m-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b'data: {"id":"s","model":"m-1","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":8,"total_tokens":19}}\n\n',
    b"data: [DONE]\n\n",
]
JSON_USAGE = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": "m-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
    }
)
STREAM_BODY = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
REAL: dict[str, tuple[Respond, bytes]] = {
    "stream-with-usage": (
        fixed(
            SSE_HEAD[:-2] + b"X-Request-Id: up-7\r\nX-Model-Version: v3\r\nX-Ratelimit-Remaining-Requests: 99\r\n\r\n",
            *chunked(STREAM_USAGE),
        ),
        post(
            "/v1/chat/completions",
            STREAM_BODY,
            "X-Llmwatch-Category: qa  ",  # llhttp keeps trailing blanks in a value, drops leading ones
            "X-Llmwatch-Conversation-Id:conv-1",
        ),
    ),
    "json-with-usage": (
        fixed(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nX-Request-Id: up-8\r\nContent-Length: %d\r\n\r\n"
            % len(JSON_USAGE),
            JSON_USAGE[:30],
            JSON_USAGE[30:],
        ),
        post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: client-9", "X-Request-Id: second"),
    ),
    "embeddings": (
        fixed(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"),
        post("/v1/embeddings", b'{"model": "e", "input": "x"}'),
    ),
    "rate-limited": (
        fixed(
            b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
            b'Content-Length: 25\r\n\r\n{"error": {"code": "rl"}}'
        ),
        PLAIN,
    ),
}


@pytest.mark.parametrize("case", sorted(REAL))
async def test_token_counts_ttft_headers_and_metadata_are_the_relays(make_agent, case):
    answer, request = REAL[case]
    async with RawUpstream(answer) as upstream:
        agent = await make_agent(upstream.url)
        run = await both(agent, [request], 1)
    assert run["got"] == run["expected"]
    assert run["c"] == run["relay"]
    assert run["c_counted"] == run["relay_counted"]
    facts = run["c"][0]["facts"]
    if case == "stream-with-usage":
        assert facts["stream"] and facts["ttft"] and (facts["input_tokens"], facts["output_tokens"]) == (11, 8)
        assert run["c"][0]["metadata"] == {"category": "qa  ", "conversation_id": "conv-1"}
        assert run["c"][0]["response_headers"]["x-model-version"] == "v3"
    if case == "json-with-usage":
        assert run["c"][0]["request_id"] == "client-9"  # the first of two, as the relay reads it
        assert (facts["input_tokens"], facts["output_tokens"]) == (7, 1)


@pytest.mark.parametrize("case", sorted(REQUESTS))
async def test_every_call_of_a_connection_reaches_the_finish_path_in_order(make_agent, case):
    requests, how = REQUESTS[case]
    async with RawUpstream(ANSWERS["stream"][0]) as upstream:
        agent = await make_agent(upstream.url.replace("http://", "http://user:secret@") + "/base")
        captured = sum(1 for r in requests if b" /v1/models" not in r.split(b"\r\n", 1)[0])
        run = await both(agent, requests, captured, **how)
    assert run["got"] == run["expected"]
    assert run["c"] == run["relay"] and len(run["c"]) == captured
    assert run["c_counted"] == run["relay_counted"]


async def test_bodies_over_the_capture_cap_are_truncated_as_the_relay_truncates_them(make_agent):
    big_answer = [b"data: " + b"x" * 700 + b"\n\n" for _ in range(6)] + [b"data: [DONE]\n\n"]
    big_request = post("/v1/chat/completions", b'{"model": "m", "pad": "' + b"p" * 2000 + b'"}')
    async with RawUpstream(fixed(SSE_HEAD, *chunked(big_answer))) as upstream:
        agent = await make_agent(upstream.url, capture={"max_body_bytes": 1024})
        run = await both(agent, [big_request, PLAIN], 2)
    assert run["got"] == run["expected"]
    assert run["c"] == run["relay"]
    first = run["c"][0]
    assert first["truncated"] and first["tail"].endswith(b"data: [DONE]\n\n") and "request_too_large" in first["notes"]
    assert run["c_counted"] == run["relay_counted"]


async def test_failed_calls_are_counted_and_finished_as_the_relay_does(make_agent):
    """502 unreachable, on a captured route and another; the relay's metrics and Exchanges."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port_closed = closed.getsockname()[1]
    agent = await make_agent(f"http://127.0.0.1:{port_closed}")
    get = b"GET /v1/models HTTP/1.1\r\nHost: h\r\n\r\n"
    run = await both(agent, [PLAIN, get, PLAIN], 2)
    assert run["got"] == run["expected"]
    assert run["c"] == run["relay"] and [c["error_type"] for c in run["c"]] == ["upstream_unavailable"] * 2
    assert run["c_counted"] == run["relay_counted"]
    assert run["c_counted"][errors("upstream_unavailable")] == 3
    # A 502 on a route not captured, alone: C's count wakes Python by itself.
    run = await both(agent, [get], 0, until=errors("upstream_unavailable"))
    assert run["got"] == run["expected"] and run["c"] == run["relay"] == []
    assert run["c_counted"] == run["relay_counted"] == {errors("upstream_unavailable"): 1}


async def test_a_read_deadline_and_a_body_deadline_are_counted_as_the_relays(make_agent):
    release = asyncio.Event()

    async def silent(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        await release.wait()

    async def stalled(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(PLAIN[:-5])
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()

    async with RawUpstream(silent) as upstream:
        agent = await make_agent(upstream.url, proxy={"read_timeout_s": 0.5, "body_timeout_s": 0.5})
        run = await both(agent, [PLAIN], 1)
        assert run["got"] == run["expected"] and b" 504 " in run["got"][0]
        assert run["c"] == run["relay"] and run["c"][0]["error_type"] == "upstream_timeout"
        assert run["c_counted"] == run["relay_counted"]

        finished = Finished(agent)
        before = counts(agent)
        expected = await stalled(agent.proxy_port)
        await wait_until(lambda: len(finished.events) == 1)
        relay_view = [view(e) for e in finished.take()]
        middle = counts(agent)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got = await stalled(port)
            await wait_until(lambda: len(finished.events) == 1)
        release.set()
    assert got == expected and got.startswith(b"HTTP/1.1 408 ")
    assert [view(e) for e in finished.take()] == relay_view and relay_view[0]["error_type"] == "client_body_timeout"
    assert moved(middle, counts(agent)) == moved(before, middle)


def errors(kind: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("llmwatch_proxy_errors_total", (("error_type", kind),))


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/other"])
async def test_an_upstream_gone_mid_stream_and_a_client_gone_mid_stream_are_the_relays(make_agent, path):
    """On a captured route (its Exchange judged in Python) and on another (C's count alone, which
    must wake Python by itself: no record follows it)."""
    request = post(path, CHAT_BODY)
    calls = 1 if path == "/v1/chat/completions" else 0
    gone_upstream = fixed(SSE_HEAD, *chunked([b"data: 1\n\n"])[:1], close=True)
    release = asyncio.Event()
    piece = b"data: " + b"y" * 65536 + b"\n\n"

    async def long_stream(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(SSE_HEAD + chunked([b"data: first\n\n"])[0])
        await writer.drain()
        await release.wait()
        for _ in range(400):  # until the proxy gives up on the client and closes this connection
            writer.write(chunked([piece])[0])
            await writer.drain()

    async def leave_after_first(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"data: first\n\n\r\n"), 10)
        finally:
            writer.transport.abort()  # a reset: the proxy's next write to it fails
        release.set()
        return head

    async with RawUpstream(gone_upstream) as upstream:
        agent = await make_agent(upstream.url)
        run = await both(agent, [request], calls, until=errors("stream_interrupted"))
    assert run["got"] == run["expected"] and run["got"][0].endswith(b"<cut>")
    assert run["c"] == run["relay"] and [c["error_type"] for c in run["c"]] == ["stream_interrupted"] * calls
    assert run["c_counted"] == run["relay_counted"]

    async with RawUpstream(long_stream) as upstream:
        agent = await make_agent(upstream.url)
        finished = Finished(agent)
        before = counts(agent)
        key = errors("client_disconnected")
        expected = await leave_after_first(agent.proxy_port)
        await wait_until(lambda: len(finished.events) == calls and key in moved(before, counts(agent)))
        relay_errors = [e.exchange.error_type for e in finished.take()]
        middle = counts(agent)
        release.clear()
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got = await leave_after_first(port)
            await wait_until(lambda: len(finished.events) == calls and key in moved(middle, counts(agent)))
        c_errors = [e.exchange.error_type for e in finished.take()]
    assert got == expected
    assert c_errors == relay_errors == ["client_disconnected"] * calls
    relay_counted, c_counted = moved(before, middle), moved(middle, counts(agent))
    assert c_counted == relay_counted and c_counted[key] == 1


async def test_a_full_ring_relays_the_calls_and_counts_their_capture_as_lost(make_agent):
    """Python not draining (its reader not registered: an event loop that far behind), a ring of
    two: every client still gets its whole answer, the two calls in the ring reach the finish path
    when it drains, and the others are counted as capture_skipped{reason="ring_full"}."""
    async with RawUpstream(fixed(OK_HEAD + OK_JSON)) as upstream:
        agent = await make_agent(upstream.url)
        expected = await talk(agent.proxy_port, [PLAIN] * 5)
        finished = Finished(agent)
        before = counts(agent)
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            front = native.NativeFront(agent.proxy.relay, listener, forward=True, ring_capacity=2)
            front.front.start()  # the C thread only: nothing drains until `_take` below
            try:
                got = await talk(listener.getsockname()[1], [PLAIN] * 5)
                await counted(front, forwarded=5, captured=2, ring_full=3)
                assert finished.events == []
                front._take()
                await wait_until(lambda: len(finished.events) == 2)
            finally:
                front.front.stop()
        assert got == expected
        assert moved(before, counts(agent))[("llmwatch_capture_skipped_total", (("reason", "ring_full"),))] == 3
        assert [e.exchange.request_id for e in finished.events] == ["fwd-1", "fwd-1"]


async def test_a_ring_past_its_byte_bound_relays_the_calls_and_counts_their_capture_as_lost(make_agent):
    """As a full ring, by bytes: records of a 4 KiB answer (about 5 KiB each), a ring of 256
    records but 12 KiB, Python not draining: two records fit, the other three calls are relayed
    whole and their capture counted as ring_full; drained, the bytes are free again. Before:
    bounded by count only."""
    body = b'{"pad":"' + b"x" * (4096 - 10) + b'"}'
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    async with RawUpstream(fixed(head + body)) as upstream:
        agent = await make_agent(upstream.url)
        expected = await talk(agent.proxy_port, [PLAIN] * 5)
        finished = Finished(agent)
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            front = native.NativeFront(agent.proxy.relay, listener, forward=True, ring_bytes=12 * 1024)
            front.front.start()  # the C thread only: nothing drains until `_take` below
            try:
                got = await talk(listener.getsockname()[1], [PLAIN] * 5)
                await counted(front, forwarded=5, captured=2, ring_full=3)
                front._take()
                await wait_until(lambda: len(finished.events) == 2)
                # Drained, the bytes are free: the next two calls are kept again.
                assert (await talk(listener.getsockname()[1], [PLAIN] * 2))[:2] == expected[:2]
                await counted(front, forwarded=7, captured=4, ring_full=3)
            finally:
                front.front.stop()
        assert got == expected and expected[0] == head + body


@pytest.mark.parametrize("proxy_engine", ["native"])
async def test_calls_c_is_forwarding_are_in_flight_and_the_engine_is_exposed(make_agent, proxy_engine):
    """proxy.engine native: llmwatch_proxy_in_flight_requests counts the
    calls C holds (the relay's own clients hold none), and llmwatch_proxy_engine_info says which
    engine serves and that C forwards."""
    release = asyncio.Event()
    arrived = asyncio.Event()

    async def held(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        arrived.set()
        await release.wait()
        writer.write(OK_HEAD + OK_JSON)
        await writer.drain()

    async with RawUpstream(held) as upstream:
        agent = await make_agent(upstream.url)
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_proxy_engine_info", engine="native", forwarding="true") == 1
        call = asyncio.create_task(talk(agent.proxy_port, [PLAIN]))
        await asyncio.wait_for(arrived.wait(), 10)
        assert metric(await scrape(agent), "llmwatch_proxy_in_flight_requests") == 1
        assert agent.proxy.relay.clients == set()  # held by C, not by the relay
        release.set()
        got = await asyncio.wait_for(call, 10)
        assert got[0].endswith(OK_JSON)
        await wait_until(lambda: agent.proxy.in_flight() == 0)
        assert agent.proxy.relay.front.stats()["forwarded"] == 1


@pytest.mark.parametrize("proxy_engine", ["native"])
async def test_an_https_upstream_keeps_the_front_door_and_the_relay_forwards(make_agent, proxy_engine):
    """C forwards to a plain-HTTP upstream only (TLS is the relay's): the proxy still starts, says so."""
    agent = await make_agent("https://127.0.0.1:9")
    samples = await scrape(agent)
    assert metric(samples, "llmwatch_proxy_engine_info", engine="native", forwarding="false") == 1
    assert agent.proxy.relay.front is not None and not agent.proxy.relay.forwarding


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/other"])
async def test_a_client_that_leaves_while_the_upstream_is_silent_ends_its_call_at_once(make_agent, path):
    """The relay sees a client leave as it happens (connection_lost): the upstream connection is
    closed and client_disconnected counted. C, which does not read a client during its call, must
    still watch for its leaving: before, it saw it only at its next write (never, here) and at the
    read deadline counted a stream_interrupted instead."""
    request = post(path, CHAT_BODY)
    upstream_closed: list[bool] = []

    async def first_then_silent(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(SSE_HEAD + chunked([b"data: first\n\n"])[0])
        await writer.drain()
        # Silent until the proxy closes this connection (within the deadline: the read timeout is 30 s).
        upstream_closed.append(await asyncio.wait_for(reader.read(), 10) == b"")
        raise ConnectionResetError

    async def leave_after_first(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            await writer.drain()
            await asyncio.wait_for(reader.readuntil(b"data: first\n\n\r\n"), 10)
        finally:
            writer.close()

    key = errors("client_disconnected")
    calls = 1 if path == "/v1/chat/completions" else 0
    async with RawUpstream(first_then_silent) as upstream:
        agent = await make_agent(upstream.url, proxy={"read_timeout_s": 30})
        finished = Finished(agent)
        before = counts(agent)
        await leave_after_first(agent.proxy_port)
        await wait_until(lambda: upstream_closed == [True] and key in moved(before, counts(agent)))
        relay_errors = [e.exchange.error_type for e in finished.take()]
        middle = counts(agent)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            await leave_after_first(port)
            await wait_until(lambda: upstream_closed == [True, True] and key in moved(middle, counts(agent)))
            await wait_until(lambda: len(finished.events) == calls)
        c_errors = [e.exchange.error_type for e in finished.take()]
    assert c_errors == relay_errors == ["client_disconnected"] * calls
    assert moved(middle, counts(agent)) == moved(before, middle)
