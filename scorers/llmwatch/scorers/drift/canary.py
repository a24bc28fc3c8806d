"""Canary comparison: two versions served side by side, compared in the same window (issue 14).

A version compared with a frozen baseline from last week also compares last week's load and
traffic mix with today's. Where one sidecar serves two versions at once - a stable version and a
canary taking part of the traffic - both see the same load and the same kind of requests at the
same time, so comparing them *with each other* over the time both were served compares like with
like: the per-token latency of the canary against the stable version's under the same host load.

The statistics are the drift families' (scorers/llmwatch/scorers/drift/families.py via `compare`): the stable version's
samples take the baseline's place, summarised in memory exactly as `baseline freeze` would, and
prompts both versions answered are matched. What is added here is the window (only the time both
versions were served; the rest is counted and left out) and the reading as a verdict on the
canary: `worse` when a family named in `fail_on` drifts in a direction that is not better (a
higher pass rate or fewer failures is a difference, not a regression; performance only counts
slower or dearer already), `not_worse`, or `insufficient`. Exit codes as drift: 0, 1, 2.

Used by `llmwatch canary` (offline) and by the aggregate stage (online `llmwatch_canary_*` gauges).
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from llmwatch.core.metrics import CanaryReading
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.compare import (
    DriftReport,
    DriftSettings,
    Signal,
    column_widths,
    compare,
    direction_and_stratum,
    tests_phrase,
)
from llmwatch.scorers.drift.features import RouteStats, summarize
from llmwatch.scorers.drift.model import EFFECT_LEGEND, effect_label, format_interval

__all__ = [
    "CanaryError",
    "CanaryReport",
    "Window",
    "canary_readings",
    "compare_summaries",
    "compare_versions",
    "format_text",
    "parse_duration",
    "pick_pairs",
    "readings_of",
    "same_window",
    "side_of",
    "window_of",
]

SCHEMA = "llmwatch.canary/v1"


class CanaryError(RecordError):
    """Samples that cannot be compared as a canary (a version missing, no common window); exit 2."""


@dataclass(frozen=True)
class Window:
    """The time both versions were served, and what fell outside it."""

    start: datetime
    end: datetime
    n_stable: int
    n_canary: int
    # Samples of each version left out: outside the window asked for, or outside the overlap.
    left_out: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "n_stable": self.n_stable,
            "n_canary": self.n_canary,
            "left_out": dict(self.left_out),
        }


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `2h`, `1d` -> a timedelta; anything else is refused with an example."""
    m = _DURATION.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration; use a positive number and a unit s, m, h or d, e.g. 30m or 2h")
    return timedelta(seconds=float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])


def _version(sample: Sample) -> str:
    return sample.model_version or "unknown"


def same_window(
    samples: Iterable[Sample],
    stable: str,
    canary: str,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    last: timedelta | None = None,
) -> tuple[list[Sample], list[Sample], Window]:
    """The samples of `stable` and `canary` from the time both were served.

    First the window asked for: `start`/`end` (inclusive), or the `last` span ending at the newest
    sample of either version (a file's own clock, so that a re-run gives the same answer). Then
    only the overlap of the two versions' time ranges: a canary that started at 10:00 is compared
    with the stable version's samples from 10:00 on, not with the quiet night before.
    """
    if stable == canary:
        raise CanaryError(f"--stable and --canary are both {stable!r}; name two different versions")
    items = list(samples)
    found = Counter(_version(s) for s in items)
    missing = [v for v in (stable, canary) if v not in found]
    if missing:
        seen = ", ".join(f"{v} ({n})" for v, n in sorted(found.items())) or "none"
        raise CanaryError(
            f"no samples of version {' or '.join(repr(v) for v in missing)}; versions found (samples): {seen}"
        )
    sides = {v: [s for s in items if _version(s) == v] for v in (stable, canary)}
    left: dict[str, int] = {stable: 0, canary: 0}
    if last is not None:
        newest = max(s.timestamp for v in sides for s in sides[v])
        start = newest - last
    if start is not None or end is not None:
        for v in sides:
            kept = [
                s for s in sides[v] if (start is None or s.timestamp >= start) and (end is None or s.timestamp <= end)
            ]
            left[v] += len(sides[v]) - len(kept)
            sides[v] = kept
        empty = [v for v in sides if not sides[v]]
        if empty:
            raise CanaryError(
                f"no samples of version {' or '.join(repr(v) for v in empty)} between {start.isoformat() if start else 'the first sample'} and {end.isoformat() if end else 'the last sample'}; widen the window"
            )
    ranges = {v: (min(s.timestamp for s in sides[v]), max(s.timestamp for s in sides[v])) for v in sides}
    lo = max(r[0] for r in ranges.values())
    hi = min(r[1] for r in ranges.values())
    if lo > hi:
        spans = "; ".join(f"{v} from {a.isoformat()} to {b.isoformat()}" for v, (a, b) in ranges.items())
        raise CanaryError(
            f"the two versions were never served at the same time ({spans}); a canary comparison needs both in one window "
            "(for versions served one after the other, freeze a baseline of the first and run `llmwatch drift`)"
        )
    for v in sides:
        kept = [s for s in sides[v] if lo <= s.timestamp <= hi]
        left[v] += len(sides[v]) - len(kept)
        sides[v] = kept
    return sides[stable], sides[canary], Window(lo, hi, len(sides[stable]), len(sides[canary]), left)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def window_of(
    samples: Iterable[Sample],
    stable: str,
    canary: str,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    last: timedelta | None = None,
) -> Window:
    """`same_window`'s window (and errors) from one pass, without keeping the samples (issue 29).

    Per sample of the two versions it keeps its time as exact integer microseconds and its UTC
    offset (12 bytes), so that the window's ends are the same datetimes, offset included, as the
    samples' own that `same_window` picks. A sample is in the window when its version is one of
    the two and `start <= timestamp <= end` of the returned `Window` (`side_of`).
    """
    if stable == canary:
        raise CanaryError(f"--stable and --canary are both {stable!r}; name two different versions")
    found: Counter[str] = Counter()
    times = {stable: array("q"), canary: array("q")}
    offsets = {stable: array("i"), canary: array("i")}
    for s in samples:
        v = _version(s)
        found[v] += 1
        if v in times:
            times[v].append((s.timestamp - _EPOCH) // _MICROSECOND)
            offsets[v].append(int((s.timestamp.utcoffset() or timedelta(0)).total_seconds()))
    missing = [v for v in (stable, canary) if v not in found]
    if missing:
        seen = ", ".join(f"{v} ({n})" for v, n in sorted(found.items())) or "none"
        raise CanaryError(
            f"no samples of version {' or '.join(repr(v) for v in missing)}; versions found (samples): {seen}"
        )
    t = {v: np.frombuffer(times[v], dtype=np.int64) for v in times}
    off = {v: np.frombuffer(offsets[v], dtype=np.int32) for v in offsets}
    keep = {v: np.ones(len(t[v]), dtype=bool) for v in t}
    left: dict[str, int] = {stable: 0, canary: 0}

    def first(v: str, mask: np.ndarray, value: int) -> datetime:
        # The first sample (in file order) of `v` at that instant: its own datetime, offset included.
        i = int(np.flatnonzero(mask & (t[v] == value))[0])
        tz = timezone(timedelta(seconds=int(off[v][i])))
        return (_EPOCH + timedelta(microseconds=value)).astimezone(tz)

    if last is not None:
        # `max` over the stable side, then the canary's: the first of the newest wins a tie.
        newest_v = max((stable, canary), key=lambda v: int(t[v].max()))
        newest = first(newest_v, keep[newest_v], int(t[newest_v].max()))
        start = newest - last
    if start is not None or end is not None:
        lo_us = None if start is None else (start - _EPOCH) // _MICROSECOND
        hi_us = None if end is None else (end - _EPOCH) // _MICROSECOND
        for v in t:
            if lo_us is not None:
                keep[v] &= t[v] >= lo_us
            if hi_us is not None:
                keep[v] &= t[v] <= hi_us
            left[v] += int(len(t[v]) - keep[v].sum())
        empty = [v for v in t if not keep[v].any()]
        if empty:
            raise CanaryError(
                f"no samples of version {' or '.join(repr(v) for v in empty)} between {start.isoformat() if start else 'the first sample'} and {end.isoformat() if end else 'the last sample'}; widen the window"
            )
    ranges = {v: (int(t[v][keep[v]].min()), int(t[v][keep[v]].max())) for v in t}
    # `max`/`min` of the two sides keep the first of equal values: the stable side's.
    lo_v = max((stable, canary), key=lambda v: ranges[v][0])
    hi_v = min((stable, canary), key=lambda v: ranges[v][1])
    lo, hi = ranges[lo_v][0], ranges[hi_v][1]
    if lo > hi:
        spans = "; ".join(
            f"{v} from {first(v, keep[v], ranges[v][0]).isoformat()} to {first(v, keep[v], ranges[v][1]).isoformat()}"
            for v in (stable, canary)
        )
        raise CanaryError(
            f"the two versions were never served at the same time ({spans}); a canary comparison needs both in one window "
            "(for versions served one after the other, freeze a baseline of the first and run `llmwatch drift`)"
        )
    n = {}
    for v in t:
        inside = keep[v] & (t[v] >= lo) & (t[v] <= hi)
        left[v] += int(keep[v].sum() - inside.sum())
        n[v] = int(inside.sum())
    return Window(first(lo_v, keep[lo_v], lo), first(hi_v, keep[hi_v], hi), n[stable], n[canary], left)


def side_of(window: Window, stable: str, canary: str) -> Callable[[Sample], int | None]:
    """0 for a sample of `stable` in `window`, 1 for one of `canary`, None for any other."""
    sides = {stable: 0, canary: 1}

    def side(s: Sample) -> int | None:
        k = sides.get(_version(s))
        return k if k is not None and window.start <= s.timestamp <= window.end else None

    return side


@dataclass
class CanaryReport:
    stable_version: str
    canary_version: str
    window: Window
    drift: DriftReport
    # Signals that count against the canary: (family, signal name, direction).
    worse: list[Signal]
    # Signals that differ in the canary's favour (shown, never fail).
    better: list[Signal]
    # Signals against the canary in a family that --fail-on leaves out: they do not fail the run,
    # but their family is worse, not "not_worse" (the text said "behaviour not_worse (does not fail
    # the run)" beside a behaviour that drifted worse).
    worse_not_failing: list[Signal] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.worse:
            return "worse"
        if self.drift.verdict == "insufficient":
            return "insufficient"
        # Drift only in the canary's favour: still undecided where a failing family could not be judged.
        undecided = [
            f
            for f, info in self.drift.families.items()
            if f in self.drift.settings.fail_on and info["verdict"] == "insufficient" and info.get("recorded", True)
        ]
        return "insufficient" if undecided else "not_worse"

    @property
    def exit_code(self) -> int:
        return {"not_worse": 0, "worse": 1}.get(self.verdict, 2)

    def family_verdicts(self) -> dict[str, str]:
        """Per family: worse | not_worse | insufficient (inputs: shifted | stable | insufficient)."""
        out = {}
        for f, info in self.drift.families.items():
            if f == "inputs":
                out[f] = info["verdict"]
            elif any(s.family == f for s in self.worse + self.worse_not_failing):
                out[f] = "worse"
            elif info["verdict"] == "insufficient":
                out[f] = "insufficient"
            else:
                out[f] = "not_worse"
        return out

    def to_dict(self) -> dict[str, Any]:
        body = self.drift.to_dict()
        verdicts = self.family_verdicts()
        for f, info in body["families"].items():
            info["canary_verdict"] = verdicts[f]
        return {
            "schema": SCHEMA,
            "stable_version": self.stable_version,
            "canary_version": self.canary_version,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "worse": [{**_entry(s), "p_adjusted": s.p_adjusted, "stratum": s.stratum} for s in self.worse],
            "better": [_entry(s) for s in self.better],
            "worse_not_failing": [_entry(s) for s in self.worse_not_failing],
            "window": self.window.to_dict(),
            "families": body["families"],
            "signals": body["signals"],
            "settings": body["settings"],
        }


def _entry(s: Signal) -> dict[str, Any]:
    # effect_kind, effect_unit and effect_ci were added in place (llmwatch.canary/v1 stays): what
    # `effect` is, in which unit, and its 95 % interval (None where none is meaningful).
    return {
        "family": s.family,
        "signal": s.name,
        "direction": s.direction,
        "effect": s.effect_size,
        "effect_kind": s.effect_kind,
        "effect_unit": s.effect_unit,
        "effect_ci": s.effect_ci,
    }


def _failure_share(routes: Mapping[str, RouteStats]) -> float:
    rows = [r for rs in routes.values() for r in rs.rows]
    return sum(r.failure_mode != "ok" for r in rows) / len(rows) if rows else 0.0


def _against(sig: Signal, stable_routes: Mapping[str, RouteStats], canary_routes: Mapping[str, RouteStats]) -> bool:
    """Whether a drifting signal counts against the canary.

    Pass rates name their direction; failure modes have none, so the share of calls that failed
    in any way decides; performance drifts only when slower or dearer (families.py). Everything
    else (answer length, relevance, answer embeddings) is a change of behaviour that someone has
    to look at before the canary takes all traffic: it counts.
    """
    if sig.name.startswith("pass_rate:"):
        return sig.direction != "better"
    if sig.name == "failure_modes":
        return _failure_share(canary_routes) >= _failure_share(stable_routes)
    return True


def compare_versions(
    stable: tuple[Sequence[Sample], Sequence[Score], Mapping[str, np.ndarray] | None],
    canary: tuple[Sequence[Sample], Sequence[Score], Mapping[str, np.ndarray] | None],
    *,
    stable_version: str,
    canary_version: str,
    window: Window,
    settings: DriftSettings = DriftSettings(),
) -> tuple[CanaryReport, dict[str, RouteStats], dict[str, RouteStats]]:
    """The canary against the stable version, each summarised in memory; and both summaries (for plots)."""
    return compare_summaries(
        _summary(*stable),
        _summary(*canary),
        stable_version=stable_version,
        canary_version=canary_version,
        window=window,
        settings=settings,
    )


def compare_summaries(
    reference: dict[str, RouteStats],
    current: dict[str, RouteStats],
    *,
    stable_version: str,
    canary_version: str,
    window: Window,
    settings: DriftSettings = DriftSettings(),
) -> tuple[CanaryReport, dict[str, RouteStats], dict[str, RouteStats]]:
    """The canary's summary (`current`) against the stable version's (`reference`), however they were made."""
    report = compare(
        reference, current, baseline_version=stable_version, current_versions=[canary_version], settings=settings
    )
    failing = [s for s in report.signals if s.family in settings.fail_on and s.verdict in ("drift", "shifted")]
    worse = [s for s in failing if _against(s, reference, current)]
    # Performance drifts only when slower or dearer, so a canary truly faster (or cheaper) per
    # token was in no list at all: NOT WORSE said nothing of it. The mirror of the regression's
    # rule names it better: adjusted p < alpha and more than the margin lower at p50 and p95.
    faster = [
        s
        for s in report.signals
        if s.family == "performance"
        and s.family in settings.fail_on
        and s.decisive
        and s.verdict == "stable"
        and s.p_adjusted < settings.alpha
        # p50 and p95 both (a stable row's effect is the smaller of the two changes when lower).
        and max(s.detail.get("p50_change", 0.0), s.detail.get("p95_change", 0.0)) < -settings.performance_margin
    ]
    better = [s for s in failing if s not in worse] + faster
    # The families --fail-on leaves out are judged all the same (inputs only shift: no worse there).
    left_out = [
        s
        for s in report.signals
        if s.family not in settings.fail_on and s.family != "inputs" and s.verdict in ("drift", "shifted")
    ]
    worse_not_failing = [s for s in left_out if _against(s, reference, current)]
    canary_report = CanaryReport(stable_version, canary_version, window, report, worse, better, worse_not_failing)
    return canary_report, reference, current


def _summary(
    samples: Sequence[Sample], scores: Sequence[Score], vectors: Mapping[str, np.ndarray] | None
) -> dict[str, RouteStats]:
    ids = {s.id for s in samples}
    return summarize(
        samples, [sc for sc in scores if sc.sample_id in ids], {k: v for k, v in (vectors or {}).items() if k in ids}
    )


def pick_pairs(
    counts: Mapping[str, Mapping[str, int]], stable: str | None, canary: str | None, *, most: int = 4
) -> list[tuple[str, str]]:
    """(stable, canary) pairs to compare online from the samples per model and version.

    With both versions configured: that pair, when both are in the windows. Otherwise, for each
    model served by two or more versions, the version with the most samples is stable and each
    other (most samples first, at most `most`) is a canary, so the series stay bounded.
    """
    totals: Counter[str] = Counter()
    for versions in counts.values():
        totals.update(versions)
    if stable is not None and canary is not None:
        return [(stable, canary)] if totals.get(stable) and totals.get(canary) else []
    pairs: list[tuple[str, str]] = []
    for _model, versions in sorted(counts.items()):
        ranked = sorted(((n, v) for v, n in versions.items() if n), key=lambda t: (-t[0], t[1]))
        if len(ranked) < 2:
            continue
        head = ranked[0][1]
        pairs += [(head, v) for _, v in ranked[1 : 1 + most] if (head, v) not in pairs]
    return pairs[:most]


def _fmt(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _why(s: Signal, otherwise: str) -> str:
    """A worse or better signal's reason in the headline. failure_modes is decided on the share of
    calls that failed in any way (`_against`), not on the one mode its direction names (the
    table's row says that mode), so the headline keeps to what decided it."""
    return otherwise if s.name == "failure_modes" else s.direction or otherwise


def format_text(report: CanaryReport) -> str:
    d, w = report.drift, report.window
    head = {
        "worse": f"WORSE: canary {report.canary_version} is worse than stable {report.stable_version} in the same window on "
        + ", ".join(f"{s.family}/{s.name} ({_why(s, 'changed')})" for s in report.worse),
        "not_worse": f"NOT WORSE: canary {report.canary_version} is not worse than stable {report.stable_version} in the same window"
        + (
            "; better on " + ", ".join(f"{s.family}/{s.name} ({_why(s, 'fewer failures')})" for s in report.better)
            if report.better
            else ""
        )
        + (
            f" on the families that fail the run ({', '.join(d.settings.fail_on)}); worse on "
            + ", ".join(f"{s.family}/{s.name} ({_why(s, 'changed')})" for s in report.worse_not_failing)
            + ", which do not fail the run (--fail-on)"
            if report.worse_not_failing
            else ""
        ),
        "insufficient": f"UNDECIDED: too few samples of one version in the common window (each signal needs at least {d.settings.min_samples} per version), or prompts that barely overlap",
    }[report.verdict]
    left = ", ".join(f"{v} {n}" for v, n in w.left_out.items())
    lines = [
        head,
        f"window {w.start.isoformat()} .. {w.end.isoformat()} (both versions served): stable {report.stable_version} {w.n_stable} samples, canary {report.canary_version} {w.n_canary} samples; left out (outside the window): {left}",
    ]
    for name, verdict in report.family_verdicts().items():
        info = d.families.get(name, {})
        how = (
            f", compared on {info['comparison']}, overlap {info['overlap']:.0%}"
            if name == "behaviour" and "comparison" in info
            else ""
        )
        fails = "" if name in d.settings.fail_on else " (does not fail the run)"
        why = f" ({info['reason']})" if info.get("reason") else ""
        lines.append(f"  {name:<12} {verdict}{how}{fails}{why}")
    if report.better:
        lines.append(
            "better in the canary (does not fail): "
            + ", ".join(
                f"{s.name} ({_why(s, 'fewer failures')}, {effect_label(s)} {_fmt(s.effect_size, '+.3f')} {format_interval(s.effect_ci)})"
                for s in report.better
            )
        )
    for s in d.signals:
        if s.name == "perf:latency_per_token_ms" and "p50" in s.detail:
            (b50, c50), (b95, c95) = s.detail["p50"], s.detail["p95"]
            lines.append(
                f"time per output token: p50 {b50:.3g} -> {c50:.3g} ms, p95 {b95:.3g} -> {c95:.3g} ms (margin {d.settings.performance_margin:.0%})"
            )
    nw, tw = column_widths(d.signals)
    # As `llmwatch drift` prints them: without the correction's line and the raw p, a context
    # figure's "changed" beside a p_adj of "-" gave no reason at all.
    lines += [
        f"alpha {d.settings.alpha} with {d.settings.correction} correction over {tests_phrase(d)}",
        EFFECT_LEGEND.replace("current minus baseline", "canary minus stable"),
        "",
        f"{'verdict':<12} {'family':<11} {'signal':<{nw}} {'test':<{tw}} {'p':>9} {'p_adj':>9} {'effect':>9} {'95% interval':>18} {'effect is':<15} {'n stable/canary':>16}  direction / stratum",
    ]
    for s in d.signals:
        lines.append(
            f"{s.verdict:<12} {s.family:<11} {s.name:<{nw}} {s.test:<{tw}} {_fmt(s.p_value, '.2e'):>9} {_fmt(s.p_adjusted, '.2e'):>9} {_fmt(s.effect_size, '+.3f'):>9} "
            f"{format_interval(s.effect_ci):>18} {effect_label(s):<15} {f'{s.n_baseline}/{s.n_current}':>16}  {direction_and_stratum(s, ('drift', 'shifted'))}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- online


Item = tuple[Sample, Sequence[Score], "np.ndarray | None"]
_VERDICT_VALUE = {"worse": 1.0, "shifted": 1.0, "not_worse": 0.0, "stable": 0.0}


def canary_readings(
    windows: Mapping[str, Sequence[Item]],
    settings: DriftSettings,
    *,
    stable: str | None = None,
    canary: str | None = None,
    most: int = 4,
) -> list[CanaryReading]:
    """Gauge readings for every (stable, canary) pair served in the recent windows (see `pick_pairs`).

    Each pair is compared exactly as `llmwatch canary` would, on the part of both windows that
    overlaps in time. A pair that was never served at the same time yields nothing.
    """
    counts: dict[str, Counter[str]] = {}
    for version, items in windows.items():
        for sample, _, _ in items:
            counts.setdefault(sample.model or "unknown", Counter())[version] += 1
    out: list[CanaryReading] = []
    for s_version, c_version in pick_pairs(counts, stable, canary, most=most):
        items = [*windows.get(s_version, ()), *windows.get(c_version, ())]
        try:
            s_samples, c_samples, window = same_window([i[0] for i in items], s_version, c_version)
        except CanaryError:
            continue
        scores = [sc for i in items for sc in i[1]]
        vectors = {i[0].id: i[2] for i in items if i[2] is not None}
        report, _, _ = compare_versions(
            (s_samples, scores, vectors),
            (c_samples, scores, vectors),
            stable_version=s_version,
            canary_version=c_version,
            window=window,
            settings=settings,
        )
        out += readings_of(report)
    return out


def readings_of(report: CanaryReport) -> list[CanaryReading]:
    s, c = report.stable_version, report.canary_version
    out = [
        CanaryReading("samples", s, c, "stable", float(report.window.n_stable)),
        CanaryReading("samples", s, c, "canary", float(report.window.n_canary)),
    ]
    # A family `drift.fail_on` leaves out reads 2 when it is worse: true on a dashboard, and not the
    # 1 that `LLMWatchCanaryWorse` pages on, since the operator chose not to be paged for it.
    failing = {sig.family for sig in report.worse}
    outside = {sig.family for sig in report.worse_not_failing} - failing
    out += [
        CanaryReading("verdict", s, c, family, 2.0 if family in outside else _VERDICT_VALUE.get(verdict, -1.0))
        for family, verdict in report.family_verdicts().items()
    ]
    for sig in report.drift.signals:
        if sig.name == "perf:latency_per_token_ms" and "p50" in sig.detail:
            for q, (b, cur) in (("0.5", sig.detail["p50"]), ("0.95", sig.detail["p95"])):
                if b:
                    out.append(CanaryReading("latency_per_token_ratio", s, c, q, cur / b))
        elif sig.name.startswith("pass_rate:") and not math.isnan(sig.effect_size):
            out.append(
                CanaryReading("pass_rate_difference", s, c, sig.name.removeprefix("pass_rate:"), float(sig.effect_size))
            )
    return out
