"""The commands a user runs: `llmwatch proxy` as a process, and `llmwatch demo` end to end."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai SDK ships with
import openai
import orjson
from helpers.procs import Proc, agent_env, agent_started, simulator_url, start_simulator


def wait_http(url: str, timeout: float = 20.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)  # poll interval of a bounded wait for the condition above
    raise AssertionError(f"{url} did not come up")


def test_proxy_process_serves_traffic_and_metrics_and_stops_cleanly_on_sigterm(tmp_path: Path):
    # Both processes bind port 0 and report the port they got: no probed port to race for.
    sim = start_simulator("--latency-scale", "0.02")
    proxy = None
    try:
        sim_url = simulator_url(sim)
        proxy = Proc(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                "proxy",
                "--upstream",
                sim_url,
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--data-dir",
                str(tmp_path / "data"),
            ],
            env=agent_env(LLMWATCH_SAMPLING__RATE="1.0"),
        )
        started = agent_started(proxy)
        proxy_port, metrics_port = started["proxy_port"], started["metrics_port"]
        wait_http(f"http://127.0.0.1:{metrics_port}/readyz")
        c = openai.OpenAI(
            base_url=f"http://127.0.0.1:{proxy_port}/v1", api_key="sk-cli-test-0123456789abcdef", max_retries=0
        )
        r = c.chat.completions.create(
            model="sim-gpt-4o-mini", messages=[{"role": "user", "content": "Tell me about Jupiter"}]
        )
        assert r.choices[0].message.content
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert (
            'gen_ai_client_operation_duration_seconds_count{error_type="",gen_ai_operation_name="chat",gen_ai_request_model="sim-gpt-4o-mini",model_version="A"} 1.0'
            in metrics
        )
    finally:
        if proxy is not None:
            proxy.popen.send_signal(signal.SIGTERM)
            proxy.popen.wait(timeout=20)
            proxy.stop()
        sim.popen.send_signal(signal.SIGTERM)
        sim.popen.wait(timeout=20)
        sim.stop()
    output = proxy.output()
    assert proxy.popen.returncode == 0, output
    assert "sk-cli-test" not in output, "no secret reaches the logs"
    lines = [
        orjson.loads(ln) for f in (tmp_path / "data" / "samples").glob("*.jsonl") for ln in f.read_bytes().splitlines()
    ]
    assert len(lines) == 1 and lines[0]["model"] == "sim-gpt-4o-mini"


def test_demo_runs_and_prints_a_summary(tmp_path: Path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmwatch.agent.cli",
            "demo",
            "--duration",
            "4",
            "--rate",
            "15",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for line in ("llmwatch demo summary", "requests", "latency", "time to 1st tok", "tokens", "cost", "samples"):
        assert line in out
    requests = int(out.split("requests")[1].split()[0])
    assert requests > 20
    assert list((tmp_path / "d" / "samples").glob("samples-*.jsonl"))
