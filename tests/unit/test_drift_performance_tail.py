"""A performance signal has a tail test beside its location test, and its row shows the one that decided.

The location test (van Elteren) cannot see a tail that grew while the median fell: median -13 %,
p95 +95 % read `van_elteren -4.44 ... +0.950 higher` (z against the effect) and was called drift
on a test that found the version faster; making the effect follow z (8aaaa9f, not merged) called
it stable and hid the p95 regression. Now the tail test (`upper_tail`, exact, one-sided) decides
it, the row names that test, and its statistic, effect and direction share one sign. Both tests
enter the Holm correction. Calibration and power: bench/drift_perf_tail.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmwatch.scorers.drift.compare import compare, format_text
from llmwatch.scorers.drift.families import family_signals, higher_or_lower
from llmwatch.scorers.drift.features import RouteStats
from llmwatch.scorers.drift.model import DriftSettings
from llmwatch.scorers.drift.rows import Row
from llmwatch.scorers.stats.stratified import effect_interval, quantile_change_intervals, upper_tail
from llmwatch.scorers.stats.twosample import adjust_pvalues

ROUTE = "/v1/chat/completions"


def _routes(rng: np.random.Generator, median: float, sd: float, n: int) -> dict[str, RouteStats]:
    values = rng.lognormal(math.log(median), sd, n)
    rows = [Row(prompt_hash=f"h{i}", ms_per_token=float(v), latency_ms=float(v) * 100) for i, v in enumerate(values)]
    return {ROUTE: RouteStats(n=n, rows=rows)}


def _pair(median: float, sd: float, seed: int = 1):
    rng = np.random.default_rng(seed)
    return _routes(rng, 15.0, 0.3, 1500), _routes(rng, median, sd, 1500)


def _latency(median: float, sd: float, seed: int = 1):
    signals, fams = family_signals(*_pair(median, sd, seed), DriftSettings(interval_draws=200))
    return next(s for s in signals if s.name == "perf:latency_per_token_ms"), fams


def test_a_lower_median_with_a_much_longer_tail_is_a_regression_found_by_the_tail_test():
    sig, fams = _latency(13.0, 0.8)  # median -13 %, p95 about +95 %
    assert sig.detail["p50_change"] < 0 < sig.detail["p95_change"]
    assert sig.detail["location"]["statistic"] < -3  # the location test finds it faster...
    assert sig.verdict == "drift" and fams["performance"]["verdict"] == "drift"  # ...the tail test slower
    assert sig.detail["decided_by"] == "tail" and sig.test == "p95_exceedance"
    assert sig.statistic == pytest.approx(sig.detail["tail"]["statistic"], abs=1e-3) and sig.statistic > 3
    assert sig.p_value == sig.detail["tail"]["p"] and sig.p_adjusted == sig.detail["tail"]["p_adjusted"]
    # The effect is the tail test's: the p95 change, with its own interval and unit.
    assert sig.effect_size == pytest.approx(sig.detail["p95_change"], abs=1e-4) and sig.effect_size > 0.5
    assert sig.effect_ci is not None and 0 < sig.effect_ci[0] <= sig.effect_size <= sig.effect_ci[1]
    assert sig.effect_unit == "p95, of the baseline's" and sig.direction == "higher"
    assert sig.detail["tail"]["current_above"] > 0.05 > sig.detail["tail"]["baseline_above"]


def test_a_slower_median_is_a_regression_found_by_the_location_test():
    sig, _ = _latency(20.0, 0.3)  # every call a third slower
    assert sig.verdict == "drift" and sig.detail["decided_by"] == "location" and sig.test == "van_elteren"
    assert sig.statistic > 0 and sig.effect_size == pytest.approx(
        max(sig.detail["p50_change"], sig.detail["p95_change"]), abs=1e-4
    )
    assert sig.p_adjusted == sig.detail["location"]["p_adjusted"] and sig.direction == "higher"


def test_a_faster_version_is_stable_with_a_negative_effect():
    sig, fams = _latency(11.0, 0.3)
    assert sig.verdict == "stable" and fams["performance"]["verdict"] == "stable"
    assert sig.detail["decided_by"] == "" and sig.test == "van_elteren"
    assert sig.statistic < 0 and sig.effect_size < -0.2 and sig.direction == "lower"
    assert sig.effect_size == pytest.approx(min(sig.detail["p50_change"], sig.detail["p95_change"]), abs=1e-4)
    assert sig.detail["tail"]["statistic"] < 0 and sig.detail["tail"]["p"] > 0.5  # one-sided: lighter is no finding


@pytest.mark.parametrize(
    ("median", "sd"), [(20.0, 0.3), (11.0, 0.3), (20.0, 0.05), (11.0, 0.9), (13.5, 0.8), (13.0, 0.8), (15.0, 0.3)]
)
def test_statistic_effect_and_direction_share_one_sign_in_every_row(median: float, sd: float):
    sig, _ = _latency(median, sd)
    # Inside the margin the location test against it reads 0 (no evidence beyond it), p 1: the
    # effect keeps its own sign and direction, never one against the statistic.
    assert np.sign(sig.statistic) in (0, np.sign(sig.effect_size)), (sig.test, sig.statistic, sig.effect_size)
    assert sig.statistic != 0 or (sig.p_value == 1.0 and abs(sig.effect_size) <= sig.detail["margin"])
    assert sig.direction == ("higher" if sig.effect_size > 0 else "lower")
    assert sig.effect_ci is not None and sig.effect_ci[0] <= sig.effect_size <= sig.effect_ci[1]


def test_no_row_has_an_effect_against_its_statistic():
    """Ranks and quantiles can disagree near z = 0: in seeds 11, 22 and 36 of these 40 unchanged
    300-sample windows p50 and p95 both moved against z (e.g. z = -0.11, p50 +1.7 %, p95 +2.7 %).
    The effect is then 0 (no direction), never of the other sign."""
    against = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        signals, _ = family_signals(
            _routes(rng, 15.0, 0.35, 300), _routes(rng, 15.0, 0.35, 300), DriftSettings(interval_draws=50)
        )
        sig = next(s for s in signals if s.name == "perf:latency_per_token_ms")
        p50, p95 = sig.detail["p50_change"], sig.detail["p95_change"]
        z = sig.detail["location"]["unshifted_statistic"]  # the rank test against no change
        against += (z < 0 < min(p50, p95)) or (z > 0 > max(p50, p95))
        assert sig.statistic * sig.effect_size >= 0, (seed, sig.statistic, sig.effect_size)
        # A statistic of 0 (inside the margin) names no direction; the effect's own is shown.
        shown = "higher" if sig.statistic > 0 else "lower" if sig.statistic < 0 else higher_or_lower(sig.effect_size)
        assert sig.direction in (shown, "")
        assert sig.effect_ci is not None and sig.effect_ci[0] <= sig.effect_size <= sig.effect_ci[1]
        assert sig.statistic * sig.effect_ci[0] >= 0 or sig.statistic * sig.effect_ci[1] >= 0
    assert against >= 1  # the case occurs in these windows, so the test can fail


def test_both_tests_of_a_performance_signal_enter_the_correction():
    base, cur = _pair(13.0, 0.8)
    report = compare(base, cur, baseline_version="A", current_versions=["B"], settings=DriftSettings(interval_draws=0))
    sig = next(s for s in report.signals if s.name == "perf:latency_per_token_ms")
    modes = next(s for s in report.signals if s.name == "failure_modes")  # the other decisive test here
    # Holm over the three hypotheses: failure modes, and this signal's location and tail tests.
    expected = adjust_pvalues([modes.p_value, sig.detail["location"]["p"], sig.detail["tail"]["p"]], method="holm")
    got = [modes.p_adjusted, sig.detail["location"]["p_adjusted"], sig.detail["tail"]["p_adjusted"]]
    assert got == pytest.approx(list(expected), rel=1e-9)
    assert sig.detail["location"]["p_adjusted"] == pytest.approx(2 * sig.detail["location"]["p"], rel=1e-9)
    assert report.n_tests == 3
    # The context row (latency_ms, raw) ran two tests too, uncorrected.
    assert report.n_context_tests == 2
    text = format_text(report)
    assert "over 3 tests (and 2 context figure(s), uncorrected)" in text
    row = next(line for line in text.splitlines() if " perf:latency_per_token_ms " in line)
    assert row.startswith("drift") and "p95_exceedance" in row and "rel p95" in row and "higher" in row
    assert report.to_dict()["signals"][0]["detail"]["decided_by"] in ("tail", "location", "")


def test_the_tail_test_holds_its_level_with_strata_ties_and_unequal_sides():
    """Seeded null trials: strata of unequal sizes, values rounded to whole milliseconds (ties at the
    cut). Exact and conditional on the pooled values, its one-sided p-value rejects at most alpha."""
    rng = np.random.default_rng(7)
    rejected = []
    for _ in range(400):
        base, cur = {}, {}
        for k, (nb, nc, level) in enumerate(((150, 40, 10), (60, 80, 20), (12, 5, 30), (300, 100, 15))):
            base[f"s{k}"] = list(np.round(rng.lognormal(math.log(level), 0.4, nb)))
            cur[f"s{k}"] = list(np.round(rng.lognormal(math.log(level), 0.4, nc)))
        res = upper_tail(base, cur)
        assert res is not None and 0 <= res.p_value <= 1
        rejected.append(res.p_value < 0.05)
    assert np.mean(rejected) <= 0.05, np.mean(rejected)


def test_the_tail_test_sees_a_tail_and_not_a_constant():
    rng = np.random.default_rng(3)
    base = {"a": list(rng.lognormal(0, 0.3, 400))}
    cur = {"a": list(np.where(rng.random(400) < 0.1, 4.0, 0.9) * rng.lognormal(0, 0.3, 400))}
    res = upper_tail(base, cur)
    assert res is not None and res.p_value < 1e-6 and res.statistic > 0 and res.effect > 0
    flat = upper_tail({"a": [1.0] * 50}, {"a": [1.0] * 50})  # all tied: nothing lies above the cut
    assert flat is not None and flat.p_value == 1.0 and flat.statistic == 0.0


def test_the_quantile_intervals_come_from_one_set_of_draws():
    rng = np.random.default_rng(5)
    base = {"a": list(rng.lognormal(0, 0.3, 300)), "b": list(rng.lognormal(1, 0.3, 100))}
    cur = {"a": list(rng.lognormal(0.1, 0.5, 200)), "b": list(rng.lognormal(1, 0.3, 150))}
    together = quantile_change_intervals(base, cur, draws=200, seed=4)
    for kind in ("quantile_change", "quantile_fall", "p95_change"):
        assert together[kind] == pytest.approx(effect_interval(base, cur, kind, draws=200, seed=4))
