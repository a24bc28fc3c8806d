"""The metrics port of every llmwatch process: `/metrics`, `/healthz` (alive) and `/readyz` (ready).

One app for the three commands that serve it (the proxy agent, `llmwatch scorer` and
`llmwatch aggregate`), so that probes mean the same everywhere: `/healthz` answers 200 while the
process runs; `/readyz` answers 200 with `{"status": "ready", "checks": {...}}` when every check
is true and 503 with the failing check otherwise. A process may add its own facts (a Kafka
worker's id and assigned partitions) to both bodies through `details`.

The proxy agent serves it on its own event loop (`serve_app`); the Kafka workers, whose main
thread belongs to the consumer, serve it from a daemon thread (`serve_in_thread`).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any, Callable

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llmwatch.core.config import ListenError
from llmwatch.core.metrics import Metrics

Readiness = Callable[[], dict[str, bool]]
Details = Callable[[], dict[str, Any]]


def metrics_app(
    metrics: Metrics,
    readiness: Readiness,
    *,
    details: Details | None = None,
    before_scrape: Callable[[], None] | None = None,
) -> web.Application:
    """`/metrics`, `/healthz`, `/readyz`. `before_scrape` runs on the serving loop before each scrape
    (the proxy's batched bookkeeping is brought up to date: a scrape sees every finished call)."""

    def body(**fields: Any) -> dict[str, Any]:
        # The process's own facts first: `status` and `checks` keep their meaning whatever they hold.
        return {**(details() if details is not None else {}), **fields}

    async def scrape(_: web.Request) -> web.Response:
        if before_scrape is not None:
            before_scrape()
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(body(status="ok")), content_type="application/json")

    async def readyz(_: web.Request) -> web.Response:
        checks = readiness()
        ready = all(checks.values())
        return web.Response(
            status=200 if ready else 503,
            body=orjson.dumps(body(status="ready" if ready else "not_ready", checks=checks)),
            content_type="application/json",
        )

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def bind_socket(address: str, setting: str) -> socket.socket:
    """A TCP socket bound to `address` (port 0 picks a free one); `ListenError` naming `setting` if it cannot be."""
    host, port = split_host_port(address)
    # Bind ourselves so that port 0 works and the chosen port is known.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ListenError(
            f"cannot listen on {address} ({setting}): {exc.strerror or exc}; "
            f"stop what holds it or choose another address (port 0 picks a free one)"
        ) from None
    return sock


async def serve_app(
    app: web.Application, address: str, runner: web.AppRunner | None = None, *, setting: str = "listen address"
) -> tuple[web.AppRunner, int]:
    """Serve `app` on `address` from the running loop, with `runner` if given (built for `app`); (runner to clean up, port bound).

    `setting` names where the address came from ("--listen, config listen"): a bind failure
    says it, since the bare "[Errno 98] Address already in use" names neither it nor the address.
    """
    # Scrapes and probes are quick: at shutdown they get a second, not aiohttp's default minute.
    runner = runner or web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    try:
        sock = bind_socket(address, setting)
    except ListenError:
        await runner.cleanup()
        raise
    site = web.SockSite(runner, sock, backlog=2048)
    await site.start()
    return runner, sock.getsockname()[1]


class ThreadedServer:
    """An aiohttp app on its own event loop in a daemon thread, for processes whose main thread is busy."""

    def __init__(
        self, app: web.Application, address: str, *, name: str = "llmwatch-http", setting: str = "listen address"
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0
        bound = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._runner, self.port = self._loop.run_until_complete(serve_app(app, address, setting=setting))
            except BaseException as exc:
                failure.append(exc)
                bound.set()
                self._loop.close()
                return
            bound.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        bound.wait()
        if failure:
            # A port already taken must fail the command at start-up, in the caller's thread.
            raise failure[0]

    def close(self, timeout: float = 5.0) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)


def serve_in_thread(
    app: web.Application,
    address: str,
    *,
    name: str = "llmwatch-http",
    setting: str = "--metrics-listen, config metrics_listen",
) -> ThreadedServer:
    return ThreadedServer(app, address, name=name, setting=setting)
