"""Calls spent by `regress --early-stop` against fixed repeats, for the verdicts each reaches.

Two simulator versions on loopback (no delays): A, and a degraded B. A baseline is made on A with
fixed repeats; then, per trial, B (and A again, the no-regression case) is run with fixed repeats
and with early stopping against that baseline. Calls are counted at the simulator. The table
gives calls per run and how often the two modes gave every case the same verdict.

    python bench/suite_early_stop.py [--trials 5] [--repeat 30] [--confidence 0.95]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Callable

import orjson
from aiohttp import web

from llmwatch.agent.apps.simulator.server import PROFILES, SimProfile, create_app
from llmwatch.core.logs import configure_logging
from llmwatch.scorers.evaluation.regress import RunSettings, regress, write_run

VERSIONS = {
    "A": SimProfile(name="A", latency_scale=0.0),
    # The built-in degraded version (shorter answers, more refusals, broken JSON), no delays.
    "B": SimProfile(**{**PROFILES["B"].__dict__, "latency_scale": 0.0}),
}
CASES = [
    {
        "id": "recipe",
        "category": "instruction_following",
        "input": "Give me a simple recipe for a pasta dinner with garlic.",
        "checks": [{"kind": "refusal"}, {"kind": "length", "name": "detailed", "params": {"min_chars": 290}}],
    },
    {
        "id": "python-keyerror",
        "category": "code",
        "input": "How do I fix a KeyError in my Python script?",
        "checks": [{"kind": "refusal"}, {"kind": "length", "name": "detailed", "params": {"min_chars": 290}}],
    },
    {
        "id": "trip",
        "category": "instruction_following",
        "input": "Plan a week-long trip itinerary: flights, hotel and passport tips.",
        "checks": [{"kind": "refusal"}],
    },
    {
        "id": "topic-json",
        "category": "extraction",
        "input": "Classify this message by topic: my bread dough never rises in the oven",
        "params": {"response_format": {"type": "json_object"}},
        "checks": [{"kind": "json_valid"}],
    },
    {
        "id": "bread",
        "category": "instruction_following",
        "input": "How long should white bread bake?",
        "checks": [{"kind": "not_empty_or_truncated"}],
    },
    {
        "id": "soup",
        "category": "instruction_following",
        "input": "What goes into a vegetable soup?",
        "checks": [{"kind": "not_empty_or_truncated"}],
    },
    {
        "id": "sql",
        "category": "code",
        "input": "Why is my SQL query with a join so slow?",
        "checks": [{"kind": "refusal"}, {"kind": "not_empty_or_truncated"}],
    },
    {
        "id": "followup",
        "category": "multi_turn_dialogue",
        "input": [
            {"role": "user", "content": "I want to bake bread"},
            {"role": "assistant", "content": "Great, what kind?"},
            {"role": "user", "content": "A white loaf, how long?"},
        ],
        "checks": [{"kind": "refusal"}, {"kind": "not_empty_or_truncated"}],
    },
]


def serve_versions(calls: Counter[str]) -> tuple[dict[str, str], Callable[[], None]]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def counting(name: str):
        @web.middleware
        async def count(request: web.Request, handler):
            if request.path.endswith("/chat/completions"):
                calls[name] += 1
            return await handler(request)

        return count

    async def start():
        out = {}
        for name, profile in VERSIONS.items():
            app = create_app(profile, seed=None)
            app.middlewares.append(counting(name))
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            out[name] = (runner, f"http://127.0.0.1:{runner.addresses[0][1]}")
        return out

    servers = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=20)

    def stop() -> None:
        for runner, _ in servers.values():
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

    return {k: url for k, (_, url) in servers.items()}, stop


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--confidence", type=float, default=0.95)
    args = p.parse_args()
    configure_logging("warning")
    calls: Counter[str] = Counter()
    urls, stop = serve_versions(calls)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            suite = Path(tmp) / "suite.jsonl"
            suite.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in CASES))
            base = RunSettings(
                upstream=urls["A"],
                model="sim-gpt-4o-mini",
                repeat=args.repeat,
                max_retries=0,
                confidence=args.confidence,
            )
            run, _ = regress(str(suite), base, progress=False)
            write_run(run, Path(tmp) / "a.json")
            rows = []
            for version in ("A", "B"):
                fixed_calls, early_calls, same, same_fixed, regressed = [], [], 0, 0, Counter()
                for _ in range(args.trials):
                    out = {}
                    for mode in ("fixed", "early", "fixed2"):
                        s = RunSettings(
                            upstream=urls[version],
                            model="sim-gpt-4o-mini",
                            repeat=args.repeat,
                            max_retries=0,
                            confidence=args.confidence,
                            early_stop=mode == "early",
                        )
                        before = calls[version]
                        run, _ = regress(str(suite), s, baseline_path=str(Path(tmp) / "a.json"), progress=False)
                        (early_calls if mode == "early" else fixed_calls).append(calls[version] - before)
                        out[mode] = {v.id: v.verdict for v in run.comparison.cases}
                        regressed[mode] += sum(v == "regressed" for v in out[mode].values())
                    same += out["fixed"] == out["early"]
                    same_fixed += out["fixed"] == out["fixed2"]
                rows.append(
                    (
                        version,
                        sum(fixed_calls) / len(fixed_calls),
                        sum(early_calls) / args.trials,
                        same,
                        same_fixed,
                        regressed,
                    )
                )
    finally:
        stop()
    print(
        f"{len(CASES)} cases, at most {args.repeat} repeats, {args.confidence:.0%} confidence, {args.trials} trials per version; baseline: version A, fixed repeats"
    )
    print(
        f"{'version':<8} {'fixed calls':>11} {'early calls':>11} {'saved':>6} {'early = fixed':>14} {'fixed = fixed':>14} {'regressed cases (fixed/early)':>30}"
    )
    for version, f, e, same, same_fixed, regressed in rows:
        print(
            f"{version:<8} {f:>11.0f} {e:>11.1f} {1 - e / f:>6.0%} {same:>8}/{args.trials:<5} {same_fixed:>8}/{args.trials:<5} "
            f"{regressed['fixed'] / args.trials:>18.1f} / {regressed['early'] / args.trials:.1f}"
        )


if __name__ == "__main__":
    sys.exit(main())
