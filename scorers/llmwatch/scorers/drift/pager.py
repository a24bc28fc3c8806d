"""The drift pager: e-detector evidence per signal, updated sample by sample (issue 28).

The fixed-window comparison (compare.py, every `drift.interval_s` on the last `drift.window`
samples) answers "does the recent window differ from the baseline now?"; asked every 30 seconds
for a month, each answer is a fresh chance of a false alarm. The pager answers "is there, by now,
enough evidence that this version became worse than its baseline?" with the e-detectors of
scorers/llmwatch/scorers/stats/sequential.py, whose bound on false alarms per sample holds
however often they are read. It pages; the fixed window explains (docs/design/0064-sequential-drift.md).

Signals, per route of the baseline, each a 0/1 outcome per sample with a null rate `q`:

- `pass_rate:<check>` (behaviour): the check failed. q = the baseline's failure rate (upper
  Wilson bound at z = 3) + `drift.min_pass_rate_change`.
- `output_tokens:longer` / `output_tokens:shorter` (behaviour): the answer is more than
  `drift.min_relative_change` longer than the baseline's median (its upper order-statistic bound),
  or as much shorter than its lower bound. q = 0.5: the median moved by more than the minimum.
- `perf:latency_per_token_ms:p50` / `:p95` (performance): time per output token above
  (1 + `drift.performance_margin`) x the baseline's p50 (q = 0.5) or p95 (q = 0.05), the fixed
  window's p50/p95 margin rule.

Each signal has an e-detector (`EDetector`): the evidence R of a change since any earlier sample,
which a stable stretch does not wear down. It alarms at c = S * samples per 30 days /
`drift.false_pages_per_30d` (`detector_threshold`, S the version's signals, samples per 30 days
from `drift.pager_samples_per_s`): a stable version then pages at most `false_pages_per_30d`
times per 30 days in expectation at that traffic. An alarm fires the signal's alert and resets
its detector; while the regression lasts the detector alarms again (no new page); when it has
gone `RESOLVE_AFTER` times the samples the longest alarm of that page took without one, the alert resolves. A new
baseline or a restarted window (served version changed) resolves everything of that version and
starts afresh.

The detectors count samples, not seconds, and transitions carry the samples' own timestamps, so
that `llmwatch replay` runs the same machinery on recorded samples and gets the same transitions
as the scorer did live.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Literal, Mapping, Sequence

import numpy as np

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.baseline import Baseline
from llmwatch.scorers.drift.model import family_of
from llmwatch.scorers.drift.rows import per_token_latency
from llmwatch.scorers.stats.sequential import EDetector, detector_threshold, quantile_bounds, rate_upper_bound

# Fewer baseline observations than this: the signal is not watched (its null rate would be a guess).
MIN_BASELINE = 30
# A firing signal resolves after this many times the samples the longest alarm of its page took,
# without another: the delay to an alarm varies severalfold between alarms of one regression, and
# a lasting regression must not flap (tests/unit/test_drift_pager.py).
RESOLVE_AFTER = 4
DAYS_30 = 30 * 86_400.0


@dataclass(frozen=True)
class PagerSettings:
    false_pages_per_30d: float = 1.0
    samples_per_s: float = 1.0  # scored samples per second the false-page budget is stated at
    min_pass_rate_change: float = 0.01
    min_relative_change: float = 0.05
    performance_margin: float = 0.20


Outcome = Callable[[Sample, Mapping[str, Score]], "int | None"]


@dataclass(frozen=True)
class WatchedSignal:
    """One signal of one route: how a sample becomes a 0/1 outcome, and the null rate it is held to."""

    route: str
    name: str
    q: float
    outcome: Outcome

    @property
    def family(self) -> str:
        return family_of(self.name)


@dataclass(frozen=True)
class Transition:
    """A signal of a version started or stopped paging (what `llmwatch replay` prints)."""

    state: Literal["firing", "resolved"]
    family: str
    signal: str
    route: str
    model_version: str
    sample_time: datetime
    samples_seen: int
    e_value: float
    threshold: float

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "family": self.family,
            "signal": self.signal,
            "route": self.route,
            "model_version": self.model_version,
            "sample_time": self.sample_time.isoformat(),
            "samples_seen": self.samples_seen,
            "e_value": round(self.e_value, 4) if math.isfinite(self.e_value) else None,
            "threshold": round(self.threshold, 4),
        }


@dataclass(frozen=True)
class PagerReading:
    """The evidence of one signal of one version now, as the gauges show it."""

    model_version: str
    operation: str
    signal: str
    family: str
    e_value: float
    threshold: float
    firing: bool
    # Unix time of the sample that made the evidence decisive (NaN while it is not).
    decisive_at: float
    samples: int  # samples the signal's detector has seen since its last reset


def _check_failed(check: str) -> Outcome:
    def outcome(sample: Sample, scores: Mapping[str, Score]) -> int | None:
        score = scores.get(check)
        if score is None or score.result not in ("pass", "fail"):
            return None
        return 1 if score.result == "fail" else 0

    return outcome


def _ok(sample: Sample) -> bool:
    return sample.status < 400 and not sample.error_type


def _tokens_above(bound: float) -> Outcome:
    def outcome(sample: Sample, scores: Mapping[str, Score]) -> int | None:
        out = sample.usage.output_tokens
        return None if out is None or not _ok(sample) else int(out > bound)

    return outcome


def _tokens_below(bound: float) -> Outcome:
    def outcome(sample: Sample, scores: Mapping[str, Score]) -> int | None:
        out = sample.usage.output_tokens
        return None if out is None or not _ok(sample) else int(out < bound)

    return outcome


def _slower_than(bound: float) -> Outcome:
    def outcome(sample: Sample, scores: Mapping[str, Score]) -> int | None:
        if not _ok(sample):
            return None
        tpot = per_token_latency(sample.latency_ms, sample.ttft_ms, sample.usage.output_tokens)
        return None if tpot is None or not math.isfinite(tpot) else int(tpot > bound)

    return outcome


def watched_signals(baseline: Baseline, settings: PagerSettings) -> list[WatchedSignal]:
    """The signals the baseline can hold a version to, route by route (see the module docstring)."""
    out: list[WatchedSignal] = []
    for route, stats in sorted(baseline.routes.items()):
        for check, c in sorted(stats.checks.items()):
            n = c.n_pass + c.n_fail
            if n < MIN_BASELINE:
                continue
            q = rate_upper_bound(c.n_fail, n) + settings.min_pass_rate_change
            if q < 1.0:
                out.append(WatchedSignal(route, f"pass_rate:{check}", q, _check_failed(check)))
        tokens = stats.metrics.get("output_tokens")
        if tokens is not None and len(tokens.reservoir) >= MIN_BASELINE:
            lo, hi = quantile_bounds(np.asarray(tokens.reservoir), 0.5)
            m = settings.min_relative_change
            # Infinite only below 10 values (MIN_BASELINE is more): the check keeps the signal honest.
            if math.isfinite(hi):
                out.append(WatchedSignal(route, "output_tokens:longer", 0.5, _tokens_above(hi * (1 + m))))
            if math.isfinite(lo) and lo > 0:
                out.append(WatchedSignal(route, "output_tokens:shorter", 0.5, _tokens_below(lo * (1 - m))))
        tpot = [r.ms_per_token for r in stats.rows if r.ms_per_token is not None]
        if len(tpot) >= MIN_BASELINE:
            m = settings.performance_margin
            for p, label in ((0.5, "p50"), (0.95, "p95")):
                _, hi = quantile_bounds(np.asarray(tpot), p)
                if not math.isfinite(hi):
                    # A p95 needs 129 baseline values before even their maximum bounds it at 3 sigma;
                    # held to a smaller sample's maximum, a stable version would page for ever.
                    continue
                out.append(
                    WatchedSignal(route, f"perf:latency_per_token_ms:{label}", 1 - p, _slower_than(hi * (1 + m)))
                )
    return out


@dataclass
class _SignalState:
    detector: EDetector
    firing: bool = False
    decisive_at: datetime | None = None
    # Samples the longest alarm of the current page took; while firing, the detector must go
    # RESOLVE_AFTER times this long without another alarm before the signal resolves.
    decided_after: int = 0
    alarms: int = 0


@dataclass
class _VersionState:
    signals: dict[tuple[str, str], _SignalState] = field(default_factory=dict)
    operations: dict[str, str] = field(default_factory=dict)


class Pager:
    """The drift evidence of every model version against one baseline, sample by sample."""

    def __init__(self, baseline: Baseline, settings: PagerSettings) -> None:
        self.baseline = baseline
        self.settings = settings
        self.signals = watched_signals(baseline, settings)
        self.threshold = detector_threshold(
            settings.false_pages_per_30d, settings.samples_per_s * DAYS_30, max(len(self.signals), 1)
        )
        self._log_threshold = math.log(self.threshold)
        self._by_route: dict[str, list[WatchedSignal]] = {}
        for sig in self.signals:
            self._by_route.setdefault(sig.route, []).append(sig)
        self._versions: dict[str, _VersionState] = {}

    def restart(self, version: str) -> list[Transition]:
        """The version's window restarted (a new served version): resolve what fired, start afresh."""
        state = self._versions.pop(version, None)
        if state is None:
            return []
        return [
            self._transition("resolved", version, route, name, s, s.decisive_at)
            for (route, name), s in state.signals.items()
            if s.firing and s.decisive_at is not None
        ]

    def _transition(
        self, kind: Literal["firing", "resolved"], version: str, route: str, name: str, s: _SignalState, at: datetime
    ) -> Transition:
        return Transition(
            kind, family_of(name), name, route, version, at, s.detector.n, s.detector.value, self.threshold
        )

    def observe(self, sample: Sample, scores: Sequence[Score]) -> list[Transition]:
        """Take one scored sample (in time order); the alert transitions it caused."""
        signals = self._by_route.get(sample.route)
        if not signals:
            return []
        version = sample.model_version or "unknown"
        state = self._versions.get(version)
        if state is None:
            state = self._versions[version] = _VersionState()
        state.operations[sample.route] = sample.operation
        by_check = {s.check: s for s in scores}
        out: list[Transition] = []
        at = sample.timestamp
        for sig in signals:
            y = sig.outcome(sample, by_check)
            if y is None:
                continue
            s = state.signals.get((sig.route, sig.name))
            if s is None:
                s = state.signals[(sig.route, sig.name)] = _SignalState(EDetector(sig.q))
            if s.detector.update(y) >= self._log_threshold:
                s.alarms += 1
                if not s.firing:
                    s.firing, s.decisive_at, s.alarms = True, at, 1
                    out.append(self._transition("firing", version, sig.route, sig.name, s, at))
                # The longest an alarm of this page took: the resolution waits a multiple of it.
                s.decided_after = max(s.decided_after, s.detector.n) if s.alarms > 1 else s.detector.n
                s.detector.reset()
            elif s.firing and s.detector.n >= RESOLVE_AFTER * max(s.decided_after, 1):
                s.firing = False
                out.append(self._transition("resolved", version, sig.route, sig.name, s, at))
                s.decisive_at = None
        return out

    def readings(self) -> list[PagerReading]:
        """One reading per watched signal that has seen samples, per version."""
        out = []
        for version, state in self._versions.items():
            for (route, name), s in state.signals.items():
                out.append(
                    PagerReading(
                        version,
                        state.operations.get(route, "other"),
                        name,
                        family_of(name),
                        s.detector.value,
                        self.threshold,
                        s.firing,
                        s.decisive_at.timestamp() if s.decisive_at is not None else math.nan,
                        s.detector.n,
                    )
                )
        return out
