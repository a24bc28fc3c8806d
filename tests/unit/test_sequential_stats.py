"""The anytime-valid tests behind the drift pager (scorers/llmwatch/scorers/stats/sequential.py), on simulated streams."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmwatch.scorers.stats.sequential import (
    BernoulliEProcess,
    EDetector,
    bernoulli_e_values,
    detector_alarms,
    detector_threshold,
    first_crossing,
    quantile_bounds,
    rate_upper_bound,
    sr_log_values,
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


def test_a_stable_stream_raises_at_most_t_over_c_alarms_in_t_samples_with_resets():
    """The e-detector's guarantee, at the worst stable case (rate exactly at the null bound)."""
    rng = np.random.default_rng(6)
    runs, n, c = 12, 12_000, 1500.0
    alarms = sum(len(detector_alarms(rng.random(n) < 0.05, 0.05, c)) for _ in range(runs))
    assert alarms / runs <= n / c, f"{alarms / runs} alarms per run, bound {n / c}"
    # Below the bound (the usual stable version): hardly ever.
    assert sum(len(detector_alarms(rng.random(n) < 0.04, 0.05, 1e5)) for _ in range(4)) <= 1


def test_a_long_stable_stretch_does_not_delay_the_detection_of_a_later_change():
    """Unlike an e-process that watched the stable stretch, the detector's evidence starts at every sample."""
    rng = np.random.default_rng(7)

    def delay(pre: int) -> float:
        out = []
        for _ in range(6):
            y = np.concatenate([rng.random(pre) < 0.03, rng.random(6000) < 0.08])
            after = [a - pre for a in detector_alarms(y, 0.05, 1e6) if a >= pre]
            out.append(after[0] if after else 6000)
        return float(np.median(out))

    fresh, late = delay(0), delay(20_000)
    assert late < 6000 and late < 2.5 * fresh, (fresh, late)
    # The one-shot e-process, by contrast, has lost so much on the stable stretch that it is still silent.
    y = np.concatenate([rng.random(20_000) < 0.03, rng.random(6000) < 0.08])
    assert first_crossing(bernoulli_e_values(y, 0.05), 1e6) is None


def test_the_online_detector_gives_the_same_evidence_as_the_whole_stream_at_once():
    rng = np.random.default_rng(8)
    y = rng.random(400) < 0.2
    online = EDetector(0.1)
    assert np.allclose([online.update(bool(v)) for v in y], sr_log_values(y, 0.1), rtol=1e-9)
    online.reset()
    assert online.n == 0 and online.value == 0.0


def test_the_alarm_level_spreads_the_false_page_budget_over_signals_and_samples():
    # One false page per 30 days at 1 sample/s over 10 signals: each detector may alarm once per 25.92M samples.
    assert detector_threshold(1.0, 2_592_000, 10) == pytest.approx(25_920_000)
    assert detector_threshold(100.0, 100, 1) == 20.0  # never a level that alarms on noise by design
    with pytest.raises(ValueError):
        detector_threshold(0.0, 100, 3)


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
