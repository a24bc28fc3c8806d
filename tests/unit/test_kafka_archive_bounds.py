"""`llmwatch archive` buffers records between writes bounded in bytes, not only in records: a sample
is up to capture.max_body_bytes twice over, so `--batch-records` 10,000 alone could buffer 20 GB
before the first write."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest

pq = pytest.importorskip("pyarrow.parquet")  # the parquet extra; the fast lane has none
from helpers.samples import chat_sample  # noqa: E402

from llmwatch.agent.cli.main import main  # noqa: E402
from llmwatch.agent.processes.kafka_archive import Archiver, Covered, consume  # noqa: E402
from llmwatch.collectors.exporters.kafka import KafkaMetrics  # noqa: E402
from llmwatch.core.metrics import Metrics  # noqa: E402

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


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--batch-bytes", "0", "--batch-bytes 0: give bytes above 0"),
        ("--batch-records", "0", "--batch-records 0: give a count of records above 0 (default 10000)"),
        ("--batch-records", "-5", "--batch-records -5: give a count of records above 0"),
        ("--flush-s", "0", "--flush-s 0.0: give a finite number of seconds above 0 (default 10)"),
        ("--flush-s", "-1", "--flush-s -1.0: give a finite number of seconds above 0"),
        ("--flush-s", "nan", "--flush-s nan: give a finite number of seconds above 0"),
        ("--flush-s", "inf", "--flush-s inf: give a finite number of seconds above 0"),
    ],
)
def test_a_batch_bound_of_zero_or_below_is_refused_with_exit_2(
    tmp_path: Path, capsys, monkeypatch, flag, value, message
) -> None:
    # `--batch-records 0` or `--flush-s -1` were taken as given: a write (or a try) after every poll.
    # Refused before the worker starts: one that starts here says so at once instead of dialling.
    import llmwatch.agent.processes.kafka_archive as kafka_archive

    monkeypatch.setattr(kafka_archive, "run_archiver", lambda *a, **kw: 0)
    argv = ["archive", "--kafka", "127.0.0.1:9", "--out", str(tmp_path / "a"), f"{flag}={value}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "a").exists()


def test_covered_ranges_stay_merged_over_ten_thousand_contiguous_files() -> None:
    # One range per file written, scanned once per record, grew for the life of an assignment.
    covered = Covered([])
    for i in range(10_000):
        covered.add(i * 10, i * 10 + 9)
    assert covered.ranges == [(0, 99_999)]
    assert 0 in covered and 99_999 in covered and 50_000 in covered
    assert 100_000 not in covered and -1 not in covered
    # A gap stays a gap: two ranges, and the offsets of the gap are not covered.
    covered.add(100_005, 100_009)
    assert covered.ranges == [(0, 99_999), (100_005, 100_009)]
    assert [o for o in range(99_998, 100_011) if o not in covered] == [*range(100_000, 100_005), 100_010]
    assert covered.between(100_000, 100_010) and not covered.between(100_000, 100_004)
    # Filling the gap (out of order, overlapping both sides) joins them into one again.
    covered.add(100_002, 100_003)
    covered.add(99_990, 100_001)
    covered.add(100_004, 100_006)
    assert covered.ranges == [(0, 100_009)]


def test_covered_matches_the_set_of_offsets_added_in_any_order() -> None:
    import random

    rng = random.Random(7)
    for _ in range(200):
        covered, offsets = Covered([]), set()
        for _ in range(rng.randrange(1, 12)):
            a = rng.randrange(0, 60)
            b = a + rng.randrange(0, 8)
            covered.add(a, b)
            offsets |= set(range(a, b + 1))
        assert {o for o in range(-2, 75) if o in covered} == offsets
        ranges = covered.ranges
        assert all(b1 + 1 < a2 for (_, b1), (a2, _) in zip(ranges, ranges[1:]))  # disjoint, not adjacent
        for lo in range(-2, 75):
            for hi in range(lo + 1, 75):
                if lo not in offsets and hi not in offsets:
                    assert covered.between(lo, hi) == any(lo < o < hi for o in offsets)
