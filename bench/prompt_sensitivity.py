"""How many rephrased requests (clusters) a prompt sensitivity interval of a given width needs, and its CPU cost.

    .venv/bin/python bench/prompt_sensitivity.py [--trials 100] [--width 0.1] [--seed 0]

Seeded simulation of llmwatch.scorers.evaluation.sensitivity.sensitivity_figure. A phrasing's
value is the mean of four pass/fail checks over its re-asks; three checks pass with probability
0.97, the fourth (the refusal check) with probability `1 - p`, where p depends on the phrasing:

* robust (as the simulator's version A): p = 0.03 for every phrasing;
* sensitive (as the simulator's version B): p = 0.08 for a request as written and 0.48 for each
  rewording (its refusal rate plus the 0.4 of its phrasing trait).

For k clusters of m phrasings (the first as written, the others reworded) and r re-asks per
phrasing, it prints the mean width of the 95% cluster-bootstrap interval over `--trials` seeded
trials, how often the interval covered the true figure (the figure of 20,000 clusters), and the
smallest k whose mean width is at most `--width`; then the CPU time of
`prompt_sensitivity` per sample on 5,000 synthetic samples (lexical clustering, 1,000 draws).
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import datetime, timezone

import numpy as np

from llmwatch.core.records import Sample
from llmwatch.scorers.evaluation.matrix import ScoredSample
from llmwatch.scorers.evaluation.sensitivity import prompt_sensitivity, sensitivity_figure

KS = (5, 10, 20, 40, 80, 160, 320)


def phrasing_value(rng: np.random.Generator, p_refusal: float, reasks: int) -> float:
    checks = np.concatenate([rng.random((reasks, 3)) < 0.97, rng.random((reasks, 1)) >= p_refusal], axis=1)
    return float(checks.mean())


def clusters(rng: np.random.Generator, k: int, m: int, reasks: int, sensitive: bool) -> list[list[float]]:
    out = []
    for _ in range(k):
        ps = [0.08] + [0.48] * (m - 1) if sensitive else [0.03] * m
        out.append([phrasing_value(rng, p, reasks) for p in ps])
    return out


def widths(args: argparse.Namespace, m: int, reasks: int, sensitive: bool) -> list[tuple[int, float, float, float]]:
    """(k, mean width, mean figure, coverage of the true figure) per k."""
    truth, _, _, _ = sensitivity_figure(
        clusters(np.random.default_rng([args.seed, 99, m, reasks, int(sensitive)]), 20_000, m, reasks, sensitive),
        draws=10,
    )
    rows = []
    for k in KS:
        ws, figures, covered = [], [], 0
        for trial in range(args.trials):
            rng = np.random.default_rng([args.seed, k, m, reasks, int(sensitive), trial])
            figure, ci, _, _ = sensitivity_figure(clusters(rng, k, m, reasks, sensitive), seed=trial)
            assert figure is not None and ci is not None
            ws.append(ci[1] - ci[0])
            figures.append(figure)
            covered += ci[0] <= (truth or 0.0) <= ci[1]
        rows.append((k, float(np.mean(ws)), float(np.mean(figures)), covered / args.trials))
    return rows


def cpu_per_sample(n: int = 5000) -> float:
    rng = random.Random(0)
    rows = []
    for i in range(n):
        text = f"how should I look after plant number {i // 6} in a small flat"
        variant = [text, text.upper(), text + "?", text.capitalize() + "."][rng.randrange(4)]
        sample = Sample.model_construct(
            id=f"s{i}",
            timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
            operation="chat",
            request={"messages": [{"role": "user", "content": variant}]},
            response=None,
            conversation_id=None,
            turn=1,
        )
        rows.append(ScoredSample(sample, "general", "A", rng.random(), True))
    started = time.process_time()
    prompt_sensitivity(rows)
    return (time.process_time() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--trials", type=int, default=100, help="seeded trials per setting (interval width and coverage are their mean)"
    )
    parser.add_argument("--width", type=float, default=0.1, help="the interval width to find the clusters for")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulation (same seed, same figures)")
    args = parser.parse_args()
    print(
        f"mean 95% interval width (and coverage of the true figure) over {args.trials} seeded trials; "
        "k = clusters (rephrased requests)"
    )
    for sensitive in (False, True):
        for m, reasks in ((3, 1), (5, 1), (5, 2)):
            rows = widths(args, m, reasks, sensitive)
            enough = next((k for k, w, _, _ in rows if w <= args.width), None)
            name = "sensitive (B-like)" if sensitive else "robust (A-like)"
            print(
                f"{name:<19} m={m} phrasings, r={reasks} re-asks: figure ~{rows[-1][2]:.3f}; "
                + ", ".join(f"k={k}: {w:.3f} ({c:.0%})" for k, w, _, c in rows)
                + f"  -> width <= {args.width}: k >= {enough if enough is not None else '>' + str(KS[-1])}"
            )
    print(f"CPU: {cpu_per_sample():.1f} us per sample (prompt_sensitivity, 5,000 samples, lexical, 1,000 draws)")


if __name__ == "__main__":
    main()
