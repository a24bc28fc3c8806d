"""How many re-asks a consistency rate interval, and how many conversations a turn decay interval, need.

    .venv/bin/python bench/stability_power.py [--trials 2000] [--decay-trials 30] [--seed 0]

1. **Consistency rate** (`llmwatch report --consistency`: agreeing / compared re-asks with a Wilson
   95% interval, llmwatch.scorers.stats.proportions.wilson_interval). For true rates 0.7, 0.9 and
   0.99 and n compared re-asks: the expected interval width and its coverage, exactly (summed over
   the binomial distribution of the agreeing count), beside the same two from `--trials` seeded
   simulated draws; then the fewest re-asks whose expected width is at most 0.1, 0.05 and 0.02.
2. **Turn decay slope** (`llmwatch report`'s `turn_decay`, llmwatch.scorers.evaluation.turns, the
   within-conversation slope with its 95% cluster-bootstrap interval, 1,000 draws). Seeded
   conversations of L turns each, a conversation's level uniform in [0.6, 0.95] (conversations
   differ: a hard topic stays hard), each turn's quality one pass/fail verdict passing with
   probability `level - decay x (turn - 1)`: the noisiest quality a sample can have (a mean over
   several checks varies less), so the counts are on the safe side. For each decay, L and number
   of conversations: the mean interval width over `--decay-trials` trials and how often it covered
   the true slope (-decay); then the conversations a width of 0.02 per turn needs, the smallest
   simulated count that reaches it, or extrapolated from the largest as width ~ 1/sqrt(n).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import random
import time
from datetime import datetime, timezone

import numpy as np
from scipy.stats import binom

from llmwatch.core.records import Sample
from llmwatch.scorers.evaluation.matrix import ScoredSample
from llmwatch.scorers.evaluation.turns import turn_decay
from llmwatch.scorers.stats.proportions import wilson_interval

RATES = (0.7, 0.9, 0.99)
REASKS = (25, 50, 100, 200, 400, 800, 1600, 3200)
WIDTHS = (0.1, 0.05, 0.02)
DECAYS = (0.0, 0.025)
LENGTHS = (3, 6, 10)
CONVERSATIONS = (25, 50, 100, 200, 400, 800)


def wilson_exact(p: float, n: int) -> tuple[float, float]:
    """(expected width, coverage of p) of the Wilson 95% interval from n trials at rate p, exactly."""
    k = np.arange(n + 1)
    pmf = binom.pmf(k, n, p)
    width = cover = 0.0
    for ki, w in zip(k, pmf):
        lo, hi = wilson_interval(int(ki), n)
        width += w * (hi - lo)
        cover += w * (lo <= p <= hi)
    return float(width), float(cover)


def wilson_simulated(p: float, n: int, trials: int, seed: int) -> tuple[float, float]:
    """(mean width, coverage of p) over `trials` seeded binomial draws."""
    rng = np.random.default_rng(seed)
    widths, covered = [], 0
    for k in rng.binomial(n, p, size=trials):
        lo, hi = wilson_interval(int(k), n)
        widths.append(hi - lo)
        covered += lo <= p <= hi
    return float(np.mean(widths)), covered / trials


def reasks_for_width(p: float, width: float, limit: int = 1_000_000) -> int:
    """The fewest compared re-asks whose expected Wilson width at rate p is at most `width`.

    The expected width falls with n except for small wiggles (the binomial's lattice), so a doubling
    search brackets it and a bisection finds the first n of the bracket that reaches it.
    """
    lo, hi = 1, 2
    while wilson_exact(p, hi)[0] > width:
        lo, hi = hi, hi * 2
        if hi > limit:
            raise ValueError(f"more than {limit} re-asks for width {width} at rate {p}")
    while lo < hi:
        mid = (lo + hi) // 2
        if wilson_exact(p, mid)[0] <= width:
            hi = mid
        else:
            lo = mid + 1
    return hi


@functools.lru_cache(maxsize=None)
def _sample(conversation: int, turn: int) -> Sample:
    # Built once and reused by every trial (Sample construction is most of a trial's time otherwise).
    return Sample.model_construct(
        id=f"c{conversation}-{turn}",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        operation="chat",
        request={"messages": [{"role": "user", "content": "q"}] * turn},
        response=None,
        conversation_id=f"c{conversation}",
        turn=turn,
    )


def conversations(n: int, turns: int, decay: float, rng: random.Random) -> list[ScoredSample]:
    """n conversations of `turns` turns; quality one pass/fail verdict at p = level - decay x (turn - 1)."""
    rows = []
    for c in range(n):
        level = rng.uniform(0.6, 0.95)
        for t in range(1, turns + 1):
            p = min(1.0, max(0.0, level - decay * (t - 1)))
            score = 1.0 if rng.random() < p else 0.0
            rows.append(ScoredSample(_sample(c, t), "multi_turn_dialogue", "V", score, score >= 0.5))
    return rows


def decay_interval(n: int, turns: int, decay: float, trials: int, seed: int) -> tuple[float, float]:
    """(mean width, coverage of -decay) of turn_decay's slope interval over `trials` seeded trials."""
    widths, covered = [], 0
    for trial in range(trials):
        rng = random.Random(seed * 1_000_003 + trial)
        (d,) = turn_decay(conversations(n, turns, decay, rng), seed=trial)
        assert d.ci is not None
        widths.append(d.ci[1] - d.ci[0])
        covered += d.ci[0] <= -decay <= d.ci[1]
    return float(np.mean(widths)), covered / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000, help="simulated draws per consistency cell")
    ap.add_argument("--decay-trials", type=int, default=30, help="simulated traffic sets per turn decay cell")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.02, help="turn decay interval width to size for")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load[0]:.1f} {load[1]:.1f}")

    print("Consistency rate, Wilson 95% interval: expected width (coverage), exact / simulated")
    print("  re-asks " + "".join(f"{f'rate {p}':>30}" for p in RATES))
    for n in REASKS:
        cells = []
        for p in RATES:
            w, c = wilson_exact(p, n)
            sw, sc = wilson_simulated(p, n, args.trials, args.seed)
            cells.append(f"{w:.3f} ({c:.1%}) / {sw:.3f} ({sc:.1%})")
        print(f"  {n:<7} " + "".join(f"{cell:>30}" for cell in cells))
    print("Compared re-asks for an expected width of " + ", ".join(f"{w}" for w in WIDTHS))
    for p in RATES:
        print(f"  rate {p}: " + ", ".join(f"{reasks_for_width(p, w)}" for w in WIDTHS))

    print(
        f"Turn decay slope, 95% cluster-bootstrap interval (turn_decay, 1,000 draws): mean width (coverage of the "
        f"true slope) over {args.decay_trials} trials; one pass/fail verdict a turn"
    )
    print("  decay  turns " + "".join(f"{n:>16}" for n in CONVERSATIONS) + f"   width <= {args.target} from")
    for decay in DECAYS:
        for turns in LENGTHS:
            rows = [(n, *decay_interval(n, turns, decay, args.decay_trials, args.seed)) for n in CONVERSATIONS]
            enough = next((n for n, w, _ in rows if w <= args.target), None)
            n_max, w_max, _ = rows[-1]
            scaled = math.ceil(n_max * (w_max / args.target) ** 2)  # width ~ 1/sqrt(conversations)
            need = f"{enough if enough is not None else f'>{n_max}'} (~{scaled} by 1/sqrt(n))"
            cells = "".join(f"{f'{w:.4f} ({c:.0%})':>16}" for _, w, c in rows)
            print(f"  {decay:<6} {turns:<5} {cells}   {need} conversations")


if __name__ == "__main__":
    main()
