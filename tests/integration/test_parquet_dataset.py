"""The Parquet dataset (llmwatch.core.parquet) is the same records as JSON Lines, to every offline command."""

from __future__ import annotations

import os
import stat
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from helpers import procs
from helpers.samples import write_jsonl

from llmwatch.core import parquet, parquet_write
from llmwatch.core.jsonio import read_records
from llmwatch.core.pairs import Pair, PairScore
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score

T0 = datetime(2026, 3, 1, 22, 0, tzinfo=timezone.utc)
ENV = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def sample(i: int, version: str | None, refuse: bool) -> Sample:
    answer = "I'm sorry, but I can't help with that." if refuse else " ".join(["word"] * (20 + i % 40)) + "."
    return Sample(
        id=f"{version}-{i}",
        timestamp=T0 + timedelta(minutes=7 * i),  # crosses midnight: two date partitions
        model="m",
        model_version=version,
        status=200,
        latency_ms=100.0 + (i * 37) % 200,
        usage={"input_tokens": 10 + i % 7, "output_tokens": 20 + i % 40},
        request={"messages": [{"role": "user", "content": f"question {i} about cooking?"}]},
        response={"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]},
        metadata={"category": "cooking" if i % 2 else "travel"},
        capture_notes=["n"] if i % 5 == 0 else [],
    )


def llmwatch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return procs.llmwatch(*args, cwd=cwd, env=ENV)


def test_samples_scores_and_pairs_read_back_from_parquet_exactly_as_written(tmp_path):
    samples = [sample(i, ["v1", "v/2", None][i % 3], i % 4 == 0) for i in range(60)]
    scores = [
        Score(
            sample_id=s.id,
            check="refusal",
            kind="rule",
            result="pass",
            value=0.5,
            details={"k": [1, 2]},
            model=s.model,
            model_version=s.model_version,
            sample_timestamp=s.timestamp,
        )
        for s in samples
    ]
    pairs = [
        Pair(
            id=f"p{i}",
            candidate="c",
            timestamp=samples[i].timestamp,
            route="/v1/chat/completions",
            primary=samples[i],
            shadow=samples[i + 1],
            primary_scores=[PairScore(check="x", result="pass", value=1.0)],
        )
        for i in range(10)
    ]
    parquet_write.write_dataset(tmp_path / "ds", "samples", samples)
    parquet_write.write_dataset(tmp_path / "ds", "scores", scores)
    parquet_write.write_dataset(tmp_path / "ds", "pairs", pairs)

    def key(r):
        return r.model_dump_json()

    assert sorted(map(key, read_records(tmp_path / "ds"))) == sorted(map(key, samples))
    assert sorted(map(key, read_records(tmp_path / "ds", Score, prefix="scores"))) == sorted(map(key, scores))
    assert sorted(map(key, read_records(tmp_path / "ds", Pair, prefix="pairs"))) == sorted(map(key, pairs))
    dirs = {p.parent.relative_to(tmp_path / "ds") for p in (tmp_path / "ds").rglob("*.parquet")}
    assert Path("samples/date=2026-03-01/model_version=v%2F2") in dirs
    assert Path("samples/date=2026-03-02/model_version=__none__") in dirs
    for p in (tmp_path / "ds").rglob("*"):
        assert stat.S_IMODE(p.stat().st_mode) == (0o700 if p.is_dir() else 0o600), p


def test_a_bad_row_is_named_by_file_and_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = parquet.to_row("samples", sample(1, "v1", False))
    bad = {**good, "status": 5000}
    (tmp_path / "samples").mkdir()
    pq.write_table(
        pa.Table.from_pylist([good, bad], schema=parquet.arrow_schema()["samples"]), tmp_path / "samples" / "x.parquet"
    )
    with pytest.raises(RecordError, match=r"x\.parquet: row 2: .*status"):
        list(read_records(tmp_path))
    proc = llmwatch("score", "--in", str(tmp_path), "--out", str(tmp_path / "scores.jsonl"), cwd=tmp_path)
    assert proc.returncode == 2 and "x.parquet: row 2" in proc.stderr and "status" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "scores.jsonl").exists()


def test_drift_gives_the_same_verdicts_on_json_lines_and_on_the_parquet_dataset(tmp_path):
    base = [sample(i, "v1", i % 20 == 0) for i in range(300)]
    current = [sample(i, "v2", i % 3 == 0) for i in range(300)]  # refuses far more: drift
    write_jsonl(tmp_path / "base.jsonl", base)
    cur_jsonl = str(write_jsonl(tmp_path / "current.jsonl", current))
    parquet_write.write_dataset(tmp_path / "ds", "samples", current)
    frozen = llmwatch(
        "baseline",
        "freeze",
        "--samples",
        str(tmp_path / "base.jsonl"),
        "--model-version",
        "v1",
        "--out",
        str(tmp_path / "base.json"),
        cwd=tmp_path,
    )
    assert frozen.returncode == 0, frozen.stderr

    def drift(samples: str) -> tuple[int, dict]:
        proc = llmwatch(
            "drift", "--baseline", str(tmp_path / "base.json"), "--samples", samples, "--format", "json", cwd=tmp_path
        )
        assert proc.returncode in (0, 1), proc.stderr
        return proc.returncode, orjson.loads(proc.stdout)

    code_jsonl, from_jsonl = drift(cur_jsonl)
    code_parquet, from_parquet = drift(str(tmp_path / "ds"))
    assert code_jsonl == code_parquet == 1
    assert from_jsonl["families"]["behaviour"]["verdict"] == "drift"
    assert from_parquet == from_jsonl

    # A baseline frozen from the dataset is the one frozen from the file (but for where it came from).
    parquet_write.write_dataset(tmp_path / "base_ds", "samples", base)
    again = llmwatch(
        "baseline",
        "freeze",
        "--samples",
        str(tmp_path / "base_ds"),
        "--model-version",
        "v1",
        "--out",
        str(tmp_path / "base2.json"),
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stderr
    a, b = (orjson.loads((tmp_path / n).read_bytes()) for n in ("base.json", "base2.json"))
    volatile = {"created_at", "checksum"}
    assert {k: v for k, v in a.items() if k not in volatile} == {k: v for k, v in b.items() if k not in volatile}


def test_score_reads_the_dataset_and_gives_the_scores_it_gives_on_json_lines(tmp_path):
    samples = [sample(i, "v1", i % 4 == 0) for i in range(40)]
    write_jsonl(tmp_path / "s.jsonl", samples)
    parquet_write.write_dataset(tmp_path / "ds", "samples", samples)
    for source, out in ((tmp_path / "s.jsonl", "a.jsonl"), (tmp_path / "ds", "b.jsonl")):
        proc = llmwatch("score", "--in", str(source), "--out", str(tmp_path / out), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr

    def verdicts(name: str) -> list:
        scores = [orjson.loads(line) for line in (tmp_path / name).read_bytes().splitlines()]
        return sorted((s["sample_id"], s["check"], s["result"], s["value"]) for s in scores)

    assert verdicts("a.jsonl") == verdicts("b.jsonl") and len(verdicts("a.jsonl")) >= 40


def test_report_and_shadow_report_give_the_same_figures_on_the_dataset_as_on_json_lines(tmp_path):
    samples = [sample(i, ("v1", "v2")[i % 2], i % (5 + i % 2) == 0) for i in range(120)]
    write_jsonl(tmp_path / "s.jsonl", samples)
    parquet_write.write_dataset(tmp_path / "ds", "samples", samples)
    scored = llmwatch("score", "--in", str(tmp_path / "s.jsonl"), "--out", str(tmp_path / "sc.jsonl"), cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    parquet_write.write_dataset(tmp_path / "ds", "scores", read_records(tmp_path / "sc.jsonl", Score, prefix="scores"))
    pairs = [
        Pair(
            id=f"pair-{i}",
            candidate="cand",
            timestamp=T0 + timedelta(minutes=i),
            route="/v1/chat/completions",
            category=("cooking", "travel")[i % 2],
            primary=samples[i],
            shadow=samples[i + 1],
            primary_scores=[PairScore(check="refusal", result="pass" if i % 7 else "fail")],
            shadow_scores=[PairScore(check="refusal", result="pass" if i % 5 else "fail")],
        )
        for i in range(0, 100, 2)
    ]
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    parquet_write.write_dataset(tmp_path / "ds", "pairs", pairs)

    def report(*args: str) -> tuple[int, dict]:
        proc = llmwatch(*args, "--format", "json", cwd=tmp_path)
        assert proc.returncode in (0, 1, 2) and proc.stdout, proc.stderr
        out = orjson.loads(proc.stdout)
        out.pop("created_at", None)
        return proc.returncode, out

    from_jsonl = report("report", "--samples", str(tmp_path / "s.jsonl"), "--scores", str(tmp_path / "sc.jsonl"))
    from_parquet = report("report", "--samples", str(tmp_path / "ds"), "--scores", str(tmp_path / "ds"))
    assert from_parquet == from_jsonl and from_jsonl[1]["n_samples"] == 120
    shadow_jsonl = report("shadow", "report", "--pairs", str(tmp_path / "pairs.jsonl"))
    shadow_parquet = report("shadow", "report", "--pairs", str(tmp_path / "ds"))
    assert shadow_parquet == shadow_jsonl and shadow_jsonl[1]["candidates"][0]["pairs"] == 50


def test_the_archiver_writes_around_a_range_another_worker_already_wrote(tmp_path):
    from llmwatch.agent.components import metric_groups
    from llmwatch.agent.processes.kafka_archive import Archiver
    from llmwatch.core.metrics import Metrics

    records = [sample(i, "v1", False).model_copy(update={"timestamp": T0}) for i in range(8)]
    key = parquet.partition_of("samples", records[0])
    # Another worker wrote offsets 3..4 and was killed before committing.
    parquet_write.write_part(tmp_path, "samples", key, parquet.part_name("t", 0, 3, 4), records[3:5])
    archiver = Archiver(tmp_path, {"t": "samples"}, Metrics(groups=metric_groups()))
    for offset, r in enumerate(records):
        archiver.add("t", 0, offset, r.to_json())
    assert archiver.flush() == {("t", 0): 8}
    assert parquet.ranges_in(tmp_path / "samples" / key.directory(), "t", 0) == [(0, 2), (3, 4), (5, 7)]
    assert sorted(s.id for s in read_records(tmp_path)) == sorted(r.id for r in records)


def test_drift_and_report_read_a_file_url_dataset_as_they_read_its_directory(tmp_path):
    base = [sample(i, "v1", i % 20 == 0) for i in range(200)]
    current = [sample(i, "v2", i % 3 == 0) for i in range(200)]
    write_jsonl(tmp_path / "base.jsonl", base)
    parquet_write.write_dataset(tmp_path / "ds", "samples", current)
    scores = [
        Score(
            sample_id=s.id,
            check="refusal",
            kind="rule",
            result="fail" if i % 3 == 0 else "pass",
            value=None,
            model=s.model,
            model_version=s.model_version,
            sample_timestamp=s.timestamp,
        )
        for i, s in enumerate(current)
    ]
    parquet_write.write_dataset(tmp_path / "ds", "scores", scores)
    url = f"file://{tmp_path / 'ds'}"
    frozen = llmwatch(
        "baseline", "freeze", "--samples", str(tmp_path / "base.jsonl"), "--model-version", "v1",
        "--out", str(tmp_path / "base.json"), cwd=tmp_path,
    )  # fmt: skip
    assert frozen.returncode == 0, frozen.stderr

    def run(*args: str) -> tuple[int, str]:
        proc = llmwatch(*args, "--format", "json", cwd=tmp_path)
        assert proc.returncode in (0, 1) and proc.stdout, proc.stderr
        out = orjson.loads(proc.stdout)
        out.pop("created_at", None)
        return proc.returncode, orjson.dumps(out, option=orjson.OPT_SORT_KEYS).decode()

    drift_dir = run("drift", "--baseline", str(tmp_path / "base.json"), "--samples", str(tmp_path / "ds"))
    drift_url = run("drift", "--baseline", str(tmp_path / "base.json"), "--samples", url)
    assert drift_url == drift_dir and drift_dir[0] == 1
    report_dir = run("report", "--samples", str(tmp_path / "ds"), "--scores", str(tmp_path / "ds"))
    report_url = run("report", "--samples", url, "--scores", url)
    assert report_url == report_dir and '"n_samples":200' in report_dir[1]

    # A URL whose filesystem cannot be had, or that holds no dataset: one line naming it, exit 2.
    for bad, words in (
        ("nosuchfs://bucket/ds", "cannot open this dataset URL"),
        (f"{url}-missing", "no samples Parquet files"),
    ):
        proc = llmwatch("drift", "--baseline", str(tmp_path / "base.json"), "--samples", bad, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert bad in proc.stderr and words in proc.stderr, proc.stderr


def refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    """The one-line bad-input outcome: exit 2, every word in stderr's one line, no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


def test_a_timestamp_past_year_9999_is_named_by_row_and_column_not_a_traceback(tmp_path):
    # Parquet holds instants Python's datetime cannot (int64 seconds): converting the batch raised
    # OverflowError out of `score` as a traceback (exit 1).
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet.arrow_schema()["samples"]
    seconds = schema.set(schema.get_field_index("timestamp"), pa.field("timestamp", pa.timestamp("s", tz="UTC")))
    rows = [parquet.to_row("samples", sample(i, "v1", False)) for i in range(3)]
    table = pa.Table.from_pylist(rows, schema=seconds)
    far = pa.array([int(r["timestamp"].timestamp()) for r in rows[:1]] + [10**12, 0], pa.int64())
    table = table.set_column(
        table.schema.get_field_index("timestamp"), "timestamp", far.cast(seconds.field("timestamp").type)
    )
    (tmp_path / "samples").mkdir()
    pq.write_table(table, tmp_path / "samples" / "x.parquet")
    proc = llmwatch("score", "--in", str(tmp_path), "--out", str(tmp_path / "scores.jsonl"), cwd=tmp_path)
    refused(proc, "x.parquet: row 2: column 'timestamp'", "years 1 and 9999")
    assert not (tmp_path / "scores.jsonl").exists()


def test_a_file_corrupt_inside_is_refused_in_one_line(tmp_path):
    # Its footer is whole, its first page header is not: Arrow's message is three lines, and
    # stderr carried them as they were.
    parquet_write.write_dataset(tmp_path, "samples", [sample(i, "v1", False) for i in range(10)])
    [part] = (tmp_path / "samples").rglob("*.parquet")
    data = bytearray(part.read_bytes())
    for k in range(4, 400):
        data[k] ^= 0x5A
    part.write_bytes(bytes(data))
    proc = llmwatch("score", "--in", str(tmp_path), "--out", str(tmp_path / "scores.jsonl"), cwd=tmp_path)
    refused(proc, f"{part.name}: not a readable Parquet file (")
    assert not (tmp_path / "scores.jsonl").exists()


def test_a_json_column_that_is_not_json_text_is_refused_naming_the_column(tmp_path):
    # Another tool wrote `request` as a struct, or `metadata` as broken text: the error said "a JSON
    # column is not valid JSON (Input must be bytes, bytearray, memoryview, or str ...)", which column
    # unsaid.
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet.arrow_schema()["samples"]
    rows = [parquet.to_row("samples", sample(i, "v1", False)) for i in range(3)]
    struct = pa.struct([("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])))])
    as_struct = schema.set(schema.get_field_index("request"), pa.field("request", struct))
    (tmp_path / "a" / "samples").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist([{**r, "request": orjson.loads(r["request"])} for r in rows], schema=as_struct),
        tmp_path / "a" / "samples" / "x.parquet",
    )
    (tmp_path / "b" / "samples").mkdir(parents=True)
    rows[1]["metadata"] = '{"category": '
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "b" / "samples" / "y.parquet")

    proc = llmwatch("score", "--in", str(tmp_path / "a"), "--out", str(tmp_path / "a.jsonl"), cwd=tmp_path)
    refused(proc, "x.parquet: row 1: column 'request' holds a dict, not JSON text", "JSON text in a string column")
    proc = llmwatch("score", "--in", str(tmp_path / "b"), "--out", str(tmp_path / "b.jsonl"), cwd=tmp_path)
    refused(proc, "y.parquet: row 2: column 'metadata' is not valid JSON (")
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "b.jsonl").exists()


def test_one_parquet_file_given_itself_is_read_as_its_dataset_is(tmp_path):
    # `--in part-0.parquet` (or its file:// URL) was read as JSON Lines: "part-0.parquet:1: not valid
    # JSON (str is not valid UTF-8 ...); each line must be one JSON object".
    parquet_write.write_dataset(tmp_path / "ds", "samples", [sample(i, "v1", i % 4 == 0) for i in range(10)])
    [part] = (tmp_path / "ds").rglob("*.parquet")

    def scores(source: str, name: str) -> list[dict]:
        proc = llmwatch("score", "--in", source, "--out", str(tmp_path / name), cwd=tmp_path)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        lines = [orjson.loads(line) for line in (tmp_path / name).read_bytes().splitlines()]
        return sorted(({k: v for k, v in s.items() if k != "scored_at"} for s in lines), key=orjson.dumps)

    whole = scores(str(tmp_path / "ds"), "whole.jsonl")
    assert len(whole) >= 10
    assert scores(str(part), "file.jsonl") == whole
    assert scores(part.as_uri(), "url.jsonl") == whole


def test_a_gs_url_that_cannot_be_reached_is_refused_after_bounded_retries_not_a_silent_wait(tmp_path):
    # The GCS client retried a call it could not authenticate for 15 minutes by default: `score --in
    # gs://...` without credentials or a route sat silent that long. Here both the token endpoint
    # and the storage endpoint are a loopback port that refuses, so nothing leaves the machine.
    import socket

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: a connection is refused
    port = closed.getsockname()[1]
    try:
        creds = tmp_path / "adc.json"
        creds.write_text(
            orjson.dumps(
                {
                    "type": "authorized_user",
                    "client_id": "x",
                    "client_secret": "y",
                    "refresh_token": "z",
                    "token_uri": f"http://127.0.0.1:{port}/token",
                }
            ).decode()
        )
        url = f"gs://llmwatch-test/ds?endpoint_override=127.0.0.1:{port}&scheme=http"
        proc = procs.llmwatch(
            "score",
            "--in",
            url,
            "--out",
            str(tmp_path / "scores.jsonl"),
            cwd=tmp_path,
            env={**ENV, "GOOGLE_APPLICATION_CREDENTIALS": str(creds)},
            timeout=240,  # a deadline for the test, well short of the client's default 15 minutes
        )
    finally:
        closed.close()
    refused(proc, f"--in {url}: cannot list this dataset (", "?retry_limit_seconds=N")
    assert not (tmp_path / "scores.jsonl").exists()


def test_a_folder_of_json_lines_and_parquet_files_is_refused_not_half_read(tmp_path):
    # The JSON Lines were read and the Parquet part files beside them skipped without a word: a
    # report over 3 of 23 samples, exit 0.
    folder = tmp_path / "samples"
    parquet_write.write_dataset(tmp_path, "samples", [sample(i, "pq", False) for i in range(20)])
    write_jsonl(folder / "samples-x.jsonl", [sample(i, "v1", False) for i in range(3)])
    proc = llmwatch(
        "report", "--samples", str(folder), "--format", "json", "--out", str(tmp_path / "r.json"), cwd=tmp_path
    )
    refused(
        proc, "holds both JSON Lines (1 file(s), e.g. samples-x.jsonl) and Parquet files (", "give a folder of one kind"
    )
    assert not (tmp_path / "r.json").exists()


def test_json_lines_beside_a_scores_or_pairs_parquet_folder_are_read_not_refused(tmp_path):
    # Only the Parquet files that would be read as samples count: a folder of samples-*.jsonl with
    # the archive's scores/ and pairs/ under it was refused as "both JSON Lines and Parquet files".
    folder = tmp_path / "mixed"
    samples = [sample(i, "v1", False) for i in range(3)]
    write_jsonl(folder / "samples-x.jsonl", samples)
    scores = [
        Score(sample_id=s.id, check="refusal", kind="rule", result="pass", value=1.0, model=s.model,
              model_version=s.model_version, sample_timestamp=s.timestamp)
        for s in samples
    ]  # fmt: skip
    parquet_write.write_dataset(folder, "scores", scores)
    parquet_write.write_dataset(folder, "pairs", [])
    assert [s.id for s in read_records(folder)] == [s.id for s in samples]
    proc = llmwatch(
        "report", "--samples", str(folder), "--format", "json", "--out", str(tmp_path / "r.json"), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    # Samples' own part files in the same folder are still refused (the test above, and here a
    # partition folder of samples beside the scores/).
    parquet_write.write_dataset(tmp_path / "pq", "samples", [sample(i, "pq", False) for i in range(5)])
    next((tmp_path / "pq" / "samples").iterdir()).rename(folder / "date=2026-03-01")
    with pytest.raises(RecordError, match="holds both JSON Lines"):
        list(read_records(folder))


def test_score_over_files_of_no_records_is_refused_as_an_empty_export_is(tmp_path):
    # An empty .jsonl was "holds no samples", exit 2; Parquet files of no rows, or a file whose one line
    # is a torn write, were "scored 0 samples", exit 0, and an empty scores file.
    parquet_write.write_dataset(tmp_path / "ds", "samples", [])
    (tmp_path / "ds" / "samples").mkdir(parents=True, exist_ok=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.Table.from_pylist([], schema=parquet.arrow_schema()["samples"]), tmp_path / "ds" / "samples" / "p.parquet"
    )
    (tmp_path / "torn.jsonl").write_bytes(b'{"schema": "llmwatch.sample/v1", "id": "a", "time')
    for source in (tmp_path / "ds", tmp_path / "torn.jsonl"):
        proc = llmwatch("score", "--in", str(source), "--out", str(tmp_path / "scores.jsonl"), cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        # The torn line's warning comes first (a log line); the error is the last line.
        assert proc.stderr.splitlines()[-1].startswith(f"llmwatch: bad input: --in {source} holds no samples")
        assert not (tmp_path / "scores.jsonl").exists()
