"""The Parquet schema the guide documents is the one the code writes, and a run never spans a covered offset."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from llmwatch.agent.processes.kafka_archive import Covered, runs
from llmwatch.core.parquet import COLUMNS, PARQUET_SCHEMA, PART_NAME, part_name
from llmwatch.core.records import Sample

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "archive.md"
TYPES = {"string": "string", "int": "int64", "float": "double", "bool": "bool", "json": "JSON text"}
TYPES["timestamp"] = "timestamp[us, UTC]"


def test_the_guide_lists_every_column_of_every_kind_with_its_type_and_field():
    text = GUIDE.read_text()
    assert PARQUET_SCHEMA in text
    for kind, columns in COLUMNS.items():
        section = text.split(f"### {kind}\n", 1)[1].split("\n### ", 1)[0]
        documented = re.findall(r"^\| `([^`]+)` \| ([^|]+) \| `([^`]+)`", section, re.M)
        assert [(n, TYPES[t], ".".join(p)) for n, p, t in columns] == [(n, t.strip(), f) for n, t, f in documented]


def test_part_names_sort_by_offset_and_parse_back():
    name = part_name("llmwatch.samples-x", 3, 7, 120)
    m = PART_NAME.match(name)
    assert m and (m["topic"], m["partition"], int(m["first"]), int(m["last"])) == ("llmwatch.samples-x", "3", 7, 120)
    assert part_name("t", 0, 9, 9) < part_name("t", 0, 10, 10)


def s(i: int, version: str) -> Sample:
    t = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=i)
    return Sample(
        id=str(i), timestamp=t, model="m", model_version=version, status=200, latency_ms=1, request={}, response={}
    )


def test_runs_cut_at_a_new_partition_key_and_at_offsets_already_in_a_file():
    records = [
        (0, s(0, "a")),
        (1, s(1, "a")),
        (2, s(2, "b")),
        (3, None),
        (4, s(4, "b")),
        (5, s(5, "b")),
        (6, s(6, "b")),
    ]
    got = runs(records, "samples", Covered([(5, 5)]))
    assert [[o for o, _ in run] for run in got] == [[0, 1], [2, 4], [6]]
    assert runs(records, "samples", Covered([(0, 6)])) == []


def test_every_field_of_every_record_has_a_column():
    # A field without a column is silently dropped by `llmwatch archive` (v1 lost conversations).
    from llmwatch.core.pairs import Pair
    from llmwatch.core.scores import Score

    for kind, model in (("samples", Sample), ("scores", Score), ("pairs", Pair)):
        stored = {path[0] for _, path, _ in COLUMNS[kind]}
        fields = {f.alias or name for name, f in model.model_fields.items()}
        assert fields <= stored, f"{kind}: no column for {sorted(fields - stored)}"


def _sample(**extra: object) -> Sample:
    return Sample(
        id="s-1",
        timestamp=datetime(2026, 12, 4, 12, tzinfo=timezone.utc),
        model="gpt-4o-mini",
        model_version="A",
        status=200,
        latency_ms=5.0,
        request={"messages": [{"role": "user", "content": "hi"}]},
        response={"choices": [{"message": {"role": "assistant", "content": "hello"}}]},
        **extra,
    )


def test_a_sample_round_trips_through_a_dataset_with_its_conversation_and_price_row(tmp_path: Path):
    pytest.importorskip("pyarrow")
    from llmwatch.core.parquet import read_dataset
    from llmwatch.core.parquet_write import write_dataset

    original = _sample(conversation_id="h-0123456789abcdef", turn=3, price_row="gpt-4o-mini@2024-07-18")
    write_dataset(tmp_path, "samples", [original])
    (back,) = list(read_dataset(tmp_path, Sample, "samples"))
    assert back == original


def test_a_v1_file_is_read_with_the_columns_v2_added_as_null(tmp_path: Path):
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from llmwatch.core.parquet import arrow_schema, read_dataset, to_row

    added = {"price_row", "conversation_id", "turn"}
    v2 = arrow_schema()["samples"]
    v1 = pa.schema(
        [f for f in v2 if f.name not in added],
        metadata={b"llmwatch.schema": b"llmwatch.parquet/v1", b"llmwatch.kind": b"samples"},
    )
    row = {k: v for k, v in to_row("samples", _sample()).items() if k not in added}
    folder = tmp_path / "samples" / "date=2026-12-04" / "model_version=A"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row], schema=v1), folder / "part-0.parquet")
    (back,) = list(read_dataset(tmp_path, Sample, "samples"))
    assert back == _sample() and back.conversation_id is None and back.turn is None


def test_a_file_of_another_kind_is_refused_naming_its_kind_and_the_folder_to_give(tmp_path: Path):
    pytest.importorskip("pyarrow")
    # `drift --scores DATASET/samples` (the samples folder given for the scores) listed a dozen
    # field errors of row 1 and "omit the field or convert the file", not what the file is.

    from llmwatch.core.parquet import read_dataset
    from llmwatch.core.parquet_write import write_dataset
    from llmwatch.core.records import RecordError
    from llmwatch.core.scores import Score

    write_dataset(tmp_path, "samples", [_sample()])
    with pytest.raises(RecordError) as refused:
        list(read_dataset(tmp_path / "samples", Score, "scores"))
    message = str(refused.value)
    assert "part-0.parquet: a Parquet file of samples, not scores" in message
    assert "give the dataset's root or its scores/ folder" in message
    assert "field" not in message


def _foreign(path: Path, columns: dict[str, list]) -> Path:
    """A Parquet file another tool wrote: its own columns, no llmwatch metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def _refusal(source: Path, kind: str = "samples") -> str:

    from llmwatch.core.parquet import MODELS, read_dataset
    from llmwatch.core.records import RecordError

    with pytest.raises(RecordError) as refused:
        list(read_dataset(source, MODELS[kind], kind))
    return str(refused.value)


def test_a_dataset_of_another_schema_is_named_as_not_a_samples_dataset_with_its_columns(tmp_path: Path):
    pytest.importorskip("pyarrow")
    # Read row by row as samples, it said "row 1: field 'schema': Input should be a valid string;
    # field 'id': ..." for thirteen fields it never had.
    part = _foreign(tmp_path / "events" / "part-0.parquet", {"user_id": [1, 2], "event": ["a", "b"], "ts": [1.0, 2.0]})
    message = _refusal(tmp_path / "events")
    assert message == (
        f"{part}: not a samples dataset: its columns are event, ts, user_id, and it lacks timestamp, model, status, "
        "latency_ms, request, response; give a samples dataset as `llmwatch archive` writes it "
        "(docs/guide/archive.md) or samples .jsonl files"
    )


def test_a_scores_file_without_its_kind_is_named_as_scores(tmp_path: Path):
    pytest.importorskip("pyarrow")
    from llmwatch.core.parquet import arrow_schema

    columns = {f.name: [None] for f in arrow_schema()["scores"]}
    part = _foreign(tmp_path / "part-0.parquet", columns)
    assert _refusal(part) == (
        f"{part}: not a samples dataset: its columns are check, details, kind, model, model_version, result, "
        "route, sample_id and 4 more, those of scores (give it as --scores)"
    )


def test_many_long_column_names_are_shortened(tmp_path: Path):
    pytest.importorskip("pyarrow")
    names = [f"metric_{i:03d}_" + "x" * 60 + f"_end{i:03d}" for i in range(30)]
    part = _foreign(tmp_path / "part-0.parquet", {n: [1] for n in names})
    message = _refusal(part)
    listed = message.split("its columns are ", 1)[1].split(" and 22 more, and it lacks ", 1)[0].split(", ")
    assert len(listed) == 8 and all(len(n) <= 40 for n in listed), message
    assert listed[0] == "metric_000_xxxxxxx...xxxxxxxxxxx_end000", listed  # both ends kept
    assert "x" * 41 not in message  # no name whole (each is 78 characters)


def test_a_samples_dataset_missing_only_a_few_columns_keeps_the_field_list(tmp_path: Path):
    pytest.importorskip("pyarrow")
    from llmwatch.core.parquet import to_row

    row = {k: [v] for k, v in to_row("samples", _sample()).items() if k not in ("status", "latency_ms")}
    part = _foreign(tmp_path / "part-0.parquet", row)
    message = _refusal(part)
    assert message.startswith(f"{part}: row 1: ") and "not a samples dataset" not in message
    assert "field 'status'" in message and "field 'latency_ms'" in message
