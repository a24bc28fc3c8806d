"""Version-stability drift: the current window against a frozen baseline, signal by signal.

Every signal is a two-sample test, not a threshold on one number:

| signal                 | test                                                        |
|------------------------|-------------------------------------------------------------|
| `pass_rate:<check>`    | two-proportion z-test, Fisher's exact for small counts      |
| `score:<check>`        | Kolmogorov-Smirnov on continuous scores (PSI in the detail) |
| `latency_ms`, `ttft_ms`, `output_tokens`, `cost_usd` | Kolmogorov-Smirnov (PSI in the detail) |
| `failure_modes`        | chi-square homogeneity over ok/error/refusal/invalid_json/truncated/empty |
| `embedding`            | MMD with an RBF kernel and a permutation test               |

The p-values are corrected together (Holm by default), so the chance of any false alarm in a
stable window stays at `alpha`. A signal drifts when its adjusted p-value is below `alpha`
and its effect is at least the configured minimum (so that a huge window does not alarm on a
difference nobody cares about). Signals with fewer than `min_samples` on either side are
reported as `insufficient` and do not take part in the correction.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np

from llmwatch.scorers import stats
from llmwatch.scorers.features import CONTINUOUS, RouteStats


@dataclass(frozen=True)
class DriftSettings:
    alpha: float = 0.05
    min_samples: int = 30
    correction: str = "holm"
    # Smallest effect worth an alert, per kind of signal (see module docstring).
    min_pass_rate_change: float = 0.01  # absolute difference in pass rate
    min_ks_distance: float = 0.05  # KS D
    min_cramers_v: float = 0.03
    mmd_permutations: int = 200
    seed: int = 0


@dataclass
class Signal:
    name: str
    route: str
    test: str
    statistic: float
    p_value: float
    effect_size: float
    n_baseline: int
    n_current: int
    p_adjusted: float = math.nan
    verdict: str = "insufficient"
    direction: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class DriftReport:
    baseline_version: str
    current_versions: list[str]
    n_current: int
    settings: DriftSettings
    signals: list[Signal]
    verdict: str  # stable | drift | insufficient

    @property
    def exit_code(self) -> int:
        return {"stable": 0, "drift": 1}.get(self.verdict, 2)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["exit_code"] = self.exit_code
        return out


def _from_result(name: str, route: str, result: stats.TestResult, **detail: Any) -> Signal:
    return Signal(
        name=name,
        route=route,
        test=result.test,
        statistic=float(result.statistic),
        p_value=float(result.p_value),
        effect_size=float(result.effect_size),
        n_baseline=result.n_baseline,
        n_current=result.n_current,
        detail={**result.detail, **detail},
    )


def _insufficient(name: str, route: str, test: str, n_base: int, n_cur: int) -> Signal:
    return Signal(name, route, test, math.nan, math.nan, math.nan, n_base, n_cur)


def _route_signals(route: str, base: RouteStats, cur: RouteStats, s: DriftSettings) -> list[Signal]:
    out: list[Signal] = []
    m = s.min_samples
    for check, b in sorted(base.checks.items()):
        c = cur.checks.get(check)
        if c is None:
            continue
        nb, nc = b.n_pass + b.n_fail, c.n_pass + c.n_fail
        name = f"pass_rate:{check}"
        if nb < m or nc < m:
            out.append(_insufficient(name, route, "two_proportion", nb, nc))
        else:
            sig = _from_result(name, route, stats.compare_proportions(b.n_pass, nb, c.n_pass, nc))
            sig.direction = "worse" if sig.effect_size < 0 else "better"
            sig.detail["min_effect"] = s.min_pass_rate_change
            out.append(sig)
        if b.values is not None and c.values is not None:
            name = f"score:{check}"
            out.append(_continuous(name, route, b.values.reservoir, c.values.reservoir, s))
    for metric in CONTINUOUS:
        b, c = base.metrics.get(metric), cur.metrics.get(metric)
        if b is None or c is None:
            continue
        out.append(_continuous(metric, route, b.reservoir, c.reservoir, s))
    nb, nc = sum(base.failure_modes.values()), sum(cur.failure_modes.values())
    if nb >= m and nc >= m:
        out.append(_from_result("failure_modes", route, stats.compare_categorical(base.failure_modes, cur.failure_modes)))
    else:
        out.append(_insufficient("failure_modes", route, "chi2_categorical", nb, nc))
    if base.embedding is not None and cur.embedding is not None:
        X, Y = np.asarray(base.embedding.reservoir, dtype=np.float64), np.asarray(cur.embedding.reservoir, dtype=np.float64)
        if len(X) < m or len(Y) < m:
            out.append(_insufficient("embedding", route, "mmd_permutation", len(X), len(Y)))
        else:
            res = stats.mmd_permutation_test(X, Y, n_permutations=s.mmd_permutations, seed=s.seed)
            centroid_cos = float(np.dot(base.embedding.centroid, cur.embedding.centroid))
            out.append(_from_result("embedding", route, res, centroid_cosine=round(centroid_cos, 4)))
    return out


def _continuous(name: str, route: str, base: list[float], cur: list[float], s: DriftSettings) -> Signal:
    if len(base) < s.min_samples or len(cur) < s.min_samples:
        return _insufficient(name, route, "ks", len(base), len(cur))
    sig = _from_result(name, route, stats.compare_distributions(base, cur))
    try:
        p = stats.psi(base, cur)
        sig.detail["psi"] = round(float(p.statistic), 4)
        sig.detail["psi_band"] = p.detail.get("band")
    except ValueError:
        pass
    shift = sig.detail.get("median_shift")
    if isinstance(shift, (int, float)):
        sig.direction = "higher" if shift > 0 else "lower" if shift < 0 else ""
    return sig


def _practical(sig: Signal, s: DriftSettings) -> bool:
    if sig.name.startswith("pass_rate:"):
        return abs(sig.effect_size) >= s.min_pass_rate_change
    if sig.test == "ks":
        return sig.statistic >= s.min_ks_distance
    if sig.name == "failure_modes":
        return abs(sig.effect_size) >= s.min_cramers_v
    return True


def compare(
    baseline_routes: Mapping[str, RouteStats],
    current_routes: Mapping[str, RouteStats],
    *,
    baseline_version: str,
    current_versions: list[str],
    settings: DriftSettings = DriftSettings(),
) -> DriftReport:
    signals: list[Signal] = []
    for route in sorted(set(baseline_routes) & set(current_routes)):
        signals.extend(_route_signals(route, baseline_routes[route], current_routes[route], settings))
    tested = [sig for sig in signals if not math.isnan(sig.p_value)]
    if tested:
        adjusted = stats.adjust_pvalues([sig.p_value for sig in tested], method=settings.correction)
        for sig, p_adj in zip(tested, adjusted):
            sig.p_adjusted = float(p_adj)
            sig.verdict = "drift" if p_adj < settings.alpha and _practical(sig, settings) else "stable"
    signals.sort(key=lambda sig: (sig.verdict != "drift", math.isnan(sig.p_adjusted), sig.p_adjusted if not math.isnan(sig.p_adjusted) else 1.0, -abs(sig.effect_size) if not math.isnan(sig.effect_size) else 0.0))
    n_current = sum(r.n for r in current_routes.values())
    if any(sig.verdict == "drift" for sig in signals):
        verdict = "drift"
    elif tested and n_current >= settings.min_samples:
        verdict = "stable"
    else:
        verdict = "insufficient"
    return DriftReport(baseline_version, current_versions, n_current, settings, signals, verdict)


def _fmt(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def format_text(report: DriftReport) -> str:
    head = {
        "drift": "DRIFT: the current window behaves differently from the baseline",
        "stable": "STABLE: no signal differs from the baseline beyond chance",
        "insufficient": f"UNDECIDED: too few samples (each signal needs at least {report.settings.min_samples} on both sides)",
    }[report.verdict]
    lines = [
        head,
        f"baseline version {report.baseline_version}; current window: {report.n_current} samples of version(s) {', '.join(report.current_versions) or '-'}",
        f"alpha {report.settings.alpha} with {report.settings.correction} correction over {sum(not math.isnan(s.p_value) for s in report.signals)} tests",
        "",
        f"{'verdict':<12} {'signal':<34} {'test':<18} {'statistic':>10} {'p':>9} {'p_adj':>9} {'effect':>9} {'n base/cur':>13}  direction",
    ]
    for s in report.signals:
        lines.append(
            f"{s.verdict:<12} {s.name[:34]:<34} {s.test[:18]:<18} {_fmt(s.statistic, '.4g'):>10} {_fmt(s.p_value, '.2e'):>9} {_fmt(s.p_adjusted, '.2e'):>9} "
            f"{_fmt(s.effect_size, '+.3f'):>9} {f'{s.n_baseline}/{s.n_current}':>13}  {s.direction}"
        )
    return "\n".join(lines)
