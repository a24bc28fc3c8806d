"""Calibration and power of the performance family's two tests (location and tail), seeded.

The performance family judges each per-unit figure (time per output token, TTFT within input-length
buckets, cost per 1k tokens) with a location test (van Elteren) and a tail test (`upper_tail`: the
current values above the pooled p95 within strata, exact and one-sided), both against the margin
(the current values divided by 1 + `performance_margin`: H0 "at most the margin slower"), all six
hypotheses Holm-corrected together at alpha 0.05 (drift.families). This measures, on synthetic
traffic of four categories with their own latency levels:

* the false-drift rate with no change (target <= alpha), and with a load of +10 % on every
  latency (within the 20 % margin: not a regression either, target about alpha or below);
* power on a tail-only regression (a tenth of the calls several times slower, the rest faster:
  the median the same or lower, p95 +60-100 %) and on location shifts (every call 30 %, 50 %,
  100 % slower);
* which test decided, and what the rule before would have found on the same trials: the tests
  against no change (Holm over the same six), drift when one is significant with z > 0 and the
  p50 or p95 *point estimate* beyond the margin (p95 for the tail test).

    python bench/drift_perf_tail.py [--trials 2000] [--power-trials 300] [--seed 2026]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np

from llmwatch.scorers.drift.families import family_signals
from llmwatch.scorers.drift.features import RouteStats
from llmwatch.scorers.drift.model import DriftSettings, Signal
from llmwatch.scorers.drift.rows import Row
from llmwatch.scorers.stats.twosample import adjust_pvalues

CATEGORIES = ("chat", "code", "summarise", "extract")
SHARES = (0.4, 0.3, 0.2, 0.1)
MS_PER_TOKEN = (10.0, 15.0, 20.0, 30.0)  # median per category
DECIDING = ("perf:latency_per_token_ms", "perf:ttft_ms_by_input_length", "perf:cost_per_1k_tokens")


@dataclass(frozen=True)
class Change:
    """How the current version differs: every latency times `load`, the per-token median times
    `median`, and a share `slow` of calls `slow_factor` times slower per token and to first token."""

    load: float = 1.0
    median: float = 1.0
    slow: float = 0.0
    slow_factor: float = 1.0


SCENARIOS = {
    "no change": Change(),
    "load +10 % (within the margin)": Change(load=1.1),
    "load +20 % (at the margin)": Change(load=1.2),
    # p50 -14 %, p95 +98 % per token (400,000 draws): the case the location test reads as faster.
    "tail only: 10 % of calls x6, the rest x0.8": Change(median=0.8, slow=0.10, slow_factor=6.0),
    # p50 0 %, p95 +59 % per token.
    "tail only: 10 % of calls x4, the rest x0.93": Change(median=0.93, slow=0.10, slow_factor=4.0),
    "location: every call x1.3": Change(median=1.3),
    "location: every call x1.5": Change(median=1.5),
    "location: every call x2": Change(median=2.0),
}


def traffic(rng: np.random.Generator, n: int, change: Change, prefix: str) -> dict[str, RouteStats]:
    cat = rng.choice(len(CATEGORIES), n, p=SHARES)
    slow = np.where(rng.random(n) < change.slow, change.slow_factor, 1.0)
    per_token = np.asarray(MS_PER_TOKEN)[cat] * rng.lognormal(0, 0.35, n) * change.median * change.load * slow
    prompt = np.round(rng.lognormal(math.log(200), 1.0, n)) + 1
    ttft = (50 + 0.5 * prompt) * rng.lognormal(0, 0.3, n) * change.median * change.load * slow
    output = np.round(rng.lognormal(math.log(150), 0.6, n)) + 1
    cost_per_1k = 1000 * (prompt * 0.15 + output * 0.6) / 1e6 / (prompt + output)
    rows = [
        Row(
            category=CATEGORIES[c],
            prompt_hash=f"{prefix}{i}",
            prompt_tokens=float(p),
            ms_per_token=float(m),
            ttft_ms=float(t),
            cost_per_1k=float(k),
            latency_ms=float(t + m * o),
        )
        for i, (c, m, p, t, o, k) in enumerate(zip(cat, per_token, prompt, ttft, output, cost_per_1k))
    ]
    return {"/v1/chat/completions": RouteStats(n=n, rows=rows)}


def rule_before(signals: list[Signal], s: DriftSettings) -> bool:
    """The rule before the margin entered the tests: the tests against no change (Holm over the
    same location and tail tests), drift when one is significant with z > 0 and the p50 or p95
    point estimate beyond the margin (p95 alone for the tail test)."""
    tested = [g for g in signals if g.name in DECIDING and "location" in g.detail]
    hypotheses = [(g, "location") for g in tested] + [(g, "tail") for g in tested if "tail" in g.detail]
    adjusted = adjust_pvalues([g.detail[w]["unshifted_p"] for g, w in hypotheses], method=s.correction)
    m = s.performance_margin
    return any(
        p < s.alpha
        and g.detail[w]["unshifted_statistic"] > 0
        and (max(g.detail["p50_change"], g.detail["p95_change"]) if w == "location" else g.detail["p95_change"]) > m
        for (g, w), p in zip(hypotheses, adjusted)
    )


def variant(signals: list[Signal], s: DriftSettings, *, tail_shifted: bool, one_sided: bool) -> bool:
    """Variants not chosen, on the same trials: the tail test against no change (with the p95
    point estimate beyond the margin, as before), or the location test against the margin read
    one-sided (half its two-sided p-value where z > 0)."""
    tested = [g for g in signals if g.name in DECIDING and "location" in g.detail]
    loc = [
        (g, "location", g.detail["location"]["p"] / (2 if one_sided else 1), g.detail["location"]["statistic"])
        for g in tested
    ]
    key = "" if tail_shifted else "unshifted_"
    tail = [
        (g, "tail", g.detail["tail"][f"{key}p"], g.detail["tail"][f"{key}statistic"])
        for g in tested
        if "tail" in g.detail
    ]
    hypotheses = loc + tail
    adjusted = adjust_pvalues([p for _, _, p, _ in hypotheses], method=s.correction)
    m = s.performance_margin
    return any(
        p < s.alpha
        and z > 0
        and (max(g.detail["p50_change"], g.detail["p95_change"]) if w == "location" else g.detail["p95_change"]) > m
        for (g, w, _, z), p in zip(hypotheses, adjusted)
    )


def run(rng: np.random.Generator, n_base: int, n_cur: int, change: Change, trials: int, s: DriftSettings) -> dict:
    drift = by_tail = by_location = before = tail_plain = one_sided = 0
    p50, p95 = [], []
    for t in range(trials):
        signals, fams = family_signals(
            traffic(rng, n_base, Change(), f"b{t}-"), traffic(rng, n_cur, change, f"c{t}-"), s
        )
        perf = [g for g in signals if g.name in DECIDING]
        drift += fams["performance"]["verdict"] == "drift"
        decided = {g.detail.get("decided_by") for g in perf if g.verdict == "drift"}
        by_tail += "tail" in decided and "location" not in decided
        by_location += "location" in decided
        before += rule_before(perf, s)
        tail_plain += variant(perf, s, tail_shifted=False, one_sided=False)
        one_sided += variant(perf, s, tail_shifted=True, one_sided=True)
        p50 += [g.detail["p50_change"] for g in perf if g.name == "perf:latency_per_token_ms"]
        p95 += [g.detail["p95_change"] for g in perf if g.name == "perf:latency_per_token_ms"]
    return {
        "drift": drift / trials,
        "location": by_location / trials,
        "tail_only": by_tail / trials,
        "before": before / trials,
        "tail_plain": tail_plain / trials,
        "one_sided": one_sided / trials,
        "p50_change": float(np.median(p50)),
        "p95_change": float(np.median(p95)),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=2000, help="trials with no change, per size")
    p.add_argument("--power-trials", type=int, default=300, help="trials per other scenario and size")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--sizes", default="300x300,2000x500", help="baseline x current sample counts")
    args = p.parse_args()
    s = DriftSettings(interval_draws=0)  # intervals do not enter a verdict
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    lines = [
        "| scenario | baseline x current | trials | performance drift | decided by location | by the tail test alone | the rule before (point estimate beyond the margin) | per-token p50 / p95 change (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    variants = [
        "| scenario | baseline x current | trials | chosen: both tests against the margin, two-sided location p | tail test against no change | location test read one-sided |",
        "|---|---|---|---|---|---|",
    ]
    for size in args.sizes.split(","):
        nb, nc = (int(x) for x in size.split("x"))
        for name, change in SCENARIOS.items():
            trials = args.trials if change == Change() else args.power_trials
            r = run(rng, nb, nc, change, trials, s)
            lines.append(
                f"| {name} | {nb} x {nc} | {trials} | {r['drift']:.3f} | {r['location']:.3f} | {r['tail_only']:.3f} | {r['before']:.3f} | {r['p50_change']:+.2f} / {r['p95_change']:+.2f} |"
            )
            variants.append(
                f"| {name} | {nb} x {nc} | {trials} | {r['drift']:.3f} | {r['tail_plain']:.3f} | {r['one_sided']:.3f} |"
            )
            print(lines[-1], flush=True)
    print(
        f"\nperformance family, alpha {s.alpha}, {s.correction} over 3 location + 3 tail tests against the margin {s.performance_margin:.0%}, seed {args.seed} ({time.perf_counter() - started:.0f} s)"
    )
    print("\n".join(lines))
    print("\nvariants not chosen, on the same trials (performance drift):")
    print("\n".join(variants))


if __name__ == "__main__":
    main()
