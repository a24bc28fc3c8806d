"""The aggregate stage: recent windows of scored samples -> drift and evaluation readings.

One stage for both places scores come together: the sidecar's scorer process (agent/llmwatch/agent/processes/scoring.py),
fed batch by batch as it scores them, and `llmwatch aggregate` (agent/llmwatch/agent/processes/kafka_aggregate.py), fed
from the samples and scores topics. Both turn the readings into the same gauges with
`Metrics.set_drift` and `Metrics.set_evaluation`.

Drift is compared on `drift.interval_s` once there is a baseline; with `drift.canary` enabled,
versions of one model served side by side are compared with each other on the same interval
(scorers/llmwatch/scorers/drift/canary.py; no baseline needed); the evaluation matrix,
stability and decision score are computed on the same interval whenever a matrix config is
given, with or without a baseline. A failing comparison is logged and yields no readings: the
windows keep filling and the next interval tries again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import structlog

from llmwatch.core.metrics import CanaryReading, DriftReading, EvaluationReading
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.baseline import Baseline
from llmwatch.scorers.drift.compare import settings_from_config
from llmwatch.scorers.drift.config import DriftSection
from llmwatch.scorers.drift.online import DriftWindows
from llmwatch.scorers.drift.pager import PagerReading, PagerSettings, Transition
from llmwatch.scorers.evaluation.config import MatrixSection

# The online loops' effect intervals when `drift.interval_draws` is unset: none. Their readings
# feed gauges and alerts, which read p-values and verdicts; 400 draws added 43-121 % to each
# comparison's CPU (DriftSection.interval_draws; `llmwatch drift` and `canary` keep their 400).
ONLINE_INTERVAL_DRAWS = 0


def online_interval_draws(drift: DriftSection) -> int:
    return ONLINE_INTERVAL_DRAWS if drift.interval_draws is None else drift.interval_draws


log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Readings:
    """None where that part was not due (or had nothing to read); a list, maybe empty, where it ran."""

    drift: list[DriftReading] | None = None
    evaluation: list[EvaluationReading] | None = None
    canary: list[CanaryReading] | None = None
    # The pager's evidence per signal (pager.py), with the drift readings.
    pager: list[PagerReading] | None = None


def pager_settings(drift: DriftSection) -> PagerSettings | None:
    """The pager's settings from the `drift` section (None when `drift.pager` is off)."""
    if not drift.pager:
        return None
    return PagerSettings(
        false_pages_per_30d=drift.false_pages_per_30d,
        samples_per_s=drift.pager_samples_per_s,
        min_pass_rate_change=drift.min_pass_rate_change,
        min_relative_change=drift.min_relative_change,
        performance_margin=drift.performance_margin,
    )


class WindowAggregator:
    def __init__(
        self,
        baseline: Baseline | None,
        drift: DriftSection,
        matrix: MatrixSection | None,
        *,
        known_checks: Sequence[str] | None = None,
    ) -> None:
        self.drift = drift
        self.matrix = matrix
        self.known_checks = list(known_checks) if known_checks is not None else None
        watch = drift.version_change
        restart_on = (
            [f for f in watch.fields if f != "model_version"] if watch.enabled else []
        )  # model_version keys the windows already
        self.windows = DriftWindows(
            baseline,
            window=drift.window,
            interval_s=drift.interval_s,
            settings=settings_from_config(drift, interval_draws=online_interval_draws(drift)),
            restart_on=restart_on,
            remember_s=watch.remember_s,
            max_changes=watch.max_changes,
            flap_window_s=watch.flap_window_s,
            pager=pager_settings(drift),
        )
        self._next_evaluation = time.monotonic() + drift.interval_s
        self._next_canary = time.monotonic() + drift.interval_s
        # Readings are not due again before as long as the last ones took: on a starved CPU (the
        # scorer runs at nice 10) a drift evaluation of a full window can take longer than
        # drift.interval_s, and without this the child evaluated after every batch it scored and
        # fell behind on scoring without bound. So readings take at most about half its time.
        self._quiet_until = float("-inf")

    @property
    def baseline(self) -> Baseline | None:
        return self.windows.baseline

    def add(
        self, samples: Sequence[Sample], scores: Sequence[Score], vectors: dict[str, Any] | None = None
    ) -> list[Transition]:
        return self.windows.add(samples, scores, vectors or {})

    def join(self, scores: Sequence[Score]) -> None:
        """Scores of samples scored before (the consistency probe's verdicts): see DriftWindows.join."""
        self.windows.join(scores)

    def set_baseline(self, baseline: Baseline) -> None:
        self.windows.set_baseline(baseline)

    def freeze(self, version: str) -> Baseline:
        return self.windows.freeze(version)

    def due(self, now: float | None = None) -> bool:
        now = now if now is not None else time.monotonic()
        if now < self._quiet_until:
            return False
        return (
            self.windows.due(now)
            or (self.matrix is not None and now >= self._next_evaluation)
            or (self.drift.canary.enabled and now >= self._next_canary)
        )

    def readings(self, now: float | None = None) -> Readings:
        """What is due at `now`: the evaluation readings, then the drift readings (either may be empty)."""
        started = time.monotonic()
        now = now if now is not None else started
        evaluation = None
        if self.matrix is not None and now >= self._next_evaluation:
            self._next_evaluation = now + self.drift.interval_s
            evaluation = self._evaluate()
        drift = None
        pager = None
        if self.windows.due(now):
            pager = self.windows.pager_readings()
            try:
                drift = self.windows.evaluate(now)
            except Exception as exc:
                log.exception("drift_evaluation_failed", error=str(exc))
        canary = None
        if self.drift.canary.enabled and now >= self._next_canary:
            self._next_canary = now + self.drift.interval_s
            canary = self._canary()
        self._quiet_until = now + (time.monotonic() - started)
        return Readings(drift, evaluation, canary, pager)

    def _canary(self) -> list[CanaryReading] | None:
        """Versions served side by side, each canary against the stable version in their common window."""
        from llmwatch.scorers.drift.canary import canary_readings

        try:
            return canary_readings(
                self.windows.by_version(),
                self.windows.settings,
                stable=self.drift.canary.stable,
                canary=self.drift.canary.canary,
            )
        except Exception as exc:
            log.exception("canary_evaluation_failed", error=str(exc))
            return None

    def _evaluate(self) -> list[EvaluationReading] | None:
        """The evaluation matrix, stability and decision score over the recent windows."""
        from llmwatch.scorers.evaluation.evaluate import build_report, evaluation_readings

        assert self.matrix is not None
        samples, scores = self.windows.contents()
        if not samples:
            return None
        try:
            report = build_report(
                samples,
                scores,
                self.matrix,
                known_checks=self.known_checks,
                baseline=self.baseline,
                drift_alpha=self.drift.alpha,
                drift_min_samples=self.drift.min_samples,
            )
        except Exception as exc:
            log.exception("evaluation_failed", error=str(exc))
            return None
        return evaluation_readings(report)
