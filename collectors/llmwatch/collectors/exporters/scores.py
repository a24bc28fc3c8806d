"""Scores become metrics and JSON Lines: the aggregate/export end of the scoring path.

Labels go through the same caps as the proxy's metrics, so a model that the proxy reports as
`other` is `other` here too, and the quality series join the latency series in PromQL.
"""

from __future__ import annotations

import threading
import time
from typing import Iterable, Sequence

import structlog

from llmwatch.core.jsonio import JsonlWriteError, JsonlWriter
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.metrics import LabelCap, MetricGroup, Metrics, counter, gauge, histogram
from llmwatch.core.scores import Score

log = structlog.get_logger(__name__)


# Buckets of scores in 0..1, of one check's time on one sample, of a call's start to its scores.
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
SCORING_DURATION_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
# Distinct `check` labels, past which a check is `other`: the configured checks and judge criteria
# are far fewer, but `llmwatch aggregate` takes check names from the scores topic, written by anyone.
# The names llmwatch knows (`known`) keep their own label outside this cap.
MAX_CHECK_LABELS = 200


class ScoringMetrics(MetricGroup):
    """Scores of sampled calls: verdicts, values, the scorer's time, lag and backlog."""

    check_results = counter(
        "llmwatch_check",
        "Check verdicts on scored samples, by result (pass|fail|error|skip).",
        ["check", "result", "gen_ai_request_model", "model_version"],
    )
    quality_score = histogram(
        "llmwatch_quality_score",
        "Quality scores in 0..1 per check (pass=1, fail=0 for boolean checks).",
        ["check", "gen_ai_request_model", "model_version"],
        SCORE_BUCKETS,
    )
    scoring_duration = histogram(
        "llmwatch_scoring_duration_seconds",
        "Time one check took on one sample (embedding checks: their share of the batch).",
        ["check"],
        SCORING_DURATION_BUCKETS,
    )
    scoring_lag = histogram(
        "llmwatch_scoring_lag_seconds",
        "From the call's start to its scores being recorded.",
        ["gen_ai_request_model", "model_version"],
        LAG_BUCKETS,
    )
    samples_unscored = counter(
        "llmwatch_samples_unscored",
        "Samples accepted by the scorer but recorded as `error` scores instead of scored, by reason (shutdown, scorer_crashed, scorer_timeout, scorer_failed).",
        ["reason"],
    )
    scores_dropped = counter(
        "llmwatch_scores_dropped",
        "Score records counted in the metrics but not written to the scores files, by reason (write_error).",
        ["reason"],
    )
    scoring_pending = gauge("llmwatch_scoring_pending", "Samples handed to the scorer and not yet scored.")


class ScoreRecorder:
    def __init__(self, metrics: Metrics, writer: JsonlWriter | None, *, known: Iterable[str] = ()) -> None:
        """`known`: check names that always keep their own label; only other names share the cap,
        first come, first served (else 200 made-up names arriving first push real checks into `other`)."""
        self.metrics = metrics.group(ScoringMetrics)
        self.writer = writer
        self._check_label = LabelCap(MAX_CHECK_LABELS, preset=tuple(known))
        self._lock = threading.Lock()
        self.recorded = 0
        self._warn = RateLimitedLog()

    def record(self, scores: Sequence[Score], durations: Sequence[float], *, count: bool = True) -> None:
        """Count the scores in the metrics and write them; `count=False` writes them only.

        (The verdicts of an uncalibrated judge are stored but must move no series an alert reads.)
        """
        m = self.metrics
        now = time.time()
        lagged: set[str] = set()
        for score, duration in zip(scores, durations) if count else ():
            model = m.model_label(score.model)
            version = m.version_label(score.model_version)
            check = self._check_label(score.check)
            m.check_results.labels(check, score.result, model, version).inc()
            if score.value is not None and score.result in ("pass", "fail"):
                m.quality_score.labels(check, model, version).observe(score.value)
            if duration > 0:
                m.scoring_duration.labels(check).observe(duration)
            if score.sample_id not in lagged:
                lagged.add(score.sample_id)
                m.scoring_lag.labels(model, version).observe(max(now - score.sample_timestamp.timestamp(), 0.0))
        if self.writer is not None:
            with self._lock:
                try:
                    self.writer.write_lines(s.to_json() for s in scores)
                except JsonlWriteError as exc:
                    # Disk full: the metrics above still count these scores; the file lost them
                    # (cut back to whole lines) and the next batch writes again.
                    m.scores_dropped.labels(reason="write_error").inc(exc.lost)
                    self._warn(
                        log.error,
                        "scores_write_failed",
                        directory=str(self.writer.directory),
                        lost=exc.lost,
                        error=str(exc),
                    )
        self.recorded += len(scores)

    def close(self) -> None:
        if self.writer is not None:
            with self._lock:
                self.writer.close()
