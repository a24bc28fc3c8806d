"""A server that silently cuts long prompts is caught (issue 27): the simulator's `num_ctx` fault
keeps the last N prompt tokens and reports N, as llama.cpp and Ollama do; the `input_truncated`
check of a real `llmwatch proxy` fails exactly those calls."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai SDK ships with
import orjson
from helpers.procs import Proc, agent_started, simulator_url, start_simulator

LONG = " ".join(["Summarise the attached contract clause about payment terms and late fees."] * 80)


def test_prompts_cut_by_the_server_fail_and_whole_ones_pass(tmp_path: Path):
    config = tmp_path / "llmwatch.yaml"
    config.write_text(
        "scoring:\n  embeddings: false\n  checks:\n    - {name: input_truncated, kind: input_truncated}\n"
    )
    sim = start_simulator("--latency-scale", "0")
    procs = [sim]
    try:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "LLMWATCH_SAMPLING__RATE": "1.0",
            "LLMWATCH_LOGGING__FORMAT": "json",
            "LLMWATCH_LOGGING__LEVEL": "info",
        }
        argv = [
            sys.executable,
            "-m",
            "llmwatch.agent.cli",
            "proxy",
            "--config",
            str(config),
            "--upstream",
            simulator_url(sim),
        ]
        argv += ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
        proxy = Proc(argv, env=env)
        procs.append(proxy)
        url = f"http://127.0.0.1:{agent_started(proxy)['proxy_port']}/v1/chat/completions"
        cut = {}
        with httpx.Client(timeout=30) as client:
            for seed in range(12):
                body = {"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": LONG}], "seed": seed}
                cut[seed] = seed % 3 == 0
                headers = {"x-llmwatch-sim-fault": "num_ctx=256"} if cut[seed] else {}
                assert client.post(url, json=body, headers=headers).status_code == 200

        def scores() -> list[dict]:
            out = []
            for path in sorted((tmp_path / "data" / "scores").glob("*.jsonl")):
                out.extend(orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip())
            return out

        deadline = time.monotonic() + 90
        while len(scores()) < len(cut) and time.monotonic() < deadline and proxy.popen.poll() is None:
            time.sleep(0.1)
        found = scores()
        assert len(found) == len(cut), proxy.output()[-3000:]
        seeds = {}
        for path in sorted((tmp_path / "data" / "samples").glob("*.jsonl")):
            for line in path.read_bytes().splitlines():
                s = orjson.loads(line)
                seeds[s["id"]] = s["request"]["seed"]
        failed = {seeds[s["sample_id"]] for s in found if s["result"] == "fail"}
        assert failed == {seed for seed, was_cut in cut.items() if was_cut}
        assert all(s["result"] == "pass" for s in found if not cut[seeds[s["sample_id"]]])
    finally:
        for proc in reversed(procs):
            proc.stop()
