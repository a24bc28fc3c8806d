"""Version-stability drift: the current window against a frozen baseline, in three families.

`inputs` (what users ask), `behaviour` (what the model does on comparable inputs) and
`performance` (per-token latency and cost, with a margin) are tested and decided apart; see
scorers/llmwatch/scorers/drift/families.py for every test and why. The report's verdict is `drift` when a family named
in `settings.fail_on` (default behaviour and performance) drifts - never for `inputs` alone -
`insufficient` when one of them cannot be decided (too few samples, or inputs that barely overlap
the baseline's), else `stable`. Exit codes: 0 stable, 1 drift, 2 insufficient.

The p-values of the decisive signals of the failing families are corrected together (Holm by
default), so the chance of a false exit 1 in a stable window stays at `alpha`. A signal drifts
when its adjusted p-value is below `alpha` and its effect is at least the configured minimum, in
the user's units (pass-rate points, fraction of the median, cosine; performance: more than
`performance_margin` slower per token at p50 or p95, tested against that margin).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from llmwatch.scorers.drift.families import family_signals
from llmwatch.scorers.drift.features import RouteStats
from llmwatch.scorers.drift.model import (
    EFFECT_LEGEND,
    FAMILIES,
    DriftSettings,
    Signal,
    context_tests,
    corrected_tests,
    effect_label,
    format_interval,
)

__all__ = [
    "DriftReport",
    "DriftSettings",
    "Signal",
    "compare",
    "direction_and_stratum",
    "format_text",
    "settings_from_config",
    "tests_phrase",
]


@dataclass
class DriftReport:
    baseline_version: str
    current_versions: list[str]
    n_current: int
    settings: DriftSettings
    signals: list[Signal]
    verdict: str  # stable | drift | insufficient
    # Per family: verdict (inputs: stable|shifted|insufficient; others stable|drift|insufficient),
    # the names of its signals (most significant first) and what it was compared on.
    families: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The one count of tests every output (text, JSON, HTML) quotes, computed here once: signals
    # whose p-value entered a multiple-testing correction (decisive), and those tested but shown
    # only as context (raw totals, never corrected, never decide).
    n_tests: int = field(init=False)
    n_context_tests: int = field(init=False)

    def __post_init__(self) -> None:
        self.n_tests = sum(corrected_tests(s) for s in self.signals)
        self.n_context_tests = sum(context_tests(s) for s in self.signals)

    @property
    def exit_code(self) -> int:
        return {"stable": 0, "drift": 1}.get(self.verdict, 2)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["exit_code"] = self.exit_code
        by_name = {(sig["family"], sig["name"]): sig for sig in out["signals"]}
        out["families"] = {
            f: {**info, "signals": [by_name[(f, n)] for n in info.get("signals", []) if (f, n) in by_name]}
            for f, info in self.families.items()
        }
        return out


def settings_from_config(section: Any, **overrides: Any) -> DriftSettings:
    """DriftSettings from a config `drift` section (core.config.DriftSection); `overrides` win (CLI flags)."""
    names = (
        "alpha",
        "min_samples",
        "performance_margin",
        "min_pass_rate_change",
        "min_relative_change",
        "min_score_change",
        "min_embedding_distance",
        "min_mix_change",
        "min_overlap",
        "near_duplicate_cosine",
        "min_prompt_separation",
        "max_unmatched_separation",
    )
    values: dict[str, Any] = {n: getattr(section, n) for n in names if hasattr(section, n)}
    if hasattr(section, "fail_on"):
        values["fail_on"] = tuple(section.fail_on)
    if getattr(section, "interval_draws", None) is not None:
        values["interval_draws"] = section.interval_draws
    values.update({k: v for k, v in overrides.items() if v is not None})
    return DriftSettings(**values)


def compare(
    baseline_routes: Mapping[str, RouteStats],
    current_routes: Mapping[str, RouteStats],
    *,
    baseline_version: str,
    current_versions: list[str],
    settings: DriftSettings = DriftSettings(),
) -> DriftReport:
    signals, families = family_signals(baseline_routes, current_routes, settings)
    n_current = sum(r.n for r in current_routes.values())
    failing = [f for f in FAMILIES if f in settings.fail_on]
    if any(families[f]["verdict"] in ("drift", "shifted") for f in failing):
        verdict = "drift"
    # A family with no signal at all records nothing here (e.g. no latencies or token counts in an
    # export): it cannot be judged, but it does not make the others undecided either.
    elif (
        n_current < settings.min_samples
        or not any(families[f].get("recorded", True) for f in failing)
        or any(families[f]["verdict"] == "insufficient" and families[f].get("recorded", True) for f in failing)
    ):
        verdict = "insufficient"
    else:
        verdict = "stable"
    return DriftReport(baseline_version, current_versions, n_current, settings, signals, verdict, families)


def column_widths(signals: Iterable[Signal]) -> tuple[int, int]:
    """Widths of the signal and test columns of a text table: the longest name in it, at least the
    widths of the table's heads before, so a name is never cut (`mmd_stratified_permutation` read
    `mmd_stratified_per`, a signal name cut at 34 could not be looked up)."""
    rows = list(signals)
    return max([34, *(len(s.name) for s in rows)]), max([18, *(len(s.test) for s in rows)])


def _fmt(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def tests_phrase(report: DriftReport) -> str:
    """How many tests the correction covered, worded the same in the text and HTML reports."""
    extra = f" (and {report.n_context_tests} context figure(s), uncorrected)" if report.n_context_tests else ""
    return f"{report.n_tests} test{'s' if report.n_tests != 1 else ''}{extra}"


def direction_and_stratum(s: Signal, verdicts: tuple[str, ...]) -> str:
    """ "lower, clearest in X", "lower" or "clearest in X" (failure_modes has no direction)."""
    where = f"clearest in {s.stratum}" if s.stratum and s.verdict in verdicts else ""
    return ", ".join(part for part in (s.direction, where) if part)


def stable_headline(report: DriftReport) -> str:
    """The headline of a run that does not fail. With --fail-on leaving out a family that drifted,
    "no signal differs from the baseline beyond chance" was untrue: it names those families."""
    # Each named with its own verdict: `inputs` shifts, it never drifts.
    left_out = [
        f"{name} {'drifted' if info['verdict'] == 'drift' else 'shifted'}"
        for name, info in report.families.items()
        if name not in report.settings.fail_on and info["verdict"] in ("drift", "shifted")
    ]
    if not left_out:
        return "STABLE: no signal differs from the baseline beyond chance"
    return (
        f"STABLE on the families that fail the run ({', '.join(report.settings.fail_on)}): none of their signals "
        f"differs from the baseline beyond chance; {', '.join(left_out)}, which does not fail the run (--fail-on)"
    )


def format_text(report: DriftReport) -> str:
    head = {
        "drift": "DRIFT: the current window behaves differently from the baseline",
        "stable": stable_headline(report),
        "insufficient": f"UNDECIDED: too few samples (each signal needs at least {report.settings.min_samples} on both sides), or inputs that barely overlap the baseline's",
    }[report.verdict]
    families = []
    for name, info in report.families.items():
        why = f" ({info['reason']})" if info.get("reason") else ""
        how = (
            f", compared on {info['comparison']}, overlap {info['overlap']:.0%}"
            if name == "behaviour" and "comparison" in info
            else ""
        )
        fails = "" if name in report.settings.fail_on else " (does not fail the run)"
        families.append(f"  {name:<12} {info['verdict']}{how}{fails}{why}")
    short = [
        name
        for name, info in report.families.items()
        if name in report.settings.fail_on and info["verdict"] == "insufficient" and not info.get("reason")
    ]
    if report.verdict == "insufficient" and short:
        # Say what to do, not only what is missing: a newcomer's first drift run on a few calls.
        families.append(
            f"  to decide {', '.join(short)}: more samples of the version in the window (each signal needs "
            f"{report.settings.min_samples} on both sides): let more traffic through, raise sampling.rate, or widen "
            "the window; a lower --min-samples decides sooner but with weaker tests"
        )
    nw, tw = column_widths(report.signals)
    lines = [
        head,
        *families,
        f"baseline version {report.baseline_version}; current window: {report.n_current} samples of version(s) {', '.join(report.current_versions) or '-'}",
        f"alpha {report.settings.alpha} with {report.settings.correction} correction over {tests_phrase(report)}; performance margin {report.settings.performance_margin:.0%} per token",
        EFFECT_LEGEND,
        "",
        f"{'verdict':<12} {'family':<11} {'signal':<{nw}} {'test':<{tw}} {'statistic':>10} {'p':>9} {'p_adj':>9} {'effect':>9} {'95% interval':>18} {'effect is':<15} {'n base/cur':>13}  direction / stratum",
    ]
    for s in report.signals:
        lines.append(
            f"{s.verdict:<12} {s.family:<11} {s.name:<{nw}} {s.test:<{tw}} {_fmt(s.statistic, '.4g'):>10} {_fmt(s.p_value, '.2e'):>9} {_fmt(s.p_adjusted, '.2e'):>9} "
            f"{_fmt(s.effect_size, '+.3f'):>9} {format_interval(s.effect_ci):>18} {effect_label(s):<15} {f'{s.n_baseline}/{s.n_current}':>13}  {direction_and_stratum(s, ('drift', 'shifted', 'changed'))}"
        )
    return "\n".join(lines)
