"""The transparent reverse proxy: every method and path, bytes untouched, streams relayed live.

What the client sends is what the upstream gets (less hop-by-hop headers, which belong to each
connection), and what the upstream answers is what the client gets: status, reason, headers,
body, chunk by chunk. Capture only copies bytes and timestamps aside; the analysis, metrics and
sampling run after the last byte has gone out, and any failure in them is counted and ignored,
so llmwatch fails open. The only responses llmwatch writes itself are 502/504 when the upstream
cannot be reached at all, and 400/408/501 for requests it will not forward, in the OpenAI error
format so that SDKs report them clearly; their messages are fixed words that never echo what
the upstream sent nor the upstream's credentials.

Documented exceptions to "bytes untouched" (docs/design/0005-proxy-under-hostile-input.md): `Expect: 100-continue`
is answered by the proxy itself and not forwarded; 1xx informational responses (103 Early Hints)
are not relayed. docs/operations/http-edge-cases.md lists every malformed-HTTP case and its answer.

The bytes are moved by the relay core (collectors/llmwatch/collectors/receivers/proxy/relay.py: raw asyncio
protocols, docs/design/0010-relay-core.md), the proxy's only engine; this class owns what it
calls: the Exchange of a captured call, failures in fixed words, and `_finish` (metrics, sampling).
"""

from __future__ import annotations

import asyncio
import random
from bisect import bisect_left
from typing import Any

import aiohttp
import orjson
import structlog
from yarl import URL

from llmwatch.collectors.calls import CallEvents, CallFinished
from llmwatch.collectors.intake import Captured, Intake
from llmwatch.collectors.receivers.proxy import ratelimits
from llmwatch.collectors.receivers.proxy.capture import CallFacts, Exchange, analyze
from llmwatch.collectors.receivers.proxy.config import ProxyConfig, ProxyMetrics
from llmwatch.collectors.receivers.proxy.ratelimits import RATE_LIMIT_HEADERS
from llmwatch.core.metrics import Metrics
from llmwatch.core.pricing import PriceTable
from llmwatch.core.urls import mask_url, split_userinfo
from llmwatch.core.wire import extract_answer_text
from llmwatch.scorers.pipeline.conversations import ConversationTracker

log = structlog.get_logger(__name__)

_UPSTREAM_REQUEST_ID = "x-request-id"
# A client's own request id is a header value: stored on the sample, so kept short.
_MAX_CLIENT_ID = 128


def error_body(kind: str, message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": f"llmwatch_{kind}"}})


# Labelled children kept at hand: models x versions x operations x errors, a few metrics each.
_MAX_CACHED_CHILDREN = 8192


class _BucketFinder:
    """A histogram child's `observe` by bisection, for the proxy's per-call histograms.

    prometheus-client's `Histogram.observe` walks the bucket bounds one by one in Python and
    checks the metric is observable on every call (1.7-3.0 µs; this is 1.1): a plain call
    observes three histograms, a stream four. It counts into the child's own bucket and sum
    values, so a scrape reads exactly what `observe` would have left (the bucket is the first
    bound >= amount, `bisect_left`; a NaN lands in no bucket and in the sum, as there).
    """

    __slots__ = ("_bounds", "_buckets", "_sum")

    def __init__(self, bounds: list[float], buckets: list[Any], total: Any) -> None:
        self._bounds = bounds
        self._buckets = buckets
        self._sum = total

    def observe(self, amount: float) -> None:
        self._sum.inc(amount)
        if amount == amount:  # not NaN
            self._buckets[bisect_left(self._bounds, amount)].inc(1)


def _fast_child(child: Any) -> Any:
    """The bisecting observer of a histogram child; any other child (or another client version's
    histogram without these attributes) as it is."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if (
        isinstance(bounds, list)
        and isinstance(buckets, list)
        and len(bounds) == len(buckets)
        and bounds
        and bounds[-1] == float("inf")
        and total is not None
        and getattr(child, "_is_observable", lambda: False)()
    ):
        return _BucketFinder(bounds, buckets, total)
    return child


class Proxy:
    def __init__(
        self,
        cfg: ProxyConfig,
        metrics: Metrics,
        intake: Intake,
        *,
        prices: PriceTable,
        events: CallEvents | None = None,
    ) -> None:
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
        self._upstream_auth: str | None = None
        if userinfo is not None:
            auth = aiohttp.BasicAuth.from_url(URL(cfg.upstream))
            self._upstream_auth = auth.encode() if auth is not None else None
        self._routes = frozenset(cfg.capture.routes)
        # Finished calls waiting for their batch (`finish`): bounded by finish_batch.
        self._batch = cfg.capture.finish_batch if cfg.capture.finish_linger_s > 0 else 1
        self._linger = cfg.capture.finish_linger_s
        self._pending: list[Exchange] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._limit = cfg.capture.max_body_bytes
        self._version_header = cfg.model_version.header.lower()
        self._rid_header = cfg.sampling.request_id_header.lower()
        self._metadata_headers = tuple((h.lower(), key) for h, key in cfg.capture.metadata_headers.items())
        self._wanted_headers = frozenset(
            {"content-type", "content-encoding", self._version_header, _UPSTREAM_REQUEST_ID, *RATE_LIMIT_HEADERS}
        )
        # The `upstream` label of the rate-limit gauges: host and port only (never credentials or a path).
        self._upstream_label = f"{self.upstream.host}:{self.upstream.port}"
        self.metrics.in_flight.set_function(self.in_flight)
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
        # Told once per captured call, sampled or not, after the client has its answer (OTLP
        # export and the shadow mirror subscribe in their factories).
        self.finished = events if events is not None else CallEvents()
        conv = cfg.capture.conversations
        # Every sampled chat call goes through it (`_captured`): a sampled turn 5 finds the sampled turn 2.
        self.conversations = ConversationTracker(conv.max_entries, conv.ttl_s) if conv.enabled else None

    async def start(self) -> None:
        """Nothing to open: the relay core keeps its own upstream connections (`relay_server`)."""

    async def close(self) -> None:
        # After the relay's cleanup, so the calls it finished on the way out are in the batch.
        self.flush()
        if self.relay is not None:
            self.relay.pool.close()

    def relay_server(self) -> Any:
        """The relay core serving this proxy; its `start(sock)` returns the port."""
        from llmwatch.collectors.receivers.proxy.relay import RelayServer

        self.relay = RelayServer(self)
        return self.relay

    # --- what the relay core calls: the exchange, failures and finish ------------------------------

    def relay_exchange(
        self, method: str, route: str, headers: dict[str, str], t0: float, started_at: float
    ) -> Exchange:
        """The Exchange of a captured call, from its request head (`headers`: lower-case name -> first value).

        Only what the relay needs while the call runs; the request id, metadata and sample id are
        read from `headers` by `_request_head`, in the finished calls' batch: between two reads
        of the network, this code runs cold (the sample id alone cost ~3 µs there, 0.3 in a loop)."""
        return Exchange(
            request_id="",
            started_at=started_at,
            t0=t0,
            method=method,
            route=route,
            max_body_bytes=self._limit,
            request_headers=headers,
        )

    def _request_head(self, ex: Exchange, headers: dict[str, str]) -> None:
        """What the Exchange keeps of its request head: the client's request id, the
        `capture.metadata_headers` values, the body's Content-Encoding, and the call's sample id."""
        ex.request_headers = None
        client_id = headers.get(self._rid_header)
        if client_id:
            ex.request_id = client_id[:_MAX_CLIENT_ID]
        ex.request_encoding = headers.get("content-encoding")
        if not ex.sample_id:
            ex.sample_id = f"llmw-{random.getrandbits(64):016x}"
        for header, key in self._metadata_headers:
            value = headers.get(header)
            if value is not None:
                ex.metadata[key] = value[:256]

    def relay_error_body(self, message: str) -> bytes:
        return error_body("invalid_request_error", message)

    def relay_gateway_error(
        self, ex: Exchange | None, *, timeout: bool, what: str, path: str, logged: str | None = None
    ) -> tuple[int, bytes]:
        """Status and body of a 502/504 in fixed words; counted, and logged as `logged` or `what`."""
        status, kind, body = self.gateway_error(timeout=timeout, what=what)
        self._fail(ex, kind)
        if ex is not None:
            ex.status = status
        log.warning(
            "upstream_failed",
            error_type=kind,
            path=path,
            upstream=self.shown_upstream,
            error=logged or what or "timeout",
        )
        return status, body

    def gateway_error(self, *, timeout: bool, what: str) -> tuple[int, str, bytes]:
        """Status, error type and body of a 502/504, nothing counted (the C data plane is given
        them once, `RelayServer.error_answers`)."""
        shown = self.shown_upstream
        if timeout:
            status, kind = 504, "upstream_timeout"
            message = f"llmwatch proxy: upstream {shown} did not answer in time (proxy.connect_timeout_s / proxy.read_timeout_s)"
        else:
            status, kind = 502, "upstream_unavailable"
            message = f"llmwatch proxy: upstream {shown} {what}"
        return status, kind, error_body(kind, message)

    def fail(self, ex: Exchange | None, error_type: str) -> None:
        self._fail(ex, error_type)

    def finish(self, ex: Exchange) -> None:
        """A call whose client has its whole answer: its bookkeeping joins the batch (`flush`).

        Not while a component follows each call (shadow mirrors, the consistency probe, OTLP
        spans): a batch would reach them as a burst, and a mirror over its candidate's
        concurrency is skipped, not queued, so a burst of 32 would mirror 4. They keep getting
        each call as it finishes."""
        if self._batch <= 1 or self.finished:
            if self._pending:
                self.flush()  # in order, should a follower have come since
            self._finish(ex)
            return
        pending = self._pending
        pending.append(ex)
        if len(pending) >= self._batch:
            self.flush()
        elif self._flush_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop (a caller outside the relay): at once
                self.flush()
                return
            self._flush_timer = loop.call_later(self._linger, self.flush)

    @property
    def waiting(self) -> int:
        """Finished calls whose bookkeeping waits for its batch (tests wait for 0 to call the proxy idle)."""
        return len(self._pending)

    def flush(self) -> None:
        """The waiting calls' bookkeeping, in the order they finished (conversation turns rely on it).

        One call at a time, `_finish` ran with cold code and data between two calls' network work
        (~90 µs in the running proxy against ~25 µs in a loop); a batch keeps them warm. A batch
        holds the event loop for finish_batch x ~25 µs at most (under 1 ms at the default 32).
        """
        timer = self._flush_timer
        if timer is not None:
            timer.cancel()
            self._flush_timer = None
        pending = self._pending
        if not pending:
            return
        self._pending = []
        finish = self._finish
        for ex in pending:
            finish(ex)

    def in_flight(self) -> float:
        """Calls taken and not yet answered to the end (read at scrape time)."""
        relay = self.relay
        if relay is None:
            return 0.0
        # The relay core's own state: a client's current call and the calls pipelined behind it;
        # and the calls the C data plane is forwarding (proxy.engine native).
        front = relay.front.in_flight() if relay.front is not None else 0
        return float(front + sum((c.current is not None) + len(c.queued) for c in list(relay.clients)))

    def _fail(self, ex: Exchange | None, error_type: str) -> None:
        self.metrics.proxy_errors.labels(error_type=error_type).inc()
        if ex is not None:
            ex.error_type = error_type

    def _captured(
        self,
        ex: Exchange,
        client_id: str,
        facts: CallFacts,
        version: str | None,
        cost: float | None,
        reason: str,
        price_row: str | None = None,
    ) -> Captured:
        if client_id:
            # Kept whole here; the pipeline's redaction policy (client_request_id) masks it, off the hot path.
            ex.client_request_id = client_id
        if self.conversations is not None and facts.operation == "chat":
            # Only calls that become samples are followed: a chat client resends its whole history,
            # so a sampled turn 5 finds the sampled turn 2 before it by the same prefix hashes that
            # would have found the unsampled turn 4, and samples group alike. Hashing every call's
            # history cost the proxy 14-200 µs per chat call (docs/guide/stability.md); here before
            # the Captured is queued, so the pipeline thread never sees a half-set exchange.
            if not facts.assembled:
                # A sampled stream's answer, read here instead of in the pipeline thread (the
                # sample is built from these facts): its next turn is found by it, where a history
                # hashed without the answer could be another chat's that opened alike.
                facts = analyze(ex)
            self._conversation(ex, facts)
        return Captured(ex, facts, version, cost, reason, price_row)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        # `.labels()` validates and joins its labels and takes a lock on every call; the children
        # it returns live as long as the registry, so each label set is looked up once. Created
        # on first use only, as `.labels()` did: a series that was never observed is not exposed.
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            if len(self._children) >= _MAX_CACHED_CHILDREN:
                self._children.clear()  # the label caps bound this; the bound is only a backstop
            child = self._children[key] = _fast_child(metric.labels(*labels))
        return child

    def _finish(self, ex: Exchange) -> None:
        """Metrics and sampling for one call. Never raises: llmwatch must not break traffic."""
        try:
            headers = ex.request_headers
            if headers is not None:
                self._request_head(ex, headers)
            # The answer of a stream is assembled only where it is read: OpenTelemetry spans
            # carry it, and a sampled call's sample (built later, in the pipeline thread).
            facts = analyze(ex, assemble=self.finished.wants_answer)
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
            price_row = None
            if facts.model is not None and (facts.input_tokens or facts.output_tokens):
                priced = self.prices.price_of(
                    facts.model,
                    facts.input_tokens,
                    facts.output_tokens,
                    facts.cached_input_tokens,
                    facts.cache_write_tokens,
                    facts.reasoning_tokens,
                )
                if priced is not None:
                    cost, price_row = priced
                if cost is None:
                    m.unpriced.labels(model_label).inc()
                    if facts.model not in self._warned_unpriced and len(self._warned_unpriced) < 100:
                        self._warned_unpriced.add(facts.model)
                        log.warning(
                            "model_not_priced", model=facts.model, fix="add it under metrics.pricing in the config"
                        )
                else:
                    child(m.cost, (op, model_label, version_label)).inc(cost)
            ratelimits.observe(m, ex.response_headers, self._upstream_label, model_label, self._child)
            for note in facts.notes:
                m.capture_skipped.labels(reason=note).inc()
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
                build=lambda reason: self._captured(ex, client_id, facts, version, cost, reason, price_row),
            )
            if self.finished:
                self.finished.publish(CallFinished(ex, facts, version, cost, admission.reason))
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
