"""`llmwatch archive` buffers records between writes bounded in bytes, not only in records: a sample
is up to capture.max_body_bytes twice over, so `--batch-records` 10,000 alone could buffer 20 GB
before the first write."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import pyarrow.parquet as pq
from helpers.samples import chat_sample

from llmwatch.agent.processes.kafka_archive import Archiver, consume
from llmwatch.collectors.exporters.kafka import KafkaMetrics
from llmwatch.core.metrics import Metrics

MiB = 1024 * 1024


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class Consumer:
    """A scripted consumer (unit test): `polls` batches of big samples, then stops the loop."""

    def __init__(self, polls: int, per_poll: int, stop: threading.Event) -> None:
        self.polls, self.per_poll, self.stop = polls, per_poll, stop
        self.offset = 0
        self.buffered = 0  # bytes handed out since the last commit
        self.peak = 0

    def poll(self, timeout_ms: int, max_records: int) -> dict[Any, list[Any]]:
        if self.polls == 0:
            self.stop.set()
            return {}
        self.polls -= 1
        records = []
        for _ in range(min(self.per_poll, max_records)):
            value = chat_sample(id=f"big{self.offset}", answer="x" * 1_000_000).to_json()
            records.append(SimpleNamespace(offset=self.offset, value=value))
            self.offset += 1
            self.buffered += len(value)
        self.peak = max(self.peak, self.buffered)
        return {TopicPartition("t.samples", 0): records}


def test_big_records_are_written_once_their_bytes_reach_batch_bytes(tmp_path: Path) -> None:
    stop = threading.Event()
    consumer = Consumer(polls=20, per_poll=2, stop=stop)
    metrics = Metrics()
    archiver = Archiver(tmp_path / "out", {"t.samples": "samples"}, metrics)
    commits: list[int] = []

    def commit(done: dict[tuple[str, int], int]) -> None:
        commits.append(done[("t.samples", 0)])
        consumer.buffered = 0

    # 40 samples of ~1 MB; the count bound (10,000) and the time bound (an hour) are far away.
    consume(consumer, archiver, commit, stop, batch_records=10_000, flush_s=3600.0, batch_bytes=4 * MiB)
    assert consumer.peak <= 4 * MiB + 2 * 1_100_000, f"buffered {consumer.peak} bytes before a write"
    assert len(commits) >= 6 and commits[-1] == 40, "written and committed every ~4 MiB, all of it in the end"
    rows = [row["id"] for f in sorted((tmp_path / "out").rglob("*.parquet")) for row in pq.read_table(f).to_pylist()]
    assert sorted(rows) == sorted(f"big{i}" for i in range(40)), "every record once"
    assert metrics.group(KafkaMetrics).kafka_consumed.labels(outcome="archived")._value.get() == 40
    assert archiver.pending() == 0 and archiver.pending_bytes() == 0


def test_a_dropped_partition_leaves_no_bytes_behind(tmp_path: Path) -> None:
    # A revoked partition's buffer is dropped: its bytes must not count against the next writes.
    archiver = Archiver(tmp_path / "out", {"t.samples": "samples"}, Metrics())
    archiver.add("t.samples", 0, 0, chat_sample(id="a").to_json())
    archiver.add("t.samples", 1, 0, chat_sample(id="b").to_json())
    archiver.drop(("t.samples", 0))
    assert archiver.pending_bytes() == len(chat_sample(id="b").to_json())
