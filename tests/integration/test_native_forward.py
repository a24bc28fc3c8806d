"""C forwards plain calls (`dataplane.Front` with `forward`, design record 0067, second milestone).

Each case goes once through the Python relay and once through the C front door with forwarding on,
in front of the same relay, to the same scripted upstream: the client must read the same bytes
(byte for byte, the relay's 502/504/408 included) and the upstream must receive the same request,
and `stats()` must say C answered it rather than handing it over. Real sockets throughout."""

from __future__ import annotations

import asyncio
import shutil
import socket

import pytest
from helpers.agents import wait_until
from helpers.native_forward import (
    ANSWERS,
    GET,
    OK_HEAD,
    PLAIN,
    REQUESTS,
    SSE_HEAD,
    STREAM,
    chunked,
    counted,
    fixed,
    forwarding_front,
    read_one,
    recording,
    talk,
)
from helpers.raw_http import CHAT_BODY, OK_JSON, RawUpstream, post, read_body

from llmwatch.collectors.receivers.proxy import native

dataplane, why = native.load()
if dataplane is None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the extension is optional", allow_module_level=True)
    raise ImportError(why)


@pytest.mark.parametrize("case", sorted(ANSWERS))
async def test_each_answer_reaches_the_client_as_the_python_relay_relays_it(make_agent, case):
    answer, _ = ANSWERS[case]
    respond, received = recording(answer)
    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url)
        expected = await talk(agent.proxy_port, [PLAIN])
        direct = list(received)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got = await talk(port, [PLAIN])
            await wait_until(lambda: front.stats()["forwarded"] + front.stats()["interrupted"] == 1)
            stats = front.stats()
        assert got == expected
        assert received == direct * 2
        assert stats["handed"] == 0


@pytest.mark.parametrize("case", sorted(REQUESTS))
@pytest.mark.parametrize("answer", ["length", "stream"])
async def test_each_plain_request_reaches_the_upstream_as_the_python_relay_sends_it(make_agent, case, answer):
    requests, how = REQUESTS[case]
    respond, received = recording(ANSWERS[answer][0])
    async with RawUpstream(respond) as upstream:
        # A path prefix and credentials in the URL: the relay adds Authorization unless the client sent one.
        agent = await make_agent(upstream.url.replace("http://", "http://user:secret@") + "/base")
        expected = await talk(agent.proxy_port, requests, **how)
        direct = list(received)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got = await talk(port, requests, **how)
            # Every request of the connection was answered in C, the later ones too.
            await counted(front, forwarded=len(requests), handed=0)
        assert got == expected and expected[-1] in (b"<open>", b"<closed>")
        assert received == direct * 2 and len(direct) == len(requests)


async def test_a_request_c_does_not_implement_is_handed_over_after_the_ones_it_forwarded(make_agent):
    respond, received = recording(fixed(OK_HEAD + OK_JSON))
    chunked_upload = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY)
    )
    requests = [PLAIN, GET, chunked_upload, PLAIN]
    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url)
        expected = await talk(agent.proxy_port, requests)
        direct = list(received)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got = await talk(port, requests)
            # Two answered in C; the connection then went to the relay with the third request's bytes.
            await counted(front, forwarded=2, handed=1)
        assert got == expected
        assert received == direct * 2


async def test_an_unreachable_upstream_gets_the_relays_502(make_agent):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port_closed = closed.getsockname()[1]
    agent = await make_agent(f"http://127.0.0.1:{port_closed}")
    expected = await talk(agent.proxy_port, [PLAIN, GET])
    async with forwarding_front(agent.proxy.relay) as (front, port):
        got = await talk(port, [PLAIN, GET])
        await counted(front, gateway_errors=2, forwarded=2)
    assert got == expected and b" 502 " in got[0] and got[-1] == b"<open>"


async def test_an_upstream_that_does_not_answer_in_time_gets_the_relays_504(make_agent):
    release = asyncio.Event()

    async def silent(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        await release.wait()

    async with RawUpstream(silent) as upstream:
        agent = await make_agent(upstream.url, proxy={"read_timeout_s": 0.5})
        expected = await talk(agent.proxy_port, [PLAIN])
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got = await talk(port, [PLAIN])
            await counted(front, gateway_errors=1)
        release.set()
    assert got == expected and b" 504 " in got[0]


async def test_a_body_that_does_not_arrive_in_time_gets_the_relays_408_and_the_connection_closes(make_agent):
    respond, received = recording(fixed(OK_HEAD + OK_JSON))
    partial = PLAIN[: len(PLAIN) - 5]

    async def stalled(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(partial)
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 10)  # the 408, then the end (within the bound)
        finally:
            writer.close()

    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url, proxy={"body_timeout_s": 0.5})
        expected = await stalled(agent.proxy_port)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got = await stalled(port)
            await counted(front, body_timeouts=1)
    assert got == expected and got.startswith(b"HTTP/1.1 408 ")
    assert received == []


async def test_a_kept_alive_upstream_connection_carries_the_next_clients_calls(make_agent):
    respond, received = recording(fixed(OK_HEAD + OK_JSON))
    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            for _ in range(3):
                assert (await talk(port, [PLAIN]))[0].endswith(OK_JSON)
            await counted(front, upstream_connections=1, forwarded=3)
        assert len(received) == 3


async def test_a_large_stream_to_a_slow_client_arrives_whole(make_agent):
    # 4 MiB in 64 KiB chunks, read slowly by the client: back-pressure, nothing lost or reordered.
    pieces = [bytes([65 + i % 26]) * 65536 for i in range(64)]
    respond, _ = recording(fixed(SSE_HEAD, *chunked(pieces)))
    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
            try:
                writer.write(PLAIN)
                await writer.drain()
                got = await asyncio.wait_for(read_one(reader), 30)
            finally:
                writer.close()
            await counted(front, forwarded=1)
    assert got == SSE_HEAD + b"".join(chunked(pieces))


async def test_a_bad_chunk_after_the_head_went_out_cuts_the_clients_answer_as_the_relay_does(make_agent):
    # The fault comes only once the client has the head and a chunk (before that it is a 502 for
    # both engines, "bad-first-chunk"): which one it is depends on the reads, so it is made certain.
    proceed = asyncio.Event()

    async def answer(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(SSE_HEAD + chunked(STREAM[:1])[0])
        await writer.drain()
        await asyncio.wait_for(proceed.wait(), 10)
        proceed.clear()
        writer.write(b"5\r\nhello!!\r\n")
        await writer.drain()

    async def cut(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(PLAIN)
            await writer.drain()
            first = await asyncio.wait_for(reader.readexactly(len(SSE_HEAD + chunked(STREAM[:1])[0])), 10)
            proceed.set()
            return first + await asyncio.wait_for(reader.read(), 10)  # then the end: cut short
        finally:
            writer.close()

    async with RawUpstream(answer) as upstream:
        agent = await make_agent(upstream.url)
        expected = await cut(agent.proxy_port)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got = await cut(port)
            await counted(front, interrupted=1, forwarded=0)
    assert got == expected == SSE_HEAD + chunked(STREAM[:1])[0]


async def test_a_connection_its_upstream_closed_after_answering_is_not_a_502_for_the_next_call(make_agent):
    # The upstream answers and closes without saying so: the next call, on the connection the C
    # pool kept, finds it closed (before it is sent, or as it is: a GET is then sent again once).
    async def answer_and_close(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(OK_HEAD + OK_JSON)
        await writer.drain()
        writer.close()
        raise ConnectionResetError

    respond, received = recording(answer_and_close)
    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            for _ in range(4):
                assert (await talk(port, [GET]))[0] == OK_HEAD + OK_JSON
            stats = await counted(front, forwarded=4, gateway_errors=0)
    assert len(received) == 4 and stats["upstream_connections"] == 4


async def test_with_the_pool_full_a_call_is_handed_to_the_relay_before_anything_is_sent(make_agent):
    # proxy.max_connections 1: the first call holds C's one upstream connection until the test lets
    # it answer; the second, meanwhile, is handed over whole and answered by the relay's own pool.
    release = asyncio.Event()

    async def held_then_ok(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        if b"X-Request-Id: first" in head:
            await asyncio.wait_for(release.wait(), 10)
        writer.write(OK_HEAD + OK_JSON)
        await writer.drain()

    async with RawUpstream(held_then_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"max_connections": 1})
        async with forwarding_front(agent.proxy.relay) as (front, port):
            first = asyncio.ensure_future(talk(port, [post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: first")]))
            await wait_until(lambda: len(upstream.heads) == 1)
            second = await talk(port, [post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: second")])
            release.set()
            assert (await first)[0] == OK_HEAD + OK_JSON and second[0] == OK_HEAD + OK_JSON
            await counted(front, forwarded=1, handed=1, plain=1)
        assert len(upstream.heads) == 2
        assert b"X-Request-Id: first" in upstream.heads[0] and b"X-Request-Id: second" in upstream.heads[1]


async def test_many_clients_at_once_are_all_forwarded(make_agent):
    respond, received = recording(fixed(SSE_HEAD, *chunked(STREAM)))
    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            results = await asyncio.gather(*(talk(port, [PLAIN, GET]) for _ in range(64)))
            await counted(front, forwarded=128, handed=0)
        expected = [SSE_HEAD + b"".join(chunked(STREAM))] * 2 + [b"<open>"]
        assert all(result == expected for result in results)
        assert len(received) == 128
