"""What the live judge's tests share: a proxy with `judge:` on, its scores on disk, its metrics, people's reviews."""

from __future__ import annotations

import asyncio
import glob
import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson

from helpers.agents import metric
from helpers.procs import Proc, scrape_metrics, start_configured_proxy
from llmwatch.agent.apps.simulator.judge import true_score
from llmwatch.core.records import Sample


def start_judged_proxy(
    tmp_path: Path, upstream: str, judge: dict[str, Any], env: dict[str, str] | None = None, **extra: Any
) -> tuple[Proc, dict]:
    """`llmwatch proxy` in front of `upstream`, every call sampled, scoring off, `judge:` as given."""
    config = {
        "upstream": upstream,
        "sampling": {"rate": 1.0},
        "scoring": {"enabled": False},
        "judge": {"enabled": True, **judge},
        **extra,
    }
    return start_configured_proxy(tmp_path, config, env)


def judge_scores(data_dir: Path) -> list[dict]:
    out = []
    for path in sorted(glob.glob(str(data_dir / "scores" / "scores-*.jsonl"))):
        with open(path, "rb") as fh:
            out.extend(orjson.loads(line) for line in fh if line.strip())
    return [s for s in out if s["check"].startswith("judge:")]


async def wait_metrics(session: aiohttp.ClientSession, ports: dict, done, timeout: float = 120.0) -> dict:
    """Scrape until `done(metrics)` holds; fail with the last scrape after `timeout`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        m = await scrape_metrics(session, ports)
        if done(m):
            return m
        assert asyncio.get_running_loop().time() < deadline, {k: v for k, v in m.items() if "judge" in k[0]}
        await asyncio.sleep(0.2)


def judged(m: dict) -> float:
    """Evaluations the judge finished or gave up on: verdicts (error included) and skips."""
    return metric(m, "llmwatch_judge_verdicts_total") + metric(m, "llmwatch_judge_skipped_total")


def review_as_people(tasks_key: Path, samples: dict[str, Sample], out: Path) -> int:
    """Blind reviews of a judge round by one "person" who rates with the simulator's rule (true_score)."""
    key = json.loads(tasks_key.read_text())
    lines = []
    for task_id, sides in key["tasks"].items():
        rated = {}
        for label, entry in sides.items():
            s = samples[entry["sample_id"]]
            rated[label] = {c: true_score(s.prompt_text(), s.answer_text()) for c in key["criteria"]}
        lines.append(
            orjson.dumps({"task_id": task_id, "candidates": ["A", "B"], "scores": rated, "judge": "ana", "blind": True})
        )
    out.write_bytes(b"\n".join(lines) + b"\n")
    return len(lines)


TOPICS = ["How do I bake sourdough bread?", "Explain kubernetes pods", "Tips for learning python", "A running plan?"]


async def send(base: str, n: int, start: int = 0, model: str = "sim-gpt-4o-mini") -> list[str]:
    """n seeded calls at once through `base`; the answers' text."""
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-client-0123456789abcdef", max_retries=0)

    async def one(i: int) -> str:
        msgs = [{"role": "user", "content": f"{TOPICS[i % len(TOPICS)]} ({i})"}]
        answer = await client.chat.completions.create(model=model, messages=msgs, seed=i)
        return answer.choices[0].message.content or ""

    try:
        return list(await asyncio.gather(*(one(i) for i in range(start, start + n))))
    finally:
        await client.close()
