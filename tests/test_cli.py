"""The commands a user runs: `llmwatch proxy` as a process, and `llmwatch demo` end to end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai SDK ships with
import openai
import orjson


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 20.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not come up")


def test_proxy_process_serves_traffic_and_metrics_and_stops_cleanly_on_sigterm(tmp_path: Path):
    sim_port, proxy_port, metrics_port = free_port(), free_port(), free_port()
    env = {**os.environ, "LLMWATCH_SAMPLING__RATE": "1.0"}
    sim = subprocess.Popen([sys.executable, "-m", "llmwatch.agent.simulator", "--port", str(sim_port), "--latency-scale", "0.02"], stderr=subprocess.DEVNULL)
    proxy = subprocess.Popen(
        [sys.executable, "-m", "llmwatch.agent.cli", "proxy", "--upstream", f"http://127.0.0.1:{sim_port}", "--listen", f"127.0.0.1:{proxy_port}",
         "--metrics-listen", f"127.0.0.1:{metrics_port}", "--data-dir", str(tmp_path / "data")],
        env=env, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/v1/models")
        wait_http(f"http://127.0.0.1:{metrics_port}/readyz")
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{proxy_port}/v1", api_key="sk-cli-test-0123456789abcdef", max_retries=0)
        r = c.chat.completions.create(model="sim-gpt-4o-mini", messages=[{"role": "user", "content": "Tell me about Jupiter"}])
        assert r.choices[0].message.content
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert 'gen_ai_client_operation_duration_seconds_count{error_type="",gen_ai_operation_name="chat",gen_ai_request_model="sim-gpt-4o-mini",model_version="A"} 1.0' in metrics
    finally:
        proxy.send_signal(signal.SIGTERM)
        _, stderr = proxy.communicate(timeout=20)
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=20)
    assert proxy.returncode == 0, stderr
    assert "sk-cli-test" not in stderr, "no secret reaches the logs"
    lines = [orjson.loads(ln) for f in (tmp_path / "data" / "samples").glob("*.jsonl") for ln in f.read_bytes().splitlines()]
    assert len(lines) == 1 and lines[0]["model"] == "sim-gpt-4o-mini"


def test_demo_runs_and_prints_a_summary(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "demo", "--duration", "4", "--rate", "15", "--data-dir", str(tmp_path / "d"),
         "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for line in ("llmwatch demo summary", "requests", "latency", "time to 1st tok", "tokens", "cost", "samples"):
        assert line in out
    requests = int(out.split("requests")[1].split()[0])
    assert requests > 20
    assert list((tmp_path / "d" / "samples").glob("samples-*.jsonl"))
