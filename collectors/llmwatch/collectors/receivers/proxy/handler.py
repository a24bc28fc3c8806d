"""The transparent reverse proxy: every method and path, bytes untouched, streams relayed live.

What the client sends is what the upstream gets (less hop-by-hop headers, which belong to each
connection), and what the upstream answers is what the client gets: status, reason, headers,
body, chunk by chunk. Capture only copies bytes and timestamps aside; the analysis, metrics and
sampling run after the last byte has gone out, and any failure in them is counted and ignored,
so llmwatch fails open. The only responses llmwatch writes itself are 502/504 when the upstream
cannot be reached at all, and 400 for a request target that is not a path, in the OpenAI error
format so that SDKs report them clearly; their messages are fixed words that never echo what
the upstream sent nor the upstream's credentials.

Documented exceptions to "bytes untouched" (docs/design/0005-proxy-under-hostile-input.md): `Expect: 100-continue`
is answered by the proxy itself and not forwarded; 1xx informational responses (103 Early Hints)
are not relayed, because aiohttp's client consumes them.

Two cores serve this class (`proxy.engine`): `relay` (the default, collectors/llmwatch/collectors/receivers/proxy/relay.py: raw
asyncio protocols that forward bytes and call `_finish` for captured calls) and `aiohttp`
(`handle` below, the previous core). Both keep the behaviours above; docs/design/0010-relay-core.md says why.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from time import perf_counter
from typing import Any, AsyncIterator, Callable

import aiohttp
import orjson
import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDict
from yarl import URL

from llmwatch.collectors.intake import Captured, Intake
from llmwatch.collectors.receivers.proxy.capture import CallFacts, Exchange, analyze
from llmwatch.collectors.receivers.proxy.config import ProxyConfig, ProxyMetrics
from llmwatch.core.metrics import Metrics
from llmwatch.core.pricing import PriceTable
from llmwatch.core.urls import mask_url, split_userinfo
from llmwatch.core.wire import extract_answer_text
from llmwatch.scorers.pipeline.conversations import ConversationTracker

log = structlog.get_logger(__name__)

# RFC 9110 §7.6.1: connection-specific; each hop sets its own.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_UPSTREAM_REQUEST_ID = "x-request-id"
# Headers aiohttp's StreamResponse adds when they are missing; a relayed response gets none of
# them unless the upstream sent them.
_DEFAULTED = frozenset({"content-type", "server", "date"})
_UPSTREAM_HAS = web.ResponseKey("llmwatch_upstream_has", set)
# A client's own request id is a header value: stored on the sample, so kept short.
_MAX_CLIENT_ID = 128


def error_body(kind: str, message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": f"llmwatch_{kind}"}})


def _strip_defaults(response: web.StreamResponse) -> None:
    present = response.get(_UPSTREAM_HAS)
    if present is None:
        return  # one of llmwatch's own answers (502/504/400): aiohttp's defaults are fine there
    headers = response.headers
    for name in _DEFAULTED - present:
        headers.popall(name, None)


async def _on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
    # Runs after aiohttp filled in its defaults and before the head is written.
    _strip_defaults(response)


class _MalformedRequestFilter(logging.Filter):
    """aiohttp logs every malformed request (bad target, headers over the limits) at ERROR with a
    traceback, and the exception's text quotes the client's bytes (an Authorization header, say).
    A client's bad request is not an llmwatch error: one line, the error class, no bytes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg = "malformed request rejected with %s: %s"
            record.args = (exc.code, type(exc).__name__)
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_http_log = logging.getLogger("llmwatch.proxy.http")
_http_log.addFilter(_MalformedRequestFilter())


class _HeadDeadlineHandler(RequestHandler):
    """aiohttp's connection handler plus a deadline on receiving a complete request head.

    aiohttp has no such timeout: a client that sends a header line every few seconds holds its
    connection (and a file descriptor) open for as long as it likes. The clock starts when a
    connection opens and when bytes arrive while the connection is idle (aiohttp waits for its
    next request), and stops when the parser has a complete head. Body bytes of a request being
    handled never start it, and an idle keep-alive connection is left to keepalive_timeout.
    """

    def __init__(
        self, manager: web.Server, *, header_timeout_s: float, on_timeout: Callable[[], None], **kwargs: Any
    ) -> None:
        super().__init__(manager, **kwargs)
        self._head_timeout_s = header_timeout_s
        self._head_on_timeout = on_timeout
        self._head_deadline: asyncio.TimerHandle | None = None
        self._heads_at_arm = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._head_arm()

    def data_received(self, data: bytes) -> None:
        heads_before = self._request_count
        super().data_received(data)
        if self._request_count != heads_before:
            self._head_disarm()
        elif self._head_deadline is None and self._waiter is not None and not self._waiter.done():
            self._head_arm()  # idle, and bytes of a new request head came in

    def connection_lost(self, exc: BaseException | None) -> None:
        self._head_disarm()
        super().connection_lost(exc)

    def _head_arm(self) -> None:
        self._head_disarm()
        self._heads_at_arm = self._request_count
        self._head_deadline = self._loop.call_later(self._head_timeout_s, self._head_expired)

    def _head_disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_expired(self) -> None:
        self._head_deadline = None
        if self.transport is not None and self._request_count == self._heads_at_arm:
            self._head_on_timeout()
            self.force_close()


class _ProxyServer(web.Server):
    header_timeout_s: float = 10.0
    on_header_timeout: Callable[[], None] = staticmethod(lambda: None)

    def __call__(self) -> RequestHandler:
        return _HeadDeadlineHandler(
            self,
            loop=self._loop,
            header_timeout_s=self.header_timeout_s,
            on_timeout=self.on_header_timeout,
            **self._kwargs,
        )


class _ProxyRunner(web.AppRunner):
    def __init__(
        self, app: web.Application, *, header_timeout_s: float, on_header_timeout: Callable[[], None], **kwargs: Any
    ) -> None:
        super().__init__(app, **kwargs)
        self._header_timeout_s = header_timeout_s
        self._on_header_timeout = on_header_timeout

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The application builds a plain Server; this subclass only changes which connection
        # handler it makes, so swapping the class keeps everything the app set up.
        server.__class__ = _ProxyServer
        server.header_timeout_s = self._header_timeout_s  # type: ignore[attr-defined]
        server.on_header_timeout = self._on_header_timeout  # type: ignore[attr-defined]
        return server


# Labelled children kept at hand: models x versions x operations x errors, a few metrics each.
_MAX_CACHED_CHILDREN = 8192


class _HeadWithBody(web.StreamResponse):
    """A relayed response whose head waits for the first body bytes (aiohttp sends both at once)."""

    _send_headers_immediately = False


async def _chain(prefix: bytes, rest: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    yield prefix
    async for chunk in rest.iter_any():
        yield chunk


class Proxy:
    def __init__(self, cfg: ProxyConfig, metrics: Metrics, intake: Intake, *, prices: PriceTable) -> None:
        if not cfg.upstream:
            raise ValueError("upstream is not set; pass --upstream URL or set `upstream:` in the config")
        self.cfg = cfg
        self.metrics = metrics.group(ProxyMetrics)
        self.intake = intake
        self.prices = prices
        # Credentials in the upstream URL are sent as Basic auth, only on requests that carry no
        # Authorization of their own, and never shown: messages use the masked form.
        bare, userinfo = split_userinfo(cfg.upstream)
        self.upstream = URL(bare)
        self.shown_upstream = mask_url(cfg.upstream)
        self._upstream_prefix = bare.rstrip("/")
        self._upstream_auth: str | None = None
        if userinfo is not None:
            auth = aiohttp.BasicAuth.from_url(URL(cfg.upstream))
            self._upstream_auth = auth.encode() if auth is not None else None
        self._routes = frozenset(cfg.capture.routes)
        self._limit = cfg.capture.max_body_bytes
        self._version_header = cfg.model_version.header.lower()
        self._rid_header = cfg.sampling.request_id_header.lower()
        self._metadata_headers = tuple((h.lower(), key) for h, key in cfg.capture.metadata_headers.items())
        self._wanted_headers = frozenset(
            {"content-type", "content-encoding", self._version_header, _UPSTREAM_REQUEST_ID}
        )
        # What the relay core (collectors/llmwatch/collectors/receivers/proxy/relay.py) reads of this proxy's settings.
        self.wanted_headers = self._wanted_headers
        self.capture_routes = self._routes
        self.upstream_authorization = self._upstream_auth
        # The request headers `relay_exchange` reads (lower case).
        self.exchange_headers = frozenset(
            {self._rid_header, "content-encoding", *(h for h, _ in self._metadata_headers)}
        )
        self.relay: Any = None
        self._warned_unpriced: set[str] = set()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # Configured and priced models keep their own label whatever clients send first.
        metrics.model_label.allow([*cfg.metrics.models, *prices.models])
        self.session: aiohttp.ClientSession | None = None
        # Set by the runtime (OpenTelemetry export): called once per captured call, sampled or not.
        self.on_call: Callable[[Exchange, CallFacts, str | None, float | None, str | None], None] | None = None
        # Set by the runtime (shadow evaluation): offered every captured call after the intake.
        self.shadow: Any = None
        conv = cfg.capture.conversations
        # Every chat call, sampled or not, goes through it: a sampled turn 5 still finds turn 4.
        self.conversations = ConversationTracker(conv.max_entries, conv.ttl_s) if conv.enabled else None

    async def start(self) -> None:
        p = self.cfg.proxy
        if p.engine == "relay":
            return  # the relay core keeps its own upstream connections (relay_server)
        connector = aiohttp.TCPConnector(
            limit=p.max_connections, limit_per_host=0, ttl_dns_cache=300, enable_cleanup_closed=True
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            # Relay compressed bodies as they are; the analysis decompresses its own copy.
            auto_decompress=False,
            # Add nothing the client did not send.
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            # Never keep one client's cookies for the next.
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=p.connect_timeout_s, sock_connect=p.connect_timeout_s, sock_read=p.read_timeout_s
            ),
            trust_env=False,
            # aiohttp's 8,190-byte default turns upstream answers with long headers into 502.
            max_line_size=p.max_header_bytes,
            max_field_size=p.max_header_bytes,
            max_headers=p.max_headers,
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.relay is not None:
            self.relay.pool.close()

    def relay_server(self) -> Any:
        """The relay core serving this proxy (`proxy.engine: relay`); its `start(sock)` returns the port."""
        from llmwatch.collectors.receivers.proxy.relay import RelayServer

        self.relay = RelayServer(self)
        return self.relay

    # --- what the relay core calls: the same exchange, failures and finish as `handle` ------------

    def relay_exchange(
        self, method: str, route: str, headers: dict[str, str], t0: float, started_at: float
    ) -> Exchange:
        """The Exchange of a captured call, from its request head (`headers`: lower-case name -> first value)."""
        client_id = headers.get(self._rid_header)
        ex = Exchange(
            request_id=client_id[:_MAX_CLIENT_ID] if client_id else "",
            started_at=started_at,
            t0=t0,
            method=method,
            route=route,
            sample_id=f"llmw-{random.getrandbits(64):016x}",
            max_body_bytes=self._limit,
            request_encoding=headers.get("content-encoding"),
        )
        for header, key in self._metadata_headers:
            value = headers.get(header)
            if value is not None:
                ex.metadata[key] = value[:256]
        return ex

    def relay_error_body(self, message: str) -> bytes:
        return error_body("invalid_request_error", message)

    def relay_gateway_error(
        self, ex: Exchange | None, *, timeout: bool, what: str, path: str, logged: str | None = None
    ) -> tuple[int, bytes]:
        """Status and body of a 502/504 in fixed words (both cores); counted, and logged as `logged` or `what`."""
        shown = self.shown_upstream
        if timeout:
            status, kind = 504, "upstream_timeout"
            message = f"llmwatch proxy: upstream {shown} did not answer in time (proxy.connect_timeout_s / proxy.read_timeout_s)"
        else:
            status, kind = 502, "upstream_unavailable"
            message = f"llmwatch proxy: upstream {shown} {what}"
        self._fail(ex, kind)
        if ex is not None:
            ex.status = status
        log.warning("upstream_failed", error_type=kind, path=path, upstream=shown, error=logged or what or "timeout")
        return status, error_body(kind, message)

    def fail(self, ex: Exchange | None, error_type: str) -> None:
        self._fail(ex, error_type)

    def finish(self, ex: Exchange) -> None:
        self._finish(ex)

    def app(self, *, client_max_size: int = 1 << 40) -> web.Application:
        # aiohttp's own body limit would answer 413 itself; the proxy forwards any size.
        p = self.cfg.proxy
        handler_args = {
            "max_line_size": p.max_header_bytes,
            "max_field_size": p.max_header_bytes,
            "max_headers": p.max_headers,
            # A compressed request body is forwarded as sent: inflated, it no longer matched its
            # own Content-Encoding (and a small upload could inflate without bound).
            "auto_decompress": False,
        }
        app = web.Application(client_max_size=client_max_size, handler_args=handler_args)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_response_prepare.append(_on_response_prepare)
        return app

    def runner(self, app: web.Application) -> web.AppRunner:
        """The runner to serve `app` with: head deadline, and handlers cancelled when the client leaves.

        Cancelling the handler of a client that went away closes its upstream connection, so
        the upstream stops working for nobody and the pool slot comes back at once.
        """
        header_timeouts = self.metrics.proxy_errors.labels(error_type="client_header_timeout")
        return _ProxyRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            logger=_http_log,
            header_timeout_s=self.cfg.proxy.header_timeout_s,
            on_header_timeout=header_timeouts.inc,
            shutdown_timeout=self.cfg.proxy.shutdown_timeout_s,
        )

    def _forward_headers(self, request: web.Request) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict()
        preserve_host = self.cfg.proxy.preserve_host
        for raw_name, raw_value in request.raw_headers:
            name = raw_name.decode("latin-1")
            lower = name.lower()
            if lower in HOP_BY_HOP or (lower == "host" and not preserve_host):
                continue
            if lower == "expect" and raw_value.lower() == b"100-continue":
                # aiohttp has already answered 100 Continue and the body is on its way to us:
                # forwarded, the header would make the upstream request wait for a second 100
                # that an upstream expecting only the body never sends.
                continue
            headers.add(name, raw_value.decode("latin-1"))
        if self._upstream_auth is not None and "authorization" not in headers:
            headers["Authorization"] = self._upstream_auth
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

    async def handle(self, request: web.Request) -> web.StreamResponse:  # noqa: C901
        t0 = perf_counter()
        started_at = time.time()
        raw_target = request.raw_path
        if not raw_target.startswith("/"):
            # Absolute-form (`GET http://other/ HTTP/1.1`) or `OPTIONS *`: a reverse proxy only
            # ever sends to its one upstream, so only a path can be forwarded.
            return self._bad_request(
                "llmwatch proxy: the request target must be a path such as /v1/chat/completions, not an absolute URL"
            )
        url = URL(self._upstream_prefix + raw_target, encoded=True)
        if url.host != self.upstream.host or url.port != self.upstream.port:
            return self._bad_request("llmwatch proxy: the request target must be a path such as /v1/chat/completions")
        path = request.path
        ex: Exchange | None = None
        if path in self._routes:
            client_id = request.headers.get(self._rid_header)
            ex = Exchange(
                request_id=client_id[:_MAX_CLIENT_ID] if client_id else "",
                started_at=started_at,
                t0=t0,
                method=request.method,
                route=path,
                # One per call (clients reuse theirs on retries); getrandbits costs far less than uuid4.
                sample_id=f"llmw-{random.getrandbits(64):016x}",
                max_body_bytes=self._limit,
                request_encoding=request.headers.get("Content-Encoding"),
            )
            headers_in = request.headers
            for header, key in self._metadata_headers:
                value = headers_in.get(header)
                if value is not None:
                    ex.metadata[key] = value[:256]
        assert self.session is not None
        headers = self._forward_headers(request)
        data = await self._request_body(request, ex)
        resp: web.StreamResponse | None = None
        try:
            async with self.session.request(
                request.method, url, headers=headers, data=data, allow_redirects=False
            ) as up:
                # A body of known length goes out with the head in one write (one syscall, one
                # packet, as web.Response does) instead of two; a chunked or event stream's head
                # still leaves at once, so the client sees the status before the first event.
                resp = (_HeadWithBody if up.content_length is not None else web.StreamResponse)(
                    status=up.status, reason=up.reason
                )
                out_headers = resp.headers
                present: set[str] = set()
                for raw_name, raw_value in up.raw_headers:
                    name = raw_name.decode("latin-1")
                    lower = name.lower()
                    if lower not in HOP_BY_HOP:
                        out_headers.add(name, raw_value.decode("latin-1"))
                        if lower in _DEFAULTED:
                            present.add(lower)
                resp[_UPSTREAM_HAS] = present
                if ex is not None:
                    ex.status = up.status
                    upstream_headers = up.headers
                    ex.response_headers = {
                        k: upstream_headers[k] for k in self._wanted_headers if k in upstream_headers
                    }
                await resp.prepare(request)
                if ex is None:
                    # readany() directly: iter_any() wraps each read in one more coroutine.
                    read = up.content.readany
                    while chunk := await read():
                        await resp.write(chunk)
                else:
                    await self._relay_captured(up, resp, ex)
                await resp.write_eof()
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            asyncio.TimeoutError,
        ) as exc:
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
        except asyncio.CancelledError:
            # The client went away (aiohttp cancels its handler); leaving the `async with`
            # closed the upstream connection.
            self._fail(ex, "client_disconnected")
            raise
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
        read = up.content.readany
        write = resp.write
        while chunk := await read():
            if size <= limit:
                size += len(chunk)
                chunks.append(chunk)
                ends.append(size)
                times.append(perf_counter())
                if size > limit:
                    ex.response_truncated = True
            await write(chunk)
        ex.captured_bytes = size

    def _fail(self, ex: Exchange | None, error_type: str) -> None:
        self.metrics.proxy_errors.labels(error_type=error_type).inc()
        if ex is not None:
            ex.error_type = error_type

    def _bad_request(self, message: str) -> web.Response:
        return web.Response(
            status=400, body=error_body("invalid_request_error", message), content_type="application/json"
        )

    def _gateway_error(self, request: web.Request, ex: Exchange | None, exc: BaseException) -> web.Response:
        # Fixed words only: an exception's text can quote the upstream's header bytes.
        timeout = isinstance(exc, asyncio.TimeoutError)
        status, body = self.relay_gateway_error(
            ex, timeout=timeout, what="" if timeout else _what_failed(exc), path=request.path, logged=type(exc).__name__
        )
        return web.Response(status=status, body=body, content_type="application/json")

    def _captured(
        self, ex: Exchange, client_id: str, facts: CallFacts, version: str | None, cost: float | None, reason: str
    ) -> Captured:
        if client_id:
            # Kept whole here; the pipeline's redaction policy (client_request_id) masks it, off the hot path.
            ex.client_request_id = client_id
        return Captured(ex, facts, version, cost, reason)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        # `.labels()` validates and joins its labels and takes a lock on every call; the children
        # it returns live as long as the registry, so each label set is looked up once. Created
        # on first use only, as `.labels()` did: a series that was never observed is not exposed.
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            if len(self._children) >= _MAX_CACHED_CHILDREN:
                self._children.clear()  # the label caps bound this; the bound is only a backstop
            child = self._children[key] = metric.labels(*labels)
        return child

    def _finish(self, ex: Exchange) -> None:
        """Metrics and sampling for one call. Never raises: llmwatch must not break traffic."""
        try:
            # The answer of a stream is assembled only where it is read: OpenTelemetry spans
            # carry it, and a sampled call's sample (built later, in the pipeline thread).
            facts = analyze(ex, assemble=self.on_call is not None)
            m = self.metrics
            # A model the upstream answered for is real: it keeps its label past the cap.
            confirmed = facts.response_model is not None and facts.status < 400
            model_label = m.model_label.confirm(facts.model) if confirmed else m.model_label(facts.model)
            version = self.intake.model_version(
                ex.response_headers.get(self._version_header), facts.response_model, facts.model
            )
            version_label = m.version_label(version)
            if confirmed:
                self.intake.served(facts.model, version, facts.response_model, facts.system_fingerprint)
            op = facts.operation
            child = self._child
            child(m.operation_duration, (op, model_label, version_label, facts.error_type or "")).observe(
                facts.duration_s
            )
            if facts.ttft_s is not None:
                child(m.time_to_first_token, (op, model_label, version_label)).observe(facts.ttft_s)
            if facts.input_tokens is not None:
                child(m.token_usage, (op, model_label, version_label, "input")).observe(facts.input_tokens)
            if facts.output_tokens is not None:
                child(m.token_usage, (op, model_label, version_label, "output")).observe(facts.output_tokens)
            cost = None
            if facts.model is not None and (facts.input_tokens or facts.output_tokens):
                cost = self.prices.cost(facts.model, facts.input_tokens, facts.output_tokens)
                if cost is None:
                    m.unpriced.labels(model_label).inc()
                    if facts.model not in self._warned_unpriced and len(self._warned_unpriced) < 100:
                        self._warned_unpriced.add(facts.model)
                        log.warning(
                            "model_not_priced", model=facts.model, fix="add it under metrics.pricing in the config"
                        )
                else:
                    child(m.cost, (op, model_label, version_label)).inc(cost)
            for note in facts.notes:
                m.capture_skipped.labels(reason=note).inc()
            if self.conversations is not None and op == "chat":
                self._conversation(ex, facts)
            client_id = ex.request_id
            if not client_id:
                # The sampling hash needs some id; the sample's own id is always the per-call one.
                ex.request_id = ex.response_headers.get(_UPSTREAM_REQUEST_ID) or ex.sample_id
            admission = self.intake.admit(
                ex.request_id,
                ex.route,
                facts.model,
                error=facts.error_type is not None,
                latency_ms=facts.duration_s * 1000.0,
                build=lambda reason: self._captured(ex, client_id, facts, version, cost, reason),
            )
            if self.on_call is not None:
                self.on_call(ex, facts, version, cost, admission.reason)
            if self.shadow is not None:
                self.shadow.offer(ex, facts, version, cost)
        except Exception:
            self.metrics.internal_errors.labels(stage="analyze").inc()
            log.exception("capture_analysis_failed", route=ex.route)

    def _conversation(self, ex: Exchange, facts: CallFacts) -> None:
        """The call's conversation and turn, on the exchange for its sample (O(history), ~µs)."""
        request = facts.request
        messages = request.get("messages") if isinstance(request, dict) else None
        if not isinstance(messages, list) or not messages or self.conversations is None:
            return
        try:
            answer = extract_answer_text(facts.response) if facts.assembled and facts.status < 400 else ""
            ex.conversation_id, ex.turn = self.conversations.observe(
                messages,
                now=ex.started_at,
                call_id=ex.sample_id or ex.request_id,
                declared=ex.metadata.get("conversation_id"),
                answer=answer or None,
            )
        except Exception:
            # The call keeps its metrics and its sample, without a conversation.
            self.metrics.internal_errors.labels(stage="conversation").inc()
            log.exception("conversation_tracking_failed", route=ex.route)


def _what_failed(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "is unreachable: the connection could not be made"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "closed the connection without a complete response"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "sent a response that is not valid HTTP or exceeds the header limits (proxy.max_header_bytes, proxy.max_headers)"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "sent a response body that is not valid HTTP"
    return "is unreachable"
