"""A connection accepted and begun elsewhere, handed to the Python relay with the bytes already read
(`RelayServer.adopt`): how the C data plane hands over what it does not implement (design record
0067, step 2). The client must not be able to tell: the same answer, the same upstream head, as
when the relay accepted the connection itself."""

from __future__ import annotations

import asyncio
import socket

import pytest
from helpers.raw_http import CHAT_BODY, RawUpstream, answer_ok, post, read_response

REQUEST = post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: adopt-1")
HEAD_END = REQUEST.index(b"\r\n\r\n") + 4


async def direct(port: int, data: bytes, answers: int) -> list[tuple[int, dict[str, str], bytes]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return [await asyncio.wait_for(read_response(reader), 10) for _ in range(answers)]
    finally:
        writer.close()


async def adopted(relay, prefix: bytes, rest: bytes, answers: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Accept a client here, read `prefix` of what it sends, hand the connection over, then let it
    send `rest`."""
    loop = asyncio.get_running_loop()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
        try:
            conn, _ = await asyncio.wait_for(loop.sock_accept(listener), 10)
            writer.write(prefix)
            await writer.drain()
            got = b""
            for _ in range(len(prefix) + 1):  # reads, at least one byte each
                if len(got) >= len(prefix):
                    break
                piece = await asyncio.wait_for(loop.sock_recv(conn, 65536), 10)
                assert piece, "the client closed"
                got += piece
            assert got == prefix
            await relay.adopt(conn, got)
            writer.write(rest)
            await writer.drain()
            return [await asyncio.wait_for(read_response(reader), 10) for _ in range(answers)]
        finally:
            writer.close()


@pytest.mark.parametrize(
    "cut",
    [0, 1, HEAD_END - 3, HEAD_END, HEAD_END + 5, len(REQUEST)],
    ids=["nothing-read", "one-byte", "inside-the-head", "the-head", "part-of-the-body", "the-whole-request"],
)
async def test_a_request_handed_over_after_any_number_of_its_bytes_is_answered_as_if_never_handed(make_agent, cut):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        expected = await direct(agent.proxy_port, REQUEST, 1)
        head_direct = upstream.heads[-1]
        got = await adopted(agent.proxy.relay, REQUEST[:cut], REQUEST[cut:], 1)
        assert got == expected and got[0][0] == 200
        assert upstream.heads[-1] == head_direct and len(upstream.heads) == 2


async def test_pipelined_requests_handed_over_midway_through_the_second_are_both_answered_in_order(make_agent):
    second = post("/v1/other", b'{"n": 2}')
    data = REQUEST + second
    cut = len(REQUEST) + len(second) // 2
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        expected = await direct(agent.proxy_port, data, 2)
        got = await adopted(agent.proxy.relay, data[:cut], data[cut:], 2)
        assert got == expected and [status for status, _, _ in got] == [200, 200]
        assert upstream.heads[2:] == upstream.heads[:2]


async def test_a_malformed_request_handed_over_gets_the_relays_own_answer(make_agent):
    bad = b"GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        expected = await direct(agent.proxy_port, bad, 1)
        got = await adopted(agent.proxy.relay, bad, b"", 1)
        assert got == expected and got[0][0] == 400
        assert upstream.heads == []
