"""Inter-rater agreement: Krippendorff's alpha and Cohen's kappa (plain and weighted). Pure functions, no I/O.

Krippendorff's alpha (Krippendorff 2011, "Computing Krippendorff's alpha-reliability"):
alpha = 1 - D_o / D_e from the coincidence matrix o_ck of values within units; every unit with
at least two values contributes, each of its m values pairing with the other m - 1 at weight
1 / (m - 1), so any number of reviewers and missing ratings are fine. Distances: nominal
(c != k), interval ((c - k)^2), ordinal ((sum of n_g for g from c to k - (n_c + n_k) / 2)^2).
On the paper's 4-coder example it gives 0.743 / 0.815 / 0.849 (nominal / ordinal / interval).

Cohen's kappa for two raters: 1 - sum(w * O) / sum(w * E), O the observed joint proportions, E
the product of the marginals, w_ij = |i - j| (linear) or (i - j)^2 (quadratic) on the scale's
values, or 1 for every disagreement (unweighted). Quadratic weights make it close to an
intraclass correlation. The one implementation: the review report (quadratic, between
reviewers) and the pairwise judge's agreement with people (unweighted, win | tie | loss) use it.

Both return NaN when undefined (no pairable values, or no variation at all).
"""

from __future__ import annotations

import math
from typing import Hashable, Literal, Sequence

import numpy as np

__all__ = ["krippendorff_alpha", "cohen_kappa", "cohen_kappa_interval"]

Level = Literal["nominal", "ordinal", "interval"]


def krippendorff_alpha(units: Sequence[Sequence[float | None]], level: Level = "interval") -> float:
    """`units`: one sequence of ratings per rated item (None = that rater gave none)."""
    if level not in ("nominal", "ordinal", "interval"):
        raise ValueError(f"level must be nominal, ordinal or interval, got {level!r}")
    pairable = [[v for v in unit if v is not None and not (isinstance(v, float) and math.isnan(v))] for unit in units]
    pairable = [u for u in pairable if len(u) >= 2]
    if not pairable:
        return math.nan
    values = sorted({v for u in pairable for v in u})
    index = {v: i for i, v in enumerate(values)}
    size = len(values)
    o = np.zeros((size, size))
    for unit in pairable:
        counts = np.zeros(size)
        for v in unit:
            counts[index[v]] += 1
        # Ordered pairs of different ratings within the unit: n_c * n_k, minus the self-pairs on the diagonal.
        o += (np.outer(counts, counts) - np.diag(counts)) / (len(unit) - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    scale = np.asarray(values, dtype=float)
    if level == "nominal":
        delta = 1.0 - np.eye(size)
    elif level == "interval":
        delta = (scale[:, None] - scale[None, :]) ** 2
    else:
        cum = np.concatenate([[0.0], np.cumsum(n_c)])
        lo = np.minimum.outer(np.arange(size), np.arange(size))
        hi = np.maximum.outer(np.arange(size), np.arange(size))
        delta = (cum[hi + 1] - cum[lo] - (n_c[:, None] + n_c[None, :]) / 2.0) ** 2
    expected = float((np.outer(n_c, n_c) * delta).sum())
    if expected == 0.0:
        return math.nan
    return float(1.0 - (n - 1.0) * float((o * delta).sum()) / expected)


def cohen_kappa(
    a: Sequence[Hashable],
    b: Sequence[Hashable],
    labels: Sequence[Hashable],
    weights: Literal["linear", "quadratic"] | None = None,
) -> float:
    """Cohen's kappa of two raters' ratings of the same items, in the same order, on the scale `labels`.

    `weights` None: the unweighted kappa, (p_o - p_e) / (1 - p_e), for any labels (categories such
    as win | tie | loss). `linear` or `quadratic`: the weighted kappa on a numeric scale. One
    formula covers all three: 1 - sum(w * O) / sum(w * E) with w = 1 - I for the unweighted one.
    """
    if len(a) != len(b):
        raise ValueError(f"a and b must rate the same items, got {len(a)} and {len(b)} ratings")
    if weights not in (None, "linear", "quadratic"):
        raise ValueError(f"weights must be None, linear or quadratic, got {weights!r}")
    if not a:
        return math.nan
    index = {v: i for i, v in enumerate(labels)}
    unknown = sorted({str(x) for x in (*a, *b) if x not in index})
    if unknown:
        raise ValueError(f"ratings {unknown} are not on the scale {list(labels)}")
    k = len(labels)
    observed = np.zeros((k, k))
    for x, y in zip(a, b):
        observed[index[x], index[y]] += 1
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    if weights is None:
        w = 1.0 - np.eye(k)
    else:
        lv = np.asarray(labels, dtype=float)
        diff = np.abs(lv[:, None] - lv[None, :])
        w = diff if weights == "linear" else diff**2
    denom = float((w * expected).sum())
    if denom == 0.0:
        return math.nan
    return float(1.0 - float((w * observed).sum()) / denom)


def cohen_kappa_interval(
    a: Sequence[Hashable],
    b: Sequence[Hashable],
    labels: Sequence[Hashable],
    weights: Literal["linear", "quadratic"] | None = None,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """A percentile bootstrap interval of `cohen_kappa` over the rated items (NaN, NaN when undefined).

    Items are resampled with replacement; resamples where kappa is undefined (no variation) are
    left out. Seeded: the same ratings give the same interval.
    """
    if len(a) != len(b):
        raise ValueError(f"a and b must rate the same items, got {len(a)} and {len(b)} ratings")
    if len(a) < 2 or not math.isfinite(cohen_kappa(a, b, labels, weights)):
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    index = {v: i for i, v in enumerate(labels)}
    aa = np.array([index[x] for x in a])
    bb = np.array([index[y] for y in b])
    draws = []
    for _ in range(resamples):
        pick = rng.integers(0, len(a), len(a))
        k = cohen_kappa([labels[i] for i in aa[pick]], [labels[i] for i in bb[pick]], labels, weights)
        if math.isfinite(k):
            draws.append(k)
    if not draws:
        return (math.nan, math.nan)
    tail = 50 * (1 - confidence)
    return (float(np.percentile(draws, tail)), float(np.percentile(draws, 100 - tail)))
