"""Data files are private: created 0600 in 0700 directories unless `files.mode` says otherwise."""

from __future__ import annotations

import os
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest

from llmwatch.agent.cli.main import main
from llmwatch.agent.components import load_config
from llmwatch.core import jsonio
from llmwatch.core.config import ConfigError
from llmwatch.core.jsonio import JsonlWriter


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def default_mode_and_loose_umask():
    # A umask of 022 is what made files 0644 before; the modes must not depend on it.
    old = os.umask(0o022)
    yield
    os.umask(old)
    jsonio.set_file_mode(0o600)


def samples_file(path: Path, n: int = 6) -> Path:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    lines = []
    for i in range(n):
        version = "A" if i % 2 else "B"
        lines.append(
            orjson.dumps(
                {
                    "id": f"s{i}",
                    "timestamp": (t0 + timedelta(seconds=i)).isoformat(),
                    "model": "m",
                    "model_version": version,
                    "status": 200,
                    "latency_ms": 100.0 + i,
                    "request": {"messages": [{"role": "user", "content": f"question {i}?"}]},
                    "response": {
                        "choices": [
                            {
                                "message": {"role": "assistant", "content": f"answer number {i}."},
                                "finish_reason": "stop",
                            }
                        ]
                    },
                }
            )
        )
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def config_file(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "llmwatch.yaml"
    # No embedding model: these tests are about files, not scores.
    path.write_text("scoring: {embeddings: false}\n" + extra)
    return str(path)


def test_sample_files_and_their_directories_are_private(tmp_path):
    writer = JsonlWriter(tmp_path / "data" / "samples", "samples")
    writer.write_lines([b'{"a": 1}'])
    writer.close()
    [written] = (tmp_path / "data" / "samples").iterdir()
    assert mode(written) == 0o600
    assert mode(tmp_path / "data" / "samples") == 0o700 and mode(tmp_path / "data") == 0o700


def test_an_existing_shared_directory_keeps_its_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    JsonlWriter(shared, "scores").write_lines([b"{}"])
    assert mode(shared) == 0o755
    assert {mode(p) for p in shared.iterdir()} == {0o600}


def test_offline_commands_write_private_scores_baselines_reports_and_review_files(tmp_path, capsys):
    cfg = config_file(tmp_path)
    samples = samples_file(tmp_path / "samples.jsonl")
    out = tmp_path / "out"
    assert main(["score", "--config", cfg, "--in", str(samples), "--out", str(out / "scores.jsonl")]) == 0
    assert (
        main(
            [
                "baseline",
                "freeze",
                "--config",
                cfg,
                "--samples",
                str(samples),
                "--model-version",
                "A",
                "--out",
                str(out / "b" / "baseline.json"),
            ]
        )
        == 0
    )
    assert main(["report", "--config", cfg, "--samples", str(samples), "--out", str(out / "report.json")]) == 0
    assert (
        main(
            [
                "review",
                "export",
                "--config",
                cfg,
                "--samples",
                str(samples),
                "--versions",
                "A,B",
                "--n",
                "2",
                "--seed",
                "1",
                "--out",
                str(out / "review" / "tasks.jsonl"),
            ]
        )
        == 0
    )
    assert mode(out / "scores.jsonl") == 0o600
    # Baselines are immutable as well as private.
    assert mode(out / "b" / "baseline.json") == 0o400
    assert mode(out / "report.json") == 0o600
    assert mode(out / "review" / "tasks.jsonl") == 0o600 and mode(out / "review" / "tasks.key.json") == 0o600
    assert {mode(d) for d in (out, out / "b", out / "review")} == {0o700}


def test_files_mode_is_configurable(tmp_path):
    cfg = config_file(tmp_path, 'files: {mode: "0640"}\n')
    samples = samples_file(tmp_path / "samples.jsonl")
    assert (
        main(["score", "--config", cfg, "--in", str(samples), "--out", str(tmp_path / "shared" / "scores.jsonl")]) == 0
    )
    assert mode(tmp_path / "shared" / "scores.jsonl") == 0o640
    assert mode(tmp_path / "shared") == 0o750


@pytest.mark.parametrize("bad", ["644x", "0777", "0400", "rw-------"])
def test_a_bad_files_mode_is_refused_with_the_field_named(tmp_path, bad):
    with pytest.raises(ConfigError, match="files.mode"):
        load_config(config_file(tmp_path, f'files: {{mode: "{bad}"}}\n'), environ={})


def test_the_ui_index_spills_into_a_private_folder_not_the_working_directory(tmp_path, monkeypatch):
    # DuckDB spills a query over its memory limit to `temp_directory`; for an in-memory database
    # that was `.tmp` in the working directory, created with the umask's modes (files 0666 under
    # umask 000): pages of prompts and answers readable by anyone.
    from llmwatch.agent.apps.ui.index import Index

    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    old_umask = os.umask(0)
    try:
        index = Index(tmp_path / "data", threads=1)
        spill = Path(index.db.execute("SELECT current_setting('temp_directory')").fetchone()[0])
        index.db.execute("SET memory_limit = '64MB'")
        index.db.execute("SET enable_progress_bar = false")
        index.db.execute(
            "CREATE TABLE big AS SELECT i, md5(i::VARCHAR) || md5((i + 1)::VARCHAR) AS s FROM range(1000000) r(i)"
        )
        seen: list[tuple[str, int]] = []
        # Spill files live only while the query runs: the sort's result is read back from them, so
        # list them from inside it (a Python UDF called once per row of the sorted result's head).
        index.db.create_function(
            "look", lambda x: seen.extend((str(p), mode(p)) for p in [spill, *spill.rglob("*")]) or x, [int], int
        )
        index.db.execute("SELECT look(i) FROM (SELECT i FROM big ORDER BY s DESC LIMIT 1 OFFSET 999998)").fetchall()
    finally:
        # Whatever fails above, the rest of the session keeps its umask.
        os.umask(old_umask)
    assert list(work.iterdir()) == [], "nothing is written into the working directory"
    assert spill.is_absolute() and not spill.is_relative_to(work)
    assert seen and all(m == 0o700 for p, m in seen if p == str(spill)), seen
    assert any(p != str(spill) for p, _ in seen), f"the query did not spill: {seen}"
    index.close()
    assert not spill.exists(), "the spill folder is removed on close"


def test_an_index_never_closed_leaves_no_spill_folder_once_collected(tmp_path):
    import gc

    from llmwatch.agent.apps.ui.index import Index

    index = Index(tmp_path, threads=1)
    spill = Path(index.db.execute("SELECT current_setting('temp_directory')").fetchone()[0])
    assert spill.is_dir()
    del index
    gc.collect()
    assert not spill.exists()
