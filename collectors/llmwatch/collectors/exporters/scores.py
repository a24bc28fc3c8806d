"""Scores become metrics and JSON Lines: the aggregate/export end of the scoring path.

Labels go through the same caps as the proxy's metrics, so a model that the proxy reports as
`other` is `other` here too, and the quality series join the latency series in PromQL.
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

import structlog

from llmwatch.core.jsonio import JsonlWriteError, JsonlWriter
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.metrics import Metrics
from llmwatch.core.scores import Score

log = structlog.get_logger(__name__)


class ScoreRecorder:
    def __init__(self, metrics: Metrics, writer: JsonlWriter | None) -> None:
        self.metrics = metrics
        self.writer = writer
        self._lock = threading.Lock()
        self.recorded = 0
        self._warn = RateLimitedLog()

    def record(self, scores: Sequence[Score], durations: Sequence[float]) -> None:
        m = self.metrics
        now = time.time()
        lagged: set[str] = set()
        for score, duration in zip(scores, durations):
            model = m.model_label(score.model)
            version = m.version_label(score.model_version)
            m.check_results.labels(score.check, score.result, model, version).inc()
            if score.value is not None and score.result in ("pass", "fail"):
                m.quality_score.labels(score.check, model, version).observe(score.value)
            if duration > 0:
                m.scoring_duration.labels(score.check).observe(duration)
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
