"""Specification tests for scorers.stats.

Reference values come from textbook examples, hand calculations written out in
the tests, or scipy routines applied independently to the same table.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from scipy import stats as sps

from llmwatch.scorers.stats import twosample as st

ALPHA = 0.05
# 200 A-vs-A trials at alpha 0.05: expected 10 rejections, sd ~3.1; 0.09 (18)
# is ~2.6 sd above, 0.01 (2) catches a test that never rejects.
FPR_MAX = 0.09
FPR_MIN = 0.01


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# --------------------------------------------------------------------------
# compare_proportions
# --------------------------------------------------------------------------


def test_identical_proportions_are_not_significant():
    res = st.compare_proportions(50, 1000, 50, 1000)
    assert res.test == "two_proportion_z"
    assert res.statistic == 0.0
    assert res.p_value == pytest.approx(1.0)
    assert res.effect_size == 0.0
    assert res.detail["cohens_h"] == 0.0


def test_z_test_matches_textbook_values():
    # 30/100 vs 45/100: pooled p = .375, se = sqrt(.375*.625*(2/100)) = .068465,
    # z = .15 / .068465 = 2.1909, two-sided p = 0.02846.
    res = st.compare_proportions(30, 100, 45, 100)
    assert res.test == "two_proportion_z"
    assert res.statistic == pytest.approx(2.1909, abs=1e-4)
    assert res.p_value == pytest.approx(0.02846, abs=1e-5)
    assert res.effect_size == pytest.approx(0.15)
    assert res.detail["baseline_rate"] == pytest.approx(0.30)
    assert res.detail["current_rate"] == pytest.approx(0.45)
    expected_h = 2 * math.asin(math.sqrt(0.45)) - 2 * math.asin(math.sqrt(0.30))
    assert res.detail["cohens_h"] == pytest.approx(expected_h)


def test_z_test_squared_equals_uncorrected_chi_square():
    table = np.array([[123, 877], [87, 913]])
    chi2 = sps.chi2_contingency(table, correction=False)
    res = st.compare_proportions(87, 1000, 123, 1000)
    assert res.statistic**2 == pytest.approx(chi2.statistic, rel=1e-10)
    assert res.p_value == pytest.approx(chi2.pvalue, rel=1e-10)


def test_one_sided_alternatives_follow_the_current_minus_baseline_direction():
    two = st.compare_proportions(30, 100, 45, 100)
    greater = st.compare_proportions(30, 100, 45, 100, alternative="greater")
    less = st.compare_proportions(30, 100, 45, 100, alternative="less")
    assert greater.p_value == pytest.approx(two.p_value / 2)
    assert less.p_value == pytest.approx(1 - two.p_value / 2)


def test_fisher_matches_lady_tasting_tea():
    # Fisher's tea example, [[3, 1], [1, 3]]: one-sided p = 17/70, two-sided 34/70.
    greater = st.compare_proportions(1, 4, 3, 4, alternative="greater")
    assert greater.test == "fisher_exact"
    assert greater.p_value == pytest.approx(17 / 70)
    assert greater.statistic == pytest.approx(9.0)  # odds ratio (3*3)/(1*1)
    two = st.compare_proportions(1, 4, 3, 4)
    assert two.p_value == pytest.approx(34 / 70)
    less = st.compare_proportions(1, 4, 3, 4, alternative="less")
    assert less.p_value == pytest.approx(69 / 70)


def test_switches_from_z_to_fisher_when_an_expected_count_drops_below_five():
    # 100 vs 100 trials: smallest expected cell = events / 2.
    at_threshold = st.compare_proportions(4, 100, 6, 100)  # 10 events -> 5.0
    below = st.compare_proportions(4, 100, 5, 100)  # 9 events -> 4.5
    assert at_threshold.test == "two_proportion_z"
    assert at_threshold.detail["min_expected_count"] == pytest.approx(5.0)
    assert below.test == "fisher_exact"
    assert below.detail["min_expected_count"] == pytest.approx(4.5)
    assert below.p_value == pytest.approx(sps.fisher_exact([[5, 95], [4, 96]]).pvalue)
    # Non-events are cells too: 95 + 96 = 191 events leave only 9 non-events.
    assert st.compare_proportions(96, 100, 95, 100).test == "fisher_exact"


def test_switch_threshold_is_configurable_and_uses_the_smaller_window():
    assert st.compare_proportions(4, 100, 5, 100, min_expected=4).test == "two_proportion_z"
    # 20 events over 1000 + 50 trials: smallest expected = 50 * 20 / 1050 < 1.
    res = st.compare_proportions(18, 1000, 2, 50)
    assert res.test == "fisher_exact"
    assert res.detail["min_expected_count"] == pytest.approx(50 * 20 / 1050)


def test_zero_events_in_both_windows_is_not_significant():
    res = st.compare_proportions(0, 500, 0, 500, min_expected=0)
    assert res.p_value == pytest.approx(1.0)
    assert res.effect_size == 0.0


def test_large_rate_increase_is_detected():
    res = st.compare_proportions(10, 1000, 60, 1000, alternative="greater")
    assert res.p_value < 1e-8
    assert res.effect_size == pytest.approx(0.05)


def test_proportion_test_false_positive_rate_is_about_alpha():
    rejections = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        k_b, k_c = rng.binomial(200, 0.1, size=2)
        res = st.compare_proportions(k_b, 200, k_c, 200)
        assert res.test == "two_proportion_z"
        rejections += res.p_value <= ALPHA
    assert FPR_MIN <= rejections / 200 <= FPR_MAX


def test_fisher_path_does_not_inflate_false_positives_for_rare_events():
    rejections = 0
    for seed in range(200):
        rng = np.random.default_rng(10_000 + seed)
        k_b, k_c = rng.binomial(300, 0.01, size=2)
        rejections += st.compare_proportions(k_b, 300, k_c, 300).p_value <= ALPHA
    assert rejections / 200 <= FPR_MAX


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        ((-1, 10, 1, 10), {}, "k_base"),
        ((1, 10, 11, 10), {}, "k_cur"),
        ((1, 0, 1, 10), {}, "n_base"),
        ((1, 10, 1, 0), {}, "n_cur"),
        ((1.5, 10, 1, 10), {}, "k_base"),
        ((1, 10, float("nan"), 10), {}, "k_cur"),
        ((True, 10, 1, 10), {}, "k_base"),
        ((1, 10, 1, 10), {"alternative": "bigger"}, "alternative"),
        ((1, 10, 1, 10), {"min_expected": -1}, "min_expected"),
    ],
)
def test_bad_proportion_input_raises_naming_the_argument(args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        st.compare_proportions(*args, **kwargs)


def test_integral_float_and_numpy_counts_are_accepted():
    a = st.compare_proportions(np.int64(30), 100, 45.0, np.float64(100))
    b = st.compare_proportions(30, 100, 45, 100)
    assert a == b


# --------------------------------------------------------------------------
# compare_distributions (KS)
# --------------------------------------------------------------------------


def test_ks_statistic_equals_hand_computed_max_ecdf_gap():
    rng = np.random.default_rng(3)
    base = rng.normal(size=80)
    cur = rng.normal(0.3, 1.2, size=60)
    grid = np.sort(np.concatenate([base, cur]))
    ecdf_b = np.searchsorted(np.sort(base), grid, side="right") / base.size
    ecdf_c = np.searchsorted(np.sort(cur), grid, side="right") / cur.size
    res = st.compare_distributions(base, cur)
    assert res.test == "ks"
    assert res.statistic == pytest.approx(np.abs(ecdf_b - ecdf_c).max())
    assert res.n_baseline == 80 and res.n_current == 60


def test_identical_samples_have_ks_p_value_one():
    x = np.linspace(0, 1, 50)
    res = st.compare_distributions(x, x.copy())
    assert res.statistic == 0.0
    assert res.p_value == pytest.approx(1.0)
    assert res.effect_size == 0.0


def test_latency_shift_is_detected_with_signed_relative_median_effect():
    rng = np.random.default_rng(7)
    base = rng.lognormal(mean=np.log(100.0), sigma=0.3, size=400)
    cur = rng.lognormal(mean=np.log(130.0), sigma=0.3, size=400)
    res = st.compare_distributions(base, cur)
    assert res.p_value < 1e-6
    expected = (np.median(cur) - np.median(base)) / np.median(base)
    assert res.effect_size == pytest.approx(expected)
    assert 0.2 < res.effect_size < 0.4
    assert st.compare_distributions(cur, base).effect_size < 0


def test_relative_median_shift_is_exact_for_simple_values():
    res = st.compare_distributions([90, 100, 110], [110, 120, 130])
    assert res.effect_size == pytest.approx(0.2)
    assert res.detail["median_shift"] == pytest.approx(20.0)
    # Negative baseline medians keep "positive = current larger".
    neg = st.compare_distributions([-12, -10, -8], [-7, -5, -3])
    assert neg.effect_size == pytest.approx(0.5)


def test_zero_baseline_median_gives_nan_relative_effect_but_absolute_shift():
    res = st.compare_distributions([-1.0, 0.0, 1.0], [1.0, 2.0, 3.0])
    assert math.isnan(res.effect_size)
    assert res.detail["median_shift"] == pytest.approx(2.0)


def test_ks_false_positive_rate_is_about_alpha():
    rejections = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        base = rng.gamma(2.0, 50.0, size=100)
        cur = rng.gamma(2.0, 50.0, size=100)
        rejections += st.compare_distributions(base, cur).p_value <= ALPHA
    assert FPR_MIN <= rejections / 200 <= FPR_MAX


@pytest.mark.parametrize(
    "base, cur, name",
    [
        ([], [1.0, 2.0], "baseline"),
        ([1.0, 2.0], [], "current"),
        ([1.0, float("nan")], [1.0], "baseline"),
        ([1.0], [1.0, float("inf")], "current"),
        ([[1.0, 2.0]], [1.0], "baseline"),
        (["a", "b"], [1.0], "baseline"),
    ],
)
def test_bad_distribution_input_raises_naming_the_argument(base, cur, name):
    with pytest.raises(ValueError, match=name):
        st.compare_distributions(base, cur)


# --------------------------------------------------------------------------
# psi
# --------------------------------------------------------------------------


def test_psi_of_identical_samples_is_zero_and_stable():
    x = np.random.default_rng(0).normal(size=1000)
    res = st.psi(x, x.copy())
    assert res.test == "psi"
    assert abs(res.statistic) < 1e-12
    assert math.isnan(res.p_value)
    assert res.detail["band"] == "stable"
    assert res.detail["n_bins"] == 10
    assert res.detail["baseline_fractions"] == pytest.approx([0.1] * 10)


def test_psi_of_two_samples_from_one_distribution_is_stable():
    rng = np.random.default_rng(1)
    res = st.psi(rng.normal(size=5000), rng.normal(size=5000))
    assert res.statistic < 0.02
    assert res.detail["band"] == "stable"


def test_psi_of_shifted_sample_exceeds_major_threshold():
    rng = np.random.default_rng(2)
    res = st.psi(rng.normal(size=5000), rng.normal(0.8, 1.0, size=5000))
    assert res.statistic > 0.25
    assert res.effect_size == res.statistic
    assert res.detail["band"] == "major"


@pytest.mark.parametrize(
    "below, expected, band",
    [
        # Two quantile bins of 0..99 split at 49.5; baseline fractions .5/.5.
        # PSI = (c - .5) ln(c / .5) + ((1 - c) - .5) ln((1 - c) / .5).
        (60, 0.1 * math.log(1.2) - 0.1 * math.log(0.8), "stable"),  # 0.0405
        (70, 0.2 * math.log(1.4) - 0.2 * math.log(0.6), "moderate"),  # 0.1695
        (73, 0.23 * math.log(1.46) - 0.23 * math.log(0.54), "moderate"),  # 0.2288
        (75, 0.25 * math.log(1.5) - 0.25 * math.log(0.5), "major"),  # 0.2747
    ],
)
def test_psi_matches_hand_computed_two_bin_values_and_bands(below, expected, band):
    base = np.arange(100.0)
    cur = np.concatenate([np.full(below, 10.0), np.full(100 - below, 90.0)])
    res = st.psi(base, cur, bins=2)
    assert res.detail["edges"] == [49.5]
    assert res.statistic == pytest.approx(expected, rel=1e-12)
    assert res.detail["band"] == band


def test_psi_empty_bins_are_smoothed_to_a_finite_large_value():
    base = np.arange(100.0)
    cur = np.full(50, 1000.0)  # everything lands in the top bin
    res = st.psi(base, cur)
    assert math.isfinite(res.statistic)
    assert res.statistic > 5
    assert min(res.detail["current_fractions"]) > 0


def test_psi_collapses_tied_quantiles_without_error():
    base = np.array([0.0] * 80 + [1.0] * 20)
    res = st.psi(base, base.copy(), bins=10)
    assert res.detail["n_bins"] < 10
    assert abs(res.statistic) < 1e-12


def test_psi_values_equal_to_an_edge_fall_in_the_upper_bin():
    # Median of [1, 2, 3] is the edge 2.0; it belongs with 3, as does the
    # current value 2.0.
    res = st.psi([1.0, 2.0, 3.0], [2.0, 2.0, 3.0, 3.0], bins=2)
    assert res.detail["edges"] == [2.0]
    assert res.detail["baseline_fractions"] == pytest.approx([1 / 3, 2 / 3])
    assert res.detail["current_fractions"] == pytest.approx([0.0, 1.0], abs=1e-3)


def test_psi_values_outside_the_baseline_range_still_count():
    base = np.arange(100.0)
    low = st.psi(base, np.full(100, -50.0))
    assert low.detail["current_fractions"][0] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"baseline": [], "current": [1.0]}, "baseline"),
        ({"baseline": [1.0], "current": [float("nan")]}, "current"),
        ({"baseline": [1.0, 2.0], "current": [1.0], "bins": 1}, "bins"),
        ({"baseline": [1.0, 2.0], "current": [1.0], "epsilon": 0.0}, "epsilon"),
    ],
)
def test_bad_psi_input_raises_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        st.psi(**kwargs)


# --------------------------------------------------------------------------
# compare_categorical
# --------------------------------------------------------------------------


def test_categorical_matches_scipy_chi_square_on_a_dense_table():
    base = {"ok": 800, "refusal": 100, "invalid_json": 60, "truncated": 40}
    cur = {"ok": 700, "refusal": 160, "invalid_json": 80, "truncated": 60}
    cats = sorted(base)
    table = np.array([[cur[c] for c in cats], [base[c] for c in cats]])
    ref = sps.chi2_contingency(table, correction=False)
    res = st.compare_categorical(base, cur)
    assert res.test == "chi2_categorical"
    assert res.statistic == pytest.approx(ref.statistic)
    assert res.p_value == pytest.approx(ref.pvalue)
    assert res.detail["dof"] == 3
    assert res.detail["merged"] == []
    assert res.effect_size == pytest.approx(math.sqrt(ref.statistic / table.sum()))
    assert res.detail["baseline_rates"]["refusal"] == pytest.approx(0.1)
    assert res.detail["current_rates"]["refusal"] == pytest.approx(160 / 1000)


def test_identical_category_mix_is_not_significant_and_has_zero_effect():
    mix = {"ok": 900, "refusal": 50, "error": 50}
    res = st.compare_categorical(mix, {k: 2 * v for k, v in mix.items()})
    assert res.p_value == pytest.approx(1.0)
    assert res.effect_size == pytest.approx(0.0, abs=1e-12)


def test_disjoint_category_mixes_have_cramers_v_one():
    res = st.compare_categorical({"ok": 50, "error": 0}, {"ok": 0, "error": 50})
    assert res.effect_size == pytest.approx(1.0)
    assert res.p_value < 1e-20


def test_sparse_categories_are_merged_before_the_chi_square_test():
    # Equal windows, so a category's smallest expected count is total / 2.
    base = {"ok": 900, "refusal": 60, "invalid_json": 4, "truncated": 1, "error": 1}
    cur = {"ok": 850, "refusal": 110, "invalid_json": 4, "truncated": 0, "error": 2}
    res = st.compare_categorical(base, cur)
    assert res.test == "chi2_categorical"
    assert res.detail["merged"] == ["error", "invalid_json", "truncated"]
    assert res.detail["columns"] == [["ok"], ["refusal"], ["error", "invalid_json", "truncated"]]
    assert res.detail["dof"] == 2
    assert res.detail["min_expected_count"] == pytest.approx(6.0)
    merged_table = np.array([[850, 110, 6], [900, 60, 6]])
    ref = sps.chi2_contingency(merged_table, correction=False)
    assert res.statistic == pytest.approx(ref.statistic)
    # Rates are still reported for every original category.
    assert set(res.detail["current_rates"]) == set(base)


def test_a_still_sparse_pool_absorbs_the_smallest_healthy_category():
    # Pool of the three rare modes totals 9 -> expected ~4.5 < 5, so "refusal"
    # (the smallest healthy category) joins it.
    base = {"ok": 900, "refusal": 60, "invalid_json": 2, "truncated": 1, "error": 1}
    cur = {"ok": 850, "refusal": 110, "invalid_json": 3, "truncated": 0, "error": 2}
    res = st.compare_categorical(base, cur)
    assert res.detail["merged"] == ["error", "invalid_json", "refusal", "truncated"]
    assert res.detail["dof"] == 1
    assert res.test == "chi2_categorical"


def test_a_single_sparse_category_is_merged_with_the_smallest_other_one():
    base = {"ok": 500, "refusal": 40, "error": 1}
    cur = {"ok": 500, "refusal": 45, "error": 2}
    res = st.compare_categorical(base, cur)
    assert res.detail["merged"] == ["error", "refusal"]
    assert res.detail["columns"] == [["ok"], ["error", "refusal"]]


def test_small_two_category_table_falls_back_to_fisher():
    base = {"ok": 20, "error": 1}
    cur = {"ok": 14, "error": 6}
    res = st.compare_categorical(base, cur)
    assert res.test == "fisher_exact"
    # Columns sorted: ["error"], ["ok"]; rows current then baseline.
    assert res.p_value == pytest.approx(sps.fisher_exact([[6, 14], [1, 20]]).pvalue)


def test_all_sparse_categories_reduce_to_top_category_versus_rest():
    res = st.compare_categorical({"ok": 3, "error": 1, "refusal": 1}, {"ok": 1, "error": 2, "refusal": 2})
    assert res.test == "fisher_exact"
    assert res.detail["columns"] == [["ok"], ["error", "refusal"]]
    assert res.p_value == pytest.approx(sps.fisher_exact([[1, 4], [3, 2]]).pvalue)


def test_category_missing_on_one_side_counts_as_zero():
    res = st.compare_categorical({"ok": 500, "refusal": 50}, {"ok": 500, "refusal": 20, "new_mode": 30})
    assert res.detail["baseline_rates"]["new_mode"] == 0.0
    assert res.p_value < 1e-6


def test_everything_in_one_category_is_trivially_homogeneous():
    res = st.compare_categorical({"ok": 100, "error": 0}, {"ok": 40})
    assert res.p_value == 1.0
    assert res.effect_size == 0.0


@pytest.mark.parametrize(
    "base, cur, name",
    [
        ({}, {"ok": 1}, "base_counts"),
        ({"ok": 1}, {"ok": 0}, "cur_counts"),
        ({"ok": -1, "error": 3}, {"ok": 1}, "base_counts"),
        ({"ok": 1.5}, {"ok": 1}, "base_counts"),
        ({"ok": 1}, [("ok", 1)], "cur_counts"),
        ({1: 1}, {"ok": 1}, "base_counts"),
    ],
)
def test_bad_categorical_input_raises_naming_the_argument(base, cur, name):
    with pytest.raises(ValueError, match=name):
        st.compare_categorical(base, cur)


# --------------------------------------------------------------------------
# mmd_permutation_test
# --------------------------------------------------------------------------


def topic_embeddings(rng, n, weights, centres, noise=1.0):
    """Unit vectors scattered around a few unit topic centres.

    ``noise`` is the typical norm of the perturbation, so with noise=1 a point
    has cosine ~0.7 to its centre, roughly like sentence embeddings of
    paraphrases on one topic.
    """
    d = centres.shape[1]
    topics = rng.choice(len(centres), size=n, p=weights)
    return unit_rows(centres[topics] + noise * rng.normal(size=(n, d)) / math.sqrt(d))


def brute_force_mmd2(x, y, sigma):
    def k(a, b):
        d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return np.exp(-d2 / (2 * sigma**2))

    kxx, kyy, kxy = k(x, x), k(y, y), k(x, y)
    n, m = len(x), len(y)
    return (kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1)) - 2 * kxy.mean()


def test_mmd_statistic_equals_brute_force_unbiased_estimate():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 5))
    y = rng.normal(0.5, 1.0, size=(25, 5))
    res = st.mmd_permutation_test(x, y, n_permutations=50)
    z = np.vstack([x, y])
    d = np.sqrt(((z[:, None] - z[None]) ** 2).sum(-1))
    sigma = np.sqrt(np.median(d[np.triu_indices(len(z), 1)] ** 2))
    assert res.detail["bandwidth"] == pytest.approx(sigma)
    assert res.statistic == pytest.approx(brute_force_mmd2(x, y, sigma), rel=1e-9)
    assert res.test == "mmd_permutation"
    assert res.effect_size == res.statistic


def test_mmd_same_distribution_is_not_significant_for_most_seeds():
    centres = unit_rows(np.random.default_rng(99).normal(size=(5, 384)))
    weights = [0.4, 0.3, 0.15, 0.1, 0.05]
    p_values = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        x = topic_embeddings(rng, 150, weights, centres)
        y = topic_embeddings(rng, 150, weights, centres)
        p_values.append(st.mmd_permutation_test(x, y, n_permutations=100, seed=seed).p_value)
    # P(4 or more of 20 below 0.05 | valid test) is about 1.6 %.
    assert sum(p <= 0.05 for p in p_values) <= 3


def test_mmd_detects_a_shift_in_topic_mix():
    centres = unit_rows(np.random.default_rng(99).normal(size=(5, 384)))
    rng = np.random.default_rng(1)
    x = topic_embeddings(rng, 300, [0.4, 0.3, 0.15, 0.1, 0.05], centres)
    y = topic_embeddings(rng, 300, [0.2, 0.3, 0.15, 0.1, 0.25], centres)
    res = st.mmd_permutation_test(x, y)
    assert res.p_value < 0.01
    assert res.p_value == pytest.approx(1 / 201)  # no permutation reached it
    assert res.statistic > 0


def test_mmd_p_value_uses_add_one_smoothing():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(40, 3))
    y = rng.normal(3.0, 1.0, size=(40, 3))
    res = st.mmd_permutation_test(x, y, n_permutations=19)
    assert res.p_value == pytest.approx(1 / 20)
    same = st.mmd_permutation_test(x, x.copy(), n_permutations=19)
    assert 0 < same.p_value <= 1


def test_mmd_is_deterministic_and_subsamples_to_max_points():
    rng = np.random.default_rng(6)
    x = unit_rows(rng.normal(size=(700, 16)))
    y = unit_rows(rng.normal(size=(90, 16)))
    a = st.mmd_permutation_test(x, y, max_points=200, seed=3)
    b = st.mmd_permutation_test(x, y, max_points=200, seed=3)
    assert a == b
    assert (a.n_baseline, a.n_current) == (200, 90)
    assert a.detail["n_baseline_total"] == 700


def test_mmd_of_identical_points_does_not_divide_by_zero():
    x = np.ones((10, 4))
    res = st.mmd_permutation_test(x, x.copy(), n_permutations=20)
    assert res.statistic == pytest.approx(0.0, abs=1e-12)
    assert res.p_value == pytest.approx(1.0)


@pytest.mark.parametrize(
    "x, y, kwargs, name",
    [
        (np.zeros((0, 3)), np.zeros((5, 3)), {}, "X"),
        (np.zeros((5, 3)), np.zeros(5), {}, "Y"),
        (np.zeros((5, 3)), np.zeros((5, 4)), {}, "columns"),
        (np.zeros((1, 3)), np.zeros((5, 3)), {}, "X"),
        (np.full((5, 3), np.nan), np.zeros((5, 3)), {}, "X"),
        (np.zeros((5, 3)), np.zeros((5, 3)), {"n_permutations": 0}, "n_permutations"),
        (np.zeros((5, 3)), np.zeros((5, 3)), {"max_points": 1}, "max_points"),
    ],
)
def test_bad_mmd_input_raises_naming_the_argument(x, y, kwargs, name):
    with pytest.raises(ValueError, match=name):
        st.mmd_permutation_test(x, y, **kwargs)


# --------------------------------------------------------------------------
# adjust_pvalues
# --------------------------------------------------------------------------


def test_holm_matches_hand_computed_example():
    # Sorted: .005*4 = .02, .01*3 = .03, .03*2 = .06, .04*1 = .04 -> max .06.
    adj = st.adjust_pvalues([0.01, 0.04, 0.03, 0.005], method="holm")
    assert adj == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_bh_matches_hand_computed_example():
    # Sorted: .005*4/1 = .02, .01*4/2 = .02, .03*4/3 = .04, .04*4/4 = .04.
    adj = st.adjust_pvalues([0.01, 0.04, 0.03, 0.005], method="bh")
    assert adj == pytest.approx([0.02, 0.04, 0.04, 0.02])


def test_bh_step_up_takes_the_minimum_from_above():
    # Sorted: .02*3/1 = .06, .025*3/2 = .0375, .03*3/3 = .03; the running
    # minimum from the largest p-value down makes all three .03.
    adj = st.adjust_pvalues([0.025, 0.02, 0.03], method="bh")
    assert adj == pytest.approx([0.03, 0.03, 0.03])


def test_nan_p_values_pass_through_and_do_not_count_towards_m():
    adj = st.adjust_pvalues([0.01, float("nan"), 0.04, 0.03, 0.005], method="holm")
    assert math.isnan(adj[1])
    assert [adj[i] for i in (0, 2, 3, 4)] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    bh = st.adjust_pvalues([float("nan"), 0.01, 0.04, 0.03, 0.005], method="bh")
    assert math.isnan(bh[0])
    assert bh[1:] == pytest.approx([0.02, 0.04, 0.04, 0.02])


def test_adjusted_p_values_are_capped_at_one_and_empty_input_is_a_no_op():
    assert st.adjust_pvalues([0.5, 0.9], method="holm") == pytest.approx([1.0, 1.0])
    assert st.adjust_pvalues([], method="bh") == []
    assert all(math.isnan(v) for v in st.adjust_pvalues([float("nan")] * 3))


@pytest.mark.parametrize(
    "p, method, name",
    [
        ([0.1, 1.5], "holm", "p_values"),
        ([-0.1], "bh", "p_values"),
        ("0.1", "holm", "p_values"),
        ([0.1], "bonferroni", "method"),
    ],
)
def test_bad_adjust_input_raises_naming_the_argument(p, method, name):
    with pytest.raises(ValueError, match=name):
        st.adjust_pvalues(p, method=method)


# --------------------------------------------------------------------------
# power and sample size
# --------------------------------------------------------------------------


def bernoulli(p):
    return lambda rng, n: rng.random(n) < p


def proportion_test(b, c):
    return st.compare_proportions(int(b.sum()), b.size, int(c.sum()), c.size)


def test_cohen_h_sample_size_matches_cohens_table():
    # Cohen (1988) table 6.4.1: h = 0.20, two-sided alpha .05, power .80 -> n = 392
    # (392.4 before rounding up).
    p_cur = math.sin(math.pi / 4 + 0.1) ** 2  # h = 0.2 from p_base = 0.5
    assert st.samples_for_proportion_shift(0.5, p_cur, power=0.8, method="cohen_h") == 393


def test_pooled_sample_size_matches_the_standard_formula():
    # Fleiss formula written out with tabulated z values 1.959964 / 1.644854.
    p1, p2 = 0.10, 0.15
    pbar = 0.125
    numerator = 1.959964 * math.sqrt(2 * pbar * (1 - pbar)) + 1.644854 * math.sqrt(p1 * 0.9 + p2 * 0.85)
    n = numerator**2 / 0.05**2
    assert st.samples_for_proportion_shift(p1, p2) == math.ceil(n)
    one_sided = st.samples_for_proportion_shift(p1, p2, alternative="greater")
    assert one_sided < math.ceil(n)


def test_closed_form_sample_size_gives_the_target_power_in_simulation():
    n = st.samples_for_proportion_shift(0.10, 0.20, power=0.9)
    est = st.simulated_power(bernoulli(0.10), bernoulli(0.20), proportion_test, n, trials=1000, seed=1)
    assert est.n_baseline == est.n_current == n
    assert 0.87 <= est.power <= 0.93


def test_simulated_power_of_a_vs_a_is_the_false_positive_rate():
    est = st.simulated_power(bernoulli(0.3), bernoulli(0.3), proportion_test, 150, trials=400)
    assert FPR_MIN <= est.power <= 0.08
    assert est.stderr == pytest.approx(math.sqrt(est.power * (1 - est.power) / 400))


def test_samples_for_power_finds_exact_threshold_of_a_step_function():
    def step_test(b, c):
        return 0.0 if len(c) >= 37 else 1.0

    draw = lambda rng, n: np.zeros(n)  # noqa: E731
    from_below = st.samples_for_power(draw, draw, step_test, trials=3, n_start=4)
    from_above = st.samples_for_power(draw, draw, step_test, trials=3, n_start=100)
    assert from_below.n_current == 37
    assert from_above.n_current == 37
    assert from_below.power == 1.0


def test_samples_for_power_agrees_with_the_closed_form_for_proportions():
    closed = st.samples_for_proportion_shift(0.05, 0.10, power=0.8)
    found = st.samples_for_power(bernoulli(0.05), bernoulli(0.10), proportion_test, power=0.8, trials=300, seed=2)
    assert found.power >= 0.8
    assert 0.85 * closed <= found.n_current <= 1.15 * closed


def test_samples_for_power_can_fix_the_baseline_size():
    found = st.samples_for_power(
        bernoulli(0.05),
        bernoulli(0.15),
        proportion_test,
        power=0.8,
        trials=200,
        n_baseline=5000,
    )
    assert found.n_baseline == 5000
    symmetric = st.samples_for_power(
        bernoulli(0.05),
        bernoulli(0.15),
        proportion_test,
        power=0.8,
        trials=200,
    )
    # A huge baseline leaves only the current window's noise.
    assert found.n_current < symmetric.n_current


def test_samples_for_power_raises_when_target_is_unreachable():
    with pytest.raises(ValueError, match="n_max"):
        st.samples_for_power(
            bernoulli(0.1),
            bernoulli(0.1),
            proportion_test,
            trials=50,
            n_start=16,
            n_max=64,
        )


def test_simulated_power_rejects_tests_without_p_values():
    draw = lambda rng, n: rng.normal(size=n)  # noqa: E731
    with pytest.raises(ValueError, match="NaN"):
        st.simulated_power(draw, draw, st.psi, 50, trials=5)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"p_base": 0.1, "p_cur": 0.1}, "p_cur"),
        ({"p_base": 1.2, "p_cur": 0.1}, "p_base"),
        ({"p_base": 0.1, "p_cur": 0.2, "alpha": 0.0}, "alpha"),
        ({"p_base": 0.1, "p_cur": 0.2, "power": 1.0}, "power"),
        ({"p_base": 0.2, "p_cur": 0.1, "alternative": "greater"}, "p_cur"),
        ({"p_base": 0.1, "p_cur": 0.2, "method": "exact"}, "method"),
    ],
)
def test_bad_sample_size_input_raises_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        st.samples_for_proportion_shift(**kwargs)


def _draw(rng, n):
    return rng.random(n) < 0.1


@pytest.mark.parametrize(
    "draw_b, draw_c, test, n, kwargs, name",
    [
        (None, _draw, proportion_test, 10, {}, "draw_baseline"),
        (_draw, None, proportion_test, 10, {}, "draw_current"),
        (_draw, _draw, None, 10, {}, "test"),
        (_draw, _draw, proportion_test, 0, {}, "n"),
        (_draw, _draw, proportion_test, (10, 0), {}, r"n\[1\]"),
        (_draw, _draw, proportion_test, 10, {"trials": 0}, "trials"),
        (_draw, _draw, proportion_test, 10, {"alpha": 1.0}, "alpha"),
    ],
)
def test_bad_simulated_power_input_raises_naming_the_argument(draw_b, draw_c, test, n, kwargs, name):
    with pytest.raises(ValueError, match=name):
        st.simulated_power(draw_b, draw_c, test, n, **kwargs)


# --- Cohen's kappa: one implementation, plain and weighted ----------------------------------------


_OUTCOME = hst.sampled_from(["win", "tie", "loss"])


# No deadline: the first example pays for importing scikit-learn, and a busy machine is not a failure.
@settings(deadline=None)
@given(hst.lists(hst.tuples(_OUTCOME, _OUTCOME), min_size=2))
def test_plain_cohen_kappa_on_categories_agrees_with_scikit_learn(pairs):
    from sklearn.metrics import cohen_kappa_score

    from llmwatch.scorers.stats.agreement import cohen_kappa

    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    ours = cohen_kappa(a, b, ["win", "tie", "loss"])
    if len(set(a)) == 1 and set(a) == set(b):
        assert math.isnan(ours)  # one category only: chance agreement is 1, kappa undefined
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        theirs = cohen_kappa_score(a, b, labels=["win", "tie", "loss"])
    if math.isnan(theirs):
        assert math.isnan(ours)
    else:
        assert ours == pytest.approx(theirs, abs=1e-9)


def test_the_pairwise_judge_reports_the_same_kappa_as_the_agreement_module():
    from llmwatch.scorers.evaluation.pairwise_judge import agreement
    from llmwatch.scorers.stats.agreement import cohen_kappa

    judge = {f"p{i}": o for i, o in enumerate(["win", "win", "tie", "loss", "loss", "win", "tie", "tie"])}
    human = {f"p{i}": o for i, o in enumerate(["win", "tie", "tie", "loss", "win", "win", "tie", "loss"])}
    got = agreement(judge, human, resamples=50)
    ids = sorted(judge)
    assert got["kappa"] == round(
        cohen_kappa([judge[i] for i in ids], [human[i] for i in ids], ["win", "tie", "loss"]), 4
    )


def test_the_judges_sign_test_is_mcnemars_exact_test_as_scipy_computes_it():
    from llmwatch.scorers.stats.paired import mcnemar_two_sided_p

    for wins in range(0, 25):
        for losses in range(0, 25):
            if wins + losses:
                expected = sps.binomtest(wins, wins + losses, 0.5).pvalue
                assert mcnemar_two_sided_p(wins, losses) == pytest.approx(expected, rel=1e-9, abs=1e-12)
