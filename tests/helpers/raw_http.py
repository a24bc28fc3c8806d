"""Raw HTTP/1.1 on sockets: a scripted upstream and hand-written requests, for framing and fault tests."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import orjson

CHAT_BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


OK_JSON = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }
)


class RawUpstream:
    """An HTTP/1.1 server on 127.0.0.1 whose every byte is chosen by the test.

    `respond(head, reader, writer)` gets the raw request head (request line and headers, without
    the blank line) and answers however it likes. Every head received is kept in `heads`.
    """

    def __init__(self, respond: Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> None:
        self.respond = respond
        self.heads: list[bytes] = []
        self.connections = 0
        self.got_request = asyncio.Event()
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def __aenter__(self) -> "RawUpstream":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 22)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for _ in range(100):  # requests per connection, far more than any test sends
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head[:-4])
                self.got_request.set()
                await self.respond(head[:-4], reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


def header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower().encode():
            return value.strip().decode("latin-1")
    return None


async def read_body(head: bytes, reader: asyncio.StreamReader) -> bytes:
    length = header(head, "content-length")
    return await reader.readexactly(int(length)) if length else b""


async def answer_ok(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_body(head, reader)
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(OK_JSON), OK_JSON)
    )
    await writer.drain()


async def raw_call(port: int, request: bytes, *, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send raw request bytes to the proxy; return (status, headers, body) of the final response."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(read_response(reader), timeout)
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    while True:
        head = (await reader.readuntil(b"\r\n\r\n"))[:-4]
        status = int(head.split(b" ", 2)[1])
        if status >= 200:
            break
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        headers[key.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            body += (await reader.readexactly(size + 2))[:-2]
            if size == 0:
                break
    else:
        body = await reader.read()
    return status, headers, body


def post(path: str, body: bytes, *extra: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: llmwatch.test",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
