"""Online drift: a sliding window per model version, compared with the baseline on an interval.

Held by the aggregator (scorers/llmwatch/scorers/drift/aggregate.py), in the scorer process, where the scores and answer
embeddings already are, and in `llmwatch aggregate`. Each refresh summarises every window with
enough samples exactly as `llmwatch drift` would and yields one gauge reading per signal, which
`Metrics.set_drift` turns into `llmwatch_drift_*` gauges.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from typing import Sequence

import numpy as np
import structlog

from llmwatch.core.metrics import DriftReading
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.core.served import ServedVersion, bounded_text
from llmwatch.scorers.drift.baseline import Baseline
from llmwatch.scorers.drift.compare import DriftSettings, compare
from llmwatch.scorers.drift.features import summarize
from llmwatch.scorers.drift.model import effect_text
from llmwatch.scorers.drift.pager import Pager, PagerReading, PagerSettings, Transition

log = structlog.get_logger(__name__)

# Late scores (`join`) whose sample has not reached a window yet: at most this many wait for it.
MAX_WAITING_SCORES = 10_000

Item = tuple[Sample, list[Score], np.ndarray | None]


class _Window(deque[Item]):
    """A version's window, oldest first, with its items by sample id for `join`.

    `join` found a late score's sample by scanning the window from its newest end: 80 us a score
    with its sample anywhere in a 2,000-sample window, 175-290 us at the old end or when the sample
    had not arrived yet (the whole window scanned, then it waits), so a join of 10,000 verdicts
    held the scorer 1-3 s; 0.3-1.8 us with the index, +0.5-0.7 us an `append` (bench/drift_join.py).
    The index holds the newest item of each sample id in the window, as the scan found it. Only
    `append` and `clear` change a window (an item falling off the old end included).
    """

    def __init__(self, maxlen: int) -> None:
        super().__init__(maxlen=maxlen)
        self.by_id: dict[str, Item] = {}

    def append(self, item: Item) -> None:
        dropped = self[0] if len(self) == self.maxlen else None
        super().append(item)
        if dropped is not None and self.by_id.get(dropped[0].id) is dropped:
            del self.by_id[dropped[0].id]  # a newer item with the same id stays
        self.by_id[item[0].id] = item

    def clear(self) -> None:
        super().clear()
        self.by_id.clear()


class DriftWindows:
    """Recent scored samples per model version; compared with `baseline` when there is one.

    The windows fill even without a baseline, so that one can be frozen from them (`freeze`).
    Setting a new baseline empties them: what was seen before was measured against another.

    A window also starts afresh when the version serving its model_version changes: the response
    model or system_fingerprint of a successful sample differs from the window's (those of
    `restart_on`; the served-version sentinel, collectors/llmwatch/collectors/sentinel.py, watches the same parts on
    the proxy's side). Samples of the old and the new version are then never compared as one. A
    sample that does not tell a part (an error, an answer without fingerprint) changes nothing, and
    coming back to a version served within `remember_s` (backends of one version with different
    fingerprints) is no change either: the rules of llmwatch/core/served.py.
    """

    def __init__(
        self,
        baseline: Baseline | None,
        *,
        window: int,
        interval_s: float,
        settings: DriftSettings,
        restart_on: Sequence[str] = ("response_model", "system_fingerprint"),
        remember_s: float = 3600.0,
        max_changes: int = 3,
        flap_window_s: float = 600.0,
        pager: PagerSettings | None = None,
    ) -> None:
        self.baseline = baseline
        # The anytime-valid pager (pager.py), fed sample by sample; None: off.
        self.pager_settings = pager
        self.pager = Pager(baseline, pager) if baseline is not None and pager is not None else None
        self.window = window
        self.interval_s = interval_s
        self.settings = settings
        self._windows: dict[str, _Window] = {}
        self._last = 0.0
        self._watch_model = "response_model" in restart_on
        self._watch_fingerprint = "system_fingerprint" in restart_on
        self._remember_s = remember_s
        self._max_changes = max_changes
        self._flap_window_s = flap_window_s
        # Per (model_version, request model): the (response model, fingerprint) it is served as.
        # Keyed by request model too, as the proxy's sentinel is: one version label often covers
        # several models (a chat model and an embedding model), whose answers name different models.
        self._served: dict[tuple[str, str], ServedVersion] = {}
        # Per model_version: what it was last seen served as (named in the drift readings).
        self._served_as_now: dict[str, tuple[str | None, ...]] = {}
        self.restarts = 0
        # Late scores waiting for their sample, by sample id, oldest first (`join`).
        self._waiting: OrderedDict[str, list[Score]] = OrderedDict()

    def _served_as(self, sample: Sample) -> tuple[str | None, str | None] | None:
        if sample.error_type is not None or sample.status >= 400 or not (self._watch_model or self._watch_fingerprint):
            return None
        fingerprint = (
            sample.response.get("system_fingerprint")
            if self._watch_fingerprint and isinstance(sample.response, dict)
            else None
        )
        served = (
            bounded_text(sample.response_model) if self._watch_model else None,
            bounded_text(fingerprint) if isinstance(fingerprint, str) else None,
        )
        return served if any(served) else None

    def _see(self, version: str, key: tuple[str, str], told: tuple[str | None, str | None]) -> bool:
        """Note what the version is served as; True when that restarted its window."""
        served = self._served.get(key)
        if served is None:
            served = self._served[key] = ServedVersion(
                self._remember_s, max_changes=self._max_changes, flap_window_s=self._flap_window_s
            )
        seen, before = served.see(told, time.monotonic())
        if seen == "flapping":
            log.warning(
                "drift_window_not_restarted",
                model_version=version,
                why="served version flapping: too many new versions too fast; the window keeps filling until calm",
            )
        if served.current is not None:
            self._served_as_now[version] = served.current
        if seen == "new":
            # Same rule as the proxy's sentinel (llmwatch/core/served.py): a version served moments
            # ago (another backend's fingerprint of it) does not restart the window.
            win = self._windows.get(version)
            log.warning(
                "drift_window_restarted",
                model_version=version,
                old=before,
                new=served.current,
                dropped_samples=len(win) if win else 0,
                why="served version changed",
            )
            if win is not None:
                win.clear()
            self.restarts += 1
            return True
        return False

    def add(
        self, samples: Sequence[Sample], scores: Sequence[Score], vectors: dict[str, np.ndarray]
    ) -> list[Transition]:
        """Take scored samples (in time order); the pager's alert transitions they caused."""
        transitions: list[Transition] = []
        by_id: dict[str, list[Score]] = {}
        for score in scores:
            by_id.setdefault(score.sample_id, []).append(score)
        for sample in samples:
            version = sample.model_version or "unknown"
            told = self._served_as(sample)
            if told is not None:
                key = (version, sample.model or "")
                served = self._served.get(key)
                if served is None or served.told != told:
                    if self._see(version, key, told) and self.pager is not None:
                        transitions.extend(self.pager.restart(version))
            win = self._windows.get(version)
            if win is None:
                win = self._windows[version] = _Window(self.window)
            joined = by_id.get(sample.id, [])
            if self._waiting and (late := self._waiting.pop(sample.id, None)) is not None:
                joined = [*joined, *late]
            win.append((sample, joined, vectors.get(sample.id)))
            if self.pager is not None:
                transitions.extend(self.pager.observe(sample, by_id.get(sample.id, [])))
        for t in transitions:
            # The page itself is the alert on the gauges; the log line keeps its exact sample.
            log.warning("drift_pager_" + t.state, **t.to_dict())
        return transitions

    def join(self, scores: Sequence[Score]) -> None:
        """Add scores decided after their sample was scored: the consistency probe's verdicts.

        Each joins its sample in its version's window, so the next evaluation has the check on
        that sample (`pass_rate:consistency` and `score:consistency` in the behaviour family,
        the `confident_unstable` failure mode), tested and Holm-corrected with the others; a
        baseline without the check does not test it. A score whose sample has not arrived yet
        (a re-ask can be compared before the scorer's batch) waits for it, `MAX_WAITING_SCORES`
        at most (the oldest is forgotten). The pager, which reads each sample once on arrival,
        does not see them.
        """
        for score in scores:
            win = self._windows.get(score.model_version or "unknown")
            item = win.by_id.get(score.sample_id) if win else None
            if item is not None:
                kept = [s for s in item[1] if s.check != score.check]  # a repeated verdict replaces the first
                item[1][:] = [*kept, score]
                continue
            self._waiting.setdefault(score.sample_id, []).append(score)
            self._waiting.move_to_end(score.sample_id)
            while len(self._waiting) > MAX_WAITING_SCORES:
                self._waiting.popitem(last=False)

    def pager_readings(self) -> list[PagerReading]:
        return self.pager.readings() if self.pager is not None else []

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
        self.pager = Pager(baseline, self.pager_settings) if self.pager_settings is not None else None
        self._windows.clear()
        self._waiting.clear()
        self._served.clear()
        self._served_as_now.clear()

    def freeze(self, version: str) -> Baseline:
        from llmwatch.scorers.drift.baseline import freeze

        win = self._windows.get(version) or ()
        return freeze(
            [i[0] for i in win],
            [s for i in win for s in i[1]],
            {i[0].id: i[2] for i in win if i[2] is not None},
            model_version=version,
            minimums=self.settings.minimums(),
        )

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
            current = self._served_as_now.get(version)
            served = ", ".join(p for p in current or () if p) or None
            report = compare(
                self.baseline.routes,
                summarize(samples, scores, vectors),
                baseline_version=self.baseline.model_version,
                current_versions=[version],
                settings=self.settings,
            )
            for sig in report.signals:
                if math.isnan(sig.p_adjusted):
                    continue
                readings.append(
                    DriftReading(
                        version,
                        operations.get(sig.route, "other"),
                        sig.name,
                        sig.statistic,
                        sig.p_adjusted,
                        sig.verdict in ("drift", "shifted"),
                        report.n_current,
                        served_as=served,
                        direction=sig.direction,
                        effect=effect_text(sig),
                    )
                )
        return readings
