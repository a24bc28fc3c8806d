"""The metrics port: `/metrics` for Prometheus, `/healthz` (alive) and `/readyz` (ready to proxy)."""

from __future__ import annotations

from typing import Any, Callable

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llmwatch.core.metrics import Metrics


def metrics_app(metrics: Metrics, readiness: Callable[[], dict[str, bool]], details: Callable[[], dict[str, Any]] | None = None) -> web.Application:
    """`details` adds facts to `/readyz`'s body that do not decide readiness (upstream_reachable)."""

    async def scrape(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        checks = readiness()
        ready = all(checks.values())
        return web.Response(
            status=200 if ready else 503,
            body=orjson.dumps({"status": "ready" if ready else "not_ready", "checks": checks, **(details() if details else {})}),
            content_type="application/json",
        )

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
