"""The floor under the proxy's relay: what any Python relay on uvloop costs here per call, before it
parses or decides anything. Not a proxy; a measuring stick for `bench/proxy_threads.py --floor`.

Each client connection gets its own keep-alive upstream connection; bytes go from one to the other
as they arrive, with no parsing at all (so it only serves a client that sends one request at a time
and waits for its answer, as the benchmark's does). Per call that is what every relay must do:
two reads, two writes, two wake-ups, two Python callbacks. With `RELAY_FLOOR_PARSE=1` it also
parses both heads with httptools, with the callbacks the relay core registers (request: message
begin, URL, one per header, head complete, body, message complete; response: a parser per
call, status, one per header, head complete), and does nothing with the result: the cost of
parsing alone, before the relay's own logic.

    python bench/proxy_threads.py --rate 200 --mode plain --seconds 8 --rounds 3 \\
        --config relay=LLMWATCH_CAPTURE__ROUTES=[] --floor --config floor= --config floor-parse=RELAY_FLOOR_PARSE=1

It takes `llmwatch proxy`'s arguments (`proxy --upstream URL --listen HOST:PORT ...`) so that
proxy_threads.py starts it the same way; only `--upstream` and `--listen` are used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

import httptools
import uvloop

PARSE = os.environ.get("RELAY_FLOOR_PARSE") == "1"
_MAX_LINE = 65_536
_MAX_HEADERS = 256


class _Upstream(asyncio.Protocol):
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: Any = None
        self.parser: Any = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if PARSE and data.startswith(b"HTTP/"):
            self.headers = []
            self.reason = b""
            self.parser = httptools.HttpResponseParser(self)
            self.parser.feed_data(data[: data.find(b"\r\n\r\n") + 4])
        self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.transport.close()

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self.headers
        if len(name) + len(value) + 2 > _MAX_LINE or len(headers) >= _MAX_HEADERS:
            raise ValueError("over the header limits")
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()


class _Client(asyncio.Protocol):
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.transport: Any = None
        self.up: _Upstream | None = None
        self.pending: list[bytes] = []
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.opening = asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(lambda: _Upstream(self), self.host, self.port)
        self.up = up
        if self.pending:
            up.transport.write(b"".join(self.pending))

    def data_received(self, data: bytes) -> None:
        if PARSE:
            self.parser.feed_data(data)
        up = self.up
        if up is None:
            self.pending.append(data)
        else:
            up.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.up is not None:
            self.up.transport.close()

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []

    def on_url(self, piece: bytes) -> None:
        self.url += piece

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self.headers
        if len(name) + len(value) + 2 > _MAX_LINE or len(headers) >= _MAX_HEADERS:
            raise ValueError("over the header limits")
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.method = self.parser.get_method()
        self.version = self.parser.get_http_version()

    def on_body(self, data: bytes) -> None:
        self.body = data

    def on_message_complete(self) -> None:
        pass


async def serve(listen: str, upstream: str) -> None:
    host, _, port = upstream.split("//", 1)[-1].rstrip("/").rpartition(":")
    lhost, _, lport = listen.rpartition(":")
    loop = asyncio.get_running_loop()
    await loop.create_server(lambda: _Client(host, int(port)), lhost, int(lport), backlog=2048)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("proxy",))
    ap.add_argument("--upstream", required=True, help="http://HOST:PORT")
    ap.add_argument("--listen", required=True, help="HOST:PORT")
    ap.add_argument("--metrics-listen", help="ignored")
    ap.add_argument("--data-dir", help="ignored")
    args = ap.parse_args()
    uvloop.run(serve(args.listen, args.upstream))


if __name__ == "__main__":
    main()
