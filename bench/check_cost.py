"""CPU per sampled call by check kind: each check of the built-in suite (and every embedding kind)
alone over the same samples, process CPU time per sample after a warm-up batch (model load
excluded), with the scorer's defaults (one torch thread, batches of 32).

    python bench/check_cost.py [--samples 256]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scoring_throughput import samples as make_samples  # noqa: E402

from llmwatch.scorers.checks.config import CheckSpec  # noqa: E402
from llmwatch.scorers.checks.suite import DEFAULT_EMBEDDING_CHECKS, DEFAULT_RULE_CHECKS, Suite  # noqa: E402

EXTRA_EMBEDDING = [
    {"name": "embedding_repetition", "kind": "embedding_repetition"},
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    items = make_samples(args.samples)
    rows = []
    shared = None
    for spec in DEFAULT_RULE_CHECKS + DEFAULT_EMBEDDING_CHECKS + EXTRA_EMBEDDING:
        suite = Suite([CheckSpec.model_validate(spec)], torch_threads=1)
        if suite.embedder is not None:
            # One model for every embedding kind: only its CPU per sample is measured here.
            if shared is None:
                shared = suite.embedder.embedder
            suite.embedder.embedder = shared
        suite.score(items[: args.batch])  # warm-up
        started = time.process_time()
        for i in range(0, len(items), args.batch):
            suite.score(items[i : i + args.batch])
        rows.append((spec["name"], spec["kind"], (time.process_time() - started) / len(items)))
    print(
        f"CPU per sampled call by check, {len(items)} samples, batches of {args.batch}, one torch thread, {time.strftime('%Y-%m-%d')}"
    )
    print()
    print("| check | kind | CPU per sample | in the default suite |")
    print("|---|---|---|---|")
    defaults = {s["name"] for s in DEFAULT_RULE_CHECKS + DEFAULT_EMBEDDING_CHECKS}
    for name, kind, cpu in rows:
        print(f"| {name} | {kind} | {cpu * 1e3:.2f} ms | {'yes' if name in defaults else 'no (opt-in)'} |")


if __name__ == "__main__":
    main()
