"""Online drift: a sliding window per model version, compared with the baseline on an interval.

Held by the aggregator (scorers/aggregate.py), in the scorer process, where the scores and answer
embeddings already are, and in `llmwatch aggregate`. Each refresh summarises every window with
enough samples exactly as `llmwatch drift` would and yields one gauge reading per signal, which
`Metrics.set_drift` turns into `llmwatch_drift_*` gauges.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Sequence

import numpy as np

from llmwatch.core.metrics import DriftReading
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.baseline import Baseline
from llmwatch.scorers.drift import DriftSettings, compare
from llmwatch.scorers.features import summarize


class DriftWindows:
    """Recent scored samples per model version; compared with `baseline` when there is one.

    The windows fill even without a baseline, so that one can be frozen from them (`freeze`).
    Setting a new baseline empties them: what was seen before was measured against another.
    """

    def __init__(self, baseline: Baseline | None, *, window: int, interval_s: float, settings: DriftSettings) -> None:
        self.baseline = baseline
        self.window = window
        self.interval_s = interval_s
        self.settings = settings
        self._windows: dict[str, deque[tuple[Sample, list[Score], np.ndarray | None]]] = {}
        self._last = 0.0

    def add(self, samples: Sequence[Sample], scores: Sequence[Score], vectors: dict[str, np.ndarray]) -> None:
        by_id: dict[str, list[Score]] = {}
        for score in scores:
            by_id.setdefault(score.sample_id, []).append(score)
        for sample in samples:
            version = sample.model_version or "unknown"
            win = self._windows.get(version)
            if win is None:
                win = self._windows[version] = deque(maxlen=self.window)
            win.append((sample, by_id.get(sample.id, []), vectors.get(sample.id)))

    def contents(self) -> tuple[list[Sample], list[Score]]:
        """Every sample in every window, and their scores (for the evaluation matrix)."""
        samples = [item[0] for win in self._windows.values() for item in win]
        scores = [s for win in self._windows.values() for item in win for s in item[1]]
        return samples, scores

    def by_version(self) -> dict[str, list[tuple[Sample, list[Score], np.ndarray | None]]]:
        """A copy of each version's window: (sample, its scores, its answer vector), oldest first (for the canary)."""
        return {version: list(win) for version, win in self._windows.items()}

    def set_baseline(self, baseline: Baseline) -> None:
        self.baseline = baseline
        self._windows.clear()

    def freeze(self, version: str) -> Baseline:
        from llmwatch.scorers.baseline import freeze

        win = self._windows.get(version) or ()
        return freeze([i[0] for i in win], [s for i in win for s in i[1]], {i[0].id: i[2] for i in win if i[2] is not None}, model_version=version, minimums=self.settings.minimums())

    def due(self, now: float | None = None) -> bool:
        if self.baseline is None:
            return False
        return (now if now is not None else time.monotonic()) - self._last >= self.interval_s

    def evaluate(self, now: float | None = None) -> list[DriftReading]:
        self._last = now if now is not None else time.monotonic()
        readings: list[DriftReading] = []
        if self.baseline is None:
            return readings
        for version, win in self._windows.items():
            if len(win) < self.settings.min_samples:
                continue
            samples = [item[0] for item in win]
            # Drift compares per route; the gauges are labelled by the operation the samples were captured as.
            operations = {sample.route: sample.operation for sample in samples}
            scores = [s for item in win for s in item[1]]
            vectors = {item[0].id: item[2] for item in win if item[2] is not None}
            report = compare(self.baseline.routes, summarize(samples, scores, vectors), baseline_version=self.baseline.model_version, current_versions=[version], settings=self.settings)
            for sig in report.signals:
                if math.isnan(sig.p_adjusted):
                    continue
                readings.append(DriftReading(version, operations.get(sig.route, "other"), sig.name, sig.statistic, sig.p_adjusted, sig.verdict in ("drift", "shifted"), report.n_current))
        return readings
