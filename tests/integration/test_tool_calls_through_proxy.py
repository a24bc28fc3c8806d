"""Tool calls end to end (issue 27): the simulator answers requests that offer tools with tool
calls, version B breaks a share of them, and the `tool_call` check of a real `llmwatch proxy`'s
scorer flags exactly the broken ones, streamed or not."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai SDK ships with
import orjson
import pytest
from helpers.engines import ALL_ENGINES, engine_environ
from helpers.procs import Proc, agent_started, simulator_url, start_simulator

from llmwatch.agent.apps.simulator.server import TOOL_CALLS_HEADER

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
BOOKING = {
    "type": "function",
    "function": {
        "name": "book_table",
        "parameters": {
            "type": "object",
            "properties": {
                "restaurant": {"type": "string"},
                "people": {"type": "integer", "minimum": 1},
                "date": {"type": "string", "format": "date"},
                "vegetarian": {"type": "boolean"},
            },
            "required": ["restaurant", "people", "date"],
        },
    },
}
# Which way the simulator broke a call, and the reason the check must give for it.
EXPECTED_REASON = {
    "wrong_type": "arguments_schema",
    "missing_required": "arguments_schema",
    "unknown_name": "unknown_tool",
}
CALLS = 48


@pytest.fixture(params=ALL_ENGINES)
def proxy_and_b(tmp_path: Path, request: pytest.FixtureRequest):
    """The simulator's version B behind a real `llmwatch proxy` of each engine (native:
    C forwards the calls, and its ring hands them to the scorer's path)."""
    sim = start_simulator("--profile", "B", "--latency-scale", "0")
    started = [sim]
    try:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "LLMWATCH_SAMPLING__RATE": "1.0",
            "LLMWATCH_SCORING__ENABLED": "true",
            "LLMWATCH_SCORING__EMBEDDINGS": "false",
            "LLMWATCH_LOGGING__FORMAT": "json",
            "LLMWATCH_LOGGING__LEVEL": "info",
            **engine_environ(str(request.param)),
        }
        argv = [sys.executable, "-m", "llmwatch.agent.cli", "proxy", "--upstream", simulator_url(sim)]
        argv += ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
        proxy = Proc(argv, env=env)
        started.append(proxy)
        yield f"http://127.0.0.1:{agent_started(proxy)['proxy_port']}", tmp_path / "data", proxy
    finally:
        for proc in reversed(started):
            proc.stop()


def records(directory: Path) -> list[dict]:
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        out.extend(orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip())
    return out


def test_the_tool_call_check_flags_exactly_the_calls_version_b_broke(proxy_and_b):
    proxy, data, proc = proxy_and_b
    truth: dict[int, str] = {}
    with httpx.Client(timeout=30) as client:
        for seed in range(CALLS):
            body = {
                "model": "sim-gpt-4o-mini",
                "messages": [
                    {"role": "user", "content": f"Book a table for four in Lyon, and the weather there ({seed})"}
                ],
                "tools": [WEATHER, BOOKING],
                "seed": seed,
                "stream": seed % 2 == 1,
            }
            r = client.post(f"{proxy}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            truth[seed] = r.headers[TOOL_CALLS_HEADER]
    broken = {seed: how for seed, how in truth.items() if how != "ok"}
    # B breaks about a quarter: both kinds of answer are there to be told apart.
    assert 0 < len(broken) < CALLS, truth
    assert {"ok", *broken.values()} == set(truth.values())

    # The scorer's files are the event waited for, polled under a deadline.
    def tool_scores() -> list[dict]:
        return [s for s in records(data / "scores") if s["check"] == "tool_call"]

    deadline = time.monotonic() + 90
    while len(tool_scores()) < CALLS and time.monotonic() < deadline and proc.popen.poll() is None:
        time.sleep(0.1)
    scores = tool_scores()
    assert len(scores) == CALLS, f"{len(scores)} tool_call scores; proxy output:\n{proc.output()[-3000:]}"

    seed_of = {s["id"]: s["request"]["seed"] for s in records(data / "samples")}
    streamed = {s["id"]: s["stream"] for s in records(data / "samples")}
    flagged = {seed_of[s["sample_id"]]: s for s in scores if s["result"] == "fail"}
    assert all(s["result"] in ("pass", "fail") for s in scores)
    assert set(flagged) == set(broken)
    for seed, score in flagged.items():
        assert score["details"]["reasons"] == [EXPECTED_REASON[broken[seed]]], score
        assert score["details"]["failures"][0]["name"].startswith(("get_weather", "book_table"))
    # Streamed answers were assembled from their deltas before they were judged: both halves count.
    assert {streamed[s["sample_id"]] for s in scores if s["result"] == "pass"} == {True, False}
