"""Anytime-valid tests for drift monitoring: evidence that may be looked at after every sample.

A fixed-window test at level alpha, repeated every 30 seconds, is a fresh chance of a false alarm
at every look; over a month of looks a stable version pages many times. The tests here are
*e-processes*: nonnegative processes whose expectation under the null hypothesis is at most 1 at
every stopping time. Ville's inequality then bounds the chance that one *ever* crosses 1/alpha,
however long it runs and however often it is read: P(sup_t E_t >= 1/alpha) <= alpha.

Every drift signal the pager watches is reduced to one question about a stream of 0/1 outcomes
(a check failed; an answer was longer than a bound; a token came slower than a bound): is the
rate of 1s above `q`? The test of H0: E[Y_t | past] <= q is a betting game. A bettor staking a
fraction lambda of its wealth on "Y = 1 more often than q" multiplies its wealth by
1 + lambda * (Y - q); under H0 that factor has conditional mean at most 1, so the wealth is a
supermartingale for any lambda in [0, 1/q). A mixture over a fixed grid of lambdas (the average of
the bettors' wealth) is again one, and is close to the best single lambda in hindsight (within
log of the grid size): the grid spans the small effects that matter (lambda ~ effect / variance)
to the large ones (lambda near 1/q), so no tuning is needed. The same function serves the online
pager (one update per sample, `BernoulliEProcess`) and the simulations (whole streams at once,
`bernoulli_e_values`); both give the same numbers (tests/unit/test_sequential_stats.py).

A test that stops at the first crossing answers "is there any change, ever?"; a pager must keep
watching after a stable month and after a page. For that the same bets feed an *e-detector*
(Shiryaev-Roberts form, Shin, Ramdas and Rinaldo 2023): a new bettor joins with 1 unit at every
sample, R_t = (R_{t-1} + 1) * (1 + lambda * (Y_t - q)), so evidence gathered since a change
began counts in full however long the stable stretch before it was (an e-process that watched the
stable stretch would first have to win back what it lost there). Under H0, R_t - t is a
supermartingale; with R reset to 0 after each alarm, R_t - t + c * alarms_t still is, so the
expected number of alarms in t samples is at most t / c, for any t. `detector_threshold` sets c
from a budget of B false pages per 30 days at a stated number of samples per 30 days, over S
signals: c = S * samples / B (union bound: a stable version pages at most B times in
expectation; at a higher traffic rate than stated, proportionally more).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as _sps

DAYS_30 = 30 * 86_400.0
# Bettors' stakes as fractions of the largest allowed (1/q): halving from one half down, 14
# values: 0.5/q ... 0.5/q / 8192. A drop of 1 point in a 5 % failure rate wants lambda ~ 0.2
# (effect / variance); 1/q = 20 there, so the grid reaches it at 20 * 2^-7.
GRID_SIZE = 14
# E-values are reported up to e^600 (~1e260): far past any threshold, and finite as a float gauge.
LOG_CAP = 600.0


def lambda_grid(q: float, size: int = GRID_SIZE) -> np.ndarray:
    """The bettors' stakes for H0: rate <= q; each keeps 1 + lambda * (y - q) >= 0.5 > 0."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"the null rate q must be in (0, 1), got {q}")
    return 0.5 / q * 0.5 ** np.arange(size, dtype=float)


def bernoulli_e_values(y: np.ndarray, q: float, size: int = GRID_SIZE) -> np.ndarray:
    """E_t after each of the outcomes `y` (0/1), for H0: P(y = 1 | past) <= q; E_0 = 1.

    The mixture (mean over the grid) of the bettors' wealth. Computed in logs: a month of traffic
    is hundreds of thousands of factors.
    """
    y = np.asarray(y, dtype=float)
    lam = lambda_grid(q, size)
    steps = np.log1p(np.outer(y - q, lam))  # (n, size)
    log_wealth = np.cumsum(steps, axis=0)
    top = log_wealth.max(axis=1, keepdims=True)
    log_e = top[:, 0] + np.log(np.exp(log_wealth - top).mean(axis=1))
    return np.exp(np.minimum(log_e, LOG_CAP))


def first_crossing(e_values: np.ndarray, threshold: float) -> int | None:
    """Index of the first E_t >= threshold (the sample that made the evidence decisive), or None."""
    hits = np.flatnonzero(np.asarray(e_values) >= threshold)
    return int(hits[0]) if hits.size else None


@dataclass
class BernoulliEProcess:
    """The same e-process, one outcome at a time (the online pager keeps one per signal)."""

    q: float
    size: int = GRID_SIZE
    n: int = 0
    ones: int = 0
    _lam: np.ndarray = field(init=False, repr=False)
    _log_wealth: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._lam = lambda_grid(self.q, self.size)
        self._log_wealth = np.zeros(self.size)

    def update(self, y: int | bool) -> float:
        """Take one outcome; the e-value after it."""
        self._log_wealth += np.log1p(self._lam * (float(y) - self.q))
        self.n += 1
        self.ones += int(bool(y))
        return self.e_value

    @property
    def e_value(self) -> float:
        top = float(self._log_wealth.max())
        return math.exp(min(top + math.log(float(np.exp(self._log_wealth - top).mean())), LOG_CAP))


def sr_log_values(y: np.ndarray, q: float, size: int = GRID_SIZE) -> np.ndarray:
    """log R_t of the Shiryaev-Roberts e-detector after each outcome, without resets; R_0 = 0.

    R_t^j = (R_{t-1}^j + 1) f_t^j is R_t^j = sum_{s<=t} prod_{u=s..t} f_u^j = P_t sum_{s<=t} 1/P_{s-1}
    with P the running product: in logs, L_t + logcumsumexp(-L_{s-1}). Averaged over the grid.
    """
    y = np.asarray(y, dtype=float)
    if y.size == 0:
        return np.zeros(0)
    lam = lambda_grid(q, size)
    log_f = np.log1p(np.outer(y - q, lam))  # (n, size)
    big_l = np.cumsum(log_f, axis=0)
    before = np.vstack([np.zeros((1, size)), big_l[:-1]])  # L_{s-1}
    log_r = big_l + np.logaddexp.accumulate(-before, axis=0)
    top = log_r.max(axis=1, keepdims=True)
    return top[:, 0] + np.log(np.exp(log_r - top).mean(axis=1))


def detector_alarms(y: np.ndarray, q: float, threshold: float, size: int = GRID_SIZE) -> list[int]:
    """Indices where the e-detector reaches `threshold`, resetting to 0 after each (the pager's rule)."""
    y = np.asarray(y, dtype=float)
    log_c = math.log(threshold)
    alarms: list[int] = []
    start = 0
    while start < y.size:
        hits = np.flatnonzero(sr_log_values(y[start:], q, size) >= log_c)
        if not hits.size:
            break
        alarms.append(start + int(hits[0]))
        start += int(hits[0]) + 1
    return alarms


@dataclass
class EDetector:
    """The e-detector, one outcome at a time (the online pager keeps one per signal)."""

    q: float
    size: int = GRID_SIZE
    n: int = 0  # outcomes since the last reset
    _lam: np.ndarray = field(init=False, repr=False)
    _log_r: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._lam = lambda_grid(self.q, self.size)
        self.reset()

    def reset(self) -> None:
        self._log_r = np.full(self.size, -np.inf)
        self.n = 0

    def update(self, y: int | bool) -> float:
        """Take one outcome; log R after it."""
        self._log_r = np.logaddexp(self._log_r, 0.0) + np.log1p(self._lam * (float(y) - self.q))
        self.n += 1
        return self.log_value

    @property
    def log_value(self) -> float:
        top = float(self._log_r.max())
        if top == -math.inf:
            return -math.inf
        return top + math.log(float(np.exp(self._log_r - top).mean()))

    @property
    def value(self) -> float:
        return math.exp(min(self.log_value, LOG_CAP))


def detector_threshold(false_pages_per_30d: float, samples_per_30d: float, n_signals: int) -> float:
    """The alarm level c of each of `n_signals` e-detectors so that a stable version raises at most
    `false_pages_per_30d` alarms in expectation over `samples_per_30d` samples (E[alarms] <= t / c
    per detector, summed). At least 20: below, a detector would alarm on noise by design."""
    if false_pages_per_30d <= 0 or samples_per_30d <= 0 or n_signals <= 0:
        raise ValueError("false_pages_per_30d, samples_per_30d and n_signals must be positive")
    return max(n_signals * samples_per_30d / false_pages_per_30d, 20.0)


def rate_upper_bound(k: int, n: int, z: float = 3.0) -> float:
    """A conservative upper bound of a rate seen as k of n (Wilson score at `z`).

    The pager's null rate is the baseline's rate plus its own sampling error: the baseline is a
    finite sample, and a baseline that happened to see too few failures would otherwise make a
    stable version page again and again for ever. z = 3: that happens to about 1 baseline in 700.
    """
    if n <= 0:
        raise ValueError("no baseline observations")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return min(centre + half, 1.0)


def quantile_bounds(values: np.ndarray, p: float, z: float = 3.0) -> tuple[float, float]:
    """Distribution-free bounds (lower, upper) on the p-quantile from a sample, by order statistics.

    Each bound misses the true quantile with probability at most Phi(-z) (z = 3: 0.00135), exactly:
    the j-th smallest value (from 0) lies above the true p-quantile only when at most j of the n
    values fall below it, P(Binomial(n, p) <= j), and below it only when more than j do. The lower
    bound is the highest, the upper the lowest order statistic that keeps its miss within Phi(-z).
    Where none can (a p95 from fewer than 129 values: even the maximum misses 0.95^n of the time,
    21 % at n = 30), the bound is -inf or inf: the sample cannot bound that quantile. The pager
    compares new answers with the upper bound (a "slower than" or "longer than" test) or the lower
    one ("shorter than"), so that the baseline's own sampling error does not count as drift.
    """
    v = np.sort(np.asarray(values, dtype=float))
    n = v.size
    if n == 0:
        raise ValueError("no baseline values")
    if not 0.0 < p < 1.0:
        raise ValueError(f"the quantile p must be in (0, 1), got {p}")
    miss = float(_sps.norm.sf(z))
    # ppf gives the order statistic's index to within one; the binomial law itself decides.
    lo = int(_sps.binom.ppf(miss, n, p))
    while lo >= 0 and _sps.binom.cdf(lo, n, p) > miss:
        lo -= 1
    hi = max(int(_sps.binom.ppf(1.0 - miss, n, p)) - 1, 0)
    while hi < n and _sps.binom.sf(hi, n, p) > miss:
        hi += 1
    return (float(v[lo]) if lo >= 0 else -math.inf, float(v[hi]) if hi < n else math.inf)
