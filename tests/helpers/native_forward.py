"""Cases and tools shared by the C forwarding tests (tests/integration/test_native_forward.py,
test_native_ring.py): a scripted upstream's answers, the plain requests, a client that reads each
answer by its framing, and the C front door with forwarding on before a running relay."""

from __future__ import annotations

import asyncio
import socket
from contextlib import asynccontextmanager
from typing import Any, Awaitable, Callable

from helpers.agents import wait_until
from helpers.raw_http import CHAT_BODY, OK_JSON, header, post, read_body
from llmwatch.collectors.receivers.proxy import native

Respond = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
PLAIN = post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: fwd-1")
GET = b"GET /v1/models?limit=2 HTTP/1.1\r\nHost: llmwatch.test\r\nAccept: */*\r\n\r\n"
STREAM = [b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i for i in range(30)] + [b"data: [DONE]\n\n"]


@asynccontextmanager
async def forwarding_front(relay: Any, **options: Any):  # type: ignore[no-untyped-def]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        front = native.NativeFront(relay, listener, forward=True, **options)
        front.start()
        try:
            yield front, listener.getsockname()[1]
        finally:
            await front.stop()


async def counted(front: Any, **want: int) -> dict[str, Any]:
    """`front.stats()` once it shows `want`: the C thread counts a call after its last byte is
    written, so the client may have it a moment before the count moves (a deadline, not a sleep)."""
    try:
        await wait_until(lambda: all(front.stats()[key] == value for key, value in want.items()))
    except AssertionError:
        raise AssertionError(f"stats {front.stats()} never showed {want}") from None
    return dict(front.stats())


async def read_one(reader: asyncio.StreamReader) -> bytes:
    """One answer's raw bytes, read by its framing; a cut one ends in b'<cut>'."""
    data = b""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        data = head
        status = int(head.split(b" ", 2)[1])
        length = header(head[:-4], "content-length")
        if status in (204, 304):
            return data
        if length is not None:
            data += await reader.readexactly(int(length))
        elif header(head[:-4], "transfer-encoding") == "chunked":
            for _ in range(100_000):  # chunks per answer, far more than any case sends
                line = await reader.readuntil(b"\r\n")
                data += line
                size = int(line[:-2].split(b";")[0], 16)
                if size == 0:
                    for _ in range(100):  # trailer lines
                        line = await reader.readuntil(b"\r\n")
                        data += line
                        if line == b"\r\n":
                            return data
                data += await reader.readexactly(size + 2)
        else:
            data += await reader.read()
    except asyncio.IncompleteReadError as exc:
        return data + exc.partial + b"<cut>"
    except ConnectionResetError:
        return data + b"<reset>"
    return data


async def talk(port: int, requests: list[bytes], *, pieces: int = 1, together: bool = False) -> list[bytes]:
    """Sends each request (in `pieces` writes, or all at once when `together`) and reads its answer;
    after the last, whether the connection closes (b'<closed>') or stays open (b'<open>')."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got: list[bytes] = []
    try:
        if together:
            writer.write(b"".join(requests))
            await writer.drain()
        for request in requests:
            if not together:
                step = max(1, len(request) // pieces)
                for at in range(0, len(request), step):
                    writer.write(request[at : at + step])
                    await writer.drain()
            answer = await asyncio.wait_for(read_one(reader), 10)
            got.append(answer)
            if answer.endswith((b"<cut>", b"<reset>")):
                return got
        if b"\r\nconnection: close\r\n" in got[-1].split(b"\r\n\r\n")[0].lower() + b"\r\n" or not got[-1]:
            got.append(b"<closed>" if await asyncio.wait_for(reader.read(), 10) == b"" else b"<bytes>")
        else:
            got.append(b"<open>")
        return got
    finally:
        writer.close()


def recording(answer: Respond) -> tuple[Respond, list[tuple[bytes, bytes]]]:
    received: list[tuple[bytes, bytes]] = []

    async def respond(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append((head, await read_body(head, reader)))
        await answer(head, reader, writer)

    return respond, received


def fixed(*parts: bytes, close: bool = False) -> Respond:
    async def answer(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for part in parts:  # separate writes: the proxy reads the answer in pieces
            writer.write(part)
            await writer.drain()
        if close:
            writer.close()
            raise ConnectionResetError  # ends RawUpstream's loop for this connection

    return answer


def chunked(chunks: list[bytes]) -> list[bytes]:
    return [b"%x\r\n%b\r\n" % (len(c), c) for c in chunks] + [b"0\r\n\r\n"]


OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(OK_JSON)
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
ANSWERS: dict[str, tuple[Respond, int]] = {
    # name: (the upstream's answer, how many of the calls C answers itself with it)
    "length": (fixed(OK_HEAD + OK_JSON), 1),
    "length-in-pieces": (fixed(OK_HEAD[:20], OK_HEAD[20:] + OK_JSON[:9], OK_JSON[9:]), 1),
    "stream": (fixed(SSE_HEAD, *chunked(STREAM)), 1),
    "stream-head-alone-then-trailer": (
        fixed(SSE_HEAD, *chunked(STREAM[:3])[:-1], b"0\r\nX-Trailer: t\r\n\r\n"),
        1,
    ),
    "stream-chunk-extension": (fixed(SSE_HEAD, b"5;ext=1\r\nhello\r\n", b"0\r\n\r\n"), 1),
    "close-delimited": (
        fixed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", b"until ", b"the end", close=True),
        1,
    ),
    "no-content": (fixed(b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"), 1),
    "early-hints-and-hop-by-hop": (
        fixed(
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\nUpgrade: h2c\r\n"
            b"Content-Length: 2\r\n\r\nok",
        ),
        1,
    ),
    "bare-lf-head": (fixed(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"), 1),
    "past-the-length": (fixed(OK_HEAD + OK_JSON + b"HTTP/1.1 200 OK\r\n\r\njunk"), 1),
    "connection-close-answer": (
        fixed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", close=True),
        1,
    ),
    "invalid-length": (fixed(b"HTTP/1.1 200 OK\r\nContent-Length: x1\r\n\r\nok"), 1),
    "invalid-status": (fixed(b"HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok"), 1),
    "bad-first-chunk": (fixed(SSE_HEAD + b"zz\r\nhello\r\n"), 1),
    "gone-mid-length": (fixed(OK_HEAD + OK_JSON[:10], close=True), 1),
    "gone-before-answer": (fixed(close=True), 1),
}


REQUESTS: dict[str, tuple[list[bytes], dict[str, Any]]] = {
    "get": ([GET], {}),
    "post-in-pieces": ([PLAIN], {"pieces": 7}),
    "keep-alive": ([PLAIN, GET, PLAIN], {}),
    "pipelined": ([PLAIN, GET, post("/v1/embeddings", b'{"input": "x"}')], {"together": True}),
    "closing": ([GET[:-2] + b"Connection: close\r\n\r\n"], {}),
    "authorization-kept": ([post("/v1/chat/completions", CHAT_BODY, "Authorization: Bearer client")], {}),
    "empty-body": ([post("/v1/chat/completions", b"")], {}),
    # Bytes after the request that the relay's parser refuses: answered with `Connection: close`.
    "junk-after": ([PLAIN + b"junk\r\n\r\n"], {}),
    "one-byte-past-the-length": ([PLAIN + b"8"], {}),
}
