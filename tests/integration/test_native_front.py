"""The C front door (`native.NativeFront`, design record 0067 step 2): a thread of its own accepts on
the listening socket and reads each connection's first head on raw epoll; the Python relay then
answers every connection, so a client must not be able to tell it from a connection the relay
accepted itself. Real sockets, a real relay, a recording upstream."""

from __future__ import annotations

import asyncio
import shutil
import socket
from contextlib import asynccontextmanager

import pytest
from helpers.agents import metric, scrape, wait_until
from helpers.raw_http import CHAT_BODY, RawUpstream, answer_ok, post, read_response

from llmwatch.collectors.receivers.proxy import native

dataplane, why = native.load()
if dataplane is None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the extension is optional", allow_module_level=True)
    raise ImportError(why)

PLAIN = post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: front-1")
CASES = {
    "plain": (PLAIN, 1),
    "plain-get-closing": (b"GET /v1/models HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 1),
    "pipelined": (PLAIN + post("/v1/other", b'{"n": 2}'), 2),
    "two-hosts": (b"GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 1),
    "http-1.0": (b"GET /v1/models HTTP/1.0\r\n\r\n", 1),
    "chunked-upload": (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY),
        1,
    ),
    "dot-segments": (b"GET /v1/../../etc HTTP/1.1\r\nHost: h\r\n\r\n", 1),
    "junk": (b"NOT HTTP AT ALL\r\n\r\n", 1),
}


@asynccontextmanager
async def front_of(relay):  # type: ignore[no-untyped-def]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        front = native.NativeFront(relay, listener)
        front.start()
        try:
            yield front, listener.getsockname()[1]
        finally:
            await front.stop()


async def exchange(port: int, data: bytes, answers: int, *, pieces: int = 1) -> list[tuple[int, dict[str, str], bytes]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        step = max(1, len(data) // pieces)
        for at in range(0, len(data), step):
            writer.write(data[at : at + step])
            await writer.drain()
        return [await asyncio.wait_for(read_response(reader), 10) for _ in range(answers)]
    finally:
        writer.close()


@pytest.mark.parametrize("case", sorted(CASES))
async def test_every_kind_of_request_through_the_front_gets_what_the_relay_answers_directly(make_agent, case):
    data, answers = CASES[case]
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        expected = await exchange(agent.proxy_port, data, answers)
        direct_heads = list(upstream.heads)
        async with front_of(agent.proxy.relay) as (front, port):
            got = await exchange(port, data, answers)
            # The same bytes in eleven pieces: the head is read across reads in C.
            again = await exchange(port, data, answers, pieces=11)
            stats = front.stats()
        assert got == expected and again == expected
        assert upstream.heads == direct_heads * 3
        assert stats["accepted"] == 2 and stats["handed"] == 2 and stats["running"]
        assert stats["plain"] == (2 if case.startswith("plain") or case == "pipelined" else 0)


async def test_many_clients_at_once_are_all_answered(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        async with front_of(agent.proxy.relay) as (front, port):
            results = await asyncio.gather(*(exchange(port, PLAIN, 1) for _ in range(64)))
            stats = front.stats()
        assert all(status == 200 for ((status, _, _),) in results)
        assert stats["accepted"] == 64 and stats["plain"] == 64


async def test_a_head_that_never_completes_is_closed_at_the_head_deadline_and_counted(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"header_timeout_s": 0.5})
        async with front_of(agent.proxy.relay) as (front, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\n")
                await writer.drain()
                # Closed without an answer (as the relay closes its own): EOF, within a bound.
                assert await asyncio.wait_for(reader.read(), 10) == b""
            finally:
                writer.close()
            stats = front.stats()
        assert stats["expired"] == 1 and stats["handed"] == 1
        assert upstream.heads == []
        # Counted by the relay, as it counts its own expired heads (a scrape runs what waits first).
        assert metric(await scrape(agent), "llmwatch_proxy_errors_total", error_type="client_header_timeout") == 1


async def test_a_client_that_leaves_before_a_byte_is_dropped_and_one_whose_head_is_cut_gets_the_relays_answer(
    make_agent,
):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        expected = b""
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        writer.write(b"GET /v1/models HT")
        writer.write_eof()
        expected = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        async with front_of(agent.proxy.relay) as (front, port):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            await wait_until(lambda: front.stats()["left"] == 1, 10)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /v1/models HT")
            writer.write_eof()
            got = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            stats = front.stats()
        assert got == expected
        assert stats["accepted"] == 2 and stats["left"] == 1 and stats["handed"] == 1


async def test_stopping_closes_the_connections_still_reading_their_head_and_the_thread_ends(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            front = native.NativeFront(agent.proxy.relay, listener)
            front.start()
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
            writer.write(b"GET /v1/models HTTP/1.1\r\n")
            await writer.drain()
            await wait_until(lambda: front.stats()["accepted"] == 1, 10)
            await front.stop()
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
            stats = front.stats()
        assert not stats["running"] and stats["left"] == 1 and stats["handed"] == 0
