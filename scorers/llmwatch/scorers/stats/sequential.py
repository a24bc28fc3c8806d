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

Alpha is spent over signals and time by `signal_alpha`: a budget of B false pages per 30 days, a
process restarted every `epoch_s` seconds, and S signals per model version give each (signal,
epoch) alpha = B * epoch_s / 30 days / S; by the union bound the expected number of false pages
of a stable version in 30 days is at most B, at any traffic rate (the bound does not depend on
how many samples or looks there are).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

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


def signal_alpha(false_pages_per_30d: float, epoch_s: float, n_signals: int) -> float:
    """Alpha of one signal's e-process over one epoch, so that a stable version (all nulls true)
    pages at most `false_pages_per_30d` times in 30 days in expectation (union bound over signals
    and epochs). Capped at 0.5: a threshold below 2 would page on noise by design."""
    if false_pages_per_30d <= 0 or epoch_s <= 0 or n_signals <= 0:
        raise ValueError("false_pages_per_30d, epoch_s and n_signals must be positive")
    epochs_per_30d = max(DAYS_30 / epoch_s, 1.0)
    return min(false_pages_per_30d / epochs_per_30d / n_signals, 0.5)


def rate_upper_bound(k: int, n: int, z: float = 3.0) -> float:
    """A conservative upper bound of a rate seen as k of n (Wilson score at `z`).

    The pager's null rate is the baseline's rate plus its own sampling error: the baseline is a
    finite sample, and a baseline that happened to see too few failures would otherwise make a
    stable version page once per epoch for ever. z = 3: that happens to about 1 baseline in 700.
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

    The ranks np +- z sqrt(n p (1 - p)): the true quantile lies between those order statistics
    except with probability about 2 * Phi(-z). The pager compares new answers with the upper
    bound (a "slower than" or "longer than" test) or the lower one ("shorter than"), so that the
    baseline's own sampling error does not count as drift.
    """
    v = np.sort(np.asarray(values, dtype=float))
    n = v.size
    if n == 0:
        raise ValueError("no baseline values")
    half = z * math.sqrt(n * p * (1 - p))
    lo = int(max(math.floor(n * p - half), 0))
    hi = int(min(math.ceil(n * p + half), n - 1))
    return float(v[lo]), float(v[hi])
