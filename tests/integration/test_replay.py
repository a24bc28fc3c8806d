"""`llmwatch replay`: recorded samples through the online drift pager, through the real command line."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import orjson
from helpers.samples import NOW, chat_sample

from llmwatch.core.scores import Score
from llmwatch.scorers.drift.baseline import freeze, write_baseline


def traffic(rng: np.random.Generator, n: int, *, version: str, fail: float, start: int = 0):
    samples, scores = [], []
    for i in range(start, start + n):
        tokens = int(rng.integers(80, 120))
        at = NOW + timedelta(seconds=10 * i)
        s = chat_sample(
            id=f"{version}-{i}",
            timestamp=at,
            model_version=version,
            latency_ms=tokens * 20.0 * float(rng.uniform(0.9, 1.1)),
            usage={"input_tokens": 30, "output_tokens": tokens},
        )
        result = "fail" if rng.random() < fail else "pass"
        samples.append(s)
        scores.append(Score(sample_id=s.id, check="refusal", kind="refusal", result=result, sample_timestamp=at))
    return samples, scores


def write(path: Path, records) -> Path:
    path.write_bytes(b"".join(r.to_json() + b"\n" for r in records))
    return path


def replay(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "replay", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def lines(out: str) -> list[dict]:
    return [orjson.loads(line) for line in out.splitlines() if line.strip()]


def regressed_recording(tmp_path):
    """A baseline of A in base.json, and B's recording: 1,500 samples failing 5 % of the time, then
    1,500 failing 20 %; (stable, worse, their scores) in time order."""
    rng = np.random.default_rng(1)
    base_samples, base_scores = traffic(rng, 800, version="A", fail=0.05)
    write_baseline(freeze(base_samples, base_scores, None, model_version="A"), tmp_path / "base.json")
    stable, stable_scores = traffic(rng, 1500, version="B", fail=0.05, start=1000)
    worse, worse_scores = traffic(rng, 1500, version="B", fail=0.20, start=2500)
    return stable, worse, stable_scores + worse_scores


def test_a_regression_in_the_middle_of_a_recording_pages_once_at_the_sample_that_decided(tmp_path):
    stable, worse, scores = regressed_recording(tmp_path)
    write(tmp_path / "samples.jsonl", stable + worse)
    write(tmp_path / "scores.jsonl", scores)

    proc = replay(tmp_path, "--baseline", "base.json", "--samples", "samples.jsonl", "--scores", "scores.jsonl")

    assert proc.returncode == 1, proc.stderr
    *transitions, summary = lines(proc.stdout)
    assert [(t["state"], t["family"], t["signal"], t["model_version"]) for t in transitions] == [
        ("firing", "behaviour", "pass_rate:refusal", "B")
    ]
    page = transitions[0]
    # Decided on the regressed part, not before it started, from evidence alone.
    assert page["samples_seen"] > 1500 and page["sample_time"] >= worse[0].timestamp.isoformat()
    assert page["e_value"] >= page["threshold"]
    assert summary["summary"]["pages"] == 1 and summary["summary"]["samples"] == 3000
    assert summary["summary"]["first_page"]["signal"] == "pass_rate:refusal"
    assert summary["summary"]["first_page"]["seconds_after_first_sample"] > 1500 * 10


def test_a_stable_recording_pages_nothing_and_exits_0(tmp_path):
    rng = np.random.default_rng(2)
    base_samples, base_scores = traffic(rng, 800, version="A", fail=0.05)
    write_baseline(freeze(base_samples, base_scores, None, model_version="A"), tmp_path / "base.json")
    samples, scores = traffic(rng, 2000, version="A", fail=0.05, start=1000)
    write(tmp_path / "samples.jsonl", samples)
    write(tmp_path / "scores.jsonl", scores)
    proc = replay(tmp_path, "--baseline", "base.json", "--samples", "samples.jsonl", "--scores", "scores.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert lines(proc.stdout) == [lines(proc.stdout)[-1]] and lines(proc.stdout)[-1]["summary"]["pages"] == 0


def test_a_recording_in_the_order_a_proxy_writes_it_replays_as_in_time_order(tmp_path):
    # A proxy writes a sample when its call finishes, stamped with the time it started: its own
    # files are out of timestamp order, and the documented `llmwatch replay --samples
    # llmwatch-data/samples` refused every real recording ("earlier than the one before it").
    stable, worse, scores = regressed_recording(tmp_path)
    in_time = stable + worse
    as_finished = [s for i in range(0, len(in_time), 2) for s in reversed(in_time[i : i + 2])]
    assert as_finished != in_time
    write(tmp_path / "in-time.jsonl", in_time)
    write(tmp_path / "as-finished.jsonl", as_finished)
    write(tmp_path / "scores.jsonl", scores)
    runs = [
        replay(tmp_path, "--baseline", "base.json", "--samples", name, "--scores", "scores.jsonl")
        for name in ("in-time.jsonl", "as-finished.jsonl")
    ]
    assert [p.returncode for p in runs] == [1, 1], runs[1].stderr
    assert lines(runs[1].stdout) == lines(runs[0].stdout)


def test_malformed_lines_exit_2_naming_the_line(tmp_path):
    rng = np.random.default_rng(3)
    base_samples, base_scores = traffic(rng, 200, version="A", fail=0.05)
    write_baseline(freeze(base_samples, base_scores, None, model_version="A"), tmp_path / "base.json")
    samples, scores = traffic(rng, 5, version="A", fail=0.05, start=1000)
    write(tmp_path / "scores.jsonl", scores)
    path = write(tmp_path / "samples.jsonl", samples[:2])
    path.write_bytes(path.read_bytes() + b'{"id": "x", "timestamp": "yesterday"\n')
    proc = replay(tmp_path, "--baseline", "base.json", "--samples", "samples.jsonl", "--scores", "scores.jsonl")
    assert proc.returncode == 2 and "samples.jsonl:3: not valid JSON" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
