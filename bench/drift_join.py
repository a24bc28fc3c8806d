"""What `DriftWindows.join` (online drift's late scores: the consistency probe's verdicts) costs per
score, and what the index costs `add`, in process, at realistic sizes: 50 model versions, a window
of 2,000 samples each (drift.window's default), 10,000 scores a join (500 samples x 20 checks).

Four places for the scores' samples: the newest of their windows (a verdict soon after its call),
uniform in the window, its oldest end, and not arrived yet (a re-ask compared before the scorer's
batch: the score waits). Best of 3 joins each.

    python bench/drift_join.py
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import numpy as np

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.compare import DriftSettings
from llmwatch.scorers.drift.online import DriftWindows

VERSIONS, WINDOW, CHECKS, PER_JOIN = 50, 2000, 20, 10_000
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
TEMPLATE = Sample(id="x", timestamp=NOW, model="m", status=200, latency_ms=1.0, request={}, response={})


def filled() -> DriftWindows:
    windows = DriftWindows(None, window=WINDOW, interval_s=60, settings=DriftSettings())
    for v in range(VERSIONS):
        update = [{"id": f"v{v}-{i}", "model_version": f"v{v}"} for i in range(WINDOW)]
        windows.add([TEMPLATE.model_copy(update=u) for u in update], [], {})
    return windows


def scores(positions: list[tuple[int, int]]) -> list[Score]:
    return [
        Score(
            sample_id=f"v{v}-{i}",
            check=f"c{c}",
            kind="consistency",
            result="pass",
            value=0.9,
            model_version=f"v{v}",
            sample_timestamp=NOW,
        )
        for v, i in positions
        for c in range(CHECKS)
    ][:PER_JOIN]


def main() -> None:
    rng = np.random.default_rng(0)
    n = PER_JOIN // CHECKS
    cases = {
        "newest of the window": [(k % VERSIONS, WINDOW - 1 - k // VERSIONS) for k in range(n)],
        "uniform in the window": [(int(rng.integers(VERSIONS)), int(rng.integers(WINDOW))) for _ in range(n)],
        "oldest end of the window": [(k % VERSIONS, k // VERSIONS) for k in range(n)],
        "sample not arrived yet": [(k % VERSIONS, WINDOW + k) for k in range(n)],
    }
    windows = filled()
    for name, positions in cases.items():
        batch = scores(positions)
        best = float("inf")
        for _ in range(3):
            windows._waiting.clear()
            started = time.perf_counter()
            windows.join(batch)
            best = min(best, time.perf_counter() - started)
        print(
            f"join, {name:<26} {best * 1e3:8.1f} ms per {len(batch)} scores {best / len(batch) * 1e6:8.2f} us a score"
        )
    samples = [TEMPLATE.model_copy(update={"id": f"s-{i}", "model_version": "v"}) for i in range(10 * WINDOW)]
    best = float("inf")
    for _ in range(5):
        fresh = DriftWindows(None, window=WINDOW, interval_s=60, settings=DriftSettings())
        started = time.perf_counter()
        fresh.add(samples, [], {})
        best = min(best, time.perf_counter() - started)
    print(f"add, {len(samples)} samples through a window of {WINDOW}: {best / len(samples) * 1e6:.2f} us a sample")


if __name__ == "__main__":
    main()
