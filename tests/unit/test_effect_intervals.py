"""The 95 % intervals the drift and canary reports print beside each effect (stats.stratified.effect_interval).

They must hold the effect they describe as often as they claim: coverage is measured here over
repeated synthetic windows with a known true effect, on the two shapes of strata the drift
families use (a few categories; many matched prompts of one sample a side).
"""

from __future__ import annotations

import numpy as np
import pytest

from llmwatch.scorers.stats.stratified import (
    QUANTILE_EFFECTS,
    cmh,
    effect_interval,
    quantile_change_intervals,
    reweighted_quantiles,
    van_elteren,
)


def _rates(rng, strata: int, per: int, pb: float, pc: float):
    base = {f"s{k}": list((rng.random(per) < pb).astype(float)) for k in range(strata)}
    cur = {f"s{k}": list((rng.random(per) < pc).astype(float)) for k in range(strata)}
    return base, cur


@pytest.mark.parametrize(("strata", "per"), [(3, 120), (240, 1)])
def test_a_pass_rate_difference_interval_covers_the_true_difference_about_95_percent_of_the_time(strata, per):
    rng = np.random.default_rng(strata)
    hits, runs = 0, 120
    for _ in range(runs):
        base, cur = _rates(rng, strata, per, 0.8, 0.7)
        ci = effect_interval(base, cur, "rate_difference", draws=200, seed=0)
        assert ci is not None
        hits += ci[0] <= -0.1 <= ci[1]
    # 120 runs at 95 %: 114 expected; below 104 (a binomial tail of about 1e-4) is an interval too narrow.
    # With one sample a side per stratum (matched prompts) an interval within strata would be 0 wide.
    assert 104 <= hits <= runs, hits


def test_the_interval_is_around_the_effect_the_test_reports_and_seeded():
    rng = np.random.default_rng(3)
    base, cur = _rates(rng, 4, 80, 0.9, 0.8)
    tables = {k: (int(sum(base[k])), len(base[k]), int(sum(cur[k])), len(cur[k])) for k in base}
    low, high = effect_interval(base, cur, "rate_difference", seed=0)
    assert low < cmh(tables).effect < high
    assert effect_interval(base, cur, "rate_difference", seed=0) == (low, high)

    b = {"x": list(rng.lognormal(3, 0.3, 200)), "y": list(rng.lognormal(2, 0.3, 40))}
    c = {"x": list(rng.lognormal(3.3, 0.3, 150)), "y": list(rng.lognormal(2.3, 0.3, 60))}
    res = van_elteren(b, c)
    low, high = effect_interval(b, c, "relative_median_shift", seed=0)
    assert low < res.effect < high and low > 0  # about +35 %, clearly above no change
    low, high = effect_interval(b, c, "median_shift", seed=0)
    assert low < res.detail["median_shift"] < high
    (b50, b95), (c50, c95), _ = reweighted_quantiles(b, c, (0.5, 0.95))
    low, high = effect_interval(b, c, "quantile_change", seed=0)
    assert low < max(c50 / b50 - 1, c95 / b95 - 1) < high


def test_no_interval_without_a_stratum_on_both_sides_and_a_bad_kind_is_refused():
    assert effect_interval({"a": [1.0, 0.0]}, {"b": [1.0]}, "rate_difference") is None
    assert effect_interval({}, {"b": [1.0]}, "rate_difference") is None
    with pytest.raises(ValueError, match="rate_difference"):
        effect_interval({"a": [1.0]}, {"a": [1.0]}, "mean")


@pytest.mark.parametrize("draws", [1, 2, 3])
def test_a_few_draws_that_all_leave_no_shared_stratum_give_no_interval_not_an_error(draws):
    # `drift.interval_draws: 1` is a valid setting; its one draw undefined left zero draws, which
    # passed "at least half of 1" (0) and raised IndexError from an empty percentile.
    assert effect_interval({"a": [1.0, 2.0]}, {"b": [2.0]}, "quantile_change", draws=draws) is None
    assert quantile_change_intervals({"a": [1.0, 2.0]}, {"b": [2.0]}, draws=draws) == dict.fromkeys(QUANTILE_EFFECTS)


def test_the_same_samples_in_another_order_give_the_same_interval():
    # A streamed summary and an in-memory one hold the strata and their values in other orders.
    rng = np.random.default_rng(5)
    base, cur = _rates(rng, 6, 30, 0.8, 0.6)
    shuffled = {k: list(rng.permutation(cur[k])) for k in reversed(list(cur))}
    assert effect_interval(base, cur, "rate_difference") == effect_interval(base, shuffled, "rate_difference")
