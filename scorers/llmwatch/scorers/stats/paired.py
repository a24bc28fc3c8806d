"""Paired tests and intervals: two answers to the same prompts (shadow evaluation's primary and candidate).

McNemar's exact test on the disagreements of a pass/fail signal, the paired pass-rate difference
with its interval, Wilcoxon's signed-rank test on paired differences, and a paired-bootstrap
interval of a ratio. Plain functions; llmwatch.scorers.evaluation.paired builds the report from them.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from scipy import stats as _sps

_BOOTSTRAP = 1000
_DRAWS_PER_CHUNK = 4_000_000


def mcnemar_worse_p(wins: int, losses: int) -> float:
    """One-sided exact McNemar p-value that the candidate loses more than it wins.

    Under "no difference" each disagreement is a fair coin: losses ~ Binomial(wins + losses, 1/2).
    """
    n = wins + losses
    if n == 0:
        return 1.0
    return float(_sps.binom.sf(losses - 1, n, 0.5))


def mcnemar_two_sided_p(wins: int, losses: int) -> float:
    n = wins + losses
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * _sps.binom.cdf(min(wins, losses), n, 0.5)))


def paired_difference_ci(wins: int, losses: int, n: int, confidence: float) -> tuple[float, float, float]:
    """Candidate minus primary pass rate and its two-sided interval (Agresti-Min adjusted Wald)."""
    if n <= 0:
        return 0.0, -1.0, 1.0
    diff = (wins - losses) / n
    # Agresti & Min (2005): half a count in each discordant cell keeps the interval honest when
    # there are few or no disagreements.
    b, c, m = wins + 0.5, losses + 0.5, n + 2.0
    d = (b - c) / m
    var = ((b + c) / m - d * d) / m
    z = float(_sps.norm.ppf(0.5 + confidence / 2.0))
    half = z * math.sqrt(max(var, 0.0))
    return diff, max(-1.0, d - half), min(1.0, d + half)


def wilcoxon_worse_p(diffs: np.ndarray, *, higher_is_worse: bool = True) -> float:
    """One-sided Wilcoxon signed-rank p that the candidate's values are worse (higher or lower)."""
    nonzero = diffs[diffs != 0]
    if len(nonzero) < 2:
        return 1.0
    alternative: Literal["greater", "less"] = "greater" if higher_is_worse else "less"
    return float(_sps.wilcoxon(nonzero, alternative=alternative, zero_method="wilcox").pvalue)


def fieller_ratio(primary: np.ndarray, shadow: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Ratio of means shadow/primary and its paired Fieller interval (t on n - 1 degrees of freedom).

    The ratios R the paired t-test of `shadow - R * primary` does not reject: exact for normal
    pairs, and for skewed positive ones (lognormal latencies and costs with a shared per-prompt
    factor) it keeps its level from 10 pairs on, where the percentile bootstrap of the ratio
    missed 17 % instead of 10 % (tests/unit/test_stats_reference.py). Where the primary's mean is
    not clearly above 0 the set is unbounded: (0, inf), the ratio of two positive means being >= 0.
    """
    p, s = np.asarray(primary, dtype=float), np.asarray(shadow, dtype=float)
    n = len(p)
    mp, ms = float(p.mean()), float(s.mean())
    point = ms / mp if mp > 0 else math.inf
    if n < 2:
        return point, 0.0, math.inf
    t2 = float(_sps.t.ppf(0.5 + confidence / 2.0, n - 1)) ** 2
    vpp, vss = float(p.var(ddof=1)) / n, float(s.var(ddof=1)) / n
    vps = float(((p - mp) * (s - ms)).sum()) / (n - 1) / n
    # (ms - R mp)^2 <= t^2 (vss - 2 R vps + R^2 vpp): a R^2 + b R + c <= 0.
    a, b, c = mp * mp - t2 * vpp, -2.0 * (mp * ms - t2 * vps), ms * ms - t2 * vss
    disc = b * b - 4.0 * a * c
    if a <= 0 or disc < 0:
        return point, 0.0, math.inf
    root = math.sqrt(disc)
    return point, max(0.0, (-b - root) / (2.0 * a)), (-b + root) / (2.0 * a)


def bootstrap_ratio(
    primary: np.ndarray, shadow: np.ndarray, stat: str, confidence: float, seed: int = 0
) -> tuple[float, float, float]:
    """Ratio shadow/primary of a statistic (`p95` or `mean`) and its paired-bootstrap interval.

    Pairs are resampled whole, so the interval keeps the correlation between the two sides.
    """

    def of(x: np.ndarray, axis: int | None = None) -> Any:
        return np.percentile(x, 95, axis=axis) if stat == "p95" else np.mean(x, axis=axis)

    base = float(of(primary))
    point = float(of(shadow)) / base if base > 0 else math.inf
    rng = np.random.default_rng(seed)
    # Replicates in chunks of at most ~4M draws: 1,000 replicates of a million pairs at once would
    # be 24 GB of indices and values (issue 29). The draws are the same whatever the chunking.
    step = max(1, _DRAWS_PER_CHUNK // max(1, len(primary)))
    nums, dens = [], []
    for done in range(0, _BOOTSTRAP, step):
        idx = rng.integers(0, len(primary), size=(min(step, _BOOTSTRAP - done), len(primary)))
        nums.append(of(shadow[idx], axis=1))
        dens.append(of(primary[idx], axis=1))
    num, den = np.concatenate(nums), np.concatenate(dens)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf)
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(ratios, [tail, 100.0 - tail])
    return point, float(lo), float(hi)
