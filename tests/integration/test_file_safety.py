"""Files llmwatch writes: readable by its own readers, private, and never written through a planted link.

Each test runs the real command (`llmwatch ingest`, `score`, `report`, `baseline freeze`, `demo`,
`proxy`) as a process and looks at what it left on disk.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import urllib3
from helpers.procs import Proc, agent_env, agent_started, simulator_url
from helpers.procs import start_simulator as start_simulator_process

CLI = [sys.executable, "-m", "llmwatch.agent.cli"]
NO_MODEL = {"LLMWATCH_SCORING__EMBEDDINGS": "false"}


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, env={**agent_env(), **(env or {})}
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def span(i: int, **numbers: float | str) -> dict:
    t0 = 1_700_000_000_000_000_000 + i * 1_000_000_000
    attrs: list[dict] = [
        {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
        {"key": "gen_ai.request.model", "value": {"stringValue": "m-otlp"}},
        {"key": "llmwatch.model_version", "value": {"stringValue": "A"}},
        {
            "key": "gen_ai.input.messages",
            "value": {"stringValue": f'[{{"role":"user","parts":[{{"type":"text","content":"question {i}?"}}]}}]'},
        },
        {
            "key": "gen_ai.output.messages",
            "value": {"stringValue": f'[{{"role":"assistant","parts":[{{"type":"text","content":"answer {i}."}}]}}]'},
        },
    ]
    for key, value in numbers.items():
        kind = "stringValue" if isinstance(value, str) else "doubleValue"
        attrs.append({"key": key.replace("__", "."), "value": {kind: value}})
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": f"{0xAAA19B7EC3C1B100 + i:016x}",
        "name": "chat m-otlp",
        "kind": 3,
        "startTimeUnixNano": str(t0),
        "endTimeUnixNano": str(t0 + 42_000_000),
        "attributes": attrs,
    }


def test_a_span_with_absurd_numbers_is_stored_as_a_sample_every_offline_command_reads(tmp_path: Path):
    data = tmp_path / "data"
    ingest = Proc(
        [*CLI, "ingest", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", str(data)],
        env=agent_env(LLMWATCH_SAMPLING__RATE="1.0", LLMWATCH_SCORING__ENABLED="false"),
    )
    try:
        port = agent_started(ingest)["ingest_port"]
        absurd = [
            {"gen_ai__usage__output_tokens": 1e300},
            {"gen_ai__usage__input_tokens": "9" * 400},
            {"gen_ai__usage__output_tokens": -5.0, "http__response__status_code": 1e30},
            {"gen_ai__server__time_to_first_token": 1e308},
        ]
        spans = [span(i, **absurd[i % len(absurd)]) for i in range(12)]
        body = orjson.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans}]}]})
        resp = urllib3.request(
            "POST", f"http://127.0.0.1:{port}/v1/traces", body=body, headers={"Content-Type": "application/json"}
        )
        assert resp.status == 200 and "rejectedSpans" not in resp.data.decode(), resp.data
    finally:
        ingest.popen.send_signal(signal.SIGTERM)  # a clean stop: the samples are flushed
        ingest.popen.wait(timeout=60)
        ingest.stop()
    lines = [orjson.loads(x) for f in sorted((data / "samples").glob("*.jsonl")) for x in f.read_bytes().splitlines()]
    assert len(lines) == 12, ingest.output()
    for record in lines:
        for count in record["usage"].values():
            assert count is None or isinstance(count, bool) or 0 <= count < 2**53
        assert record["ttft_ms"] is None and 100 <= record["status"] <= 999
    assert sum("number_out_of_range" in r["capture_notes"] for r in lines) == 9  # the span is kept, the number not
    samples = str(data / "samples")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("scoring: {embeddings: false}\n")
    for args in (
        ["score", "--config", str(cfg), "--in", samples, "--out", str(tmp_path / "scores.jsonl")],
        ["report", "--config", str(cfg), "--samples", samples, "--out", str(tmp_path / "report.json")],
        ["baseline", "freeze", "--config", str(cfg), "--samples", samples, "--model-version", "A",
         "--out", str(tmp_path / "baseline.json")],
    ):  # fmt: skip
        done = run(*args)
        assert done.returncode == 0, (args[0], done.stderr)


def samples_file(path: Path, n: int = 6) -> Path:
    lines = []
    for i in range(n):
        lines.append(
            orjson.dumps(
                {
                    "id": f"s{i}",
                    "timestamp": 1_767_225_600 + i,
                    "model": "m",
                    "model_version": "AB"[i % 2],
                    "status": 200,
                    "latency_ms": 100.0 + i,
                    "request": {"messages": [{"role": "user", "content": f"question {i}?"}]},
                    "response": {"choices": [{"message": {"role": "assistant", "content": f"answer {i}."}}]},
                }
            )
        )
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def plant(link: Path, victim: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)


def test_whole_file_outputs_never_write_or_chmod_through_a_planted_link(tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    victim.chmod(0o644)
    samples = samples_file(tmp_path / "samples.jsonl")
    out = tmp_path / "out"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("scoring: {embeddings: false}\n")
    commands = {
        "scores.jsonl": ["score", "--config", str(cfg), "--in", str(samples), "--out", str(out / "scores.jsonl")],
        "report.json": ["report", "--config", str(cfg), "--samples", str(samples), "--out", str(out / "report.json")],
        "baseline.json": ["baseline", "freeze", "--config", str(cfg), "--samples", str(samples),
                          "--model-version", "A", "--out", str(out / "baseline.json")],
    }  # fmt: skip
    for name, args in commands.items():
        # The name a careless writer opens, and the output itself: both links to the victim
        # (a baseline is never frozen over an existing name, a link included: only the first).
        plant(out / f"{name}.partial", victim)
        if name != "baseline.json":
            plant(out / name, victim)
        done = run(*args)
        assert done.returncode == 0, (name, done.stderr)
        assert victim.read_bytes() == b"precious\n" and mode(victim) == 0o644, name
        assert not (out / name).is_symlink() and mode(out / name) in (0o600, 0o400), name
        (out / f"{name}.partial").unlink()
    assert sorted(p.name for p in out.iterdir()) == sorted(commands)


def test_a_link_planted_where_the_proxy_writes_samples_is_not_followed(tmp_path: Path):
    import datetime

    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    data = tmp_path / "data"
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
    plant(data / "samples" / f"samples-{day}-0000.jsonl", victim)
    sim = start_simulator_process("--latency-scale", "0")
    proxy = None
    try:
        upstream = simulator_url(sim)
        proxy = Proc(
            [*CLI, "proxy", "--upstream", upstream, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--data-dir", str(data)],
            env=agent_env(LLMWATCH_SAMPLING__RATE="1.0", LLMWATCH_SCORING__ENABLED="false"),
        )  # fmt: skip
        ports = agent_started(proxy)
        body = orjson.dumps({"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
        for _ in range(3):
            r = urllib3.request(
                "POST",
                f"http://127.0.0.1:{ports['proxy_port']}/v1/chat/completions",
                body=body,
                headers={"Content-Type": "application/json"},
            )
            assert r.status == 200
    finally:
        if proxy is not None:
            proxy.popen.send_signal(signal.SIGTERM)  # a clean stop: the samples are flushed
            proxy.popen.wait(timeout=60)
            proxy.stop()
        sim.stop()
    assert victim.read_bytes() == b"precious\n", "nothing was appended through the link"
    written = sorted(p for p in (data / "samples").iterdir() if not p.is_symlink())
    assert [p.name for p in written] == [f"samples-{day}-0001.jsonl"], "the writer moved on to the next name"
    assert len(written[0].read_bytes().splitlines()) == 3 and mode(written[0]) == 0o600
    assert proxy.events("data_file_name_skipped"), proxy.output()


def test_every_file_a_demo_and_a_scored_run_write_is_0600_in_0700_directories(tmp_path: Path):
    old = os.umask(0o022)  # the children inherit it: the modes must not depend on it
    try:
        demo = run(
            "demo", "--duration", "4", "--rate", "15", "--data-dir", str(tmp_path / "d"),
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )  # fmt: skip
        # Four seconds cannot show the drift verdicts: the demo says so and exits 2
        # (tests/integration/test_cli.py); every file it wrote is still checked below.
        assert demo.returncode == 2 and "demo incomplete (exit 2)" in demo.stdout, demo.stdout + demo.stderr
        scored = run(
            "score", "--in", str(tmp_path / "d" / "samples"), "--out", str(tmp_path / "run" / "scores.jsonl"),
            env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )  # fmt: skip
        assert scored.returncode == 0, scored.stderr
    finally:
        os.umask(old)
    assert (tmp_path / "run" / "scores.jsonl.embeddings.npz").exists(), "the embedding cache is among the files"
    files, dirs = {}, {}
    for root in (tmp_path / "d", tmp_path / "run"):
        dirs[root] = mode(root)
        for p in root.rglob("*"):
            (dirs if p.is_dir() else files)[p] = mode(p)
    assert len(files) >= 4, files
    # Baselines are immutable as well as private (0400); everything else 0600.
    assert {str(p.relative_to(tmp_path)): m for p, m in files.items() if m not in (0o600, 0o400)} == {}
    assert {str(p.relative_to(tmp_path)): m for p, m in dirs.items() if m != 0o700} == {}
