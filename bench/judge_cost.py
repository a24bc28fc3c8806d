"""What the live judge costs, and how many labels its calibration needs.

1. CPU per 1,000 judged calls: the proxy's side (the judge sink on the pipeline thread: category,
   rate, serialising the job) and the judge child's side (its worker: prompt, caps, the HTTP call
   to the judge, parsing, the score), process CPU time, against `llmwatch simulate` in judge mode
   (a separate process, answering at once, so its CPU is not counted).
2. USD per 1,000 judged calls for a priced judge model (default gpt-4o-mini), from the usage the
   judge reported, beside the worst case the spend cap reserved.
3. Labels needed for a kappa interval of width 0.2: the 95 % bootstrap interval of the quadratic
   kappa between a simulated judge (the simulator's judge mode: bias 0, noise N on the 1-5 scale)
   and the truth, mean width over repeats, for growing label counts.

    python bench/judge_cost.py [--calls 1000] [--model gpt-4o-mini] [--repeats 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import queue
import random
import re
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scoring_throughput import samples as make_samples  # noqa: E402

from llmwatch.agent.apps.simulator.judge import simulate_labels  # noqa: E402
from llmwatch.collectors.judge.child import JudgeWorker  # noqa: E402
from llmwatch.collectors.judge.config import JudgeSection  # noqa: E402
from llmwatch.collectors.judge.messages import JudgeJob, JudgeReport  # noqa: E402
from llmwatch.collectors.judge.parent import JudgeSampler  # noqa: E402
from llmwatch.core.pricing import PriceTable  # noqa: E402
from llmwatch.scorers.evaluation.config import MatrixSection  # noqa: E402
from llmwatch.scorers.evaluation.matrix import build_categories  # noqa: E402
from llmwatch.scorers.stats.agreement import cohen_kappa_interval  # noqa: E402

QUALITY, WEIGHTS = (1, 2, 3, 4, 5), (0.1, 0.15, 0.2, 0.3, 0.25)


class _Outbox:
    def __init__(self) -> None:
        self.reports: list[JudgeReport] = []

    def put(self, item: object) -> None:
        if isinstance(item, JudgeReport):
            self.reports.append(item)


def start_judge() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmwatch.agent.cli", "simulate", "--port", "0", "--latency-scale", "0",
         "--judge-bias", "0", "--judge-noise", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"url=(http://127\.0\.0\.1:\d+)", line)
        if m:
            return proc, m.group(1)
    raise SystemExit("the simulator did not start")


def sink_cpu(n: int) -> float:
    """CPU seconds of the proxy-side hand-off for n samples (all picked): category, job, pickling."""
    section = JudgeSection(rate=1.0)
    sampler = JudgeSampler(section, build_categories(MatrixSection()), "uncategorized")
    items = make_samples(n)
    start = time.process_time()
    for s in items:
        picked = sampler.pick(s)
        assert picked is not None and picked[1] is not None
        job = JudgeJob(s.to_json(), picked[0], [c.model_dump(mode="json") for c in picked[1].criteria])
        pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)  # what mp.Queue's feeder does
    return time.process_time() - start


async def child_cpu(url: str, n: int, model: str) -> tuple[float, float, list[JudgeReport], float]:
    section = JudgeSection(
        enabled=True, upstream=url, model=model, max_inflight=4, max_calls_per_minute=None, max_usd_per_hour=1e9
    )
    outbox = _Outbox()
    worker = JudgeWorker(section, PriceTable(), None, outbox)
    inbox: queue.Queue = queue.Queue()
    task = asyncio.create_task(worker.run(inbox))
    sampler = JudgeSampler(JudgeSection(rate=1.0), build_categories(MatrixSection()), "uncategorized")
    jobs = []
    for s in make_samples(n):
        category, rubric = sampler.pick(s)  # type: ignore[misc]
        jobs.append(JudgeJob(s.to_json(), category, [c.model_dump(mode="json") for c in rubric.criteria]))
    reserved: list[float] = []
    reserve = worker.budget.reserve

    def counting(now: float, usd: float) -> bool:
        reserved.append(usd)
        return reserve(now, usd)

    worker.budget.reserve = counting  # type: ignore[method-assign]
    cpu0, wall0 = time.process_time(), time.monotonic()
    for job in jobs:
        inbox.put(job)
    while sum(len(r.scores) for r in outbox.reports) + len(worker.report.scores) < n:
        await asyncio.sleep(0.01)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    inbox.put(None)
    await task
    return cpu, wall, outbox.reports, sum(reserved)


def labels_for_width(noise: float, sizes: list[int], repeats: int, target: float = 0.2) -> list[tuple[int, float]]:
    rng = random.Random(11)
    out = []
    for n in sizes:
        widths = []
        for r in range(repeats):
            truth = rng.choices(QUALITY, WEIGHTS, k=n)
            judge = simulate_labels(truth, 0.0, noise, seed=r)
            lo, hi = cohen_kappa_interval(judge, truth, QUALITY, "quadratic", resamples=1000, seed=r)
            widths.append(hi - lo)
        out.append((n, sum(widths) / len(widths)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--model", default="gpt-4o-mini")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    n = args.calls

    sink = sink_cpu(n)
    proc, url = start_judge()
    try:
        cpu, wall, reports, worst = asyncio.run(child_cpu(url, n, args.model))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    spent = sum(r.spend_usd for r in reports)
    print(f"judge cost per {n} judged calls (one criterion each), judge model {args.model}:")
    print(
        f"  proxy side (pipeline thread: sink, job, pickling): {sink * 1000:.0f} ms CPU ({sink / n * 1e6:.0f} us a call)"
    )
    print(
        f"  judge child (prompt, caps, HTTP, parse, score):    {cpu * 1000:.0f} ms CPU ({cpu / n * 1e3:.2f} ms a call), {wall:.1f} s wall"
    )
    print(f"  USD (settled on reported usage): ${spent:.4f} per {n}; worst cases reserved: ${worst:.4f}")
    print("labels for a kappa interval (95 %, quadratic, bootstrap) of width 0.2:")
    sizes = [50, 100, 200, 400, 800]
    for noise in (0.5, 1.0):
        rows = labels_for_width(noise, sizes, args.repeats)
        enough = next((size for size, w in rows if w <= 0.2), None)
        cells = ", ".join(f"{size}: {w:.3f}" for size, w in rows)
        print(f"  judge noise {noise}: mean width by labels {cells} -> {enough or f'>{sizes[-1]}'} labels")


if __name__ == "__main__":
    main()
