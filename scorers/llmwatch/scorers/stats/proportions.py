"""Intervals of one proportion (a pass rate), and of the mean of values bounded in [0, 1]."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np


def wilson_interval(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval: unlike the normal one it stays inside [0, 1] and is honest at 0/n and n/n."""
    if n <= 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0/n and n/n the bound is exactly 0 or 1; floating point would land a hair inside.
    return (0.0 if k == 0 else max(0.0, centre - half), 1.0 if k == n else min(1.0, centre + half))


def bounded_mean_interval(values: Sequence[float] | np.ndarray, confidence: float) -> tuple[float, float, float]:
    """(mean, lower, upper) of values in [0, 1]: Agresti-Coull's interval carried over to a mean.

    z^2 / 2 pseudo-values are added at 0 and at 1, and the normal interval is taken around the
    augmented sample's mean with its variance. On 0/1 values this is exactly Agresti-Coull's
    interval for a proportion. The plain t-interval is dishonest where the values pile up at a
    bound, as answer similarities do (most pairs identical): every value 1 gives [1, 1], and at
    97 % identical pairs its 90 % interval missed the true mean 42 % of the time over 30 pairs
    (tests/unit/test_stats_reference.py). The pseudo-values cost width only on small samples of
    values that are all close together away from the bounds.
    """
    x = np.asarray(values, dtype=float)
    n = x.size
    if n == 0:
        return (math.nan, math.nan, math.nan)
    z = float(NormalDist().inv_cdf(0.5 + confidence / 2.0))
    k = z * z / 2.0
    m = n + 2.0 * k
    centre = (float(x.sum()) + k) / m
    var = (float(((x - centre) ** 2).sum()) + k * centre**2 + k * (1.0 - centre) ** 2) / m
    half = z * math.sqrt(var / m)
    return (float(x.mean()), max(0.0, centre - half), min(1.0, centre + half))


def rogan_gladen(
    k: int,
    n: int,
    sens_k: int,
    sens_n: int,
    spec_k: int,
    spec_n: int,
    z: float = 1.959963984540054,
) -> tuple[float, float, float] | None:
    """A true rate from an imperfect rater's apparent one: (estimate, lower, upper), or None when undefined.

    The rater (a model judge) called `k` of `n` items positive; on items whose truth is known
    (people's labels) it called `sens_k` of `sens_n` true positives positive (sensitivity) and
    `spec_k` of `spec_n` true negatives negative (specificity). Rogan and Gladen (1978):
    true = (apparent + Sp - 1) / (Se + Sp - 1), clipped to [0, 1]. The interval is Lang and
    Reiczigel's (2014): the three proportions adjusted as Agresti-Coull's (z^2 / 2 added to
    successes and failures), the delta-method variance of all three, so it widens with few
    labels as it must. Undefined (None) without items, without labels on either side, or when
    Se + Sp <= 1 (a rater no better than chance says nothing about the truth).
    """
    if n <= 0 or sens_n <= 0 or spec_n <= 0:
        return None
    se, sp, p = sens_k / sens_n, spec_k / spec_n, k / n
    if se + sp - 1.0 <= 0.0:
        return None
    estimate = min(1.0, max(0.0, (p + sp - 1.0) / (se + sp - 1.0)))
    z2 = z * z
    pa = (k + z2 / 2) / (n + z2)
    sea = (sens_k + z2 / 2) / (sens_n + z2)
    spa = (spec_k + z2 / 2) / (spec_n + z2)
    youden = sea + spa - 1.0
    if youden <= 0.0:
        return (estimate, 0.0, 1.0)
    centre = (pa + spa - 1.0) / youden
    var = (
        pa * (1 - pa) / (n + z2)
        + centre**2 * sea * (1 - sea) / (sens_n + z2)
        + (1 - centre) ** 2 * spa * (1 - spa) / (spec_n + z2)
    ) / youden**2
    half = z * math.sqrt(max(var, 0.0))
    return (estimate, min(1.0, max(0.0, centre - half)), min(1.0, max(0.0, centre + half)))
