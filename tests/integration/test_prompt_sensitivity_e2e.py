"""Prompt sensitivity on live traffic, end to end with real processes.

Two `llmwatch simulate` processes (version A, robust; version B, whose answers get worse when a
prompt is not in plain written form), each behind a real `llmwatch proxy`. The client sends every
request in five surface rewordings (the simulator's `rephrase`: as written, lower case, no final
punctuation, capitals, word order), plus some re-asks. `llmwatch report --format json` must give
B a higher prompt sensitivity than A, with intervals that do not overlap.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
from helpers.procs import Proc, agent_env, agent_started, simulator_url, start_simulator

from llmwatch.agent.apps.simulator.stability import rephrase

MODEL = "sim-gpt-4o-mini"
SUBJECTS = [
    "store fresh basil",
    "learn Python for data analysis",
    "train for a half marathon",
    "improve my sleep schedule",
    "pack for a week of hiking",
    "keep a sourdough starter alive",
    "make a monthly budget",
    "repot a houseplant",
    "roast a whole chicken",
    "plant tomatoes in spring",
    "save for an emergency fund",
    "start learning jazz piano",
    "clean a cast iron pan",
    "prepare for a job interview",
    "choose a beginner telescope",
    "write a SQL query for top customers",
]
FRAMES = ["How should I {}?", "What is the best way to {}?", "Can you explain how to {}?"]
REQUESTS = [frame.format(subject) for subject in SUBJECTS for frame in FRAMES]  # 48 requests
PHRASINGS = 5


async def ask(session: aiohttp.ClientSession, base: str, text: str, seed: int) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "seed": seed}
    async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        await resp.read()


def run_version(profile: str, data_dir: Path) -> None:
    sim = start_simulator("--profile", profile, "--seed", "5", "--latency-scale", "0")
    proxy = None
    try:
        proxy = Proc(
            [sys.executable, "-m", "llmwatch.agent.cli", "proxy", "--upstream", simulator_url(sim)]
            + ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
            env=agent_env(LLMWATCH_SAMPLING__RATE="1.0", LLMWATCH_SCORING__ENABLED="false"),
        )
        base = f"http://127.0.0.1:{agent_started(proxy)['proxy_port']}"

        async def traffic() -> None:
            async with aiohttp.ClientSession() as session:
                for i, request in enumerate(REQUESTS):
                    calls = [ask(session, base, rephrase(request, k), i * 10 + k) for k in range(PHRASINGS)]
                    # A re-ask of the first phrasing: collapsed into it, not another phrasing.
                    calls.append(ask(session, base, rephrase(request, 0), i * 10 + 9))
                    await asyncio.gather(*calls)

        asyncio.run(traffic())
        proxy.popen.send_signal(signal.SIGTERM)  # a graceful stop writes every sample
        assert proxy.popen.wait(timeout=60) == 0, proxy.output()
    finally:
        if proxy is not None:
            proxy.stop()
        sim.stop()


def test_the_version_sensitive_to_phrasing_has_the_higher_prompt_sensitivity(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run_version("A", data)
    run_version("B", data)
    report = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "report", "--samples", str(data / "samples")]
        + ["--format", "json"],
        capture_output=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "LLMWATCH_SCORING__EMBEDDINGS": "false"},
        timeout=600,
    )
    assert report.returncode == 0, report.stderr.decode()
    rows = {r["model_version"]: r for r in json.loads(report.stdout)["prompt_sensitivity"]}
    a, b = rows["A"], rows["B"]
    # Lexically (embeddings off), each request's rewordings are one cluster; the re-ask is no phrasing.
    assert a["clusters"] == b["clusters"] == len(REQUESTS)
    assert a["phrasings"] == b["phrasings"] == len(REQUESTS) * PHRASINGS
    assert a["samples"] == b["samples"] == len(REQUESTS) * (PHRASINGS + 1)
    assert a["verdict"] == b["verdict"] == "measured"
    assert b["sensitivity"] > a["sensitivity"]
    assert b["ci"][0] > a["ci"][1], (a, b)  # the intervals do not overlap

    # The HTML report plots it.
    page = tmp_path / "report.html"
    html = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "report", "--samples", str(data / "samples")]
        + ["--format", "html", "--out", str(page)],
        capture_output=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "LLMWATCH_SCORING__EMBEDDINGS": "false"},
        timeout=600,
    )
    assert html.returncode == 0, html.stderr.decode()
    text = page.read_text()
    assert "Prompt sensitivity: rephrasings of one request" in text
    assert "Prompt sensitivity per version; bars: 95% intervals" in text  # the figure's caption
