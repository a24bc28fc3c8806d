"""How many pairs shadow evaluation needs, paired vs unpaired, and how often an identical candidate is called worse.

    python bench/shadow_power.py [--trials 400] [--fpr-runs 200] [--fpr-pairs 1000] [--seed 1]

Simulated data, no network: the point is the statistics, on a data model stated here.

- Prompts differ: most are easy (pass probability 0.995), some are hard (0.40); per prompt the
  log-latency has a prompt effect (answer length, sd 0.6) and per-call noise (sd 0.25). This
  prompt-to-prompt spread is what pairing removes.
- Primary and candidate answer the same prompt independently given the prompt. The degraded
  candidate's pass probability is lowered on every prompt (a logit shift sized for a mean drop of
  2 points), or every latency is multiplied by 1.10.
- Paired tests (what `llmwatch shadow report` runs): McNemar's exact test on the disagreements,
  Wilcoxon's signed-rank test on log-latency differences. Unpaired tests on the *same* calls with
  the pairing ignored (what a comparison of two windows can do): a two-proportion z-test and
  the Mann-Whitney U test. One-sided, alpha 0.05; power is the share of trials that detect.

The false-alarm rate runs the full report (`scorers.paired.compare`, margins of
`shadow.margins`, Holm over the signals) on an identical candidate many times and counts
`worse` verdicts.
"""

from __future__ import annotations

import argparse
import math
import time
from datetime import datetime, timezone

import numpy as np
from scipy import stats

EASY_P, HARD_P, HARD_SHARE = 0.995, 0.40, 0.15
PROMPT_SD, CALL_SD = 0.6, 0.25
ALPHA = 0.05
POWER = 0.95


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


def _shift_for_drop(drop: float) -> float:
    """Logit shift that lowers the mean pass probability by `drop` (bisection on the mixture)."""
    base = np.array([EASY_P, HARD_P])
    weights = np.array([1 - HARD_SHARE, HARD_SHARE])
    mean = float(weights @ base)
    lo, hi = 0.0, 5.0
    for _ in range(60):
        mid = (lo + hi) / 2
        shifted = 1 / (1 + np.exp(-(_logit(base) - mid)))
        if mean - float(weights @ shifted) < drop:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def prompts(rng: np.random.Generator, trials: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    hard = rng.random((trials, n)) < HARD_SHARE
    p = np.where(hard, HARD_P, EASY_P)
    effect = rng.normal(0.0, PROMPT_SD, (trials, n))
    return p, effect


def pass_power(rng: np.random.Generator, trials: int, n: int, shift: float) -> tuple[float, float]:
    p, _ = prompts(rng, trials, n)
    q = 1 / (1 + np.exp(-(_logit(p) - shift)))
    a = rng.random((trials, n)) < p  # primary passes
    b = rng.random((trials, n)) < q  # candidate passes
    wins = (~a & b).sum(axis=1)
    losses = (a & ~b).sum(axis=1)
    paired_p = stats.binom.sf(losses - 1, wins + losses, 0.5)
    paired_p = np.where(wins + losses == 0, 1.0, paired_p)
    # Unpaired: two independent proportions, pooled z, one-sided (candidate lower).
    pa, pb = a.mean(axis=1), b.mean(axis=1)
    pooled = (pa + pb) / 2
    se = np.sqrt(np.maximum(pooled * (1 - pooled) * 2 / n, 1e-12))
    unpaired_p = stats.norm.sf((pa - pb) / se)
    return float((paired_p < ALPHA).mean()), float((unpaired_p < ALPHA).mean())


def latency_power(rng: np.random.Generator, trials: int, n: int, ratio: float) -> tuple[float, float]:
    _, effect = prompts(rng, trials, n)
    la = effect + rng.normal(0.0, CALL_SD, (trials, n))
    lb = effect + math.log(ratio) + rng.normal(0.0, CALL_SD, (trials, n))
    paired_p = stats.wilcoxon(lb - la, alternative="greater", axis=1).pvalue
    unpaired_p = stats.mannwhitneyu(lb, la, alternative="greater", axis=1).pvalue
    return float((paired_p < ALPHA).mean()), float((unpaired_p < ALPHA).mean())


def smallest_n(power_at, lo: int = 8, hi: int = 400_000) -> int:
    """Smallest n (to about 5 %) whose estimated power reaches POWER: doubling, then bisection."""
    n = lo
    while n < hi and power_at(n) < POWER:
        n *= 2
    if n >= hi:
        return hi
    low = n // 2
    while n - low > max(2, n // 20):
        mid = (low + n) // 2
        if power_at(mid) >= POWER:
            n = mid
        else:
            low = mid
    return n


def false_alarms(runs: int, n: int, seed: int) -> tuple[int, int, dict[str, int]]:
    from llmwatch.core.pairs import Pair, PairScore
    from llmwatch.core.records import Sample, Usage
    from llmwatch.scorers.evaluation.config import ShadowMargins
    from llmwatch.scorers.evaluation.paired import compare

    rng = np.random.default_rng(seed)
    margins = ShadowMargins()
    worse = 0
    decided = 0
    where: dict[str, int] = {}
    ts = datetime(2026, 12, 1, tzinfo=timezone.utc)

    def sample(i: int, ms: float, tokens: int) -> Sample:
        return Sample.model_construct(
            id=f"s{i}",
            timestamp=ts,
            model="m",
            status=200,
            error_type=None,
            latency_ms=ms,
            ttft_ms=ms / 5,
            usage=Usage(output_tokens=tokens),
            cost_usd=tokens * 1e-6,
            request={},
            response={"choices": [{"message": {"content": "x"}}]},
            metadata={},
        )

    for _ in range(runs):
        p, effect = prompts(rng, 1, n)
        p, effect = p[0], effect[0]
        a = rng.random(n) < p
        b = rng.random(n) < p
        la = np.exp(5 + effect + rng.normal(0, CALL_SD, n))
        lb = np.exp(5 + effect + rng.normal(0, CALL_SD, n))
        ta = np.maximum(1, (la / 5).astype(int))
        tb = np.maximum(1, (lb / 5).astype(int))
        pairs = [
            Pair.model_construct(
                schema_="llmwatch.pair/v1",
                id=f"p{i}",
                candidate="same",
                timestamp=ts,
                route="/v1/chat/completions",
                category=None,
                primary=sample(i, float(la[i]), int(ta[i])),
                shadow=sample(i, float(lb[i]), int(tb[i])),
                primary_scores=[
                    PairScore.model_construct(check="c", kind="c", result="pass" if a[i] else "fail", value=None)
                ],
                shadow_scores=[
                    PairScore.model_construct(check="c", kind="c", result="pass" if b[i] else "fail", value=None)
                ],
                scored_by="rules",
            )
            for i in range(n)
        ]
        report = compare(pairs, margins)
        if report.verdict == "worse":
            worse += 1
            for signal in report.worse_on:
                where[signal] = where.get(signal, 0) + 1
        elif report.verdict == "not_worse":
            decided += 1
    return worse, decided, where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400, help="simulated studies per sample size (power estimate)")
    ap.add_argument("--fpr-runs", type=int, default=200, help="identical-candidate reports for the false-alarm rate")
    ap.add_argument("--fpr-pairs", type=int, default=1000, help="pairs per identical-candidate report")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    shift = _shift_for_drop(0.02)
    base = (1 - HARD_SHARE) * EASY_P + HARD_SHARE * HARD_P
    print(
        f"data model: pass rate {base:.3f} (share {HARD_SHARE} of hard prompts at {HARD_P}), log-latency sd prompt {PROMPT_SD} + call {CALL_SD}"
    )
    print(f"power {POWER:.0%}, one-sided alpha {ALPHA}, {args.trials} simulated studies per size\n")
    rows = []
    n_pp = smallest_n(lambda n: pass_power(rng, args.trials, n, shift)[0])
    n_pu = smallest_n(lambda n: pass_power(rng, args.trials, n, shift)[1])
    rows.append(("pass rate -2 points", "McNemar exact", n_pp, "two-proportion z", n_pu))
    n_lp = smallest_n(lambda n: latency_power(rng, args.trials, n, 1.10)[0], lo=4)
    n_lu = smallest_n(lambda n: latency_power(rng, args.trials, n, 1.10)[1], lo=4)
    rows.append(("latency +10 %", "Wilcoxon signed-rank", n_lp, "Mann-Whitney U", n_lu))
    print(
        f"{'change':<22}{'paired test':<24}{'pairs':>8}   {'unpaired test':<20}{'calls per side':>15}   {'unpaired / paired':>17}"
    )
    for change, pt, pn, ut, un in rows:
        print(f"{change:<22}{pt:<24}{pn:>8}   {ut:<20}{un:>15}   {un / pn:>16.1f}x")
    worse, decided, where = false_alarms(args.fpr_runs, args.fpr_pairs, args.seed + 1)
    print(f"\nidentical candidate, {args.fpr_runs} reports of {args.fpr_pairs} pairs each (default margins, Holm):")
    print(f"  verdict worse      {worse} ({worse / args.fpr_runs:.1%})" + (f"  on {where}" if where else ""))
    print(
        f"  verdict not worse  {decided} ({decided / args.fpr_runs:.1%}); the rest undecided (more pairs needed for the 1-point margin)"
    )
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
