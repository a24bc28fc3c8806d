"""C forwards plain calls (`dataplane.Front` with `forward`, design record 0067, second milestone).

Each case goes once through the Python relay and once through the C front door with forwarding on,
in front of the same relay, to the same scripted upstream: the client must read the same bytes
(byte for byte, the relay's 502/504/408 included) and the upstream must receive the same request,
and `stats()` must say C answered it rather than handing it over. Real sockets throughout."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import socket
from typing import Any

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
from llmwatch.collectors.receivers.proxy import relay as relay_module

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


# A DELETE with `Content-Length: 00`: a body of 0 bytes, but not the relay's whole-head request
# (its test is the value "0"), so not sent again. Before, C replayed it (design record 0067).
DELETE_00 = b"DELETE /v1/files/f HTTP/1.1\r\nHost: x\r\nContent-Length: 00\r\n\r\n"


@pytest.mark.parametrize("request_bytes", [GET, PLAIN, DELETE_00], ids=["get", "post", "delete-length-00"])
@pytest.mark.parametrize("order", ["close-seen-first", "request-first"])
async def test_an_idle_connection_its_upstream_closes_as_a_call_comes_is_handled_as_the_relay_does(
    make_agent, monkeypatch, request_bytes, order
):
    # The race of an upstream's idle close against a new call, in each order that C's own thread can
    # see it (test_relay_hostile.py's kept-alive cases make a third certain only for a proxy on the
    # test's event loop: the FIN in the kernel, not yet read, as the request is read; see 0067).
    # close-seen-first: the proxy has read the FIN and dropped the connection (its slot is free)
    # before the request comes: a new connection, the call answered. request-first: the request
    # went out on the kept-alive connection, which then ends unanswered: a GET is sent again once,
    # on a new connection; a POST gets the 502. The relay is run first, then C, the bytes compared.
    monkeypatch.setattr(relay_module, "_PEER_CHECK_IDLE_S", 0.0)  # passed into C as well
    served: list[asyncio.StreamWriter] = []

    async def answers_once(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        if all(writer is not w for w in served):
            served.append(writer)
            writer.write(OK_HEAD + OK_JSON)
            await writer.drain()
            return
        raise ConnectionError  # a call on a connection this server has closed: never answered

    async def run(port: int, pool: Any) -> tuple[list[bytes], int]:
        served.clear()
        heads_before = len(upstream.heads)
        assert (await talk(port, [PLAIN]))[0] == OK_HEAD + OK_JSON
        taken = pool.slots_taken()
        if order == "close-seen-first":
            served[0].get_extra_info("socket").shutdown(socket.SHUT_WR)
            await wait_until(lambda: pool.slots_taken() == taken - 1)  # the proxy read the FIN
        got = await talk(port, [request_bytes])
        return got, len(upstream.heads) - heads_before

    async with RawUpstream(answers_once) as upstream:
        agent = await make_agent(upstream.url)
        pool = agent.proxy.relay.pool
        expected, expected_heads = await run(agent.proxy_port, pool)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            got, heads = await run(port, pool)
            stats = await counted(front, handed=0)
    assert got == expected and heads == expected_heads
    if order == "close-seen-first" or request_bytes == GET:
        assert got[0] == OK_HEAD + OK_JSON
        assert heads == (2 if order == "close-seen-first" else 3)  # the GET sent again once
        assert stats["replayed"] == (order == "request-first")
    else:
        assert got[0].startswith(b"HTTP/1.1 502") and b"closed the connection" in got[0] and heads == 2


async def test_the_relays_constants_patched_change_c_forwarding_too(make_agent, monkeypatch):
    # `RelayServer.dataplane_constants` passes relay.py's constants into C when the front starts:
    # a test that changes one (a keep-alive of 0.3 s, a body limit under this body's size) changes
    # both engines. Before, C kept its own copies (75 s, 1 MiB).
    monkeypatch.setattr(relay_module, "_CLIENT_KEEPALIVE_S", 0.3)
    respond, received = recording(fixed(OK_HEAD + OK_JSON))
    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(GET)
                assert await asyncio.wait_for(read_one(reader), 10) == OK_HEAD + OK_JSON
                # Idle past the patched keep-alive: C closes the connection (a deadline, not a sleep).
                assert await asyncio.wait_for(reader.read(), 10) == b""
            finally:
                writer.close()
            await counted(front, forwarded=1, handed=0)
        monkeypatch.setattr(relay_module, "_PENDING_LIMIT", len(CHAT_BODY) - 1)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            assert (await talk(port, [PLAIN]))[0] == OK_HEAD + OK_JSON
            await counted(front, forwarded=0, handed=1)  # a body over the limit streams, in the relay


@pytest.mark.parametrize("proxy_engine", ["native"])
async def test_a_call_c_forwards_when_the_proxy_stops_finishes_within_the_shutdown_grace(make_agent, proxy_engine):
    # The relay's `cleanup` gives calls in flight proxy.shutdown_timeout_s; a call C forwards gets
    # the same (`Front.shutdown`): answered whole, then its connection closed. Before, the stop cut
    # it at once: the client read the end of the connection and no answer.
    release = asyncio.Event()
    arrived = asyncio.Event()

    async def held(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        arrived.set()
        await asyncio.wait_for(release.wait(), 20)
        writer.write(OK_HEAD + OK_JSON)
        await writer.drain()

    async with RawUpstream(held) as upstream:
        agent = await make_agent(upstream.url, proxy={"shutdown_timeout_s": 20})
        relay = agent.proxy.relay
        assert relay.forwarding
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        try:
            writer.write(PLAIN)
            await asyncio.wait_for(arrived.wait(), 10)
            await wait_until(lambda: relay.front.front.held() == 2)  # the call's and the idle connection
            stopping = asyncio.ensure_future(relay.cleanup())
            # The idle connection is closed at once; the call goes on.
            assert await asyncio.wait_for(idle_reader.read(), 10) == b""
            assert not stopping.done() and relay.front.in_flight() == 1
            release.set()
            got = await asyncio.wait_for(read_one(reader), 10)
            assert await asyncio.wait_for(reader.read(), 10) == b""  # and then closed
            await asyncio.wait_for(stopping, 10)
        finally:
            writer.close()
            idle_writer.close()
    assert got == OK_HEAD + OK_JSON
    assert relay.front.stats()["forwarded"] == 1 and relay.front.stats()["interrupted"] == 0


async def test_a_client_that_does_not_read_pauses_cs_upstream_and_stats_say_so(make_agent):
    # As test_relay.py's case of that name observes the relay's paused upstream: 32 MiB, far more
    # than the socket buffers and C's mark of unsent bytes, to a client that reads nothing at first.
    block = bytes(range(256)) * 1024
    blocks = 128
    expected = hashlib.sha256(block * blocks).hexdigest()

    async def big(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(block) * blocks))
        for _ in range(blocks):
            writer.write(block)
            await writer.drain()

    async with RawUpstream(big) as upstream:
        agent = await make_agent(upstream.url)
        async with forwarding_front(agent.proxy.relay) as (front, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
            try:
                writer.write(PLAIN)
                await writer.drain()
                await counted(front, upstreams_paused=1)  # C stopped reading the upstream
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                digest = hashlib.sha256()
                got = 0
                for _ in range(blocks * 1024):  # reads: far more than 32 MiB needs
                    if got >= len(block) * blocks:
                        break
                    chunk = await asyncio.wait_for(reader.read(1 << 20), 10)
                    assert chunk, "the answer ended early"
                    digest.update(chunk)
                    got += len(chunk)
            finally:
                writer.close()
            stats = await counted(front, forwarded=1, upstreams_paused=0)
    assert head.startswith(b"HTTP/1.1 200") and got == len(block) * blocks and digest.hexdigest() == expected
    assert stats["handed"] == 0


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


async def test_with_the_pool_full_a_call_is_handed_to_the_relay_and_waits_there_for_cs_connection(make_agent):
    # proxy.max_connections 1: the first call holds C's one upstream connection until the test lets
    # it answer; the second, meanwhile, is handed over whole (nothing sent) and waits in the relay's
    # pool, which takes its slots from C's count (one bound for both engines). C's connection, once
    # free, goes to it kept alive. Before: the relay's pool opened a second connection.
    release = asyncio.Event()
    # The upstream connections that carried a call (the start-up probe carries none), held: a freed
    # writer's id() can be the next one's.
    carriers: dict[int, asyncio.StreamWriter] = {}

    async def held_then_ok(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carriers[id(writer)] = writer  # held, so that its id() is not reused
        await read_body(head, reader)
        if b"X-Request-Id: first" in head:
            await asyncio.wait_for(release.wait(), 10)
        writer.write(OK_HEAD + OK_JSON)
        await writer.drain()

    async with RawUpstream(held_then_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"max_connections": 1})
        pool = agent.proxy.relay.pool
        async with forwarding_front(agent.proxy.relay) as (front, port):
            first = asyncio.ensure_future(talk(port, [post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: first")]))
            await wait_until(lambda: len(upstream.heads) == 1)
            second = asyncio.ensure_future(
                talk(port, [post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: second")])
            )
            await wait_until(lambda: len(pool.waiters) == 1)
            assert len(upstream.heads) == 1
            release.set()
            assert (await first)[0] == OK_HEAD + OK_JSON and (await second)[0] == OK_HEAD + OK_JSON
            await counted(front, forwarded=1, handed=1, plain=1, upstreams_handed=1)
        assert len(upstream.heads) == 2 and len(carriers) == 1
        assert b"X-Request-Id: first" in upstream.heads[0] and b"X-Request-Id: second" in upstream.heads[1]


async def test_a_call_handed_to_the_relay_gets_the_idle_connection_c_holds_at_the_pools_bound(make_agent):
    # proxy.max_connections 1, the one connection idle in C after a plain call: a chunked upload,
    # which C hands to the relay, finds no free slot; the relay's pool tells C (a failed take_slot),
    # and C hands its idle connection over, kept alive. Without that the upload waited out
    # proxy.connect_timeout_s (504) beside an idle connection.
    respond, received = recording(fixed(OK_HEAD + OK_JSON))
    carriers: dict[int, asyncio.StreamWriter] = {}

    async def noting(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carriers[id(writer)] = writer  # held, so that its id() is not reused
        if b"chunked" in head.lower():
            await reader.readuntil(b"0\r\n\r\n")
            writer.write(OK_HEAD + OK_JSON)
            await writer.drain()
            return
        await respond(head, reader, writer)

    chunked_upload = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY)
    )
    async with RawUpstream(noting) as upstream:
        agent = await make_agent(upstream.url, proxy={"max_connections": 1, "connect_timeout_s": 5})
        async with forwarding_front(agent.proxy.relay) as (front, port):
            assert (await talk(port, [PLAIN]))[0] == OK_HEAD + OK_JSON
            await counted(front, forwarded=1, upstreams_open=1)  # idle in C
            assert (await talk(port, [chunked_upload]))[0] == OK_HEAD + OK_JSON
            stats = await counted(front, handed=1, upstreams_handed=1, upstreams_open=1)
        assert len(upstream.heads) == 2 and len(carriers) == 1 and stats["upstream_connections"] == 1


async def test_calls_forwarded_in_c_and_calls_handed_to_the_relay_share_one_bound_of_upstream_connections(
    make_agent,
):
    # proxy.max_connections 2, 14 calls at once: plain ones (C forwards them) and chunked uploads
    # (C hands them to the relay). The upstream counts the connections open to it and holds every
    # call until the gate opens, so while it is shut each call either holds a connection or waits
    # in the relay's pool; the two engines together must never have more than 2 open.
    limit, plain_calls, uploads = 2, 7, 7
    gate = asyncio.Event()
    now_open = most_open = arrived = 0
    chunked_upload = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY)
    )

    async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal now_open, most_open, arrived
        carrying = False  # counted from its first request: the proxy's start-up probe sends none
        try:
            for _ in range(plain_calls + uploads):  # calls per connection: at most all of them
                head = await reader.readuntil(b"\r\n\r\n")
                if not carrying:
                    carrying = True
                    now_open += 1
                    most_open = max(most_open, now_open)
                if b"chunked" in head.lower():
                    await reader.readuntil(b"0\r\n\r\n")
                else:
                    await read_body(head[:-4], reader)
                arrived += 1
                await asyncio.wait_for(gate.wait(), 20)
                writer.write(OK_HEAD + OK_JSON)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            now_open -= carrying
            writer.close()

    server = await asyncio.start_server(counting, "127.0.0.1", 0)
    try:
        port_up = server.sockets[0].getsockname()[1]
        agent = await make_agent(
            f"http://127.0.0.1:{port_up}", proxy={"max_connections": limit, "connect_timeout_s": 20}
        )
        pool = agent.proxy.relay.pool
        async with forwarding_front(agent.proxy.relay) as (front, port):
            calls = [asyncio.ensure_future(talk(port, [PLAIN])) for _ in range(plain_calls)]
            calls += [asyncio.ensure_future(talk(port, [chunked_upload])) for _ in range(uploads)]
            # Every call is placed: held by the upstream on one of the connections, or waiting in the
            # relay's pool (C hands a plain call there when it finds no slot).
            await wait_until(lambda: arrived + len(pool.waiters) == plain_calls + uploads, timeout=20)
            assert most_open <= limit and arrived <= limit
            gate.set()
            results = await asyncio.wait_for(asyncio.gather(*calls), 30)
            stats = await counted(front, upstreams_open=pool.count)
        assert all(result[0] == OK_HEAD + OK_JSON for result in results)
        assert arrived == plain_calls + uploads
        assert most_open <= limit, f"{most_open} upstream connections open at once, over max_connections {limit}"
        assert stats["forwarded"] >= 1 and stats["handed"] >= uploads  # both engines carried calls
    finally:
        server.close()


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
