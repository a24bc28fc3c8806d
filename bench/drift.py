"""Time to compute a full drift report for 1k, 10k and 100k current samples against a 10k baseline.

"Full report" = summarising the current window from its samples, scores and answer embeddings
(exactly what `llmwatch drift` and the online detector do) plus every test and the correction.
Scoring the samples is not included (that is bench/scoring_throughput.py). Data: bench/synthetic.py.

    python bench/drift.py [--sizes 1000,10000,100000] [--baseline 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import Behaviour, degradations, window  # noqa: E402

from llmwatch.scorers.drift.baseline import freeze  # noqa: E402
from llmwatch.scorers.drift.compare import compare  # noqa: E402
from llmwatch.scorers.drift.features import summarize  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--baseline", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    samples, scores, emb = window(rng, args.baseline, Behaviour(), prefix="base")
    t = time.perf_counter()
    baseline = freeze(samples, scores, emb, model_version="A")
    freeze_s = time.perf_counter() - t
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        cur = window(rng, n, degradations()["latency +40%"], version="B", prefix="cur")
        times_sum, times_cmp = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            current = summarize(*cur)
            t1 = time.perf_counter()
            report = compare(baseline.routes, current, baseline_version="A", current_versions=["B"])
            t2 = time.perf_counter()
            times_sum.append(t1 - t0)
            times_cmp.append(t2 - t1)
        rows.append((n, np.median(times_sum), np.median(times_cmp), len(report.signals), report.verdict))
    out = [
        f"drift report timing, {time.strftime('%Y-%m-%d')}, baseline {args.baseline} samples (frozen in {freeze_s:.2f} s), median of {args.repeat}",
        "",
        "| current samples | summarise (s) | tests + correction (s) | full report (s) | signals | verdict |",
        "|---|---|---|---|---|---|",
    ]
    out += [f"| {n:,} | {a:.3f} | {b:.3f} | {a + b:.3f} | {k} | {v} |" for n, a, b, k, v in rows]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
