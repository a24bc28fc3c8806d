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
from helpers.procs import Proc, agent_env, agent_started, proxy_argv, simulator_url, start_simulator


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
            proxy_argv(sim_url, tmp_path / "data"),
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


def run_demo(data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
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
            str(data),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_runs_prints_a_summary_and_says_what_of_its_story_it_could_not_show(tmp_path: Path):
    # Four seconds of traffic cannot give the drift its 40 scored samples per version: the demo
    # must say so, for each version, and exit 2 rather than end on a summary missing its verdicts.
    result = run_demo(tmp_path / "d")
    assert result.returncode == 2, result.stdout + result.stderr
    out = result.stdout
    for line in ("llmwatch demo summary", "requests", "latency", "time to 1st tok", "tokens", "cost", "samples"):
        assert line in out
    requests = int(out.split("requests")[1].split()[0])
    assert requests > 20
    assert list((tmp_path / "d" / "samples").glob("samples-*.jsonl"))
    assert "waiting for the drift verdicts of version A and B" in out and "as long as the scorer makes progress" in out
    assert "gave up waiting for a drift verdict for version A" in out
    assert "demo incomplete (exit 2): could not show" in out and "version B" in out.split("demo incomplete")[1]
    assert "each cell: pass rate over the check's verdicts" in out
    # Every row of the table has a pass rate: a check without a verdict (tool_call: no demo call
    # sends tools) is named under it, not shown as "- (N err)" (tests/unit/test_demo_table.py).
    table = out.split("pass rate per check and model version:")[1].split("each cell:")[0].splitlines()
    table = [row for row in table[2:] if row.strip()]  # the check rows, after the header
    assert table and all("%" in row for row in table), table
    # A normal exit stops every child in time: no error-level log line (the shadow mirror child
    # used to be killed as 'did not stop in time' on every run).
    errors = [ln for ln in result.stderr.splitlines() if '"level": "error"' in ln or "[error" in ln]
    assert not errors, errors
    # Its stderr is a pipe here, as in `llmwatch demo > demo.txt 2>&1`: its warnings (version B
    # served: a new served version) are readable lines, not the JSON lines a server writes for a
    # log collector.
    logged = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert not [ln for ln in logged if ln.lstrip().startswith("{")], result.stderr
    assert any("[warning" in ln and "served_version_changed" in ln for ln in logged), result.stderr


def test_each_demo_run_has_its_own_data_and_a_foreign_folder_is_refused(tmp_path: Path):
    data = tmp_path / "d"
    first = run_demo(data, "--duration", "2")
    assert "llmwatch demo summary" in first.stdout, first.stderr
    first_ids = {
        orjson.loads(ln)["id"] for p in (data / "samples").glob("*.jsonl") for ln in p.read_text().splitlines()
    }
    second = run_demo(data, "--duration", "2")
    assert "cleared the previous demo run from" in second.stdout, second.stdout + second.stderr
    second_ids = {
        orjson.loads(ln)["id"] for p in (data / "samples").glob("*.jsonl") for ln in p.read_text().splitlines()
    }
    assert first_ids and second_ids and not first_ids & second_ids, "the second run read the first run's samples"
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not the demo's")
    refused = run_demo(foreign)
    assert refused.returncode == 2
    assert "is not empty and was not written by `llmwatch demo`" in refused.stderr
    assert (foreign / "keep.txt").read_text() == "not the demo's"
