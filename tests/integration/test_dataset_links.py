"""A symbolic link inside a dataset folder is refused by every reader, never read through (design
record 0062); a file the user names on the command line is followed, as `cat` does."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from helpers.procs import llmwatch
from helpers.samples import NOW, refusal_scored, write_jsonl

from llmwatch.core import parquet_write

ENV = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
SECRET = "other-team-secret-prompt"


def records(version: str, n: int, prompt: str = "how do I bake bread?") -> tuple[list, list]:
    pairs = [
        refusal_scored(f"{version}-{i}", NOW + timedelta(minutes=i), f"{prompt} {i}", 30 + i, version, i % 3 > 0)
        for i in range(n)
    ]
    return [s for s, _ in pairs], [sc for _, sc in pairs]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return llmwatch(*args, cwd=cwd, env=ENV)


def commands(samples: Path, scores: Path, out: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", "--samples", str(samples), "--out", str(out / "report.json")],
        "score": ["score", "--in", str(samples), "--out", str(out / "scores.jsonl")],
        "baseline freeze": ["baseline", "freeze", "--samples", str(samples), "--scores", str(scores),
                            "--model-version", "A", "--out", str(out / "baseline.json")],
        "suite build": ["suite", "build", "--samples", str(samples), "--scores", str(scores),
                        "--similarity", "text", "--out", str(out / "suite.jsonl")],
    }  # fmt: skip


def assert_refused(done: subprocess.CompletedProcess, link: Path, name: str) -> None:
    assert done.returncode == 2, (name, done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, (name, done.stderr)
    assert str(link) in done.stderr and "symbolic link" in done.stderr, (name, done.stderr)
    assert SECRET not in done.stdout + done.stderr, name


def test_a_link_planted_in_a_json_lines_folder_is_refused_by_every_reader(tmp_path: Path):
    data = tmp_path / "data"
    samples, scores = records("A", 12)
    write_jsonl(data / "samples" / "samples-1.jsonl", samples)
    write_jsonl(data / "scores" / "scores-1.jsonl", scores)
    theirs, their_scores = records("A", 3, prompt=SECRET)
    victim = write_jsonl(tmp_path / "elsewhere" / "theirs.jsonl", theirs)
    link = data / "samples" / "samples-2.jsonl"
    link.symlink_to(victim)
    score_link = data / "scores" / "scores-2.jsonl"
    score_link.symlink_to(write_jsonl(tmp_path / "elsewhere" / "their-scores.jsonl", their_scores))
    out = tmp_path / "out"
    for name, args in commands(data / "samples", data / "scores", out).items():
        assert_refused(run(*args, cwd=tmp_path), link, name)
    # The scores folder's link is refused too (the samples given alone, as a file: followed).
    link.unlink()
    done = run(*commands(data / "samples", data / "scores", out)["suite build"], cwd=tmp_path)
    assert_refused(done, score_link, "suite build --scores")
    # A file named on the command line is the user's choice: read through its link, as `cat` does.
    named = tmp_path / "named.jsonl"
    named.symlink_to(data / "samples" / "samples-1.jsonl")
    done = run("report", "--samples", str(named), "--out", str(out / "named.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_a_linked_part_file_or_folder_in_a_parquet_dataset_is_refused(tmp_path: Path):
    samples, scores = records("A", 12)
    parquet_write.write_dataset(tmp_path / "ds", "samples", samples)
    parquet_write.write_dataset(tmp_path / "ds", "scores", scores)
    theirs, _ = records("A", 3, prompt=SECRET)
    parquet_write.write_dataset(tmp_path / "theirs", "samples", theirs)
    their_part = next((tmp_path / "theirs").rglob("*.parquet"))
    partition = next((tmp_path / "ds" / "samples").glob("date=*/model_version=*"))
    out = tmp_path / "out"
    plants = {
        "a part file": partition / "part-planted.parquet",
        "a partition folder": tmp_path / "ds" / "samples" / "date=2099-01-01",
        "the kind's folder": tmp_path / "ds" / "samples",
    }
    for what, link in plants.items():
        if what == "the kind's folder":
            (tmp_path / "ds" / "samples").rename(tmp_path / "ds-samples")
            link.symlink_to(tmp_path / "ds-samples")
        else:
            link.symlink_to(their_part if link.name.endswith(".parquet") else their_part.parent.parent)
        for name, args in commands(tmp_path / "ds", tmp_path / "ds", out).items():
            assert_refused(run(*args, cwd=tmp_path), link, f"{name}: {what}")
        link.unlink()
        if what == "the kind's folder":
            (tmp_path / "ds-samples").rename(tmp_path / "ds" / "samples")
    done = run(*commands(tmp_path / "ds", tmp_path / "ds", out)["report"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_ui_refuses_to_start_over_a_data_dir_with_a_planted_link(tmp_path: Path, form: str):
    samples, scores = records("A", 6)
    theirs, _ = records("A", 3, prompt=SECRET)
    data = tmp_path / "data"
    if form == "jsonl":
        write_jsonl(data / "samples" / "samples-1.jsonl", samples)
        link = data / "samples" / "samples-2.jsonl"
        link.symlink_to(write_jsonl(tmp_path / "theirs.jsonl", theirs))
    else:
        parquet_write.write_dataset(data, "samples", samples)
        parquet_write.write_dataset(tmp_path / "theirs", "samples", theirs)
        link = data / "samples" / "part-planted.parquet"
        link.symlink_to(next((tmp_path / "theirs").rglob("*.parquet")))
    done = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "ui", "--data-dir", str(data), "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=120, env=ENV,
    )  # fmt: skip
    assert_refused(done, link, f"ui {form}")
    assert done.stderr.strip().count("\n") == 0, done.stderr
