"""CPU of one online drift comparison (DriftWindows.evaluate, what the scorer runs every
`drift.interval_s`) with and without the effect intervals (`drift.interval_draws`).

    .venv/bin/python bench/drift_interval_cpu.py [--window 2000] [--rounds 3]

Synthetic traffic (bench/synthetic.py): a baseline of 2,000 samples, a current window of
`--window` samples of a version with longer latency and more refusals, the default window size.
Rounds alternate the settings so that a machine's load hits both alike; process CPU time
(time.process_time), the median of the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from synthetic import Behaviour, window

from llmwatch.scorers.drift.baseline import freeze
from llmwatch.scorers.drift.model import DriftSettings
from llmwatch.scorers.drift.online import DriftWindows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    base = freeze(*window(rng, 2000, Behaviour(), version="A", prefix="a"), model_version="A")
    cur = window(rng, args.window, Behaviour(latency_ms=1500.0, refusal=0.06), version="B", prefix="b")
    cpu: dict[int, list[float]] = {400: [], 0: []}
    for _ in range(args.rounds):
        for draws in cpu:
            windows = DriftWindows(base, window=args.window, interval_s=0, settings=DriftSettings(interval_draws=draws))
            windows.add(*cur)
            started = time.process_time()
            readings = windows.evaluate()
            cpu[draws].append(time.process_time() - started)
            assert readings, "no readings"
    with_, without = statistics.median(cpu[400]), statistics.median(cpu[0])
    print(f"window {args.window}, {args.rounds} rounds, CPU s per comparison (median; all):")
    print(f"  interval_draws 400: {with_:.2f} s {[round(x, 2) for x in cpu[400]]}")
    print(f"  interval_draws 0:   {without:.2f} s {[round(x, 2) for x in cpu[0]]}")
    print(f"  the intervals cost {100 * (with_ / without - 1):+.0f} %")


if __name__ == "__main__":
    main()
