"""The transparent reverse proxy: every method and path, bytes untouched, streams relayed live.

What the client sends is what the upstream gets (less hop-by-hop headers, which belong to each
connection), and what the upstream answers is what the client gets: status, reason, headers,
body, chunk by chunk. Capture only copies bytes and timestamps aside; the analysis, metrics and
sampling run after the last byte has gone out, and any failure in them is counted and ignored,
so llmwatch fails open. The only responses llmwatch writes itself are 502/504 when the upstream
cannot be reached at all, in the OpenAI error format so that SDKs report them clearly.
"""

from __future__ import annotations

import asyncio
import random
import time
from time import perf_counter
from typing import Any, AsyncIterator, Callable

import aiohttp
import orjson
import structlog
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from llmwatch.core.config import Config
from llmwatch.core.metrics import Metrics
from llmwatch.collectors.intake import Captured, Intake
from llmwatch.core.pricing import PriceTable
from llmwatch.collectors.proxy_capture import CallFacts, Exchange, analyze
from llmwatch.collectors.upstream_probe import describe_connect_error, upstream_address

log = structlog.get_logger(__name__)

# RFC 9110 §7.6.1: connection-specific; each hop sets its own.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade"}
)
_UPSTREAM_REQUEST_ID = "x-request-id"


def error_body(kind: str, message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": f"llmwatch_{kind}"}})


async def _chain(prefix: bytes, rest: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    yield prefix
    async for chunk in rest.iter_any():
        yield chunk


class Proxy:
    def __init__(self, cfg: Config, metrics: Metrics, intake: Intake, *, prices: PriceTable) -> None:
        if not cfg.upstream:
            raise ValueError("upstream is not set; pass --upstream URL or set `upstream:` in the config")
        self.cfg = cfg
        self.metrics = metrics
        self.intake = intake
        self.prices = prices
        self.upstream = URL(cfg.upstream)
        self._upstream_prefix = cfg.upstream.rstrip("/")
        self._routes = frozenset(cfg.capture.routes)
        self._limit = cfg.capture.max_body_bytes
        self._version_header = cfg.model_version.header.lower()
        self._rid_header = cfg.sampling.request_id_header.lower()
        self._metadata_headers = tuple((h.lower(), key) for h, key in cfg.capture.metadata_headers.items())
        self._wanted_headers = frozenset({"content-type", "content-encoding", self._version_header, _UPSTREAM_REQUEST_ID})
        self._warned_unpriced: set[str] = set()
        self.session: aiohttp.ClientSession | None = None
        # Set by the runtime (OpenTelemetry export): called once per captured call, sampled or not.
        self.on_call: Callable[[Exchange, CallFacts, str | None, float | None, str | None], None] | None = None

    async def start(self) -> None:
        p = self.cfg.proxy
        connector = aiohttp.TCPConnector(limit=p.max_connections, limit_per_host=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        self.session = aiohttp.ClientSession(
            connector=connector,
            # Relay compressed bodies as they are; the analysis decompresses its own copy.
            auto_decompress=False,
            # Add nothing the client did not send.
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            # Never keep one client's cookies for the next.
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, connect=p.connect_timeout_s, sock_connect=p.connect_timeout_s, sock_read=p.read_timeout_s),
            trust_env=False,
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    def app(self, *, client_max_size: int = 1 << 40) -> web.Application:
        # aiohttp's own body limit would answer 413 itself; the proxy forwards any size.
        app = web.Application(client_max_size=client_max_size, handler_args={"max_field_size": 65536})
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def _forward_headers(self, request: web.Request) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict()
        preserve_host = self.cfg.proxy.preserve_host
        for raw_name, raw_value in request.raw_headers:
            name = raw_name.decode("latin-1")
            lower = name.lower()
            if lower in HOP_BY_HOP or (lower == "host" and not preserve_host):
                continue
            headers.add(name, raw_value.decode("latin-1"))
        return headers

    async def _request_body(self, request: web.Request, ex: Exchange | None) -> Any:
        if not request.body_exists:
            if ex is not None:
                ex.request_body = b""
            return None
        length = request.content_length
        if ex is None:
            return request.content
        if length is not None and length > self._limit:
            ex.notes.append("request_too_large")
            return request.content
        if length is not None:
            body = await request.content.readexactly(length) if length else b""
            ex.request_body = body
            return body
        # Chunked upload of unknown size: read up to the capture limit, then stream the rest.
        buf = bytearray()
        while True:
            chunk = await request.content.readany()
            if not chunk:
                break
            buf += chunk
            if len(buf) > self._limit:
                ex.notes.append("request_too_large")
                return _chain(bytes(buf), request.content)
        ex.request_body = bytes(buf)
        return ex.request_body

    async def handle(self, request: web.Request) -> web.StreamResponse:
        t0 = perf_counter()
        started_at = time.time()
        path = request.path
        ex: Exchange | None = None
        if path in self._routes:
            ex = Exchange(request_id=request.headers.get(self._rid_header, ""), started_at=started_at, t0=t0, method=request.method, route=path)
            headers_in = request.headers
            for header, key in self._metadata_headers:
                value = headers_in.get(header)
                if value is not None:
                    ex.metadata[key] = value[:256]
        assert self.session is not None
        headers = self._forward_headers(request)
        data = await self._request_body(request, ex)
        url = URL(self._upstream_prefix + request.raw_path, encoded=True)
        resp: web.StreamResponse | None = None
        try:
            async with self.session.request(request.method, url, headers=headers, data=data, allow_redirects=False) as up:
                resp = web.StreamResponse(status=up.status, reason=up.reason)
                out_headers = resp.headers
                for raw_name, raw_value in up.raw_headers:
                    name = raw_name.decode("latin-1")
                    if name.lower() not in HOP_BY_HOP:
                        out_headers.add(name, raw_value.decode("latin-1"))
                if ex is not None:
                    ex.status = up.status
                    upstream_headers = up.headers
                    ex.response_headers = {k: upstream_headers[k] for k in self._wanted_headers if k in upstream_headers}
                await resp.prepare(request)
                if ex is None:
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                else:
                    await self._relay_captured(up, resp, ex)
                await resp.write_eof()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, asyncio.TimeoutError) as exc:
            if resp is None or not resp.prepared:
                return self._gateway_error(request, ex, exc)
            # Headers already went out: the honest thing is to break the client's stream too,
            # exactly as a direct connection to the upstream would have broken.
            self._fail(ex, "stream_interrupted")
            if request.transport is not None:
                request.transport.close()
            return resp
        except aiohttp.ClientConnectionResetError:
            self._fail(ex, "client_disconnected")
            return resp if resp is not None else web.Response(status=499)
        except aiohttp.ClientError as exc:
            if resp is None or not resp.prepared:
                return self._gateway_error(request, ex, exc)
            raise
        finally:
            if ex is not None:
                ex.t_end = perf_counter()
                self._finish(ex)
        return resp

    async def _relay_captured(self, up: aiohttp.ClientResponse, resp: web.StreamResponse, ex: Exchange) -> None:
        limit = self._limit
        chunks = ex.response_chunks
        ends = ex.chunk_ends
        times = ex.chunk_times
        size = 0
        async for chunk in up.content.iter_any():
            if size <= limit:
                size += len(chunk)
                chunks.append(chunk)
                ends.append(size)
                times.append(perf_counter())
                if size > limit:
                    ex.response_truncated = True
            await resp.write(chunk)
        ex.captured_bytes = size

    def _fail(self, ex: Exchange | None, error_type: str) -> None:
        self.metrics.proxy_errors.labels(error_type=error_type).inc()
        if ex is not None:
            ex.error_type = error_type

    def _gateway_error(self, request: web.Request, ex: Exchange | None, exc: BaseException) -> web.Response:
        reason = str(exc)
        if isinstance(exc, asyncio.TimeoutError):
            status, kind = 504, "upstream_timeout"
            message = f"llmwatch proxy: upstream {self.upstream} did not answer in time ({type(exc).__name__})"
        else:
            status, kind = 502, "upstream_unavailable"
            # aiohttp's own text says "ssl:default" even for plain http; name host:port instead.
            reason = describe_connect_error(*upstream_address(str(self.upstream)), exc) if isinstance(exc, aiohttp.ClientConnectorError) else str(exc)
            message = f"llmwatch proxy: upstream {self.upstream} is unreachable: {reason}"
        self._fail(ex, kind)
        if ex is not None:
            ex.status = status
        log.warning("upstream_failed", error_type=kind, path=request.path, error=reason)
        return web.Response(status=status, body=error_body(kind, message), content_type="application/json")

    def _finish(self, ex: Exchange) -> None:
        """Metrics and sampling for one call. Never raises: llmwatch must not break traffic."""
        try:
            facts = analyze(ex)
            m = self.metrics
            model_label = m.model_label(facts.model)
            version = self.intake.model_version(ex.response_headers.get(self._version_header), facts.response_model, facts.model)
            version_label = m.version_label(version)
            op = facts.operation
            m.operation_duration.labels(op, model_label, version_label, facts.error_type or "").observe(facts.duration_s)
            if facts.ttft_s is not None:
                m.time_to_first_token.labels(op, model_label, version_label).observe(facts.ttft_s)
            if facts.input_tokens is not None:
                m.token_usage.labels(op, model_label, version_label, "input").observe(facts.input_tokens)
            if facts.output_tokens is not None:
                m.token_usage.labels(op, model_label, version_label, "output").observe(facts.output_tokens)
            cost = None
            if facts.model is not None and (facts.input_tokens or facts.output_tokens):
                cost = self.prices.cost(facts.model, facts.input_tokens, facts.output_tokens)
                if cost is None:
                    m.unpriced.labels(model_label).inc()
                    if facts.model not in self._warned_unpriced and len(self._warned_unpriced) < 100:
                        self._warned_unpriced.add(facts.model)
                        log.warning("model_not_priced", model=facts.model, fix="add it under metrics.pricing in the config")
                else:
                    m.cost.labels(op, model_label, version_label).inc(cost)
            for note in facts.notes:
                m.capture_skipped.labels(reason=note).inc()
            if not ex.request_id:
                # Random ids only feed the sampling hash; uuid4 (os.urandom) costs more than the rest of the analysis.
                ex.request_id = ex.response_headers.get(_UPSTREAM_REQUEST_ID) or f"llmw-{random.getrandbits(64):016x}"
            admission = self.intake.admit(
                ex.request_id,
                ex.route,
                facts.model,
                error=facts.error_type is not None,
                latency_ms=facts.duration_s * 1000.0,
                build=lambda reason: Captured(ex, facts, version, cost, reason),
            )
            if self.on_call is not None:
                self.on_call(ex, facts, version, cost, admission.reason)
        except Exception:
            self.metrics.internal_errors.labels(stage="analyze").inc()
            log.exception("capture_analysis_failed", route=ex.route)
