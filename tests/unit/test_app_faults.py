"""The middleware the review app and `llmwatch ui` share: a fault is a logged, plain 500 with the
security headers, never a traceback; aiohttp's own answers (404) pass through it."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from structlog.testing import capture_logs

from llmwatch.agent.apps.review import SECURITY_HEADERS, no_tracebacks, secure_headers


async def test_a_fault_is_a_plain_500_with_the_security_headers_and_a_log_line():
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("secret-token-in-a-message")

    app = web.Application(middlewares=[no_tracebacks("app.internal_error", "internal error (logged)\n")])
    app.on_response_prepare.append(secure_headers)
    app.router.add_get("/t/{token}", broken)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        with capture_logs() as logs:
            resp = await client.get("/t/abc")
            body = await resp.text()
        missing = await client.get("/nowhere")
    assert (resp.status, body) == (500, "internal error (logged)\n")
    assert "Traceback" not in body and "secret-token" not in body
    assert all(resp.headers.get(k) == v for k, v in SECURITY_HEADERS.items())
    [line] = [e for e in logs if e["event"] == "app.internal_error"]
    assert (line["method"], line["route"]) == ("GET", "/t/{token}")
    assert missing.status == 404 and all(missing.headers.get(k) == v for k, v in SECURITY_HEADERS.items())
