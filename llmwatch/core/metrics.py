"""Prometheus metrics of the sidecar, named after the OpenTelemetry GenAI semantic conventions.

`gen_ai.client.operation.duration` becomes `gen_ai_client_operation_duration_seconds`, and so on;
bucket boundaries follow the conventions' advice. Each `Metrics` owns its own registry so that
several agents (or tests) can live in one process.

Label values are bounded: model names and versions pass through a `LabelCap`, and no label ever
carries prompt text, user ids or request ids.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# `_created` series double the exposition size and no dashboard or rule here reads them.
disable_created_metrics()

# Advisory boundaries from the GenAI semantic conventions.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
SCORING_DURATION_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)

OTHER = "other"
UNKNOWN = "unknown"
_MAX_LABEL_LEN = 64
_SAFE = re.compile(r"[^A-Za-z0-9._:/@+-]")


class LabelCap:
    """Bound the distinct values of a label; every value beyond the bound becomes `other`.

    Names the operator configured (`allow`) and names the upstream confirmed by answering for
    them (`confirm`) always keep their own label: otherwise a client that sends 20 made-up model
    names first would push the real ones into `other` for the life of the process. Only
    unconfirmed names are admitted first-come, up to `limit`, so random names from clients
    cannot grow the series count past the cap.
    """

    # Upstreams are trusted to name real models, but a router can serve hundreds; past this
    # many confirmed names the cap applies to them too, so memory and series stay bounded.
    MAX_CONFIRMED = 500

    def __init__(self, limit: int, preset: tuple[str, ...] = ()) -> None:
        self._limit = limit
        self._seen: dict[str, str] = {}
        self._capped = 0  # unconfirmed names admitted so far
        self._confirmed = 0
        self._lock = threading.Lock()
        self.allow(preset)

    def allow(self, values: Iterable[str]) -> None:
        """Give each configured name its own label, outside the cap."""
        with self._lock:
            for value in values:
                if value and self._seen.get(value, OTHER) == OTHER:
                    self._seen[value] = _SAFE.sub("_", value[:_MAX_LABEL_LEN])

    def __call__(self, value: str | None) -> str:
        if not value:
            return UNKNOWN
        label = self._seen.get(value)
        if label is not None:
            return label
        with self._lock:
            return self._admit_locked(value)

    def confirm(self, value: str | None) -> str:
        """The label of a name the upstream answered for: its own, even after the cap is full."""
        if not value:
            return UNKNOWN
        label = self._seen.get(value)
        if label is not None and label != OTHER:
            return label
        with self._lock:
            label = self._seen.get(value)
            if label is not None and label != OTHER:
                return label
            if self._confirmed < self.MAX_CONFIRMED:
                self._confirmed += 1
                label = _SAFE.sub("_", value[:_MAX_LABEL_LEN])
                self._seen[value] = label
                return label
            return label or self._admit_locked(value)

    def _admit_locked(self, value: str) -> str:
        label = self._seen.get(value)
        if label is not None:
            return label
        if self._capped < self._limit:
            self._capped += 1
            label = _SAFE.sub("_", value[:_MAX_LABEL_LEN])
        else:
            label = OTHER
        # Remember rejections too (bounded by a second cap) so lookups stay O(1).
        if label != OTHER or len(self._seen) < self._limit * 50:
            self._seen[value] = label
        return label

    @property
    def admitted(self) -> int:
        return sum(1 for v in self._seen.values() if v != OTHER)


@dataclass(frozen=True)
class DriftReading:
    """One drift signal of one model version and operation against the baseline, as the gauges show it."""

    model_version: str
    operation: str
    signal: str
    statistic: float
    p_value: float  # adjusted for multiple testing
    detected: bool
    n_current: int
    # The version the window's samples were served as ("response model, fingerprint"), when they
    # said: after a silent change under one model_version, the reading names the new one.
    served_as: str | None = None


@dataclass(frozen=True)
class CanaryReading:
    """One figure of a canary compared with the stable version in the same window.

    kind: `verdict` (key = family; value 1 worse, 0 not worse, -1 undecided),
    `latency_per_token_ratio` (key = quantile 0.5 or 0.95; canary / stable), `pass_rate_difference`
    (key = check; canary minus stable, stratified) or `samples` (key = stable or canary).
    """

    kind: str
    stable_version: str
    canary_version: str
    key: str
    value: float


@dataclass(frozen=True)
class EvaluationReading:
    """One value of the evaluation report: kind is category_quality, stability or decision."""

    kind: str
    category: str
    stability_kind: str
    model_version: str
    value: float


class Metrics:
    def __init__(
        self, *, max_models: int = 20, max_versions: int = 20, registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.model_label = LabelCap(max_models)
        self.version_label = LabelCap(max_versions)
        r = self.registry
        call_labels = ["gen_ai_operation_name", "gen_ai_request_model", "model_version", "error_type"]
        self.operation_duration = Histogram(
            "gen_ai_client_operation_duration_seconds",
            "Duration of GenAI operations seen by the proxy, request start to last response byte.",
            call_labels,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "gen_ai_server_time_to_first_token_seconds",
            "Time from request start to the first content token of a streamed response.",
            ["gen_ai_operation_name", "gen_ai_request_model", "model_version"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.token_usage = Histogram(
            "gen_ai_client_token_usage",
            "Tokens per call, by gen_ai_token_type (input|output).",
            ["gen_ai_operation_name", "gen_ai_request_model", "model_version", "gen_ai_token_type"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.cost = Counter(
            "llmwatch_cost_usd",
            "Cost of calls in USD from the configured price table.",
            ["gen_ai_operation_name", "gen_ai_request_model", "model_version"],
            registry=r,
        )
        self.unpriced = Counter(
            "llmwatch_unpriced_calls",
            "Calls whose model has no price in the table (cost not counted).",
            ["gen_ai_request_model"],
            registry=r,
        )
        self.samples = Counter(
            "llmwatch_samples",
            "Samples selected for storage and scoring, by why they were kept.",
            ["reason"],
            registry=r,
        )
        self.samples_dropped = Counter(
            "llmwatch_samples_dropped",
            "Samples selected but lost before a sink took them, by reason (queue_full, sink_error, write_error, scoring_queue_full, ...).",
            ["reason"],
            registry=r,
        )
        self.samples_written = Counter(
            "llmwatch_samples_written",
            "Samples each sink accepted (written to disk, handed to the scorer, buffered for Kafka).",
            ["sink"],
            registry=r,
        )
        self.queue_depth = Gauge("llmwatch_queue_depth", "Samples waiting in the in-process queue.", registry=r)
        self.capture_skipped = Counter(
            "llmwatch_capture_skipped",
            "Calls forwarded but not (fully) captured, by reason (body_too_large, request_not_json, ...).",
            ["reason"],
            registry=r,
        )
        self.proxy_errors = Counter(
            "llmwatch_proxy_errors",
            "Calls the proxy could not complete, by error_type (upstream_unavailable, upstream_timeout, stream_interrupted, client_disconnected, client_header_timeout).",
            ["error_type"],
            registry=r,
        )
        quality_labels = ["check", "gen_ai_request_model", "model_version"]
        self.check_results = Counter(
            "llmwatch_check",
            "Check verdicts on scored samples, by result (pass|fail|error|skip).",
            ["check", "result", "gen_ai_request_model", "model_version"],
            registry=r,
        )
        self.quality_score = Histogram(
            "llmwatch_quality_score",
            "Quality scores in 0..1 per check (pass=1, fail=0 for boolean checks).",
            quality_labels,
            buckets=SCORE_BUCKETS,
            registry=r,
        )
        self.scoring_duration = Histogram(
            "llmwatch_scoring_duration_seconds",
            "Time one check took on one sample (embedding checks: their share of the batch).",
            ["check"],
            buckets=SCORING_DURATION_BUCKETS,
            registry=r,
        )
        self.scoring_lag = Histogram(
            "llmwatch_scoring_lag_seconds",
            "From the call's start to its scores being recorded.",
            ["gen_ai_request_model", "model_version"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.samples_unscored = Counter(
            "llmwatch_samples_unscored",
            "Samples accepted by the scorer but recorded as `error` scores instead of scored, by reason (shutdown, scorer_crashed, scorer_timeout, scorer_failed).",
            ["reason"],
            registry=r,
        )
        self.scores_dropped = Counter(
            "llmwatch_scores_dropped",
            "Score records counted in the metrics but not written to the scores files, by reason (write_error).",
            ["reason"],
            registry=r,
        )
        self.scoring_pending = Gauge(
            "llmwatch_scoring_pending", "Samples handed to the scorer and not yet scored.", registry=r
        )
        drift_labels = ["signal", "model_version", "gen_ai_operation_name"]
        self.drift_statistic = Gauge(
            "llmwatch_drift_statistic",
            "Test statistic of each drift signal against the frozen baseline.",
            drift_labels,
            registry=r,
        )
        self.drift_p_value = Gauge(
            "llmwatch_drift_p_value",
            "Multiple-testing-adjusted p-value of each drift signal.",
            drift_labels,
            registry=r,
        )
        self.drift_detected = Gauge(
            "llmwatch_drift_detected",
            "1 when the signal differs from the baseline (adjusted p < alpha and effect large enough).",
            drift_labels,
            registry=r,
        )
        self.drift_window = Gauge(
            "llmwatch_drift_window_samples",
            "Samples in the drift window of each model version.",
            ["model_version"],
            registry=r,
        )
        # Served-version sentinel (collectors/llmwatch/collectors/sentinel.py): one info series per request model, the
        # current one; the previous is removed, not set to 0, so series stay one per model however
        # often a provider rotates versions, and `== 1` never matches a stale one.
        self.model_version_info = Gauge(
            "llmwatch_model_version_info",
            "1 for the version each request model is served as now (model_version, response model, system_fingerprint of its last answer).",
            ["gen_ai_request_model", "model_version", "response_model", "system_fingerprint"],
            registry=r,
        )
        self.model_version_changes = Counter(
            "llmwatch_model_version_changes",
            "Times the served version of a request model changed (see llmwatch_model_version_info).",
            ["gen_ai_request_model"],
            registry=r,
        )
        # Value: when the last change happened (Unix seconds); labels: from what to what. What the
        # LLMWatchServedVersionChanged alert reads, so its annotations can name both versions.
        self.model_version_last_change = Gauge(
            "llmwatch_model_version_last_change_timestamp_seconds",
            "Unix time of the last served-version change of each request model, labelled with the versions before and after.",
            ["gen_ai_request_model", "from_version", "to_version"],
            registry=r,
        )
        self.model_version_actions = Counter(
            "llmwatch_model_version_change_actions",
            "What drift.version_change triggered on a change, by action (webhook, command) and outcome (sent, retries, failed, dropped; ok, exit_nonzero, timeout, not_started; coalesced: a change folded into the next run by drift.version_change.min_action_interval_s).",
            ["action", "outcome"],
            registry=r,
        )
        # 1 while a request model is flapping (more than drift.version_change.max_changes new
        # versions within flap_window_s): its changes are not counted or acted on one by one.
        self.model_version_flapping = Gauge(
            "llmwatch_model_version_flapping",
            "1 while the served version of a request model is flapping (too many new versions too fast to be changes); 0 once calm for drift.version_change.flap_window_s.",
            ["gen_ai_request_model"],
            registry=r,
        )
        # Canary (scorers/llmwatch/scorers/drift/canary.py): two versions served at once, compared in the same window.
        pair = ["stable_version", "canary_version"]
        self.canary_verdict = Gauge(
            "llmwatch_canary_verdict",
            "Canary against the stable version in the same window, per family: 1 worse, 0 not worse, -1 undecided (too few samples).",
            ["family", *pair],
            registry=r,
        )
        self.canary_latency_ratio = Gauge(
            "llmwatch_canary_latency_per_token_ratio",
            "Canary / stable time per output token at a quantile (0.5, 0.95), same window, stratified.",
            ["quantile", *pair],
            registry=r,
        )
        self.canary_pass_rate_diff = Gauge(
            "llmwatch_canary_pass_rate_difference",
            "Canary minus stable pass rate of a check (0..1 scale), stratified, same window.",
            ["check", *pair],
            registry=r,
        )
        self.canary_samples = Gauge(
            "llmwatch_canary_window_samples",
            "Samples of each side (role: stable, canary) in the common window of a canary comparison.",
            ["role", *pair],
            registry=r,
        )
        self._canary_series: set[tuple[str, tuple[str, str, str]]] = set()
        self.kafka_produced = Counter(
            "llmwatch_kafka_produced", "Samples acknowledged by the Kafka broker.", registry=r
        )
        self.kafka_dropped = Counter(
            "llmwatch_kafka_dropped",
            "Samples not delivered to Kafka, by reason (buffer_full, send_failed, delivery_failed, delivery_timeout, closed).",
            ["reason"],
            registry=r,
        )
        self.kafka_buffer_depth = Gauge(
            "llmwatch_kafka_buffer_depth", "Samples handed to the Kafka sink and not yet acknowledged.", registry=r
        )
        self.kafka_consumed = Counter(
            "llmwatch_kafka_consumed",
            "Samples read by a Kafka scorer worker, by outcome (scored, duplicate, invalid).",
            ["outcome"],
            registry=r,
        )
        self.notifications = Counter(
            "llmwatch_webhook_notifications",
            "Drift webhook deliveries by outcome (sent, retries, failed, dropped).",
            ["event"],
            registry=r,
        )
        self.otel_spans = Counter(
            "llmwatch_otel_spans",
            "Spans of captured calls for OTLP export, by outcome (exported, failed: the collector refused or was unreachable, dropped: export queue full).",
            ["outcome"],
            registry=r,
        )
        self.otlp_ingest_spans = Counter(
            "llmwatch_otlp_ingest_spans",
            "Spans received on the OTLP trace receiver, by outcome (sampled, unsampled, not_llm, rejected).",
            ["outcome"],
            registry=r,
        )
        # Business evaluation (scorers/llmwatch/scorers/evaluation/evaluate.py export_metrics); set from a report, not per call.
        self.category_quality = Gauge(
            "llmwatch_category_quality",
            "Mean quality score (0..1) of a task category from the evaluation matrix.",
            ["category", "model_version"],
            registry=r,
        )
        self.stability = Gauge(
            "llmwatch_stability",
            "Stability (0..1, 1 = stable) by kind (sampling, turn, version) and task category.",
            ["kind", "category", "model_version"],
            registry=r,
        )
        self.decision_score = Gauge(
            "llmwatch_decision_score",
            "(w_quality * quality + w_stability * stability) / normalized_cost of a model version.",
            ["model_version"],
            registry=r,
        )
        self.internal_errors = Counter(
            "llmwatch_internal_errors",
            "Exceptions inside llmwatch's own capture/metrics code; traffic was forwarded regardless.",
            ["stage"],
            registry=r,
        )
        # Shadow evaluation (collectors/llmwatch/collectors/shadow/mirror.py); `candidate` is a configured candidate name only.
        self.shadow_mirrored = Counter(
            "llmwatch_shadow_mirrored",
            "Requests mirrored to a shadow candidate (sent, whatever the outcome).",
            ["candidate"],
            registry=r,
        )
        self.shadow_skipped = Counter(
            "llmwatch_shadow_skipped",
            "Calls picked for mirroring but not mirrored, by reason (queue_full, concurrency, spend_cap, rate_cap, not_captured).",
            ["candidate", "reason"],
            registry=r,
        )
        self.shadow_candidate_errors = Counter(
            "llmwatch_shadow_candidate_errors",
            "Mirrored calls the candidate failed (timeout, unreachable, HTTP status >= 400).",
            ["candidate", "error_type"],
            registry=r,
        )
        self.shadow_pairs = Counter(
            "llmwatch_shadow_pairs",
            "Pair records (primary and candidate answers to one request) written.",
            ["candidate"],
            registry=r,
        )
        self.shadow_pairs_dropped = Counter(
            "llmwatch_shadow_pairs_dropped",
            "Finished mirrors whose pair was not written, by reason.",
            ["candidate", "reason"],
            registry=r,
        )
        self.shadow_kafka_produced = Counter(
            "llmwatch_shadow_kafka_produced",
            "Pair records acknowledged by the Kafka broker (kafka.pairs_topic).",
            registry=r,
        )
        self.shadow_kafka_dropped = Counter(
            "llmwatch_shadow_kafka_dropped",
            "Pair records not delivered to Kafka, by reason (as llmwatch_kafka_dropped_total).",
            ["reason"],
            registry=r,
        )
        self.shadow_spend = Counter(
            "llmwatch_shadow_spend_usd",
            "Estimated USD spent on mirrored calls (price table).",
            ["candidate"],
            registry=r,
        )
        # Over the last pairs of each candidate (a sliding window): what the dashboard and alerts read.
        self.shadow_window_pairs = Gauge(
            "llmwatch_shadow_window_pairs",
            "Pairs in the sliding window behind the llmwatch_shadow_* gauges.",
            ["candidate"],
            registry=r,
        )
        self.shadow_pass_rate_diff = Gauge(
            "llmwatch_shadow_pass_rate_difference",
            "Candidate minus primary pass rate (0..1 scale) over paired check results in the window.",
            ["candidate"],
            registry=r,
        )
        self.shadow_worse_p_value = Gauge(
            "llmwatch_shadow_worse_p_value",
            "One-sided exact McNemar p-value that the candidate fails more paired checks than the primary (window).",
            ["candidate"],
            registry=r,
        )
        self.shadow_win_rate = Gauge(
            "llmwatch_shadow_win_rate",
            "Share of paired check results the candidate wins (it passes, the primary fails), window.",
            ["candidate"],
            registry=r,
        )
        self.shadow_loss_rate = Gauge(
            "llmwatch_shadow_loss_rate",
            "Share of paired check results the candidate loses (it fails, the primary passes), window.",
            ["candidate"],
            registry=r,
        )
        self.shadow_latency_ratio = Gauge(
            "llmwatch_shadow_latency_ratio",
            "Candidate p95 latency / primary p95 latency over the window's pairs.",
            ["candidate"],
            registry=r,
        )
        self.shadow_cost_ratio = Gauge(
            "llmwatch_shadow_cost_ratio",
            "Candidate mean cost / primary mean cost over the window's priced pairs.",
            ["candidate"],
            registry=r,
        )

    def set_drift(self, readings: Iterable[DriftReading]) -> None:
        """Drift readings become the `llmwatch_drift_*` gauges (the sidecar's scorer and `llmwatch aggregate` alike)."""
        for r in readings:
            v = self.version_label(r.model_version)
            self.drift_statistic.labels(r.signal, v, r.operation).set(r.statistic)
            self.drift_p_value.labels(r.signal, v, r.operation).set(r.p_value)
            self.drift_detected.labels(r.signal, v, r.operation).set(1.0 if r.detected else 0.0)
            self.drift_window.labels(v).set(r.n_current)

    def set_canary(self, readings: Iterable[CanaryReading]) -> None:
        """The canary gauges, replaced as a whole: a pair no longer served stops being exported (and its alert resolves)."""
        gauges = {
            "verdict": self.canary_verdict,
            "latency_per_token_ratio": self.canary_latency_ratio,
            "pass_rate_difference": self.canary_pass_rate_diff,
            "samples": self.canary_samples,
        }
        now: set[tuple[str, tuple[str, str, str]]] = set()
        for r in readings:
            gauge = gauges.get(r.kind)
            if gauge is not None:
                labels = (r.key, self.version_label(r.stable_version), self.version_label(r.canary_version))
                gauge.labels(*labels).set(r.value)
                now.add((r.kind, labels))
        # Set first, then remove what is gone: a scrape in between never misses a series that
        # stays (a gap would reset the `for:` of a pending alert).
        for kind, labels in self._canary_series - now:
            gauges[kind].remove(*labels)
        self._canary_series = now

    def set_evaluation(self, readings: Iterable[EvaluationReading]) -> None:
        """Evaluation readings become the category quality, stability and decision score gauges."""
        for r in readings:
            v = self.version_label(r.model_version)
            if r.kind == "category_quality":
                self.category_quality.labels(r.category, v).set(r.value)
            elif r.kind == "stability":
                self.stability.labels(r.stability_kind, r.category, v).set(r.value)
            elif r.kind == "decision":
                self.decision_score.labels(v).set(r.value)
