"""The proxy receiver as a component: its sections (`proxy`, `capture`), its metrics, its factory."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from prometheus_client import Counter
from pydantic import Field, model_validator

from llmwatch.core.config import (
    MetricsSection,
    ModelVersionSection,
    Section,
)
from llmwatch.core.metrics import MetricGroup, counter, gauge, histogram
from llmwatch.scorers.pipeline.conversations import ConversationsSection
from llmwatch.scorers.pipeline.sampler import SamplingSection


class ProxySection(Section):
    connect_timeout_s: float = Field(10.0, gt=0)
    # LLM answers can take minutes; this bounds silence between bytes, not the whole answer.
    read_timeout_s: float = Field(600.0, gt=0)
    max_connections: int = Field(1000, ge=1)
    # Reverse proxies normally send the upstream's own Host; keep the client's only when the
    # upstream does virtual hosting on it.
    preserve_host: bool = False
    # A client that has not sent a complete request head (request line and headers) this long
    # after it started one is disconnected, so slow clients cannot hold connections open.
    header_timeout_s: float = Field(10.0, gt=0)
    # A request body must be complete this long after its head, however it trickles in (a total,
    # never re-armed by a byte). Bodies up to 1 MiB are read whole before an upstream connection
    # is taken, so a stalled body holds no upstream connection; it gets 408.
    body_timeout_s: float = Field(60.0, gt=0)
    # On SIGTERM, calls still in flight get this long to finish before they are cut, so that a
    # rolling restart does not break answers that are nearly done, and a stuck stream cannot hold
    # the pod past its termination grace period (Kubernetes' default is 30 s).
    shutdown_timeout_s: float = Field(10.0, ge=0, le=3600)
    # Longest request line, and longest single header line, accepted from clients and from the
    # upstream (nginx and Envoy accept 64 KiB header sections). Bigger ones get 400 (client) or
    # 502 (upstream). One request head is bounded by max_headers * max_header_bytes.
    max_header_bytes: int = Field(65_536, ge=8190, le=1_048_576)
    # Most header fields in one request or response head.
    max_headers: int = Field(256, ge=32, le=4096)

    # Which engine serves calls (design record 0067): `native`, the C data plane (a thread that
    # accepts, forwards plain HTTP/1.1 calls and streams itself and hands every other case to the
    # relay), there only when the package was built with a C compiler; `python`, the relay core
    # (relay.py) alone; `auto` (the default), `native` where it can serve this configuration and
    # `python` elsewhere: without the C extension, for an https upstream (TLS is the relay's), and
    # for an upstream named by DNS (C resolves it once at start-up, the relay on every connection).
    # The `relay_engine` log line and llmwatch_proxy_engine_info say which serves and why.
    # `native` without the C extension is refused at start-up.
    engine: Literal["auto", "python", "native"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _old_engines(cls, data: Any) -> Any:
        # `engine` once chose between the relay core and the aiohttp core, which is gone: an old
        # `engine: relay` still loads (the relay core is `python`); `aiohttp` is refused with the fix.
        if isinstance(data, dict) and "engine" in data:
            if data["engine"] == "relay":
                return {**data, "engine": "python"}
            if data["engine"] not in ("auto", "python", "native"):
                raise ValueError(
                    f"engine {data['engine']!r} is no longer available (the aiohttp core was removed): delete the "
                    "`engine:` line from the proxy section, or set `auto` (the default), `python` (the relay core) or `native` (the C data plane)"
                )
        return data


class CaptureSection(Section):
    # Bodies above this are forwarded untouched but not parsed or stored (counted instead).
    max_body_bytes: int = Field(1_048_576, ge=1024)
    routes: list[str] = Field(
        default_factory=lambda: ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
    )
    # Request headers copied into `sample.metadata` (header -> key), e.g. for the evaluation
    # matrix's categories or to key Kafka records by conversation. Only these are kept: no other
    # header of a request is ever stored.
    metadata_headers: dict[str, str] = Field(
        default_factory=lambda: {"x-llmwatch-category": "category", "x-llmwatch-conversation-id": "conversation_id"}
    )
    # Group chat calls into conversations and number their turns (sample.conversation_id, .turn):
    # by the header mapped to the `conversation_id` key above, else by following the history.
    conversations: ConversationsSection = Field(default_factory=ConversationsSection)
    # A finished call's bookkeeping (parsing, metrics, conversation, the sampling decision) runs
    # after the client has its answer, in batches: up to `finish_batch` calls, at most
    # `finish_linger_s` after the first of them. Run one call at a time, its code and data were
    # cold every time and it cost three times as much (docs/design/0066-finish-in-batches.md).
    # Metrics (a scrape runs what waits first) and samples lag by the linger at most; a linger of 0
    # (or a batch of 1) runs each call at once, and so does a proxy with a component that follows
    # each call (shadow, the consistency probe, OTLP spans), which must not get calls in bursts.
    finish_batch: int = Field(32, ge=1, le=1024)
    finish_linger_s: float = Field(0.25, ge=0.0, le=5.0)


class ProxyConfig(Protocol):
    """The sections the proxy reads (the root config has them all)."""

    @property
    def upstream(self) -> str | None: ...
    @property
    def proxy(self) -> ProxySection: ...
    @property
    def capture(self) -> CaptureSection: ...
    @property
    def sampling(self) -> SamplingSection: ...
    @property
    def metrics(self) -> MetricsSection: ...
    @property
    def model_version(self) -> ModelVersionSection: ...


# --- its metrics -----------------------------------------------------------------------------

# Advisory boundaries from the GenAI semantic conventions.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


class ProxyMetrics(MetricGroup):
    """Every proxied call: duration, time to first token, tokens, cost, and what went wrong."""

    operation_duration = histogram(
        "gen_ai_client_operation_duration_seconds",
        "Duration of GenAI operations seen by the proxy, request start to last response byte.",
        ["gen_ai_operation_name", "gen_ai_request_model", "model_version", "error_type"],
        DURATION_BUCKETS,
    )
    time_to_first_token = histogram(
        "gen_ai_server_time_to_first_token_seconds",
        "Time from request start to the first content token of a streamed response.",
        ["gen_ai_operation_name", "gen_ai_request_model", "model_version"],
        TTFT_BUCKETS,
    )
    token_usage = histogram(
        "gen_ai_client_token_usage",
        "Tokens per call, by gen_ai_token_type (input|output).",
        ["gen_ai_operation_name", "gen_ai_request_model", "model_version", "gen_ai_token_type"],
        TOKEN_BUCKETS,
    )
    cost = counter(
        "llmwatch_cost_usd",
        "Cost of calls in USD from the configured price table.",
        ["gen_ai_operation_name", "gen_ai_request_model", "model_version"],
    )
    unpriced = counter(
        "llmwatch_unpriced_calls",
        "Calls whose model has no price in the table (cost not counted).",
        ["gen_ai_request_model"],
    )
    capture_skipped = counter(
        "llmwatch_capture_skipped",
        "Calls forwarded but not (fully) captured, by reason (request_too_large, request_not_json, ...).",
        ["reason"],
    )
    proxy_errors = counter(
        "llmwatch_proxy_errors",
        "Calls the proxy could not complete, by error_type (upstream_unavailable, upstream_timeout, stream_interrupted, client_disconnected, client_header_timeout, client_body_timeout, bad_request).",
        ["error_type"],
    )

    # The upstream's rate-limit budget from its x-ratelimit-* and retry-after response headers
    # (collectors/llmwatch/collectors/receivers/proxy/ratelimits.py); one upstream per proxy, models capped.
    ratelimit_remaining = gauge(
        "llmwatch_upstream_ratelimit_remaining",
        "Requests or tokens left in the upstream's rate-limit window (x-ratelimit-remaining-<resource>), as last reported.",
        ["upstream", "gen_ai_request_model", "resource"],
    )
    ratelimit_limit = gauge(
        "llmwatch_upstream_ratelimit_limit",
        "The upstream's rate limit for the window (x-ratelimit-limit-<resource>), as last reported.",
        ["upstream", "gen_ai_request_model", "resource"],
    )
    ratelimit_reset = gauge(
        "llmwatch_upstream_ratelimit_reset_seconds",
        "Seconds until the upstream's rate-limit window resets (x-ratelimit-reset-<resource>), as last reported.",
        ["upstream", "gen_ai_request_model", "resource"],
    )
    ratelimit_observed = gauge(
        "llmwatch_upstream_ratelimit_observed_timestamp_seconds",
        "When the upstream last reported its rate-limit budget (Unix time): tells a current reading from an old one.",
        ["upstream", "gen_ai_request_model", "resource"],
    )
    retry_after = gauge(
        "llmwatch_upstream_retry_after_seconds",
        "The wait the upstream last asked for in a retry-after header.",
        ["upstream", "gen_ai_request_model"],
    )
    retry_after_responses = counter(
        "llmwatch_upstream_retry_after_responses",
        "Responses of the upstream that carried a retry-after header.",
        ["upstream", "gen_ai_request_model"],
    )
    in_flight = gauge(
        "llmwatch_proxy_in_flight_requests",
        "Calls the proxy has taken and not yet answered to the end.",
    )
    engine_info = gauge(
        "llmwatch_proxy_engine_info",
        "1 for the engine serving calls (proxy.engine: python or native) and whether C forwards plain calls.",
        ["engine", "forwarding"],
    )

    @property
    def internal_errors(self) -> Counter:
        return self.hub.internal_errors
