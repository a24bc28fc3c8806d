"""Statistical tests used by the drift detector.

The drift detector compares a *current* window of an LLM's behaviour (error
rates, latencies, output lengths, failure-mode mix, embedding clouds) against a
frozen *baseline* window.  This module holds the statistics only: no I/O, no
logging, no global state.  Every function is deterministic given its inputs
(including ``seed`` where randomness is involved).

Conventions shared by every test
--------------------------------
* The first argument is always the baseline and the second the current window.
* Signed effect sizes are "current minus baseline", so a positive effect on an
  error rate means things got worse.
* Results are :class:`TestResult` instances; ``detail`` holds only plain Python
  scalars, strings, lists and dicts so that a result can be serialised to JSON
  (e.g. with orjson) without a custom encoder.
* Bad input raises :class:`ValueError` whose message starts with the name of
  the offending argument.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as _sps

__all__ = [
    "TestResult",
    "PowerEstimate",
    "compare_proportions",
    "compare_distributions",
    "psi",
    "PSI_STABLE",
    "PSI_MAJOR",
    "compare_categorical",
    "mmd_permutation_test",
    "adjust_pvalues",
    "samples_for_proportion_shift",
    "simulated_power",
    "samples_for_power",
]

_ALTERNATIVES = ("two-sided", "greater", "less")

#: PSI below this is conventionally read as "no meaningful shift".
PSI_STABLE = 0.1
#: PSI above this is conventionally read as "major shift, investigate".
PSI_MAJOR = 0.25


# --------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class TestResult:
    """Outcome of one baseline-vs-current comparison.

    Attributes:
        test: Which procedure produced the numbers: ``"two_proportion_z"``,
            ``"fisher_exact"``, ``"ks"``, ``"psi"``, ``"mmd_permutation"`` or
            ``"chi2_categorical"``.
        statistic: The procedure's own statistic (z, Fisher's conditional
            odds ratio, KS D, PSI, MMD^2, chi-square).  Fisher's odds ratio can
            be ``inf`` or ``0`` when a cell is empty.
        p_value: P-value, or NaN where the procedure gives none (PSI).
        effect_size: Current minus baseline where a sign is meaningful (see
            each function for the exact definition).
        n_baseline: Observations from the baseline the result is based on.
        n_current: Observations from the current window the result is based
            on.
        detail: Small, JSON-friendly extras (rates, medians, bands, ...).
    """

    # pytest collects classes named Test* from any test module that imports
    # them; this opt-out keeps "cannot collect" warnings out of callers' runs.
    __test__ = False

    test: str
    statistic: float
    p_value: float
    effect_size: float
    n_baseline: int
    n_current: int
    # Excluded from hashing: a dict is unhashable, and without this a frozen
    # dataclass instance would raise on hash() (e.g. when put in a set).
    detail: dict = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class PowerEstimate:
    """Monte Carlo estimate of a test's power at one sample size.

    Attributes:
        power: Fraction of simulated trials in which the test rejected at
            ``alpha`` (p <= alpha).
        stderr: Binomial standard error of ``power``.
        n_baseline: Baseline sample size used in each trial.
        n_current: Current-window sample size used in each trial.
        trials: Number of Monte Carlo trials.
        alpha: Significance level.
    """

    power: float
    stderr: float
    n_baseline: int
    n_current: int
    trials: int
    alpha: float


# --------------------------------------------------------------------------
# Input validation helpers
# --------------------------------------------------------------------------


def _count(value: Any, name: str) -> int:
    """Return ``value`` as a non-negative int or raise ValueError.

    Integral floats (``12.0``, as produced by ``float_array.sum()``) are
    accepted because they are common at call sites; bools are rejected
    because passing one as a count is almost always a bug.
    """
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer count, got a bool")
    if isinstance(value, numbers.Integral):
        out = int(value)
    elif isinstance(value, numbers.Real):
        f = float(value)
        if not math.isfinite(f) or not f.is_integer():
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        out = int(f)
    else:
        raise ValueError(f"{name} must be an integer count, got {type(value).__name__}")
    if out < 0:
        raise ValueError(f"{name} must be non-negative, got {out}")
    return out


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    out = _count(value, name)
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return out


def _probability(value: Any, name: str, *, open_interval: bool) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    f = float(value)
    if math.isnan(f):
        raise ValueError(f"{name} must not be NaN")
    if open_interval and not 0.0 < f < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {f}")
    if not open_interval and not 0.0 <= f <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {f}")
    return f


def _alternative(value: Any) -> str:
    if value not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}, got {value!r}")
    return value


def _finite_array(x: Any, name: str, ndim: int) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric: {exc}") from None
    if arr.ndim != ndim:
        shape = "1-D (n,)" if ndim == 1 else "2-D (n, d)"
        raise ValueError(f"{name} must be {shape}, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains infinite values")
    return arr


def _cohens_h(p_base: float, p_cur: float) -> float:
    return float(2.0 * math.asin(math.sqrt(p_cur)) - 2.0 * math.asin(math.sqrt(p_base)))


# --------------------------------------------------------------------------
# 1. Proportions (error rate, refusal rate, invalid-JSON rate, ...)
# --------------------------------------------------------------------------


def compare_proportions(
    k_base: int,
    n_base: int,
    k_cur: int,
    n_cur: int,
    *,
    alternative: str = "two-sided",
    min_expected: float = 5,
) -> TestResult:
    """Compare an event rate between baseline and current windows.

    Uses the pooled two-proportion z-test when every expected cell count of
    the 2x2 table (events / non-events by window) is at least
    ``min_expected``; otherwise Fisher's exact test.  The z-test's normal
    approximation is what breaks down for rare events (error rates of 0.1 %
    are typical), and Fisher's test is exact and fast at any size.  Boschloo's
    unconditional test is uniformly more powerful than Fisher's, but it
    maximises over a nuisance parameter numerically (orders of magnitude
    slower, and slower still as windows grow), and for an alerting system a
    test that errs conservative on sparse data is the safer failure mode.
    Fisher's conservatism only costs power when expected counts are tiny,
    i.e. exactly where no test has much power.

    The z-test is uncorrected (no Yates continuity correction), so z**2 equals
    ``scipy.stats.chi2_contingency(table, correction=False)``'s statistic.

    Args:
        k_base: Events in the baseline window (0 <= k_base <= n_base).
        n_base: Trials in the baseline window (> 0).
        k_cur: Events in the current window (0 <= k_cur <= n_cur).
        n_cur: Trials in the current window (> 0).
        alternative: ``"two-sided"``, ``"greater"`` (current rate is higher
            than baseline) or ``"less"`` (current rate is lower).
        min_expected: Smallest expected cell count for which the z-test is
            trusted.  ``0`` forces the z-test whenever it is defined.

    Returns:
        TestResult with ``test`` ``"two_proportion_z"`` (statistic z, positive
        when the current rate is higher) or ``"fisher_exact"`` (statistic the
        conditional odds ratio current vs baseline); ``effect_size`` is
        current rate minus baseline rate; ``detail`` has both rates, Cohen's h
        (signed, current minus baseline) and the smallest expected count.
    """
    k_base = _count(k_base, "k_base")
    n_base = _count(n_base, "n_base")
    k_cur = _count(k_cur, "k_cur")
    n_cur = _count(n_cur, "n_cur")
    if n_base == 0:
        raise ValueError("n_base must be positive")
    if n_cur == 0:
        raise ValueError("n_cur must be positive")
    if k_base > n_base:
        raise ValueError(f"k_base ({k_base}) must not exceed n_base ({n_base})")
    if k_cur > n_cur:
        raise ValueError(f"k_cur ({k_cur}) must not exceed n_cur ({n_cur})")
    alternative = _alternative(alternative)
    if isinstance(min_expected, bool) or not isinstance(min_expected, numbers.Real):
        raise ValueError(f"min_expected must be a number, got {min_expected!r}")
    if math.isnan(min_expected) or min_expected < 0:
        raise ValueError(f"min_expected must be non-negative, got {min_expected}")

    p_base = k_base / n_base
    p_cur = k_cur / n_cur
    n_total = n_base + n_cur
    events = k_base + k_cur
    pooled = events / n_total
    # The smallest expected cell is always the smaller window times the rarer
    # outcome, so there is no need to build the whole expected table.
    min_exp = min(n_base, n_cur) * min(events, n_total - events) / n_total

    detail = {
        "baseline_rate": p_base,
        "current_rate": p_cur,
        "cohens_h": _cohens_h(p_base, p_cur),
        "min_expected_count": min_exp,
    }

    # pooled in {0, 1} means zero variance: z is undefined, Fisher gives p=1.
    if min_exp >= min_expected and 0.0 < pooled < 1.0:
        se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n_base + 1.0 / n_cur))
        z = (p_cur - p_base) / se
        if alternative == "two-sided":
            p = 2.0 * _sps.norm.sf(abs(z))
        elif alternative == "greater":
            p = _sps.norm.sf(z)
        else:
            p = _sps.norm.cdf(z)
        return TestResult(
            test="two_proportion_z",
            statistic=float(z),
            p_value=float(min(1.0, p)),
            effect_size=p_cur - p_base,
            n_baseline=n_base,
            n_current=n_cur,
            detail=detail,
        )

    # Current window in the first row so that scipy's "greater" (odds ratio
    # > 1) means exactly "current rate higher than baseline".
    table = [[k_cur, n_cur - k_cur], [k_base, n_base - k_base]]
    res = _sps.fisher_exact(table, alternative=alternative)
    return TestResult(
        test="fisher_exact",
        statistic=float(res.statistic),
        p_value=float(min(1.0, res.pvalue)),
        effect_size=p_cur - p_base,
        n_baseline=n_base,
        n_current=n_cur,
        detail=detail,
    )


# --------------------------------------------------------------------------
# 2. Continuous distributions (latency, judge scores, output lengths)
# --------------------------------------------------------------------------


def compare_distributions(baseline: Any, current: Any) -> TestResult:
    """Two-sample Kolmogorov-Smirnov test on continuous values.

    KS is sensitive to any change in shape, not just location, which is what
    a drift alarm wants (e.g. a latency tail appearing while the median stays
    put).  For heavily tied data (small integer scores) the KS p-value is
    conservative, so it errs toward not alarming.

    Args:
        baseline: 1-D array-like of raw baseline values.
        current: 1-D array-like of raw current values.

    Returns:
        TestResult with ``test="ks"``, ``statistic`` the KS D, and
        ``effect_size`` the relative median shift
        ``(median(current) - median(baseline)) / |median(baseline)|``
        (NaN when the baseline median is 0; the absolute shift is always in
        ``detail["median_shift"]``).
    """
    base = _finite_array(baseline, "baseline", 1)
    cur = _finite_array(current, "current", 1)

    res = _sps.ks_2samp(base, cur)
    med_b = float(np.median(base))
    med_c = float(np.median(cur))
    shift = med_c - med_b
    # abs() in the denominator keeps the sign meaning "current is larger" even
    # for negative-valued metrics (e.g. log-probabilities).
    rel = shift / abs(med_b) if med_b != 0.0 else math.nan
    return TestResult(
        test="ks",
        statistic=float(res.statistic),
        p_value=float(res.pvalue),
        effect_size=float(rel),
        n_baseline=int(base.size),
        n_current=int(cur.size),
        detail={
            "baseline_median": med_b,
            "current_median": med_c,
            "median_shift": shift,
            "ks_location": float(res.statistic_location),
        },
    )


# --------------------------------------------------------------------------
# 3. Population Stability Index
# --------------------------------------------------------------------------


def _psi_band(value: float) -> str:
    if value < PSI_STABLE:
        return "stable"
    if value <= PSI_MAJOR:
        return "moderate"
    return "major"


def psi(baseline: Any, current: Any, *, bins: int = 10, epsilon: float = 1e-4) -> TestResult:
    """Population Stability Index of ``current`` against ``baseline``.

    Bin edges are the baseline's quantiles, so each bin holds about
    ``1/bins`` of the baseline and the index is not dominated by sparse tails.
    Duplicate quantiles (heavily tied baselines) are collapsed, so fewer bins
    than requested may be used; ``detail["n_bins"]`` says how many.  The outer
    bins are open-ended so current values outside the baseline range still
    count.

    PSI = sum over bins of (cur_frac - base_frac) * ln(cur_frac / base_frac).
    Empty bins would make the log infinite, so any zero fraction is replaced
    by ``epsilon`` and the fractions renormalised.  Non-empty bins are left
    untouched, so the result is exact when no bin is empty; when one is, the
    result depends on ``epsilon`` (roughly through ln(1/epsilon)).

    PSI has no sampling distribution worth trusting, so ``p_value`` is NaN and
    the conventional bands are reported instead: < 0.1 ``"stable"``,
    0.1-0.25 ``"moderate"``, > 0.25 ``"major"``.

    Caveat: with a constant baseline there is a single edge, and only values
    below it land in a different bin, so upward shifts of a constant baseline
    are invisible to PSI.  Use :func:`compare_distributions` alongside it.

    Args:
        baseline: 1-D array-like of raw baseline values.
        current: 1-D array-like of raw current values.
        bins: Requested number of quantile bins (>= 2).
        epsilon: Floor for empty-bin fractions (0 < epsilon < 1).

    Returns:
        TestResult with ``test="psi"``, ``statistic`` and ``effect_size`` both
        equal to the PSI (>= 0), ``p_value`` NaN, and ``detail`` holding the
        band, the thresholds, the inner bin edges and both fraction vectors.
    """
    base = _finite_array(baseline, "baseline", 1)
    cur = _finite_array(current, "current", 1)
    bins = _positive_int(bins, "bins", minimum=2)
    eps = _probability(epsilon, "epsilon", open_interval=True)

    quantiles = np.quantile(base, np.linspace(0.0, 1.0, bins + 1))
    inner = np.unique(quantiles[1:-1])
    n_bins = inner.size + 1
    # side="right": a value equal to an edge goes to the upper bin, matching
    # how quantile edges split the baseline itself.
    base_counts = np.bincount(np.searchsorted(inner, base, side="right"), minlength=n_bins)
    cur_counts = np.bincount(np.searchsorted(inner, cur, side="right"), minlength=n_bins)

    def _fractions(counts: np.ndarray) -> np.ndarray:
        frac = counts / counts.sum()
        frac = np.where(frac == 0.0, eps, frac)
        return frac / frac.sum()

    fb = _fractions(base_counts)
    fc = _fractions(cur_counts)
    value = float(np.sum((fc - fb) * np.log(fc / fb)))
    return TestResult(
        test="psi",
        statistic=value,
        p_value=math.nan,
        effect_size=value,
        n_baseline=int(base.size),
        n_current=int(cur.size),
        detail={
            "band": _psi_band(value),
            "bands": {"stable_below": PSI_STABLE, "major_above": PSI_MAJOR},
            "n_bins": int(n_bins),
            "edges": [float(e) for e in inner],
            "baseline_fractions": [float(f) for f in fb],
            "current_fractions": [float(f) for f in fc],
        },
    )


# --------------------------------------------------------------------------
# 4. Categorical failure modes
# --------------------------------------------------------------------------


_OTHER = "__other__"


def _category_counts(counts: Any, name: str) -> dict[str, int]:
    if not isinstance(counts, Mapping):
        raise ValueError(f"{name} must be a mapping of category -> count")
    if not counts:
        raise ValueError(f"{name} must not be empty")
    out: dict[str, int] = {}
    for key, value in counts.items():
        if not isinstance(key, str):
            raise ValueError(f"{name} keys must be strings, got {key!r}")
        if key == _OTHER:
            raise ValueError(f"{name} must not use the reserved category name {_OTHER!r}")
        out[key] = _count(value, f"{name}[{key!r}]")
    if sum(out.values()) == 0:
        raise ValueError(f"{name} must have a positive total count")
    return out


def _merge_sparse(
    cats: list[str], base: dict[str, int], cur: dict[str, int], min_expected: float
) -> tuple[list[list[str]], list[str]]:
    """Group categories into columns whose expected counts are all adequate.

    Returns the groups (each a list of original categories forming one
    column) and the categories that ended up merged.
    """
    n_b = sum(base.values())
    n_c = sum(cur.values())
    scale = min(n_b, n_c) / (n_b + n_c)
    total = {c: base.get(c, 0) + cur.get(c, 0) for c in cats}

    # A column's smallest expected count is its total times smaller-row share.
    sparse = [c for c in cats if total[c] * scale < min_expected]
    if not sparse:
        return [[c] for c in cats], []

    pool = list(sparse)
    rest = sorted((c for c in cats if c not in pool), key=lambda c: (total[c], c))
    # The pool of sparse categories can itself still be sparse (always so when
    # it holds a single category); absorbing the smallest healthy category
    # fixes that while destroying as little resolution as possible.
    while rest and sum(total[c] for c in pool) * scale < min_expected:
        pool.append(rest.pop(0))
    groups = [[c] for c in sorted(rest)] + [sorted(pool)]
    return groups, sorted(pool)


def compare_categorical(
    base_counts: Mapping[str, int],
    cur_counts: Mapping[str, int],
    *,
    min_expected: float = 5,
) -> TestResult:
    """Chi-square test of homogeneity for the failure-mode mix.

    Categories missing from one side count as 0 there; categories absent from
    both are ignored.  Categories whose smallest expected count is below
    ``min_expected`` are pooled into a single ``"__other__"`` column (growing
    the pool with the smallest remaining categories until it is itself
    adequate), because the chi-square approximation is unreliable for sparse
    cells and rare failure modes are common.  If that leaves nothing but the
    pool, the table is reduced to "most frequent category vs everything else".

    A final 2x2 table with any expected count below ``min_expected`` is tested
    with Fisher's exact test; any other table with the uncorrected chi-square
    test (``scipy.stats.chi2_contingency(correction=False)``), consistent with
    :func:`compare_proportions`.

    Args:
        base_counts: Baseline counts per category, e.g. ``{"ok": 950,
            "refusal": 30, "invalid_json": 20}``.
        cur_counts: Current-window counts per category.
        min_expected: Smallest expected cell count trusted by chi-square.

    Returns:
        TestResult with ``test`` ``"chi2_categorical"`` (statistic chi-square)
        or ``"fisher_exact"`` (statistic the odds ratio of the 2x2 table
        ``[[cur col0, cur col1], [base col0, base col1]]``), ``effect_size``
        Cramér's V of the tested table (0 = same mix, 1 = disjoint; unsigned),
        and ``detail`` with per-category rates for both windows (original
        categories, before merging), the merged categories, the tested
        columns, the degrees of freedom and the chi-square statistic.
    """
    base = _category_counts(base_counts, "base_counts")
    cur = _category_counts(cur_counts, "cur_counts")
    if isinstance(min_expected, bool) or not isinstance(min_expected, numbers.Real):
        raise ValueError(f"min_expected must be a number, got {min_expected!r}")
    if math.isnan(min_expected) or min_expected < 0:
        raise ValueError(f"min_expected must be non-negative, got {min_expected}")

    n_b = sum(base.values())
    n_c = sum(cur.values())
    all_cats = sorted(set(base) | set(cur))
    detail: dict[str, Any] = {
        "baseline_rates": {c: base.get(c, 0) / n_b for c in all_cats},
        "current_rates": {c: cur.get(c, 0) / n_c for c in all_cats},
    }
    cats = [c for c in all_cats if base.get(c, 0) + cur.get(c, 0) > 0]

    if len(cats) < 2:
        # Every observation in both windows falls in one category: the mixes
        # are identical, there is nothing to test.
        detail.update(merged=[], columns=[cats], dof=0, chi2=0.0)
        return TestResult(
            test="chi2_categorical",
            statistic=0.0,
            p_value=1.0,
            effect_size=0.0,
            n_baseline=n_b,
            n_current=n_c,
            detail=detail,
        )

    groups, merged = _merge_sparse(cats, base, cur, min_expected)
    if len(groups) < 2:
        total = {c: base.get(c, 0) + cur.get(c, 0) for c in cats}
        top = max(cats, key=lambda c: (total[c], c))
        groups = [[top], sorted(c for c in cats if c != top)]
        merged = groups[1]

    table = np.array(
        [
            [sum(cur.get(c, 0) for c in g) for g in groups],
            [sum(base.get(c, 0) for c in g) for g in groups],
        ],
        dtype=float,
    )
    chi2_res = _sps.chi2_contingency(table, correction=False)
    chi2 = float(chi2_res.statistic)
    n_total = n_b + n_c
    # Two rows, so min(r, c) - 1 == 1 and V reduces to sqrt(chi2 / N).
    cramers_v = float(min(1.0, math.sqrt(chi2 / n_total)))
    detail.update(
        merged=merged,
        columns=groups,
        dof=int(chi2_res.dof),
        chi2=chi2,
        min_expected_count=float(chi2_res.expected_freq.min()),
    )

    if table.shape[1] == 2 and chi2_res.expected_freq.min() < min_expected:
        res = _sps.fisher_exact(table.astype(np.int64))
        return TestResult(
            test="fisher_exact",
            statistic=float(res.statistic),
            p_value=float(min(1.0, res.pvalue)),
            effect_size=cramers_v,
            n_baseline=n_b,
            n_current=n_c,
            detail=detail,
        )
    return TestResult(
        test="chi2_categorical",
        statistic=chi2,
        p_value=float(chi2_res.pvalue),
        effect_size=cramers_v,
        n_baseline=n_b,
        n_current=n_c,
        detail=detail,
    )


# --------------------------------------------------------------------------
# 5. Embedding clouds: MMD permutation test
# --------------------------------------------------------------------------

# Bounds the (chunk, N) label matrix so memory stays flat for large
# n_permutations while each matmul is still big enough to run at BLAS speed.
_PERM_CHUNK = 256


def mmd_permutation_test(
    X: Any,
    Y: Any,
    *,
    n_permutations: int = 200,
    seed: int | None = 0,
    max_points: int = 500,
) -> TestResult:
    """Kernel two-sample test (unbiased MMD^2, RBF kernel) by permutation.

    Designed for sentence-embedding clouds (e.g. d=384, unit-normalised),
    where per-dimension tests are meaningless and multiple-testing across 384
    dimensions would be hopeless.

    * Kernel ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))`` with ``sigma`` the
      median pairwise distance of the pooled (subsampled) sample (computed as
      the square root of the median squared distance): the usual median
      heuristic, which needs no tuning and is scale-free.
    * Unbiased MMD^2 (diagonal terms excluded), so it is centred on 0 under
      the null and can be slightly negative.
    * p-value ``(count + 1) / (n_permutations + 1)`` where ``count`` is the
      number of label permutations whose MMD^2 is >= the observed one; the
      add-one keeps the test valid and never returns p = 0, so the smallest
      attainable p-value is ``1 / (n_permutations + 1)``.

    The pooled kernel matrix is computed once; each permutation only needs
    three block sums, which for a batch of label vectors A are obtained from
    one matrix product ``A @ K``.

    Args:
        X: Baseline sample, shape ``(n, d)``, n >= 2.
        Y: Current sample, shape ``(m, d)``, m >= 2, same d as X.
        n_permutations: Number of label permutations (>= 1).
        seed: Seed for ``numpy.random.default_rng``; drives both the
            subsampling and the permutations.  ``None`` is non-deterministic.
        max_points: Each sample larger than this is subsampled without
            replacement to this size (>= 2) to bound the O((n+m)^2) cost.

    Returns:
        TestResult with ``test="mmd_permutation"``, ``statistic`` and
        ``effect_size`` both the observed unbiased MMD^2, ``n_baseline`` /
        ``n_current`` the numbers of points actually used, and ``detail``
        with the bandwidth, the original sizes and the permutation-null mean
        and standard deviation.
    """
    x = _finite_array(X, "X", 2)
    y = _finite_array(Y, "Y", 2)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"X and Y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
    if x.shape[0] < 2:
        raise ValueError(f"X must have at least 2 rows, got {x.shape[0]}")
    if y.shape[0] < 2:
        raise ValueError(f"Y must have at least 2 rows, got {y.shape[0]}")
    n_permutations = _positive_int(n_permutations, "n_permutations", minimum=1)
    max_points = _positive_int(max_points, "max_points", minimum=2)
    try:
        rng = np.random.default_rng(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"seed is not usable as a numpy seed: {exc}") from None

    n_x_total, n_y_total = x.shape[0], y.shape[0]
    if n_x_total > max_points:
        # Sorted so the kept rows stay in input order; only the choice of rows
        # depends on the seed.
        x = x[np.sort(rng.choice(n_x_total, size=max_points, replace=False))]
    if n_y_total > max_points:
        y = y[np.sort(rng.choice(n_y_total, size=max_points, replace=False))]
    n, m = x.shape[0], y.shape[0]
    z = np.vstack([x, y])
    n_tot = n + m

    sq_norms = np.einsum("ij,ij->i", z, z)
    d2 = sq_norms[:, None] + sq_norms[None, :] - 2.0 * (z @ z.T)
    # The expansion above can go slightly negative through cancellation.
    np.maximum(d2, 0.0, out=d2)
    np.fill_diagonal(d2, 0.0)

    median_d2 = float(np.median(d2[np.triu_indices(n_tot, k=1)]))
    if median_d2 > 0.0:
        bandwidth = math.sqrt(median_d2)
    else:
        # More than half the pairs coincide (duplicated outputs, e.g. a model
        # stuck on one canned reply); fall back to the mean non-zero distance
        # so the kernel still separates the distinct points.
        positive = d2[d2 > 0.0]
        bandwidth = float(np.sqrt(positive).mean()) if positive.size else 1.0

    k = np.exp(d2 * (-0.5 / bandwidth**2))
    np.fill_diagonal(k, 0.0)
    row_sums = k.sum(axis=1)
    k_total = float(row_sums.sum())

    def _mmd2(labels: np.ndarray) -> np.ndarray:
        # labels: (P, N) with 1 marking the "X" group.  With a = labels row,
        # b = 1 - a: s_xx = a'Ka, s_xy = a'Kb = a'r - s_xx, and
        # s_yy = 1'K1 - s_xx - 2 s_xy, so one matmul gives all three sums.
        ka = labels @ k
        s_xx = np.einsum("pn,pn->p", ka, labels)
        s_xy = labels @ row_sums - s_xx
        s_yy = k_total - s_xx - 2.0 * s_xy
        return s_xx / (n * (n - 1)) + s_yy / (m * (m - 1)) - 2.0 * s_xy / (n * m)

    observed_labels = np.zeros((1, n_tot))
    observed_labels[0, :n] = 1.0
    # Computing the observed statistic through the same code path as the
    # permuted ones means an identical labelling gives a bit-identical value,
    # so ">=" ties are not decided by rounding noise.
    observed = float(_mmd2(observed_labels)[0])

    null = np.empty(n_permutations)
    done = 0
    while done < n_permutations:
        chunk = min(_PERM_CHUNK, n_permutations - done)
        labels = rng.permuted(np.repeat(observed_labels, chunk, axis=0), axis=1)
        null[done : done + chunk] = _mmd2(labels)
        done += chunk

    count = int(np.count_nonzero(null >= observed))
    p_value = (count + 1) / (n_permutations + 1)
    return TestResult(
        test="mmd_permutation",
        statistic=observed,
        p_value=float(p_value),
        effect_size=observed,
        n_baseline=int(n),
        n_current=int(m),
        detail={
            "kernel": "rbf",
            "bandwidth": float(bandwidth),
            "n_permutations": int(n_permutations),
            "n_baseline_total": int(n_x_total),
            "n_current_total": int(n_y_total),
            "null_mean": float(null.mean()),
            "null_std": float(null.std()),
        },
    )


# --------------------------------------------------------------------------
# 6. Multiple-testing correction
# --------------------------------------------------------------------------


def adjust_pvalues(p_values: Sequence[float], method: str = "holm") -> list[float]:
    """Adjust a family of p-values for multiple testing.

    * ``"holm"``: Holm-Bonferroni step-down; controls the family-wise error
      rate under any dependence between the tests.
    * ``"bh"``: Benjamini-Hochberg (via ``scipy.stats.false_discovery_control``);
      controls the false discovery rate for independent or positively
      dependent tests, and is the less conservative choice when many metrics
      are monitored at once.

    NaN entries (tests that give no p-value, such as PSI) are returned as NaN
    in the same position and do not count towards the family size m.  An
    empty list is returned unchanged: a detector with no tests configured has
    nothing to correct, which is not an error.

    Args:
        p_values: P-values in [0, 1], NaN allowed.
        method: ``"holm"`` or ``"bh"``.

    Returns:
        Adjusted p-values, same length and order as the input, as floats.
    """
    if method not in ("holm", "bh"):
        raise ValueError(f"method must be 'holm' or 'bh', got {method!r}")
    if isinstance(p_values, (str, bytes, Mapping)):
        raise ValueError("p_values must be a sequence of floats")
    try:
        p = np.asarray(p_values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"p_values must be numeric: {exc}") from None
    if p.ndim != 1:
        raise ValueError(f"p_values must be 1-D, got shape {p.shape}")
    if p.size == 0:
        return []
    finite = ~np.isnan(p)
    if ((p[finite] < 0.0) | (p[finite] > 1.0)).any():
        raise ValueError("p_values must lie in [0, 1] (NaN allowed)")

    out = np.full(p.shape, np.nan)
    valid = p[finite]
    if valid.size:
        if method == "bh":
            out[finite] = _sps.false_discovery_control(valid, method="bh")
        else:
            m = valid.size
            order = np.argsort(valid, kind="stable")
            scaled = valid[order] * (m - np.arange(m))
            # The running maximum enforces monotonicity: a larger raw p-value
            # may never get a smaller adjusted one.
            adjusted = np.minimum(np.maximum.accumulate(scaled), 1.0)
            res = np.empty(m)
            res[order] = adjusted
            out[finite] = res
    return [float(v) for v in out]


# --------------------------------------------------------------------------
# 7. Power and sample size
# --------------------------------------------------------------------------


def samples_for_proportion_shift(
    p_base: float,
    p_cur: float,
    *,
    alpha: float = 0.05,
    power: float = 0.95,
    alternative: str = "two-sided",
    method: str = "pooled",
) -> int:
    """Per-group sample size for the two-proportion z-test to detect a shift.

    ``method="pooled"`` (default) is the standard normal-approximation formula
    matching the pooled z-test in :func:`compare_proportions` (Fleiss, no
    continuity correction)::

        n = (z_a * sqrt(2 pbar qbar) + z_b * sqrt(p1 q1 + p2 q2))^2 / (p1 - p2)^2

    ``method="cohen_h"`` uses the arcsine transform, ``n = 2 ((z_a + z_b) / h)^2``
    with Cohen's h; it gives nearly the same answer away from 0 and 1 and is
    what Cohen's power tables are built on.

    Both are normal approximations: for rare events (expected counts below
    ~5) the detector will actually run Fisher's test, which is less powerful,
    so check such cells with :func:`samples_for_power`.

    Args:
        p_base: Baseline rate, in [0, 1].
        p_cur: Current rate to detect, in [0, 1], different from ``p_base``.
        alpha: Significance level, in (0, 1).
        power: Desired power, in (0, 1).
        alternative: ``"two-sided"`` (uses z at 1 - alpha/2), or ``"greater"``
            / ``"less"`` (one-sided; ``p_cur`` must lie on that side).
        method: ``"pooled"`` or ``"cohen_h"``.

    Returns:
        Smallest integer n per group (both windows the same size).
    """
    p1 = _probability(p_base, "p_base", open_interval=False)
    p2 = _probability(p_cur, "p_cur", open_interval=False)
    alpha = _probability(alpha, "alpha", open_interval=True)
    power = _probability(power, "power", open_interval=True)
    alternative = _alternative(alternative)
    if method not in ("pooled", "cohen_h"):
        raise ValueError(f"method must be 'pooled' or 'cohen_h', got {method!r}")
    if p1 == p2:
        raise ValueError("p_cur must differ from p_base (no sample size detects a zero shift)")
    if alternative == "greater" and p2 < p1:
        raise ValueError("p_cur must exceed p_base when alternative='greater'")
    if alternative == "less" and p2 > p1:
        raise ValueError("p_cur must be below p_base when alternative='less'")

    z_a = _sps.norm.isf(alpha / 2.0 if alternative == "two-sided" else alpha)
    z_b = _sps.norm.isf(1.0 - power)
    if method == "cohen_h":
        n = 2.0 * ((z_a + z_b) / _cohens_h(p1, p2)) ** 2
    else:
        pbar = (p1 + p2) / 2.0
        num = z_a * math.sqrt(2.0 * pbar * (1.0 - pbar)) + z_b * math.sqrt(p1 * (1.0 - p1) + p2 * (1.0 - p2))
        n = (num / (p1 - p2)) ** 2
    # The tiny slack stops float noise (e.g. 392.0000000001) adding a sample.
    return max(1, math.ceil(n - 1e-9))


def _sizes(n: Any, name: str) -> tuple[int, int]:
    if isinstance(n, tuple):
        if len(n) != 2:
            raise ValueError(f"{name} must be an int or a (n_baseline, n_current) pair")
        return (
            _positive_int(n[0], f"{name}[0]", minimum=1),
            _positive_int(n[1], f"{name}[1]", minimum=1),
        )
    size = _positive_int(n, name, minimum=1)
    return size, size


def _p_of(result: Any) -> float:
    p = getattr(result, "p_value", result)
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"test must return a TestResult or a float p-value, got {type(result).__name__}") from None
    if math.isnan(p):
        raise ValueError("test returned a NaN p-value; power is undefined for it (e.g. PSI)")
    return p


def simulated_power(
    draw_baseline: Callable[[np.random.Generator, int], Any],
    draw_current: Callable[[np.random.Generator, int], Any],
    test: Callable[[Any, Any], Any],
    n: int | tuple[int, int],
    *,
    alpha: float = 0.05,
    trials: int = 500,
    seed: int | None = 0,
) -> PowerEstimate:
    """Estimate a test's power (or false-positive rate) by Monte Carlo.

    Each trial draws ``baseline = draw_baseline(rng, n_baseline)`` and
    ``current = draw_current(rng, n_current)`` from one shared
    ``numpy.random.Generator`` and records whether ``test(baseline, current)``
    rejects (p <= alpha).  With the same distribution on both sides the
    result estimates the false-positive rate instead.

    Args:
        draw_baseline: ``(rng, size) -> sample`` for the baseline.
        draw_current: ``(rng, size) -> sample`` for the current window.
        test: ``(baseline_sample, current_sample) -> TestResult | float``;
            wrap count-based tests, e.g.
            ``lambda b, c: compare_proportions(b.sum(), b.size, c.sum(), c.size)``.
        n: Per-group size, or a ``(n_baseline, n_current)`` pair.
        alpha: Significance level, in (0, 1).
        trials: Number of Monte Carlo trials (>= 1).
        seed: Seed for ``numpy.random.default_rng``.

    Returns:
        PowerEstimate with the rejection fraction and its binomial stderr.
    """
    if not callable(draw_baseline):
        raise ValueError("draw_baseline must be callable")
    if not callable(draw_current):
        raise ValueError("draw_current must be callable")
    if not callable(test):
        raise ValueError("test must be callable")
    n_b, n_c = _sizes(n, "n")
    alpha = _probability(alpha, "alpha", open_interval=True)
    trials = _positive_int(trials, "trials", minimum=1)
    try:
        rng = np.random.default_rng(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"seed is not usable as a numpy seed: {exc}") from None

    rejections = 0
    for _ in range(trials):
        baseline = draw_baseline(rng, n_b)
        current = draw_current(rng, n_c)
        if _p_of(test(baseline, current)) <= alpha:
            rejections += 1
    power = rejections / trials
    return PowerEstimate(
        power=power,
        stderr=math.sqrt(power * (1.0 - power) / trials),
        n_baseline=n_b,
        n_current=n_c,
        trials=trials,
        alpha=alpha,
    )


def samples_for_power(
    draw_baseline: Callable[[np.random.Generator, int], Any],
    draw_current: Callable[[np.random.Generator, int], Any],
    test: Callable[[Any, Any], Any],
    *,
    power: float = 0.95,
    alpha: float = 0.05,
    trials: int = 500,
    seed: int | None = 0,
    n_start: int = 16,
    n_max: int = 1_000_000,
    n_baseline: int | None = None,
) -> PowerEstimate:
    """Smallest sample size whose simulated power reaches ``power``.

    Doubles n from ``n_start`` until the target is reached, then bisects
    between the last failing and the first passing n.  Every evaluation uses
    the same ``seed`` (common random numbers), which makes simulated power
    much smoother in n, but it is still a Monte Carlo estimate: the answer is
    accurate to roughly the resolution that ``trials`` allows, and a
    non-monotone power curve can mislead the bisection by a few samples.

    Cost: about ``trials * (log2(n / n_start) * 2 + 1)`` test calls.

    Args:
        draw_baseline, draw_current, test, alpha, trials, seed: As for
            :func:`simulated_power`.
        power: Target power, in (0, 1).
        n_start: First size tried (>= 1); if it already reaches the target
            the search continues downwards to 1.
        n_max: Give up above this size.
        n_baseline: If given, the baseline size is fixed at this value and
            only the current-window size is searched (typical when the
            baseline is a large frozen sample); otherwise both windows have
            size n.

    Returns:
        PowerEstimate at the smallest n found (``n_current`` is the answer).

    Raises:
        ValueError: For bad arguments, or if the target power is not reached
            by ``n_max`` (the shift is too small to detect in practice).
    """
    target = _probability(power, "power", open_interval=True)
    n_start = _positive_int(n_start, "n_start", minimum=1)
    n_max = _positive_int(n_max, "n_max", minimum=1)
    if n_start > n_max:
        raise ValueError(f"n_start ({n_start}) must not exceed n_max ({n_max})")
    fixed_base = None if n_baseline is None else _positive_int(n_baseline, "n_baseline")

    def evaluate(size: int) -> PowerEstimate:
        sizes = (size, size) if fixed_base is None else (fixed_base, size)
        return simulated_power(draw_baseline, draw_current, test, sizes, alpha=alpha, trials=trials, seed=seed)

    lo = 0  # largest size known (or assumed, for 0) to fall short
    hi = n_start
    best = evaluate(hi)
    while best.power < target:
        if hi >= n_max:
            raise ValueError(f"power {target} not reached by n_max={n_max} (simulated power there: {best.power:.3f})")
        lo = hi
        hi = min(2 * hi, n_max)
        best = evaluate(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        est = evaluate(mid)
        if est.power >= target:
            hi, best = mid, est
        else:
            lo = mid
    return best
