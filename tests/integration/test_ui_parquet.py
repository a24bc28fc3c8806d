"""`llmwatch ui` as a real process over a Parquet dataset (what `llmwatch archive` writes), local or
through a `file://` URL: the same list, sample, pair and versions pages as over the JSON Lines the
dataset was made from (that server is the oracle), and a new part file picked up on refresh.
"""

from __future__ import annotations

import html
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.ui_app import UiServer, count, get, listed_ids
from helpers.ui_data import generate, make_sample, make_scores

from llmwatch.core import parquet, parquet_write
from llmwatch.core.jsonio import read_records
from llmwatch.core.pairs import Pair
from llmwatch.core.scores import Score

N = 120
PAIRS = 10
QUERIES = (
    "",
    "?model_version=B",
    "?check=min_length&outcome=fail",
    "?failure_mode=any",
    "?q=password",
    "?sort=latency",
    "?category=account&sort=cost",
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A JSON Lines data directory and the Parquet dataset of the same records."""
    base = tmp_path_factory.mktemp("ui-parquet")
    jsonl, dataset = base / "llmwatch-data", base / "dataset"
    generate(jsonl, N, pairs=PAIRS)
    for kind, model in (("samples", None), ("scores", Score), ("pairs", Pair)):
        records = read_records(jsonl / kind, model, prefix=kind) if model else read_records(jsonl / kind)
        parquet_write.write_dataset(dataset, kind, records)
    assert not list(dataset.rglob("*.jsonl")) and parquet.dataset_files(dataset, "samples")
    return jsonl, dataset


@pytest.fixture(scope="module")
def servers(folders: tuple[Path, Path]):
    jsonl, dataset = folders
    started: list[UiServer] = []
    try:
        for source in (jsonl, dataset, f"file://{dataset}"):
            started.append(UiServer(source))  # type: ignore[arg-type]
        yield started
    finally:
        for server in started:
            server.stop()


def test_every_table_is_loaded_from_the_dataset(servers):
    oracle, local, remote = servers
    expected = json.loads(get(f"{oracle.base}/healthz")[2])
    assert expected["samples"] == N and expected["pairs"] == PAIRS and expected["scores"] > N
    assert json.loads(get(f"{local.base}/healthz")[2]) == expected
    assert json.loads(get(f"{remote.base}/healthz")[2]) == expected


def test_filtered_lists_are_the_ones_the_json_lines_give(servers):
    oracle, local, remote = servers
    for query in QUERIES:
        status, _, want = get(f"{oracle.base}/samples{query}")
        assert status == 200
        for server in (local, remote):
            status, _, body = get(f"{server.base}/samples{query}")
            assert status == 200, (query, body[:500])
            assert count(body) == count(want) and listed_ids(body) == listed_ids(want), query
    assert count(get(f"{local.base}/samples")[2]) == N


def test_a_sample_page_reads_the_record_back_from_its_part_file(servers, folders):
    oracle, local, remote = servers
    jsonl, _ = folders
    scores = sorted(
        (s.check, s.result)
        for s in read_records(jsonl / "scores", Score, prefix="scores")
        if s.sample_id == "smp-0000050"
    )
    _, _, want = get(f"{oracle.base}/samples/smp-0000050")
    for server in (local, remote):
        status, _, body = get(f"{server.base}/samples/smp-0000050")
        assert status == 200
        text = html.unescape(re.sub(r"<[^>]+>", " ", body))
        # The prompt and the answer come from the record read back (the table keeps only snippets).
        assert "Question 50 about password reset: what should I do next?" in text
        assert '<mark class="redacted">[EMAIL]</mark>' in body
        rows = re.findall(r'<tr class="check"><td>([^<]+)</td><td>[^<]*</td><td class="(\w+)">', body)
        assert sorted(rows) == scores
        assert body == want
        assert get(f"{server.base}/samples/no-such-sample")[0] == 404


def test_versions_and_pair_pages_are_the_ones_the_json_lines_give(servers):
    oracle, local, remote = servers
    _, _, pairs = get(f"{oracle.base}/shadow")
    pair_ids = re.findall(r'class="pair-link" href="/shadow/([^"]+)"', pairs)
    assert len(pair_ids) == PAIRS
    for path in ("/versions", "/versions?model_version=A,B", "/shadow", f"/shadow/{pair_ids[3]}"):
        status, _, want = get(oracle.base + path)
        assert status == 200
        for server in (local, remote):
            assert get(server.base + path)[2] == want, path


@pytest.mark.parametrize("as_url", [False, True], ids=["directory", "file-url"])
def test_a_new_part_file_is_picked_up_on_refresh(tmp_path: Path, as_url: bool):
    rng = random.Random(3)
    first = [make_sample(i, rng) for i in range(20)]
    parquet_write.write_dataset(tmp_path, "samples", first)
    parquet_write.write_dataset(tmp_path, "scores", [sc for s in first for sc in make_scores(s, rng)])
    # A damaged file and another kind's file among the samples: skipped with a warning, the rest read.
    (tmp_path / "samples" / "date=2026-12-01" / "part-damaged.parquet").write_bytes(b"PAR1 cut short")
    parquet_write.write_part(
        tmp_path / "samples", "scores", parquet.partition_of("samples", first[0]), "part-stray.parquet",
        make_scores(first[0], rng),
    )  # fmt: skip
    server = UiServer(f"file://{tmp_path}" if as_url else tmp_path, "--refresh", "0.2")  # type: ignore[arg-type]
    try:
        assert json.loads(get(f"{server.base}/healthz")[2]) == {"samples": 20, "scores": 60, "pairs": 0}
        extra = [make_sample(i, rng) for i in range(20, 30)]
        # What the archive does: new files beside the old ones, never a changed one.
        parquet_write.write_dataset(tmp_path, "samples", extra, name="part-later.parquet")
        parquet_write.write_dataset(
            tmp_path, "scores", [sc for s in extra for sc in make_scores(s, rng)], name="part-later.parquet"
        )
        deadline = time.monotonic() + 30
        while json.loads(get(f"{server.base}/healthz")[2]) != {"samples": 30, "scores": 90, "pairs": 0}:
            assert time.monotonic() < deadline, get(f"{server.base}/healthz")[2]
            time.sleep(0.1)  # polling the state under test, with a deadline
        status, _, body = get(f"{server.base}/samples/smp-0000029")
        assert status == 200 and "min_length" in body
    finally:
        server.stop()


def test_another_tools_part_file_among_the_samples_is_named_not_dropped_in_silence(tmp_path: Path):
    """A Parquet file of another schema (no llmwatch.kind) under samples/ had its missing columns
    filled with nulls and every row dropped: no sample, and not a word in the log. It is skipped
    with the warning part files that cannot be read get, saying what it is not and what it has."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(5)
    parquet_write.write_dataset(tmp_path, "samples", [make_sample(i, rng) for i in range(6)])
    foreign = tmp_path / "samples" / "events.parquet"
    pq.write_table(pa.table({"user_id": [1, 2], "event": ["a", "b"], "ts": [1.0, 2.0]}), foreign)
    server = UiServer(tmp_path)
    try:
        assert json.loads(get(f"{server.base}/healthz")[2])["samples"] == 6
        warning = server.proc.wait_event("ui.parquet_unreadable", 30)
        assert warning["file"] == str(foreign), warning
        assert warning["error"].startswith("not a samples dataset: its columns are event, ts, user_id, and it lacks ")
    finally:
        server.stop()


def test_a_dataset_url_that_cannot_be_opened_is_one_line_and_exit_2(tmp_path: Path):
    for url, words in (
        ("nosuchfs://bucket/archive", "cannot open this dataset URL"),
        (f"file://{tmp_path}/empty", "no Parquet files"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "llmwatch.agent.cli", "ui", "--data-dir", url, "--listen", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert url in done.stderr and words in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr


def test_the_start_line_names_a_dataset_url_as_it_was_given(folders, servers):
    # It printed "... from file:/tmp/ds" (the URL passed through Path, one slash lost): a string
    # that, given back to --data-dir, is a local path that does not exist.
    _, dataset = folders
    _, _, remote = servers
    line = next(x for x in remote.proc.lines if x.startswith("llmwatch ui listening on"))
    assert line.rstrip().endswith(f"pairs from file://{dataset})"), line


def test_a_sample_whose_timestamp_python_cannot_hold_is_shown_from_the_index_not_a_500(tmp_path: Path):
    # Its part file's row could not be turned back into a record (OverflowError, year 33658): the
    # sample page answered 500 "internal error".
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet.arrow_schema()["samples"]
    seconds = schema.set(schema.get_field_index("timestamp"), pa.field("timestamp", pa.timestamp("s", tz="UTC")))
    sample = make_sample(7, random.Random(7))
    table = pa.Table.from_pylist([parquet.to_row("samples", sample)], schema=seconds)
    far = pa.array([10**12], pa.int64()).cast(seconds.field("timestamp").type)
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", far)
    (tmp_path / "samples").mkdir()
    pq.write_table(table, tmp_path / "samples" / "part-0.parquet")
    server = UiServer(tmp_path)
    try:
        status, _, body = get(f"{server.base}/samples/{sample.id}")
        assert status == 200 and sample.id in body
    finally:
        server.stop()
