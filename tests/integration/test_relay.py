"""The relay core, the proxy's only engine: what a core that forwards raw bytes must get right.

The behaviours every proxy must keep are specified in test_proxy.py and test_proxy_faults.py;
hostile HTTP in test_relay_hostile.py and test_relay_fuzz.py. These tests cover request bodies of
both framings, HTTP/1.0 clients, keep-alive reuse of upstream connections, pipelined requests,
responses delimited by a close, flow control, the connection pool's limit, and the removed
`proxy.engine` setting.
"""

from __future__ import annotations

import asyncio
import hashlib

import orjson
import pytest
from helpers.agents import drained, metric, scrape, wait_until
from helpers.engines import both_engines as proxy_engine  # noqa: F401  (every test on both engines)
from helpers.raw_http import (
    CHAT_BODY,
    OK_JSON,
    RawUpstream,
    answer_ok,
    header,
    post,
    raw_call,
    read_body,
    read_response,
)

from llmwatch.agent.components import load_config
from llmwatch.core.config import ConfigError


async def read_chunked_body(head: bytes, reader: asyncio.StreamReader) -> bytes:
    body = b""
    for _ in range(10_000):  # chunks per body, far more than any test sends
        size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
        body += (await reader.readexactly(size + 2))[:-2]
        if size == 0:
            break
    return body


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def test_a_chunked_upload_reaches_the_upstream_whole_and_is_captured(make_agent):
    received: list[tuple[str | None, bytes]] = []

    async def keep(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_chunked_body(head, reader) if header(head, "transfer-encoding") else b""
        received.append((header(head, "transfer-encoding"), body))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(OK_JSON), OK_JSON)
        )
        await writer.drain()

    async with RawUpstream(keep) as upstream:
        agent = await make_agent(upstream.url, sampling={"rate": 1.0})
        for path in ("/v1/chat/completions", "/uploads"):  # captured, and streamed through
            request = f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + chunked(
                CHAT_BODY[:7], CHAT_BODY[7:]
            )
            status, _, body = await raw_call(agent.proxy_port, request)
            assert status == 200 and body == OK_JSON
        assert received == [("chunked", CHAT_BODY), ("chunked", CHAT_BODY)]
        [record] = await drained(agent, 1)
        assert record["request"]["model"] == "m"


async def test_an_http_1_0_client_gets_a_chunked_answer_unchunked_and_the_connection_closes(make_agent):
    events = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]

    async def stream(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked(*events)
        )
        await writer.drain()

    async with RawUpstream(stream) as upstream:
        agent = await make_agent(upstream.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        try:
            writer.write(b"GET /events HTTP/1.0\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 5)  # to the close: an HTTP/1.0 body ends there
        finally:
            writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200 OK") and b"transfer-encoding" not in head.lower()
        assert body == b"".join(events)


async def test_sequential_calls_on_one_client_connection_reuse_one_upstream_connection(make_agent):
    # The upstream connections that carried a request (the readiness probe only connects), held: a freed
    # writer's id() can be the next one's.
    carriers: dict[int, asyncio.StreamWriter] = {}

    async def answer(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carriers[id(writer)] = writer  # held, so that its id() is not reused
        await answer_ok(head, reader, writer)

    async with RawUpstream(answer) as upstream:
        agent = await make_agent(upstream.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        try:
            for path in ("/v1/chat/completions", "/other", "/v1/chat/completions"):
                writer.write(post(path, CHAT_BODY))
                status, headers, body = await asyncio.wait_for(read_response(reader), 5)
                assert status == 200 and body == OK_JSON and "connection" not in headers
        finally:
            writer.close()
        assert len(carriers) == 1 and len(upstream.heads) == 3


async def test_pipelined_requests_are_answered_in_order(make_agent):
    async def echo_path(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0)  # let the next request arrive at the proxy while this one is open
        path = head.split(b" ")[1]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(path), path))
        await writer.drain()

    async with RawUpstream(echo_path) as upstream:
        agent = await make_agent(upstream.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        try:
            writer.write(b"".join(f"GET /p{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(5)))
            answers = [(await asyncio.wait_for(read_response(reader), 5))[2] for _ in range(5)]
        finally:
            writer.close()
        assert answers == [f"/p{i}".encode() for i in range(5)]


async def test_a_response_delimited_by_the_upstream_closing_is_relayed_whole_then_the_client_connection_closes(
    make_agent,
):
    answer = orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "to the close"}, "finish_reason": "stop"}
            ],
        }
    )

    async def until_close(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + answer[:20])
        await writer.drain()
        writer.write(answer[20:])
        await writer.drain()
        raise ConnectionError  # RawUpstream closes the connection: that is the end of the body

    async with RawUpstream(until_close) as upstream:
        agent = await make_agent(upstream.url, sampling={"rate": 1.0})
        status, headers, body = await raw_call(agent.proxy_port, post("/v1/chat/completions", CHAT_BODY))
        assert status == 200 and body == answer and headers["connection"] == "close"
        [record] = await drained(agent, 1)
        assert record["response"]["choices"][0]["message"]["content"] == "to the close"


async def test_a_client_that_does_not_read_pauses_the_upstream_and_then_gets_every_byte(make_agent):
    block = bytes(range(256)) * 1024  # 256 KiB
    blocks = 128  # 32 MiB: far more than the socket buffers and the write-buffer high-water mark
    expected = hashlib.sha256(block * blocks).hexdigest()

    async def big(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
            % (len(block) * blocks)
        )
        for _ in range(blocks):
            writer.write(block)
            await writer.drain()

    async with RawUpstream(big) as upstream:
        agent = await make_agent(upstream.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port, limit=1 << 16)
        try:
            writer.write(b"GET /download HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            # The client reads nothing: the proxy must stop reading the upstream, not buffer 32 MiB
            # (the relay's paused upstream, or one C forwarding the call has stopped reading).
            relay = agent.proxy.relay
            front = relay.front if relay.forwarding else None
            await wait_until(
                lambda: (
                    any(
                        c.current is not None and c.current.up is not None and c.current.up.paused
                        for c in relay.clients
                    )
                    or (front is not None and front.stats()["upstreams_paused"] > 0)
                ),
                timeout=20,
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            digest = hashlib.sha256()
            got = 0
            while got < len(block) * blocks:
                chunk = await asyncio.wait_for(reader.read(1 << 20), 10)
                assert chunk, "the stream ended early"
                digest.update(chunk)
                got += len(chunk)
            assert got == len(block) * blocks and digest.hexdigest() == expected
        finally:
            writer.close()


async def test_calls_beyond_max_connections_wait_for_a_free_upstream_connection(make_agent):
    gate = asyncio.Event()
    arrived = 0
    carriers: dict[int, asyncio.StreamWriter] = {}

    async def held(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal arrived
        arrived += 1
        carriers[id(writer)] = writer  # held, so that its id() is not reused
        await asyncio.wait_for(gate.wait(), 10)
        await answer_ok(head, reader, writer)

    async with RawUpstream(held) as upstream:
        agent = await make_agent(upstream.url, proxy={"max_connections": 1})
        calls = [
            asyncio.create_task(raw_call(agent.proxy_port, post("/v1/chat/completions", CHAT_BODY))) for _ in range(3)
        ]
        await wait_until(lambda: arrived == 1)
        gate.set()
        results = await asyncio.gather(*calls)
        assert [r[0] for r in results] == [200, 200, 200]
        assert arrived == 3 and len(carriers) == 1  # the other two waited for the one connection


async def test_a_client_that_leaves_mid_stream_closes_the_upstream_connection_and_is_counted(make_agent):
    upstream_saw_close = asyncio.Event()

    async def endless(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%b\r\n" % (11, b"data: x\n\n\n\n"[:11])
        )
        await writer.drain()
        if await asyncio.wait_for(reader.read(1), 20) == b"":
            upstream_saw_close.set()
        raise ConnectionError

    async with RawUpstream(endless) as upstream:
        agent = await make_agent(upstream.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        writer.write(post("/v1/chat/completions", orjson.dumps({"model": "m", "messages": [], "stream": True})))
        await asyncio.wait_for(reader.readuntil(b"data: x"), 5)
        writer.close()
        await asyncio.wait_for(upstream_saw_close.wait(), 5)
        deadline = asyncio.get_running_loop().time() + 5
        while metric(await scrape(agent), "llmwatch_proxy_errors_total", error_type="client_disconnected") != 1:
            assert asyncio.get_running_loop().time() < deadline, "the disconnect was never counted"
            await asyncio.sleep(0.05)


async def test_an_old_aiohttp_engine_setting_says_how_to_fix_it_and_an_old_relay_one_is_the_python_engine(
    sim, make_agent
):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides={"upstream": sim.url, "proxy": {"engine": "aiohttp"}}, environ={})
    assert "engine 'aiohttp' is no longer available" in str(err.value)
    assert "delete the `engine:` line" in str(err.value) and "`python`" in str(err.value)
    # `engine: relay` (what an old config may say) still loads, as the relay core, and serves.
    agent = await make_agent(sim.url, proxy={"engine": "relay"})
    assert agent.proxy.relay is not None and agent.proxy.relay.engine == "python"
    body = orjson.dumps({"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "seed": 1})
    direct = await raw_call(int(sim.url.rsplit(":", 1)[1]), post("/v1/chat/completions", body))
    proxied = await raw_call(agent.proxy_port, post("/v1/chat/completions", body))
    assert proxied[0] == direct[0] == 200 and proxied[2] == direct[2]


async def test_answers_without_a_body_head_204_304_end_at_their_head_and_the_connection_goes_on(make_agent):
    async def bodiless(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = head.split(b" ")[1]
        if path == b"/head":
            # The length of the body a GET would get; a HEAD answer has none.
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(OK_JSON)
            )
        elif path == b"/204":
            writer.write(b"HTTP/1.1 204 No Content\r\nX-Kind: none\r\n\r\n")
        else:
            writer.write(b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n')
        await writer.drain()

    async with RawUpstream(bodiless) as upstream:
        agent = await make_agent(upstream.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        try:
            writer.write(b"HEAD /head HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200 OK") and b"Content-Length: %d" % len(OK_JSON) in head
            for path, status in (("/204", 204), ("/304", 304)):
                writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                assert head.startswith(b"HTTP/1.1 %d" % status)
        finally:
            writer.close()
        assert [h.split(b"\r\n")[0] for h in upstream.heads] == [
            b"HEAD /head HTTP/1.1",
            b"GET /204 HTTP/1.1",
            b"GET /304 HTTP/1.1",
        ]


@pytest.mark.parametrize(
    ("answer", "connections"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", 1),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", 1),
        (b"HTTP/1.1 404 Not Found\r\nX-Kind: none\r\n\r\n", 1),
        # The upstream's own word still counts: a connection it means to close is not reused.
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 2),
        (b"HTTP/1.0 200 OK\r\n\r\n", 2),
    ],
    ids=["1.1", "1.0-keep-alive", "404", "close", "1.0"],
)
async def test_a_head_answer_without_length_or_chunking_keeps_the_upstream_connection_it_was_not_told_to_close(
    make_agent, answer, connections
):
    # The upstream connections that carried a request (the readiness probe only connects), held
    # here: a set of id()s undercounted when the first connection's writer was freed and the
    # second one's took its address (once in a full run, python-1.0).
    carriers: dict[int, asyncio.StreamWriter] = {}

    async def framed_by_nothing(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carriers[id(writer)] = writer  # held, so that its id() is not reused
        writer.write(answer)  # a HEAD answer: no body follows, whatever the head says (RFC 9112 §6.3)
        await writer.drain()
        if b"close" in answer or answer.startswith(b"HTTP/1.0 200 OK\r\n\r\n"):
            raise ConnectionError  # as it said: this connection ends

    async with RawUpstream(framed_by_nothing) as upstream:
        agent = await make_agent(upstream.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        try:
            for _ in range(2):
                writer.write(b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                assert head.split(b"\r\n")[0] == answer.split(b"\r\n")[0].replace(b"HTTP/1.0", b"HTTP/1.1")
        finally:
            writer.close()
        assert len(upstream.heads) == 2
        # Before the fix: 2 in every case (llhttp read the answer as a body ended by the close, and
        # said not to keep the connection).
        assert len(carriers) == connections
