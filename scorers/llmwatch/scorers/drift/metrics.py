"""The drift gauges: readings of the online comparison against a baseline, and of canaries.

Set from the scorer's readings (the sidecar's scorer child, `llmwatch aggregate`), not per call.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable

from llmwatch.core.component import Event
from llmwatch.core.metrics import OTHER, CanaryReading, DriftReading, MetricGroup, Metrics, gauge
from llmwatch.core.wire import OPERATIONS

if TYPE_CHECKING:
    from llmwatch.scorers.drift.pager import PagerReading


# The operations llmwatch names (the proxy's and the OTLP receiver's); `llmwatch aggregate` reads
# `operation` from the samples topic, where anyone with produce rights can write any string.
KNOWN_OPERATIONS = frozenset(OPERATIONS.values())


def operation_label(operation: str) -> str:
    return operation if operation in KNOWN_OPERATIONS else OTHER


class DriftReadings(Event[list[DriftReading]]):
    """The scorer published a round of drift readings (metrics, alerts and the agent's state subscribe)."""


class DriftMetrics(MetricGroup):
    """Each drift signal of each model version and operation against the frozen baseline."""

    drift_statistic = gauge(
        "llmwatch_drift_statistic",
        "Test statistic of each drift signal against the frozen baseline.",
        ["signal", "model_version", "gen_ai_operation_name"],
    )
    drift_p_value = gauge(
        "llmwatch_drift_p_value",
        "Multiple-testing-adjusted p-value of each drift signal.",
        ["signal", "model_version", "gen_ai_operation_name"],
    )
    drift_detected = gauge(
        "llmwatch_drift_detected",
        "1 when the signal differs from the baseline (adjusted p < alpha and effect large enough).",
        ["signal", "model_version", "gen_ai_operation_name"],
    )
    drift_window = gauge(
        "llmwatch_drift_window_samples", "Samples in the drift window of each model version.", ["model_version"]
    )

    # The pager (pager.py): e-detector evidence per signal, what LLMWatchDriftEvidence reads.
    drift_evidence = gauge(
        "llmwatch_drift_evidence",
        "Evidence (e-detector value) that a drift signal changed for the worse against the frozen baseline; decisive at the threshold.",
        ["signal", "family", "model_version", "gen_ai_operation_name"],
    )
    drift_evidence_threshold = gauge(
        "llmwatch_drift_evidence_threshold",
        "Evidence at which a drift signal is decisive: signals x samples per 30 days / drift.false_pages_per_30d.",
        ["signal", "family", "model_version", "gen_ai_operation_name"],
    )
    drift_evidence_decisive = gauge(
        "llmwatch_drift_evidence_decisive",
        "1 while the pager holds a drift signal decisive (the evidence reached the threshold), else 0.",
        ["signal", "family", "model_version", "gen_ai_operation_name"],
    )
    drift_evidence_decisive_time = gauge(
        "llmwatch_drift_evidence_decisive_timestamp_seconds",
        "Time of the sample that made a drift signal decisive (exported while it is).",
        ["signal", "family", "model_version", "gen_ai_operation_name"],
    )

    def set_pager(self, readings: Iterable[PagerReading]) -> None:
        """The pager's readings become the `llmwatch_drift_evidence*` gauges."""
        for r in readings:
            labels = (r.signal, r.family, self.version_label(r.model_version), operation_label(r.operation))
            self.drift_evidence.labels(*labels).set(r.e_value)
            self.drift_evidence_threshold.labels(*labels).set(r.threshold)
            self.drift_evidence_decisive.labels(*labels).set(1.0 if r.firing else 0.0)
            if r.firing and not math.isnan(r.decisive_at):
                self.drift_evidence_decisive_time.labels(*labels).set(r.decisive_at)
            else:
                try:
                    self.drift_evidence_decisive_time.remove(*labels)
                except KeyError:
                    pass

    def set_drift(self, readings: Iterable[DriftReading]) -> None:
        """Drift readings become the `llmwatch_drift_*` gauges (the sidecar's scorer and `llmwatch aggregate` alike)."""
        for r in readings:
            v, op = self.version_label(r.model_version), operation_label(r.operation)
            self.drift_statistic.labels(r.signal, v, op).set(r.statistic)
            self.drift_p_value.labels(r.signal, v, op).set(r.p_value)
            self.drift_detected.labels(r.signal, v, op).set(1.0 if r.detected else 0.0)
            self.drift_window.labels(v).set(r.n_current)


# Canary (scorers/llmwatch/scorers/drift/canary.py): two versions served at once, compared in the same window.
class CanaryMetrics(MetricGroup):
    """A canary version against the stable one, in the same window."""

    canary_verdict = gauge(
        "llmwatch_canary_verdict",
        "Canary against the stable version in the same window, per family: 1 worse, 0 not worse, -1 undecided (too few samples), 2 worse on a family drift.fail_on leaves out (does not page).",
        ["family", "stable_version", "canary_version"],
    )
    canary_latency_ratio = gauge(
        "llmwatch_canary_latency_per_token_ratio",
        "Canary / stable time per output token at a quantile (0.5, 0.95), same window, stratified.",
        ["quantile", "stable_version", "canary_version"],
    )
    canary_pass_rate_diff = gauge(
        "llmwatch_canary_pass_rate_difference",
        "Canary minus stable pass rate of a check (0..1 scale), stratified, same window.",
        ["check", "stable_version", "canary_version"],
    )
    canary_samples = gauge(
        "llmwatch_canary_window_samples",
        "Samples of each side (role: stable, canary) in the common window of a canary comparison.",
        ["role", "stable_version", "canary_version"],
    )

    def __init__(self, metrics: Metrics) -> None:
        super().__init__(metrics)
        self._canary_series: set[tuple[str, tuple[str, str, str]]] = set()

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
