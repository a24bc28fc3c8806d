"""Shadow evaluation as a component: the `shadow` section, its metrics, its factory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field, SecretStr, field_validator, model_validator

from llmwatch.core.config import (
    CpuAffinity,
    FilesSection,
    LoggingSection,
    MetricsSection,
    ModelVersionSection,
    Section,
    normalize_upstream,
    secret_header_values,
)
from llmwatch.core.metrics import MetricGroup, counter, gauge
from llmwatch.core.urls import check_http_url
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.evaluation.config import ShadowMargins
from llmwatch.scorers.pipeline.redaction import RedactionSection

SHADOW_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses")


class ShadowCandidate(Section):
    """One candidate version that sampled live requests are mirrored to (llmwatch.collectors.shadow)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    upstream: str
    # Fraction of captured calls mirrored, decided on the request id (independent of sampling.rate).
    rate: float = Field(0.1, ge=0.0, le=1.0)
    # Rewrites the request body's `model` for the candidate; unset: sent as the client asked.
    model: str | None = None
    # Sent to the candidate only (e.g. its own authorization). A value `env:NAME` is read from the
    # environment at start-up; values are secrets: never stored, logged, or echoed in errors.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    max_concurrency: int = Field(4, ge=1, le=1024)
    timeout_s: float = Field(60.0, gt=0)
    # Spend caps: a mirror that would exceed either is skipped (counted as spend_cap / rate_cap).
    max_usd_per_hour: float | None = Field(None, ge=0)
    max_requests_per_minute: int | None = Field(None, ge=0)
    # With max_usd_per_hour: each mirror reserves the worst case before it is sent (the request's
    # bytes as input tokens, its own max_tokens or this many as output) and is sent with that
    # limit, so concurrent mirrors can never spend past the cap; settled on the real usage.
    max_output_tokens: int = Field(4096, ge=1, le=1_000_000)
    # mirror: a streamed request is sent streamed too (TTFT recorded); buffered: sent with stream off.
    stream: Literal["mirror", "buffered"] = "mirror"

    @field_validator("upstream")
    @classmethod
    def _valid_upstream(cls, value: str) -> str:
        return normalize_upstream(check_http_url(value, "http://127.0.0.1:8001"))

    @field_validator("headers", mode="before")
    @classmethod
    def _header_values_as_text(cls, value: Any) -> Any:
        return secret_header_values(value, "{authorization: 'env:CANDIDATE_KEY'}")


class ShadowSection(Section):
    enabled: bool = False
    candidates: list[ShadowCandidate] = Field(default_factory=list)
    routes: list[str] = Field(default_factory=lambda: list(SHADOW_ROUTES))
    # Mirrors waiting to be sent (all candidates); beyond it a mirror is skipped (queue_full).
    max_queue: int = Field(1000, ge=1)
    margins: ShadowMargins = Field(default_factory=ShadowMargins)
    # One-sided level of the non-inferiority tests (Holm-corrected over the signals).
    alpha: float = Field(0.05, gt=0, lt=0.5)
    # Power the report sizes "pairs needed" for.
    power: float = Field(0.95, gt=0.5, lt=1)
    # The mirror runs in a child process of its own (llmwatch.collectors.shadow), pinned like the scorer
    # (same values as scoring.cpu_affinity): "auto" keeps it off the first allowed CPU, the
    # proxy's, wherever there is another.
    cpu_affinity: CpuAffinity = "auto"
    # 10 by default, as the scorer: the mirror must not compete with traffic on the CPUs it shares.
    # Measured (bench/peers.py, 200 streams/s, 5 % mirrored, the child on the load generator's
    # core): at nice 0 the client's streams read +6.7 ms at p50 against an A/A control of -0.1 ms;
    # at 10 and 19 the difference was within the A/A control. The price: on a saturated CPU the
    # child's timestamps of the candidate can wait for a scheduler slice (milliseconds, against
    # margins of 10 % of a p95 latency); give the child a CPU of its own, or nice 0, where
    # millisecond timings matter more than the host's other work.
    nice: int = Field(10, ge=0, le=19)

    @field_validator("routes")
    @classmethod
    def _known_routes(cls, routes: list[str]) -> list[str]:
        for route in routes:
            if route not in SHADOW_ROUTES:
                raise ValueError(f"route {route!r} cannot be mirrored; choose among {', '.join(SHADOW_ROUTES)}")
        return routes

    @model_validator(mode="after")
    def _candidates_when_enabled(self) -> "ShadowSection":
        if self.enabled and not self.candidates:
            raise ValueError("enabled: true needs at least one entry in candidates (name, upstream, rate)")
        names = [c.name for c in self.candidates]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(
                    f"candidate name {name!r} is used twice; names must be unique (they are metric labels)"
                )
        return self


class ShadowConfig(Protocol):
    """The sections shadow evaluation reads, parent and child (the root config has them all)."""

    @property
    def data_dir(self) -> Path: ...
    @property
    def shadow(self) -> ShadowSection: ...
    @property
    def files(self) -> FilesSection: ...
    @property
    def metrics(self) -> MetricsSection: ...
    @property
    def model_version(self) -> ModelVersionSection: ...
    @property
    def redaction(self) -> RedactionSection: ...
    @property
    def scoring(self) -> ScoringSection: ...
    @property
    def logging(self) -> LoggingSection: ...


# --- its metrics -----------------------------------------------------------------------------


# `candidate` is a configured candidate name only; the window gauges are over the last pairs of
# each candidate (a sliding window): what the dashboard and alerts read.
class ShadowMetrics(MetricGroup):
    """Mirrors to shadow candidates, their pairs, spend, and the window the gauges are over."""

    shadow_mirrored = counter(
        "llmwatch_shadow_mirrored",
        "Requests mirrored to a shadow candidate (sent, whatever the outcome).",
        ["candidate"],
    )
    shadow_skipped = counter(
        "llmwatch_shadow_skipped",
        "Calls picked for mirroring but not mirrored, by reason (queue_full, concurrency, spend_cap, rate_cap, not_captured).",
        ["candidate", "reason"],
    )
    shadow_candidate_errors = counter(
        "llmwatch_shadow_candidate_errors",
        "Mirrored calls the candidate failed (timeout, unreachable, HTTP status >= 400).",
        ["candidate", "error_type"],
    )
    shadow_pairs = counter(
        "llmwatch_shadow_pairs", "Pair records (primary and candidate answers to one request) written.", ["candidate"]
    )
    shadow_pairs_dropped = counter(
        "llmwatch_shadow_pairs_dropped",
        "Finished mirrors whose pair was not written, by reason.",
        ["candidate", "reason"],
    )
    shadow_kafka_produced = counter(
        "llmwatch_shadow_kafka_produced", "Pair records acknowledged by the Kafka broker (kafka.pairs_topic)."
    )
    shadow_kafka_dropped = counter(
        "llmwatch_shadow_kafka_dropped",
        "Pair records not delivered to Kafka, by reason (as llmwatch_kafka_dropped_total).",
        ["reason"],
    )
    shadow_spend = counter(
        "llmwatch_shadow_spend_usd", "Estimated USD spent on mirrored calls (price table).", ["candidate"]
    )
    shadow_window_pairs = gauge(
        "llmwatch_shadow_window_pairs",
        "Pairs in the sliding window behind the llmwatch_shadow_* gauges.",
        ["candidate"],
    )
    shadow_pass_rate_diff = gauge(
        "llmwatch_shadow_pass_rate_difference",
        "Candidate minus primary pass rate (0..1 scale) over paired check results in the window.",
        ["candidate"],
    )
    shadow_worse_p_value = gauge(
        "llmwatch_shadow_worse_p_value",
        "One-sided exact McNemar p-value that the candidate fails more paired checks than the primary (window).",
        ["candidate"],
    )
    shadow_win_rate = gauge(
        "llmwatch_shadow_win_rate",
        "Share of paired check results the candidate wins (it passes, the primary fails), window.",
        ["candidate"],
    )
    shadow_loss_rate = gauge(
        "llmwatch_shadow_loss_rate",
        "Share of paired check results the candidate loses (it fails, the primary passes), window.",
        ["candidate"],
    )
    shadow_latency_ratio = gauge(
        "llmwatch_shadow_latency_ratio",
        "Candidate p95 latency / primary p95 latency over the window's pairs.",
        ["candidate"],
    )
    shadow_cost_ratio = gauge(
        "llmwatch_shadow_cost_ratio",
        "Candidate mean cost / primary mean cost over the window's priced pairs.",
        ["candidate"],
    )
