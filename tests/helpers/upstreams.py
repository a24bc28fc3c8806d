"""Tiny purpose-built upstreams for behaviours the simulator has no reason to show."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
from aiohttp import web


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


@contextmanager
def served_in_thread(app: web.Application) -> Iterator[str]:
    """`app` served as `serve` serves it, by an event loop of its own on a daemon thread, for a
    synchronous test (the command it runs holds the test's thread until its end): its URL. Cleaned
    up, and the thread joined, on the way out."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        runner, url = asyncio.run_coroutine_threadsafe(serve(app), loop).result(timeout=30)
        try:
            yield url
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def echo_app() -> web.Application:
    """Answers with exactly what it received: method, raw path, raw headers, body digest."""

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        payload = {
            "method": request.method,
            "raw_path": request.raw_path,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.raw_headers],
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_len": len(body),
        }
        return web.Response(
            body=orjson.dumps(payload),
            content_type="application/json",
            headers={"X-Upstream-Custom": "Kept-As-Is", "Set-Cookie": "session=abc; Path=/"},
        )

    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


def gated_stream_app(gate: asyncio.Event) -> web.Application:
    """Sends one SSE chunk, then waits for `gate` before finishing the stream.

    A proxy that buffered the response would never deliver the first chunk, so a test that
    opens the gate only after seeing that chunk through the proxy proves chunk-by-chunk relay.
    """

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        first = {
            "id": "g",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "first"}, "finish_reason": None}],
        }
        await resp.write(b"data: " + orjson.dumps(first) + b"\n\n")
        await asyncio.wait_for(gate.wait(), timeout=10)
        last = {
            "id": "g",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": " second"}, "finish_reason": "stop"}],
        }
        await resp.write(b"data: " + orjson.dumps(last) + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def quoting_app(seen: list | None = None) -> web.Application:
    """An upstream that refuses every call with 401 and quotes the credential it was sent, as
    OpenAI does ("Incorrect API key provided: <key>"); Basic credentials decoded, as a gateway might.
    `seen` gets the headers of each call."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        if seen is not None:
            seen.append(dict(request.headers))
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme == "Basic":
            user, _, password = base64.b64decode(token).decode().partition(":")
            message = f"Incorrect password provided for {user}: {password}"
        else:
            message = f"Incorrect API key provided: {token}"
        body = {"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}}
        return web.Response(status=401, body=orjson.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app
