"""`llmwatch archive` skips a record it cannot place in the dataset (counted `invalid`, never a row)
and goes on past it: a poison record on a topic must not kill the worker, which would stop at the
same offset after every restart and stall the partition for good."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

pq = pytest.importorskip("pyarrow.parquet")  # the parquet extra; the fast lane has none
from helpers.samples import chat_sample  # noqa: E402
from structlog.testing import capture_logs  # noqa: E402

from llmwatch.agent.processes.kafka_archive import Archiver  # noqa: E402
from llmwatch.collectors.exporters.kafka import KafkaMetrics  # noqa: E402
from llmwatch.core.metrics import Metrics  # noqa: E402


def consumed(metrics: Metrics, outcome: str) -> float:
    return metrics.group(KafkaMetrics).kafka_consumed.labels(outcome=outcome)._value.get()


def archive(tmp_path: Path, *values: bytes) -> tuple[Archiver, dict[tuple[str, int], int], list[Path]]:
    metrics = Metrics()
    archiver = Archiver(tmp_path / "out", {"t.samples": "samples"}, metrics)
    for offset, value in enumerate(values):
        archiver.add("t.samples", 0, offset, value)
    done = archiver.flush()
    return archiver, done, sorted((tmp_path / "out").rglob("*.parquet"))


def test_a_timestamp_before_year_1_in_utc_is_invalid_not_fatal(tmp_path: Path) -> None:
    edge = orjson.loads(chat_sample(id="edge").to_json())
    # Valid ISO 8601 and a valid datetime, but 0000-12-31T19:00Z in UTC: no date partition.
    edge["timestamp"] = "0001-01-01T00:00:00+05:00"
    archiver, done, files = archive(tmp_path, orjson.dumps(edge), chat_sample(id="good").to_json())
    assert done == {("t.samples", 0): 2}, "the offset to commit is past the poison record"
    assert [row["id"] for f in files for row in pq.read_table(f).to_pylist()] == ["good"]
    assert consumed(archiver.metrics, "invalid") == 1
    assert consumed(archiver.metrics, "archived") == 1


def test_a_model_version_too_long_for_a_directory_name_is_invalid_not_fatal(tmp_path: Path) -> None:
    # 10,000 characters: `model_version=<it>` exceeds the 255-byte name limit of the file system.
    long = chat_sample(id="long").model_copy(update={"model_version": "V" * 10_000})
    fits = chat_sample(id="fits").model_copy(update={"model_version": "V" * 200})
    archiver, done, files = archive(tmp_path, long.to_json(), fits.to_json(), chat_sample(id="good").to_json())
    assert done == {("t.samples", 0): 3}, "the offset to commit is past the poison record"
    assert sorted(row["id"] for f in files for row in pq.read_table(f).to_pylist()) == ["fits", "good"]
    assert consumed(archiver.metrics, "invalid") == 1


def test_an_invalid_record_is_logged_by_place_and_reason_not_dumped(tmp_path: Path) -> None:
    huge = b'{"id": "' + b"x" * 3_000_000  # three megabytes, cut short: not JSON
    with capture_logs() as logs:
        archiver, done, _ = archive(tmp_path, chat_sample(id="good").to_json(), huge)
    assert done == {("t.samples", 0): 2}
    [line] = [e for e in logs if e["event"] == "invalid_record"]
    assert (line["topic"], line["partition"], line["offset"]) == ("t.samples", 0, 1)
    assert "JSONDecodeError" in line["error"] and len(str(line)) < 1000


def test_a_record_that_fails_validation_is_logged_without_its_values(tmp_path: Path) -> None:
    # pydantic's message quotes the input: the record's prompt, or a key in it, reached the log.
    with capture_logs() as logs:
        archive(tmp_path, b'{"id": "x", "request": "Bearer sk-SECRET-1"}')
    [line] = [e for e in logs if e["event"] == "invalid_record"]
    assert "SECRET" not in str(line), line
    assert "timestamp" in line["error"], "the fields at fault are named"
