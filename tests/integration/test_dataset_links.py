"""A symbolic link inside a dataset folder is refused by every reader, never read through (design
record 0062); a file the user names on the command line is followed, as `cat` does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from helpers.procs import llmwatch
from helpers.samples import NOW, refusal_scored, write_jsonl

from llmwatch.core import parquet, parquet_write
from llmwatch.core.links import LinkInDataset
from llmwatch.core.records import Sample

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


def _two_partitions(tmp_path: Path) -> tuple[Path, list[Path], Path]:
    """A samples dataset of versions A and B (one partition folder each), and another team's part file
    of B whose records carry the same ids as ours with SECRET prompts."""
    a, _ = records("A", 4)
    b, _ = records("B", 4)
    parquet_write.write_dataset(tmp_path / "ds", "samples", a + b)
    theirs, _ = records("B", 4, prompt=SECRET)
    parquet_write.write_dataset(tmp_path / "theirs", "samples", theirs)
    ours = parquet.dataset_files(tmp_path / "ds", "samples")
    assert [p.parent.name for p in ours] == ["model_version=A", "model_version=B"], ours
    return tmp_path / "ds", ours, next((tmp_path / "theirs").rglob("*.parquet"))


def _swap(what: str, ours: Path, their_part: Path, tmp_path: Path) -> Path:
    """`ours` (a part file), or its partition folder, moved away and a link to theirs left at its name."""
    if what == "part file":
        ours.rename(tmp_path / "moved.parquet")
        ours.symlink_to(their_part)
        return ours
    ours.parent.rename(tmp_path / "moved-partition")
    ours.parent.symlink_to(their_part.parent)
    if their_part.name != ours.name:
        their_part.rename(their_part.parent / ours.name)  # the listed name, now through the linked folder
    return ours.parent


@pytest.mark.parametrize("what", ["part file", "partition folder"])
def test_a_part_swapped_for_a_link_after_the_listing_is_refused_at_the_open(tmp_path: Path, what: str):
    """The listing refuses a link; one swapped in between the listing and the read (a part file, or
    a partition folder on the way to one) is refused by the open itself, with the listing's message,
    and nothing of it is read. A part file the user names itself is still followed."""
    ds, ours, their_part = _two_partitions(tmp_path)
    reader = parquet.read_dataset(ds, Sample, "samples")
    first = next(reader)  # listed, and the first (version A) part file opened
    assert first.model_version == "A"
    link = _swap(what, ours[1], their_part, tmp_path)
    read = [first]
    with pytest.raises(
        LinkInDataset,
        match=rf"^{re.escape(str(link))}: a symbolic link \(to .*\) inside the dataset folder {re.escape(str(ds))};",
    ):
        read.extend(reader)
    assert [s.model_version for s in read] == ["A"] * 4
    assert all(SECRET not in str(s.request) for s in read)
    # The same one-line refusal from a command, where the race is lost at the listing instead.
    done = run(*commands(ds, ds, tmp_path / "out")["report"], cwd=tmp_path)
    assert_refused(done, link, f"report: {what}")
    # Named itself on the command line, the link is the user's choice: followed.
    theirs_read = list(parquet.read_dataset(ours[1], Sample, "samples"))
    assert len(theirs_read) == 4 and all(SECRET in str(s.request) for s in theirs_read)


def test_ui_reads_no_part_swapped_for_a_link_after_its_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The ui's index and its record page open a data directory's part files without following links:
    a part file swapped for one after the listing is skipped with a warning (nothing of it indexed),
    and a sample's page reads nothing back through one."""
    from llmwatch.agent.apps.ui import index as ui_index

    ds, ours, their_part = _two_partitions(tmp_path)
    listed = parquet.dataset_files

    def listed_then_swapped(*args, **kwargs):
        found = listed(*args, **kwargs)
        if ours[1].is_file() and not ours[1].is_symlink():
            _swap("part file", ours[1], their_part, tmp_path)  # the race, lost right after the listing
        return found

    monkeypatch.setattr(ui_index.parquet, "dataset_files", listed_then_swapped)
    index = ui_index.Index(ds)
    try:
        index.refresh(strict=True)
        rows = index.db.execute("SELECT id, model_version, prompt FROM samples ORDER BY id").fetchall()
        assert [r[1] for r in rows] == ["A"] * 4, rows
        assert SECRET not in str(rows)
        # The record page: read back from the file the index names, through the data directory.
        assert ui_index.read_record(str(ours[1]), "B-0", index.local_dir) is None
        control = ui_index.read_record(str(ours[1]), "B-0")  # without the folder: read through (the old way)
        assert control is not None and SECRET in str(control["request"])
    finally:
        index.close()


def test_ui_reads_no_json_lines_file_swapped_for_a_link_after_its_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The ui's index read a data directory's JSON Lines files by name (DuckDB's read_json, and the
    tail of a grown file by open()): a file swapped for a link after the listing was read through it,
    its records (here another team's, with SECRET prompts and our ids) indexed and shown. It is
    opened from the data directory without following links and DuckDB reads the descriptor: a
    whole read and a grown file's tail each refuse the link with a warning, and a sample's page
    reads nothing back through one."""
    from helpers.loglines import LogLines

    from llmwatch.agent.apps.ui import index as ui_index

    ours_a, _ = records("A", 4)
    ours_b, _ = records("B", 4)
    theirs, _ = records("B", 40, prompt=SECRET)  # longer than ours: a tail read of it finds whole lines
    data = tmp_path / "data"
    write_jsonl(data / "samples" / "samples-1.jsonl", ours_a)
    second = write_jsonl(data / "samples" / "samples-2.jsonl", ours_b)
    victim = write_jsonl(tmp_path / "theirs.jsonl", theirs)
    logs = LogLines()
    monkeypatch.setattr(ui_index, "log", logs)
    index = ui_index.Index(data)
    listed = index._files
    swapping = [True]

    def listed_then_swapped(kind):
        found = listed(kind)
        if kind.folder == "samples" and swapping[0]:
            second.rename(tmp_path / "moved.jsonl")  # the race, lost right after the listing (and its stat)
            second.symlink_to(victim)
        return found

    def rows() -> list[tuple]:
        return index.db.execute("SELECT id, model_version, prompt FROM samples ORDER BY id").fetchall()

    monkeypatch.setattr(index, "_files", listed_then_swapped)
    try:
        # A whole read: samples-2.jsonl is new.
        index.refresh(strict=True)
        assert [r[0] for r in rows()] == [f"A-{i}" for i in range(4)] and SECRET not in str(rows())
        [warning] = [line for line in logs.lines if line["event"] == "ui.file_unreadable"]
        assert warning["file"] == str(second) and "a symbolic link (to " in warning["error"], warning
        # The record page: read back through the data directory, the link is not followed.
        assert ui_index.read_record(str(second), "B-0", index.local_dir) is None
        control = ui_index.read_record(str(second), "B-0")  # without the folder: read through (the old way)
        assert control is not None and SECRET in str(control["request"])

        # A grown file's tail: ours again, read, then grown; swapped between the listing and the read.
        second.unlink()
        (tmp_path / "moved.jsonl").rename(second)
        swapping[0] = False
        index.refresh()
        assert len(rows()) == 8 and SECRET not in str(rows())
        more, _ = records("C", 2)
        with open(second, "ab") as fh:
            fh.write(b"".join(s.to_json() + b"\n" for s in more))
        swapping[0] = True
        index.refresh()
        assert len(rows()) == 8 and SECRET not in str(rows()), rows()
        assert [line["file"] for line in logs.lines if line["event"] == "ui.file_unreadable"] == [str(second)] * 2
    finally:
        index.close()


def test_a_fifo_swapped_in_for_a_part_file_is_refused_not_waited_on(tmp_path: Path):
    """A named pipe at a listed part file's name (no writer) is refused at once: opened without
    blocking, and not a regular file."""
    from llmwatch.core.links import open_inside
    from llmwatch.core.records import RecordError

    folder = tmp_path / "ds"
    (folder / "samples").mkdir(parents=True)
    os.mkfifo(folder / "samples" / "part-0.parquet")
    with pytest.raises(RecordError, match=r"part-0.parquet: not a regular file"):
        open_inside(folder / "samples" / "part-0.parquet", folder)
