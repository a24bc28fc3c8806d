"""False alarms and power of the whole drift detector (all signals, Holm-corrected, alpha 0.05).

* False-positive control: version A against its own baseline with fresh samples from the same
  behaviour, over many seeds: the share of runs with any drift verdict (target <= alpha).
* Power: for each realistic degradation (bench/synthetic.py `degradations`), the smallest
  current-window size (on a grid, doubling) at which the detector flags drift in >= 95% of runs.

    python bench/drift_power.py [--trials 40] [--fpr-trials 200] [--baseline 5000]
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
from llmwatch.scorers.drift.compare import DriftSettings, compare  # noqa: E402
from llmwatch.scorers.drift.features import summarize  # noqa: E402
from llmwatch.scorers.stats.twosample import samples_for_proportion_shift  # noqa: E402

GRID = (50, 100, 200, 400, 800, 1600, 3200, 6400, 12800)


def detects(baseline, rng, n: int, behaviour: Behaviour, settings: DriftSettings) -> tuple[bool, list[str]]:
    cur = summarize(*window(rng, n, behaviour, version="B", prefix="cur"))
    report = compare(baseline.routes, cur, baseline_version="A", current_versions=["B"], settings=settings)
    return report.verdict == "drift", [s.name for s in report.signals if s.verdict == "drift"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--fpr-trials", type=int, default=200)
    p.add_argument("--baseline", type=int, default=5000)
    args = p.parse_args()
    settings = DriftSettings(mmd_permutations=100)
    rng = np.random.default_rng(2026)
    baseline = freeze(*window(rng, args.baseline, Behaviour(), prefix="base"), model_version="A")
    started = time.perf_counter()

    fpr_rows = []
    for n in (100, 500, 2000):
        alarms = sum(detects(baseline, rng, n, Behaviour(), settings)[0] for _ in range(args.fpr_trials))
        fpr_rows.append((n, alarms, args.fpr_trials))

    power_rows = []
    for name, behaviour in degradations().items():
        found = None
        signals: dict[str, int] = {}
        for n in GRID:
            hits = 0
            for _ in range(args.trials):
                hit, names = detects(baseline, rng, n, behaviour, settings)
                hits += hit
                for s in names:
                    signals[s] = signals.get(s, 0) + 1
            if hits / args.trials >= 0.95:
                found = (n, hits)
                break
        top = ", ".join(s for s, _ in sorted(signals.items(), key=lambda kv: -kv[1])[:2])
        power_rows.append((name, found, top))

    base = Behaviour()
    closed = {
        "JSON validity -5 points": samples_for_proportion_shift(base.json_valid, base.json_valid - 0.05)
        / 0.3,  # 30% of calls ask for JSON
        "refusals +10% (relative)": samples_for_proportion_shift(base.refusal, base.refusal * 1.1),
        "refusals +10 points": samples_for_proportion_shift(base.refusal, base.refusal + 0.10),
    }
    lines = [
        f"drift detector power, {time.strftime('%Y-%m-%d')}: baseline {args.baseline} samples of A, alpha 0.05, Holm over all signals, {args.trials} runs per size ({time.perf_counter() - started:.0f} s)",
        "",
        "| false-positive control: A vs its own baseline | runs with a drift verdict |",
        "|---|---|",
    ]
    lines += [f"| {n} fresh samples of A | {a}/{t} = {a / t:.3f} |" for n, a, t in fpr_rows]
    lines += [
        "",
        "| degradation (version B) | samples of B for 95% power | signals that caught it | single-test closed form (per group) |",
        "|---|---|---|---|",
    ]
    for name, found, top in power_rows:
        size = f"<= {found[0]:,} ({found[1]}/{args.trials} detected)" if found else f"> {GRID[-1]:,}"
        cf = f"{closed[name]:,.0f}" if name in closed else ""
        lines.append(f"| {name} | {size} | {top} | {cf} |")
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
