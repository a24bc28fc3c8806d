"""Two-sample tests that compare like with like: within strata, pooled without letting the mix count.

A stratum is a part of the traffic whose inputs are comparable on both sides: a category, or one
normalised prompt (matched prompts). Each test compares baseline and current inside every stratum
and pools the within-stratum differences, so a change in how much traffic each stratum gets (the
mix) does not move the statistic, while a change inside one stratum does.

* `cmh`: Cochran-Mantel-Haenszel for a pass rate. With one baseline and one current observation
  per stratum (1:1 matched prompts) its statistic is McNemar's.
* `van_elteren`: the stratified Wilcoxon rank-sum test for a continuous value. With strata of one
  pair it reduces to a sign-type paired test; with one stratum it is Mann-Whitney.
* `upper_tail`: the stratified exceedance test for a tail: within each stratum, how many current
  values lie above the pooled p95, against the hypergeometric count that exchangeable samples
  give; one-sided (the current side heavier), exact over the strata.
* `stratified_chi2`: homogeneity of a categorical (failure modes) per stratum, chi-squares summed.
* `stratified_mmd`: MMD on answer embeddings, labels permuted within strata, with as many
  permutations as the decision needs (adaptive, up to 10 000).

Effects are reported in the user's units and weighted by the *baseline's* stratum mix: "in the
traffic the baseline saw, pass rate moved by x points", so an effect does not change with the mix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import stats as sps
from scipy.special import gammaln

from llmwatch.scorers.stats import twosample as stats


@dataclass
class Stratified:
    test: str
    statistic: float
    p_value: float
    effect: float  # baseline-mix weighted, in the signal's unit
    n_baseline: int
    n_current: int
    n_strata: int
    worst_stratum: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


def _weights(base_counts: Mapping[str, int], keys: Sequence[str]) -> dict[str, float]:
    total = sum(base_counts[k] for k in keys)
    return {k: base_counts[k] / total for k in keys} if total else {}


def cmh(tables: Mapping[str, tuple[int, int, int, int]]) -> Stratified | None:
    """`tables[stratum] = (baseline passes, baseline n, current passes, current n)`; None without a usable stratum."""
    keys = [k for k, (_, nb, _, nc) in tables.items() if nb > 0 and nc > 0]
    if not keys:
        return None
    num = var = 0.0
    for k in keys:
        pb, nb, pc, nc = tables[k]
        n = nb + nc
        m1 = pb + pc
        if n < 2:
            continue
        num += pc - nc * m1 / n
        var += nb * nc * m1 * (n - m1) / (n * n * (n - 1))
    w = _weights({k: tables[k][1] for k in keys}, keys)
    effect = sum(w[k] * (tables[k][2] / tables[k][3] - tables[k][0] / tables[k][1]) for k in keys)
    if var <= 0:
        # Every stratum all-pass or all-fail on both sides: nothing can differ.
        chi2, p = 0.0, 1.0
    else:
        chi2 = max(abs(num) - 0.5, 0.0) ** 2 / var  # continuity-corrected
        p = float(sps.chi2.sf(chi2, 1))
    worst, worst_p = "", 1.0
    for k in keys:
        pb, nb, pc, nc = tables[k]
        if min(nb, nc) >= 10:
            r = stats.compare_proportions(pb, nb, pc, nc)
            if r.p_value < worst_p:
                worst, worst_p = k, float(r.p_value)
    nb_all = sum(tables[k][1] for k in keys)
    nc_all = sum(tables[k][3] for k in keys)
    extra = (
        {
            "worst_stratum_p": worst_p,
            "worst_stratum_effect": tables[worst][2] / tables[worst][3] - tables[worst][0] / tables[worst][1],
        }
        if worst
        else {}
    )
    return Stratified("cmh", chi2, p, effect, nb_all, nc_all, len(keys), worst, extra)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w) - 0.5 * w
    return float(np.interp(q * w.sum(), cum, v))


def reweighted_quantiles(
    base: Mapping[str, Sequence[float]], cur: Mapping[str, Sequence[float]], qs: Sequence[float]
) -> tuple[list[float], list[float], float]:
    """Quantiles of the baseline, and of the current side reweighted to the baseline's stratum mix, over shared strata.

    Also returns Kish's effective sample size of the reweighted current side.
    """
    keys = [k for k in base if len(base[k]) and len(cur.get(k, ()))]
    w = _weights({k: len(base[k]) for k in keys}, keys)
    bv = np.concatenate([np.asarray(base[k], float) for k in keys])
    cv = np.concatenate([np.asarray(cur[k], float) for k in keys])
    cw = np.concatenate([np.full(len(cur[k]), w[k] / len(cur[k])) for k in keys])
    bq = [float(np.quantile(bv, q)) for q in qs]
    cq = [_weighted_quantile(cv, cw, q) for q in qs]
    ess = float(cw.sum() ** 2 / (cw**2).sum())
    return bq, cq, ess


def van_elteren(
    base: Mapping[str, Sequence[float]], cur: Mapping[str, Sequence[float]], *, min_per_stratum: int = 1
) -> Stratified | None:
    """Stratified Wilcoxon rank-sum (van Elteren, weights 1/(n+1)); effect: baseline-mix weighted relative median change."""
    keys = [k for k in base if len(base[k]) >= min_per_stratum and len(cur.get(k, ())) >= min_per_stratum]
    if not keys:
        return None
    num = var = 0.0
    worst, worst_p = "", 1.0
    for k in keys:
        b, c = np.asarray(base[k], float), np.asarray(cur[k], float)
        nb, nc = len(b), len(c)
        n = nb + nc
        ranks = sps.rankdata(np.concatenate([b, c]))
        w_stat = ranks[nb:].sum()
        _, counts = np.unique(ranks, return_counts=True)
        ties = float((counts**3 - counts).sum())
        v = nb * nc / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
        wk = 1.0 / (n + 1)
        num += wk * (w_stat - nc * (n + 1) / 2.0)
        var += wk * wk * v
        if min(nb, nc) >= 10 and v > 0:
            p_k = float(2 * sps.norm.sf(abs(w_stat - nc * (n + 1) / 2.0) / math.sqrt(v)))
            if p_k < worst_p:
                worst, worst_p = k, p_k
    z = num / math.sqrt(var) if var > 0 else 0.0
    p = float(2 * sps.norm.sf(abs(z))) if var > 0 else 1.0
    w = _weights({k: len(base[k]) for k in keys}, keys)
    # Ratio of weighted sums, not a weighted mean of per-stratum ratios: with small strata (one
    # prompt each) the mean of ratios is biased upward (Jensen), the ratio of sums is not.
    abs_shift = sum(w[k] * (float(np.median(cur[k])) - float(np.median(base[k]))) for k in keys)
    level = sum(w[k] * float(np.median(base[k])) for k in keys)
    effect = abs_shift / abs(level) if level else abs_shift
    return Stratified(
        "van_elteren",
        z,
        p,
        effect,
        sum(len(base[k]) for k in keys),
        sum(len(cur[k]) for k in keys),
        len(keys),
        worst,
        {"median_shift": round(abs_shift, 6), **(_worst_median(base[worst], cur[worst], worst_p) if worst else {})},
    )


def _hypergeom_pmf(n: int, a: int, draws: int, lo: int, hi: int) -> np.ndarray:
    """P(x) for x = lo..hi of the hypergeometric count (population n, a marked, `draws` drawn),
    from log-gamma: a fraction of `scipy.stats.hypergeom`'s cost, for strata by the thousand."""
    x = np.arange(lo, hi + 1, dtype=float)
    log = _log_comb(float(a), x) + _log_comb(float(n - a), draws - x) - _log_comb(float(n), np.asarray(float(draws)))
    return np.exp(log)


def _log_comb(n: float, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def upper_tail(
    base: Mapping[str, Sequence[float]], cur: Mapping[str, Sequence[float]], *, q: float = 0.95
) -> Stratified | None:
    """Is the current side's upper tail heavier? A stratified exceedance test, one-sided.

    Within each stratum both sides are pooled and cut at the pooled `q` quantile; `A` values lie
    above it, `x` of them current. With no difference the samples are exchangeable within the
    stratum, so given the pooled values `x` is hypergeometric (N, A, n_current) whatever the
    distribution, its ties and the baseline's own noise: the cut is a function of the pooled values
    only. (A cut at the baseline's p95 alone would not be: its sampling error inflates the count's
    variance by about 1 + n_current / n_baseline, and a binomial against 5 % ignores that.) The
    strata's counts are summed (Cochran-Mantel-Haenszel's numerator) and the one-sided p-value is
    the exact upper tail of that sum (the strata's pmfs convolved), so a few exceedances a stratum
    get no normal approximation. Statistic: the standardised excess, (x - E) / sd; effect: the
    baseline-mix weighted share of current values above the cut minus the baseline's share.
    A location test cannot see a tail that grew while the median stayed or fell; this one can.
    """
    keys = [k for k in base if len(base[k]) and len(cur.get(k, ()))]
    if not keys:
        return None
    x_all = mean = var = 0.0
    pmf = np.ones(1)
    above_b = above_c = 0
    worst, worst_p = "", 1.0
    w = _weights({k: len(base[k]) for k in keys}, keys)
    effect = 0.0
    for k in keys:
        b, c = np.asarray(base[k], float), np.asarray(cur[k], float)
        nb, nc = len(b), len(c)
        n = nb + nc
        cut = float(np.quantile(np.concatenate([b, c]), q))
        xb, xc = int((b > cut).sum()), int((c > cut).sum())
        a = xb + xc
        above_b += xb
        above_c += xc
        effect += w[k] * (xc / nc - xb / nb)
        if a == 0 or n < 2:
            continue  # all tied at the top: the stratum cannot differ in its tail
        lo, hi = max(0, a - nb), min(a, nc)
        p_k = _hypergeom_pmf(n, a, nc, lo, hi)
        pmf = np.convolve(pmf, np.concatenate([np.zeros(lo), p_k]))
        x_all += xc
        mean += nc * a / n
        var += nb * nc * a * (n - a) / (n * n * (n - 1))
        if min(nb, nc) >= 10:
            tail_k = float(p_k[xc - lo :].sum())
            if tail_k < worst_p:
                worst, worst_p = k, tail_k
    if var > 0:
        z = (x_all - mean) / math.sqrt(var)
        p = float(min(1.0, max(0.0, pmf[int(x_all) :].sum())))
    else:
        z, p = 0.0, 1.0
    nb_all, nc_all = sum(len(base[k]) for k in keys), sum(len(cur[k]) for k in keys)
    return Stratified(
        "p95_exceedance",
        z,
        p,
        effect,
        nb_all,
        nc_all,
        len(keys),
        worst,
        {
            "quantile": q,
            "current_above": round(above_c / nc_all, 4),
            "baseline_above": round(above_b / nb_all, 4),
            **({"worst_stratum_p": worst_p} if worst else {}),
        },
    )


def _worst_median(b: Sequence[float], c: Sequence[float], p: float) -> dict[str, float]:
    mb, mc = float(np.median(b)), float(np.median(c))
    return {
        "worst_stratum_p": p,
        "worst_stratum_shift": mc - mb,
        "worst_stratum_effect": (mc - mb) / abs(mb) if mb else mc - mb,
    }


def stratified_chi2(
    base: Mapping[str, Mapping[str, int]], cur: Mapping[str, Mapping[str, int]], *, min_per_stratum: int = 5
) -> Stratified | None:
    """Failure-mode homogeneity within each stratum, chi-square statistics and degrees of freedom summed."""
    keys = [
        k for k in base if sum(base[k].values()) >= min_per_stratum and sum(cur.get(k, {}).values()) >= min_per_stratum
    ]
    if not keys:
        return None
    total = 0.0
    dof = 0
    worst, worst_p = "", 1.0
    for k in keys:
        cats = sorted({c for c, v in base[k].items() if v} | {c for c, v in cur[k].items() if v})
        if len(cats) < 2:
            continue
        table = np.array([[base[k].get(c, 0) for c in cats], [cur[k].get(c, 0) for c in cats]], float)
        expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
        chi = float(((table - expected) ** 2 / expected).sum())
        total += chi
        dof += len(cats) - 1
        p_k = float(sps.chi2.sf(chi, len(cats) - 1))
        if p_k < worst_p:
            worst, worst_p = k, p_k
    p = float(sps.chi2.sf(total, dof)) if dof else 1.0
    # Effect: the largest baseline-mix weighted change in one mode's rate, in rate points.
    w = _weights({k: sum(base[k].values()) for k in keys}, keys)
    modes = sorted({c for k in keys for c in (*base[k], *cur[k])})
    changes = {
        m: sum(
            w[k] * (cur[k].get(m, 0) / sum(cur[k].values()) - base[k].get(m, 0) / sum(base[k].values())) for k in keys
        )
        for m in modes
    }
    top = max(changes, key=lambda m: abs(changes[m])) if changes else ""
    return Stratified(
        "stratified_chi2",
        total,
        p,
        changes.get(top, 0.0),
        sum(sum(base[k].values()) for k in keys),
        sum(sum(cur[k].values()) for k in keys),
        len(keys),
        worst,
        {
            "dof": dof,
            "mode": top,
            "mode_changes": {m: round(v, 4) for m, v in changes.items()},
            **({"worst_stratum_p": worst_p} if worst else {}),
        },
    )


def stratified_mmd(
    X: np.ndarray,
    Y: np.ndarray,
    sx: Sequence[str],
    sy: Sequence[str],
    *,
    needed: float,
    seed: int = 0,
    start: int = 200,
    most: int = 10_000,
    max_points: int = 1000,
) -> stats.TestResult:
    """MMD^2 (RBF kernel, median heuristic, unbiased) with labels permuted only *within* strata.

    The null is "inside each stratum (category, or one matched prompt) baseline and current
    answers come from the same distribution": the permutations keep each stratum's baseline /
    current counts, so a different mix of strata moves the observed statistic and its null alike
    and cannot produce a small p-value by itself. Permutations grow while the p-value could still
    cross `needed`: with a fixed 200 the smallest p is 1/201, which Holm over ten signals can
    never use; a p-value clearly above `needed` stops at once, so the stable case stays cheap.
    """
    rng = np.random.default_rng(seed)
    Z = np.vstack([X, Y]).astype(np.float64)
    labels = np.concatenate([np.ones(len(X)), np.zeros(len(Y))])
    strata = np.asarray(list(sx) + list(sy))
    if len(Z) > max_points:
        keep = np.sort(rng.choice(len(Z), max_points, replace=False))
        Z, labels, strata = Z[keep], labels[keep], strata[keep]
    sq = np.maximum((Z * Z).sum(1)[:, None] + (Z * Z).sum(1)[None, :] - 2 * Z @ Z.T, 0.0)
    off = sq[np.triu_indices(len(Z), 1)]
    sigma2 = float(np.median(off)) / 2 if off.size and np.median(off) > 0 else 1.0
    K = np.exp(-sq / (2 * sigma2))
    K1 = K.sum(1)
    total = float(K1.sum())
    nx, ny = float(labels.sum()), float(len(labels) - labels.sum())
    groups = [np.flatnonzero(strata == k) for k in np.unique(strata)]

    def mmd(A: np.ndarray) -> np.ndarray:
        aKa = np.einsum("pi,pi->p", A @ K, A)
        aK1 = A @ K1
        kxx = aKa - nx  # diagonal of an RBF kernel is 1
        kyy = total - 2 * aK1 + aKa - ny
        kxy = aK1 - aKa
        return kxx / (nx * (nx - 1)) + kyy / (ny * (ny - 1)) - 2 * kxy / (nx * ny)

    observed = float(mmd(labels[None, :])[0])
    count, done, n = 0, 0, start
    while True:
        while done < n:
            batch = min(200, n - done)
            A = np.tile(labels, (batch, 1))
            for idx in groups:
                if len(idx) > 1:
                    order = np.argsort(rng.random((batch, len(idx))), axis=1)
                    A[:, idx] = labels[idx][order]
            count += int((mmd(A) >= observed - 1e-12).sum())
            done += batch
        p = (count + 1) / (done + 1)
        clearly_above = p - 3 * math.sqrt(p * (1 - p) / done) > needed
        resolved = 1.0 / (done + 1) < needed / 5 and p > 20.0 / (done + 1)
        if clearly_above or resolved or done >= most:
            return stats.TestResult(
                "mmd_stratified_permutation",
                observed,
                p,
                observed,
                int(nx),
                int(ny),
                {"permutations": done, "strata": len(groups), "sigma": round(math.sqrt(sigma2), 4)},
            )
        n = min(most, n * 7)


# ---------------------------------------------------------------------------- effect intervals

# The performance effects (drift.families): of the p50 and p95 relative changes, the larger (the
# current side ranks higher), the smaller (it ranks lower), or the p95's alone (the tail test decided).
QUANTILE_EFFECTS = ("quantile_change", "quantile_fall", "p95_change")
EFFECTS = ("rate_difference", "median_shift", "relative_median_shift", *QUANTILE_EFFECTS)


def _flat(groups: Mapping[str, Sequence[float]], codes: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """One side as (stratum code, value) arrays; `codes` numbers the strata across both sides.

    Strata in name order and values sorted within each: the same samples in another order (a
    streamed summary, another file order) draw the same bootstrap, so give the same interval."""
    keys = sorted(k for k in groups if len(groups[k]))
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0)
    code = np.concatenate([np.full(len(groups[k]), codes.setdefault(k, len(codes)), np.int64) for k in keys])
    value = np.concatenate([np.sort(np.asarray(groups[k], float)) for k in keys])
    return code, value


def _medians(code: np.ndarray, value: np.ndarray, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-stratum medians (NaN where a stratum is empty) and counts, vectorised: one sort per call."""
    order = np.lexsort((value, code))
    v = value[order]
    counts = np.bincount(code, minlength=n_codes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    lo = starts + np.maximum(counts - 1, 0) // 2
    hi = starts + counts // 2
    med = np.full(n_codes, np.nan)
    med[has] = 0.5 * (v[lo[has]] + v[np.minimum(hi[has], len(v) - 1)])
    return med, counts


def _effect(kind: str, bc: np.ndarray, bv: np.ndarray, cc: np.ndarray, cv: np.ndarray, n_codes: int) -> float:
    """The effect as the tests above compute it (`cmh`, `van_elteren`, the performance change)."""
    nb, nc = np.bincount(bc, minlength=n_codes), np.bincount(cc, minlength=n_codes)
    shared = (nb > 0) & (nc > 0)
    if not shared.any():
        return math.nan
    w = np.where(shared, nb, 0) / nb[shared].sum()
    if kind == "rate_difference":
        pb = np.bincount(bc, bv, minlength=n_codes) / np.maximum(nb, 1)
        pc = np.bincount(cc, cv, minlength=n_codes) / np.maximum(nc, 1)
        return float((w * (pc - pb))[shared].sum())
    if kind in ("median_shift", "relative_median_shift"):
        mb, _ = _medians(bc, bv, n_codes)
        mc, _ = _medians(cc, cv, n_codes)
        shift = float((w[shared] * (mc[shared] - mb[shared])).sum())
        level = float((w[shared] * mb[shared]).sum())
        return shift / abs(level) if kind == "relative_median_shift" and level else shift
    r50, r95 = _quantile_changes(bc, bv, cc, cv, n_codes)
    return _pick(kind, r50, r95)


def _pick(kind: str, r50: float, r95: float) -> float:
    if math.isnan(r50):
        return math.nan
    return max(r50, r95) if kind == "quantile_change" else min(r50, r95) if kind == "quantile_fall" else r95


def _quantile_changes(
    bc: np.ndarray, bv: np.ndarray, cc: np.ndarray, cv: np.ndarray, n_codes: int
) -> tuple[float, float]:
    """The relative changes of p50 and p95, the current side reweighted to the baseline's stratum
    mix over shared strata (`reweighted_quantiles`); NaN where no stratum is on both sides."""
    nb, nc = np.bincount(bc, minlength=n_codes), np.bincount(cc, minlength=n_codes)
    shared = (nb > 0) & (nc > 0)
    if not shared.any():
        return math.nan, math.nan
    w = np.where(shared, nb, 0) / nb[shared].sum()
    keep_b, keep_c = shared[bc], shared[cc]
    b, c = bv[keep_b], cv[keep_c]
    cw = (w / np.maximum(nc, 1))[cc[keep_c]]
    changes = []
    for q in (0.5, 0.95):
        bq = float(np.quantile(b, q))
        changes.append(_weighted_quantile(c, cw, q) / bq - 1 if bq else 0.0)
    return changes[0], changes[1]


def effect_interval(
    base: Mapping[str, Sequence[float]],
    cur: Mapping[str, Sequence[float]],
    kind: str,
    *,
    draws: int = 400,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float] | None:
    """A percentile bootstrap interval of a stratified effect (`kind` one of EFFECTS); None when undefined.

    Each side's samples are drawn with replacement *as a whole*, each keeping its stratum, and the
    effect is recomputed over the strata both sides then hold, with the baseline's mix as weights:
    so the interval also carries the spread that many strata of one or two samples each (matched
    prompts) bring, where a within-stratum interval would read 0 wide. Seeded: the same samples
    give the same interval. Vectorised per draw (one sort a side), so a few hundred draws over
    tens of thousands of samples take a fraction of a second.
    """
    if kind not in EFFECTS:
        raise ValueError(f"kind must be one of {', '.join(EFFECTS)}, got {kind!r}")
    out = _resampled(base, cur, lambda *sides: _effect(kind, *sides), width=1, draws=draws, seed=seed)
    return None if out is None else _percentiles(out[:, 0], confidence)


def _resampled(
    base: Mapping[str, Sequence[float]],
    cur: Mapping[str, Sequence[float]],
    statistic: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int], Any],
    *,
    width: int,
    draws: int,
    seed: int,
) -> np.ndarray | None:
    """`statistic` (of `width` values) over `draws` seeded resamples of both sides, each side drawn
    whole with its strata (`effect_interval`); the draws whose first value is defined, or None
    when most left no stratum on both sides (no interval worth printing)."""
    codes: dict[str, int] = {}
    bc, bv = _flat(base, codes)
    cc, cv = _flat(cur, codes)
    if not len(bv) or not len(cv) or draws < 1:
        return None
    n_codes = len(codes)
    rng = np.random.default_rng(seed)
    out = np.empty((draws, width))
    for i in range(draws):
        ib = rng.integers(0, len(bv), len(bv))
        ic = rng.integers(0, len(cv), len(cv))
        out[i] = statistic(bc[ib], bv[ib], cc[ic], cv[ic], n_codes)
    out = out[~np.isnan(out[:, 0])]
    # At least one defined draw: with `draws` 1, half of it is 0, and an empty array has no percentile.
    return out if len(out) >= max(1, draws // 2) else None


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


def quantile_change_intervals(
    base: Mapping[str, Sequence[float]],
    cur: Mapping[str, Sequence[float]],
    *,
    draws: int = 400,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, tuple[float, float] | None]:
    """`effect_interval` of each of QUANTILE_EFFECTS from one set of draws (the same draws, so
    `quantile_change`'s interval is the one `effect_interval` gives): a performance signal's effect
    is one of them, which one known only once its tests are corrected (drift.families)."""
    out = _resampled(base, cur, _quantile_changes, width=2, draws=draws, seed=seed)
    if out is None:
        return dict.fromkeys(QUANTILE_EFFECTS)
    picked = {
        "quantile_change": out.max(axis=1),
        "quantile_fall": out.min(axis=1),
        "p95_change": out[:, 1],
    }
    return {k: _percentiles(v, confidence) for k, v in picked.items()}
