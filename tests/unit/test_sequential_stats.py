"""The anytime-valid tests behind the drift pager (scorers/llmwatch/scorers/stats/sequential.py), on simulated streams."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmwatch.scorers.stats.sequential import (
    BernoulliEProcess,
    bernoulli_e_values,
    first_crossing,
    quantile_bounds,
    rate_upper_bound,
    signal_alpha,
)


def test_a_stable_stream_crosses_one_over_alpha_at_most_alpha_of_the_time_however_long_it_is_watched():
    """Ville's bound: the worst stable case (the true rate exactly at the null bound), looked at after every sample."""
    rng = np.random.default_rng(1)
    alpha, q, runs, n = 0.05, 0.05, 300, 4000
    crossed = sum(first_crossing(bernoulli_e_values(rng.random(n) < q, q), 1 / alpha) is not None for _ in range(runs))
    assert crossed / runs <= alpha, f"{crossed} of {runs} stable runs crossed 1/alpha"


def test_a_rate_below_the_null_bound_hardly_ever_crosses():
    rng = np.random.default_rng(2)
    crossed = sum(first_crossing(bernoulli_e_values(rng.random(4000) < 0.04, 0.05), 20) is not None for _ in range(200))
    assert crossed <= 2


def test_a_doubled_failure_rate_is_found_within_a_few_hundred_samples():
    rng = np.random.default_rng(3)
    found = [first_crossing(bernoulli_e_values(rng.random(3000) < 0.10, 0.05), 100) for _ in range(50)]
    assert all(f is not None for f in found)
    assert float(np.median([f for f in found if f is not None])) < 1000


def test_the_online_process_gives_the_same_evidence_as_the_whole_stream_at_once():
    rng = np.random.default_rng(4)
    y = rng.random(500) < 0.2
    online = BernoulliEProcess(0.1)
    stepwise = [online.update(bool(v)) for v in y]
    assert np.allclose(stepwise, bernoulli_e_values(y, 0.1), rtol=1e-9)
    assert online.n == 500 and online.ones == int(y.sum())


def test_alpha_is_spread_over_signals_and_epochs_of_thirty_days():
    # One false page per 30 days, weekly epochs, 10 signals: 30/7 epochs, each signal 7/30/10.
    assert signal_alpha(1.0, 7 * 86_400, 10) == pytest.approx(7 / 30 / 10)
    assert signal_alpha(1.0, 86_400, 1) == pytest.approx(1 / 30)
    assert signal_alpha(100.0, 30 * 86_400, 1) == 0.5  # never a threshold below 2
    with pytest.raises(ValueError):
        signal_alpha(0.0, 86_400, 3)


def test_baseline_bounds_cover_the_truth_they_stand_for():
    rng = np.random.default_rng(5)
    misses = 0
    for _ in range(200):
        k = int((rng.random(800) < 0.1).sum())
        misses += rate_upper_bound(k, 800) < 0.1
    assert misses <= 2
    values = rng.exponential(size=2000)
    lo, hi = quantile_bounds(values, 0.5)
    assert lo < math.log(2) < hi
    with pytest.raises(ValueError):
        quantile_bounds(np.array([]), 0.5)
