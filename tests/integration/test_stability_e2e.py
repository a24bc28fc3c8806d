"""Stability as evaluation practice defines it, end to end with real processes.

Two `llmwatch simulate` processes (version A, and version B that decays over a conversation's
turns), each behind a real `llmwatch proxy`; multi-turn chats that resend their growing history
and send no conversation header. The samples must carry conversation ids and turn numbers, and
`llmwatch report --format json` must give each version a decay slope whose interval separates B
(decays) from A.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import aiohttp
from helpers.procs import Proc, agent_env, agent_started, simulator_url, start_simulator

MODEL = "sim-gpt-4o-mini"
QUESTIONS = [
    "How should I store fresh basil so it lasts longer?",
    "What is a good way to learn Python for data analysis?",
    "How do I train for my first half marathon?",
    "How can I improve my sleep schedule?",
    "What should I pack for a week of hiking?",
    "How do I keep sourdough starter alive?",
    "What are the basics of personal budgeting?",
    "How do I repot a houseplant without killing it?",
]
FOLLOW_UPS = ["Can you say more?", "Why is that?", "What should I avoid?", "Any other tips?", "Summarise that for me."]


async def chat(session: aiohttp.ClientSession, base: str, conversation: int, turns: int) -> None:
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(turns):
        question = QUESTIONS[conversation % len(QUESTIONS)] if turn == 0 else FOLLOW_UPS[turn % len(FOLLOW_UPS)]
        messages.append({"role": "user", "content": question})
        body = {"model": MODEL, "messages": messages, "seed": conversation * 100 + turn}
        async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            answer = (await resp.json())["choices"][0]["message"]["content"]
        messages.append({"role": "assistant", "content": answer})


def run_version(profile: str, data_dir: Path, conversations: int, turns: int, extra_env: dict[str, str]) -> Proc:
    sim = start_simulator("--profile", profile, "--seed", "11", "--latency-scale", "0")
    proxy = None
    try:
        upstream = simulator_url(sim)
        proxy = Proc(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                "proxy",
                "--upstream",
                upstream,
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--data-dir",
                str(data_dir),
            ],
            env=agent_env(
                LLMWATCH_SAMPLING__RATE="1.0",
                LLMWATCH_SCORING__ENABLED="false",
                **extra_env,
            ),
        )
        port = agent_started(proxy)["proxy_port"]

        async def traffic() -> None:
            async with aiohttp.ClientSession() as session:
                # A few conversations at a time, interleaved as real clients are.
                for start in range(0, conversations, 8):
                    await asyncio.gather(
                        *(
                            chat(session, f"http://127.0.0.1:{port}", c, turns)
                            for c in range(start, min(conversations, start + 8))
                        )
                    )

        asyncio.run(traffic())
        # A graceful stop drains the pipeline: every sample is on disk when it exits.
        proxy.popen.send_signal(signal.SIGTERM)
        assert proxy.popen.wait(timeout=60) == 0, proxy.output()
        return proxy
    finally:
        if proxy is not None:
            proxy.stop()
        sim.stop()


def read_samples(data_dir: Path) -> list[dict]:
    out = []
    for path in sorted(glob.glob(str(data_dir / "samples" / "*.jsonl"))):
        with open(path, "rb") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def test_conversations_are_found_without_a_header_and_the_decaying_version_is_told_apart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    conversations, turns = 48, 6
    run_version("A", data, conversations, turns, {})
    run_version("B", data, conversations, turns, {})

    samples = read_samples(data)
    assert len(samples) == 2 * conversations * turns
    by_conversation: dict[str, list[dict]] = defaultdict(list)
    for s in samples:
        assert s["conversation_id"] and s["conversation_id"].startswith("h-")
        by_conversation[s["conversation_id"]].append(s)
    # Every chat was followed from its first turn to its last, and no two chats were merged.
    assert len(by_conversation) == 2 * conversations
    for items in by_conversation.values():
        assert sorted(s["turn"] for s in items) == list(range(1, turns + 1))
        assert len({s["model_version"] for s in items}) == 1

    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmwatch.agent.cli",
            "report",
            "--samples",
            str(data / "samples"),
            "--format",
            "json",
        ],
        capture_output=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "LLMWATCH_SCORING__EMBEDDINGS": "false"},
        timeout=600,
    )
    assert report.returncode == 0, report.stderr.decode()
    decay = {d["model_version"]: d for d in json.loads(report.stdout)["turn_decay"]}
    a, b = decay["A"], decay["B"]
    assert a["conversations"] == b["conversations"] == conversations
    assert b["verdict"] == "decays" and b["ci"][1] < 0
    assert a["ci"][0] <= 0 <= a["ci"][1] or a["ci"][0] > b["ci"][1]
    assert b["ci"][1] < a["ci"][0]  # the intervals do not overlap: the sign separates A from B
    assert b["by_turn"]["1"]["mean"] > b["by_turn"][str(turns)]["mean"]
