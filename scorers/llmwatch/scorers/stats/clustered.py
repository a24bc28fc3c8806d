"""Statistics whose unit is a cluster (a conversation), not a sample.

Turns of one conversation are not independent: a conversation that went wrong at turn 2 tends to
stay wrong. Treating its samples as independent would make every interval too narrow. So:

* the decay slope is the **within-conversation** (fixed-effects) least-squares slope of score on
  turn: each conversation's turns and scores are centred on its own means, and
  slope = sum_c Sxy_c / sum_c Sxx_c. A conversation with one turn says nothing about decay and
  adds nothing; a long conversation weighs by its spread of turns. Differences *between*
  conversations (a hard topic that also runs long) cannot pose as decay.
* its interval, and the intervals of the per-turn means, come from a **cluster bootstrap**:
  conversations (not samples) are resampled, with Poisson(1) weights per conversation (the
  Poisson bootstrap, which a multinomial draw approaches for many clusters and which can be drawn
  in chunks), `draws` times with a fixed seed, and the 2.5th and 97.5th percentiles taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Sequence

import numpy as np

__all__ = ["ClusteredSlope", "cluster_bootstrap_slope"]

_CHUNK = 64
# Weights drawn at once at most (16 MB of floats): a million conversations would make 64 draws
# half a gigabyte. The Poisson stream is the same whatever the chunking, so are the intervals.
_CELLS = 2_000_000


@dataclass(frozen=True)
class ClusteredSlope:
    slope: float | None  # None: fewer than `min_clusters` clusters with two distinct x
    ci: tuple[float, float] | None
    stderr: float | None  # bootstrap standard deviation of the slope
    clusters: int  # clusters that inform the slope (two distinct x at least)
    clusters_total: int
    n: int  # points
    # x bucket label -> {"mean", "lo", "hi", "n", "clusters"}: the mean of y at that x, with its
    # cluster-bootstrap interval.
    by_x: dict[str, dict[str, float]] = field(default_factory=dict)


def cluster_bootstrap_slope(
    cluster: Sequence[Hashable],
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    bucket: Sequence[str] | None = None,
    draws: int = 1000,
    confidence: float = 0.95,
    min_clusters: int = 3,
    seed: int = 0,
) -> ClusteredSlope:
    """The within-cluster slope of y on x and the per-bucket means of y, with cluster-bootstrap intervals."""
    n = len(x)
    ids: dict[Hashable, int] = {}
    cl = np.fromiter((ids.setdefault(c, len(ids)) for c in cluster), dtype=np.int64, count=n)
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    k = len(ids)
    counts = np.bincount(cl, minlength=k).astype(float)
    xbar = np.bincount(cl, xs, minlength=k) / np.maximum(counts, 1)
    ybar = np.bincount(cl, ys, minlength=k) / np.maximum(counts, 1)
    dx = xs - xbar[cl]
    sxx = np.bincount(cl, dx * dx, minlength=k)
    sxy = np.bincount(cl, dx * (ys - ybar[cl]), minlength=k)
    informative = sxx > 1e-12
    labels = sorted(set(bucket), key=_bucket_order) if bucket is not None else []
    b_index = {b: i for i, b in enumerate(labels)}
    # Per cluster and bucket: sum of y and count, so that a draw's bucket mean is two dot products.
    bsum = np.zeros((k, len(labels)))
    bcnt = np.zeros((k, len(labels)))
    if bucket is not None:
        bi = np.fromiter((b_index[b] for b in bucket), dtype=np.int64, count=n)
        np.add.at(bsum, (cl, bi), ys)
        np.add.at(bcnt, (cl, bi), 1.0)
    rng = np.random.default_rng(seed)
    slopes: list[np.ndarray] = []
    means: list[np.ndarray] = []
    done = 0
    while done < draws and k:
        size = min(_CHUNK, max(1, _CELLS // k), draws - done)
        w = rng.poisson(1.0, size=(size, k)).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            slopes.append((w @ sxy) / (w @ sxx))
            if labels:
                means.append((w @ bsum) / (w @ bcnt))
        done += size
    lo_q, hi_q = 50 * (1 - confidence), 50 * (1 + confidence)
    by_x: dict[str, dict[str, float]] = {}
    if labels:
        m = np.vstack(means)
        total_sum, total_cnt = bsum.sum(0), bcnt.sum(0)
        for j, label in enumerate(labels):
            col = m[:, j][np.isfinite(m[:, j])]
            by_x[label] = {
                "mean": float(total_sum[j] / total_cnt[j]),
                "lo": float(np.percentile(col, lo_q)) if col.size else math.nan,
                "hi": float(np.percentile(col, hi_q)) if col.size else math.nan,
                "n": int(total_cnt[j]),
                "clusters": int((bcnt[:, j] > 0).sum()),
            }
    n_inf = int(informative.sum())
    if n_inf < min_clusters:
        return ClusteredSlope(None, None, None, n_inf, k, n, by_x)
    slope = float(sxy.sum() / sxx.sum())
    s = np.concatenate(slopes)
    s = s[np.isfinite(s)]
    ci = (float(np.percentile(s, lo_q)), float(np.percentile(s, hi_q)))
    return ClusteredSlope(slope, ci, float(s.std(ddof=1)), n_inf, k, n, by_x)


def _bucket_order(label: str) -> tuple[int, str]:
    digits = label.rstrip("+")
    return (int(digits), label) if digits.isdigit() else (10**9, label)
