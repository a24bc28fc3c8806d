"""`llmwatch archive`: the samples, scores and pairs topics into one Parquet dataset (llmwatch.core.parquet).

Exactly one row per record, across restarts and rebalances, without readers deduplicating:

* each file holds one contiguous run of one topic partition's offsets, all of one
  (date, model_version) partition, and is named by that run:
  `part-<topic>-p<partition>-<first>-<last>.parquet` (offsets zero-padded to 20 digits);
* a file appears whole or not at all (temporary file, fsync, rename, directory fsync), and the
  consumer commits an offset only after every file below it is durable;
* before writing a run, the worker lists the run's partition directory (the only place a file
  holding those offsets can be, since a record's directory follows from the record) and skips
  the offsets a file already holds: offsets handed out again (committed late or never, after a
  kill or a rebalance, or a group replaying from 0) are never written twice. File ranges
  therefore never overlap; a run is split at any already-covered offset.

The output directory must be shared by every worker of the group (one file system, or a mount
every worker writes). A run is cut where the partition key changes, so traffic that interleaves
model versions within a partition makes smaller files; `--batch-records` bounds a file's rows.

What the worker buffers between writes is bounded in records (`--batch-records`) and in the
encoded bytes of those records (`--batch-bytes`, default 64 MiB): a sample is up to
capture.max_body_bytes twice over, so 10,000 of them could be 20 GB. Either bound reached writes
and commits, as `--flush-s` does; the buffer then holds at most that plus one poll.
"""

from __future__ import annotations

import bisect
import math
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import structlog
from pydantic import BaseModel, ValidationError

from llmwatch.agent.components import Config, metric_groups
from llmwatch.collectors.exporters.kafka import KafkaMetrics, close_worker, connect, consumer_settings, record_error
from llmwatch.collectors.exporters.prometheus import metrics_app, serve_in_thread
from llmwatch.core import parquet, parquet_write
from llmwatch.core.metrics import Metrics

log = structlog.get_logger(__name__)

# The longest file or directory name most file systems take (ext4, xfs, btrfs, APFS: 255 bytes).
NAME_MAX = 255
# Encoded bytes buffered before a write (`--batch-bytes`).
BATCH_BYTES = 64 * 1024 * 1024


class Covered:
    """The offset ranges of one topic partition that files already hold, kept merged: sorted,
    disjoint and never adjacent, so the contiguous files of a long assignment (one per write)
    are one range, and a membership test is a binary search, not a scan of every file written."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self.ranges: list[tuple[int, int]] = []
        for first, last in ranges:
            self.add(first, last)

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        i = bisect.bisect_right(self.ranges, (offset, math.inf)) - 1
        return i >= 0 and offset <= self.ranges[i][1]

    def add(self, first: int, last: int) -> None:
        """Cover [first, last], merged with every range it overlaps or touches (b + 1 == first)."""
        lo = bisect.bisect_left(self.ranges, (first, -math.inf))
        if lo > 0 and self.ranges[lo - 1][1] >= first - 1:
            lo -= 1
        hi = lo
        while hi < len(self.ranges) and self.ranges[hi][0] <= last + 1:
            hi += 1
        if hi > lo:
            first = min(first, self.ranges[lo][0])
            last = max(last, self.ranges[hi - 1][1])
        self.ranges[lo:hi] = [(first, last)]

    def between(self, lo: int, hi: int) -> bool:
        """Some covered offset lies strictly between two offsets: a run may not span it. (With
        ranges merged, a range that holds such an offset may reach past `lo` or `hi`: the two
        offsets themselves are not covered where this is asked, so the range lies between.)"""
        i = bisect.bisect_right(self.ranges, (lo, math.inf))
        return i < len(self.ranges) and self.ranges[i][0] < hi


def runs(
    records: Sequence[tuple[int, BaseModel | None]], kind: str, covered: Covered
) -> list[list[tuple[int, BaseModel]]]:
    """Maximal runs of consecutive offsets not yet covered whose records share a partition key.
    An invalid record (None) belongs to no run and cuts none: it is skipped wherever it falls."""
    out: list[list[tuple[int, BaseModel]]] = []
    current: list[tuple[int, BaseModel]] = []
    key: parquet.PartitionKey | None = None
    for offset, record in records:
        if offset in covered:
            if current:
                out.append(current)
            current, key = [], None
            continue
        if record is None:
            continue
        k = parquet.partition_of(kind, record)
        if current and (k != key or covered.between(current[-1][0], offset)):
            out.append(current)
            current = []
        current.append((offset, record))
        key = k
    if current:
        out.append(current)
    return out


class Archiver:
    """The consumer-independent part: buffered records per topic partition, written as runs."""

    def __init__(self, root: str | Path, kinds: dict[str, str], metrics: Metrics) -> None:
        self.root = Path(root)
        self.kinds = kinds  # topic -> samples | scores | pairs
        self.metrics = metrics
        self.covered: dict[tuple[str, int], Covered] = {}
        self.buffers: dict[tuple[str, int], list[tuple[int, BaseModel | None]]] = {}
        # Encoded bytes of each buffer's records: the write is triggered by bytes as well as by count.
        self.buffer_bytes: dict[tuple[str, int], int] = {}

    def assigned(self, topic: str, partition: int) -> None:
        # What this worker knew of a partition it held before may be stale: forget it. What is on
        # disk is read from the run's own directory before every write (`write_run`).
        self.covered[(topic, partition)] = Covered([])

    def add(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        if (topic, partition) not in self.covered:
            self.assigned(topic, partition)
        kind = self.kinds[topic]
        model = parquet.MODELS[kind]
        record: BaseModel | None
        try:
            record = model.model_validate(orjson.loads(value or b""))
            # The record's partition directory, placed now: a timestamp at the calendar's edge
            # ("0001-01-01T00:00:00+05:00" is valid, but before year 1 in UTC) raises OverflowError,
            # which at write time would kill the worker at the same offset after every restart.
            key = parquet.partition_of(kind, record)
            # A model_version of thousands of characters (anyone with produce rights can write
            # one) makes a directory name the file system refuses (ENAMETOOLONG): same stall.
            if any(len(part.encode()) > NAME_MAX for part in key.directory().split("/")):
                raise ValueError(f"model_version of {len(key.model_version or '')} characters")
        except (orjson.JSONDecodeError, ValidationError, TypeError, OverflowError, ValueError) as exc:
            record = None
            self._count("invalid")
            # Where it is and why, never the record itself (it may be megabytes, or a secret).
            log.warning("invalid_record", topic=topic, partition=partition, offset=offset, error=record_error(exc))
        self.buffers.setdefault((topic, partition), []).append((offset, record))
        self.buffer_bytes[(topic, partition)] = self.buffer_bytes.get((topic, partition), 0) + len(value or b"")

    def pending(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def pending_bytes(self) -> int:
        return sum(self.buffer_bytes.values())

    def flush(self, only: set[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """Write the buffered runs; the next offset to commit per topic partition flushed."""
        done: dict[tuple[str, int], int] = {}
        for tp in list(self.buffers):
            if only is not None and tp not in only:
                continue
            topic, partition = tp
            records = self.buffers.pop(tp)
            self.buffer_bytes.pop(tp, None)
            covered = self.covered.setdefault(tp, Covered([]))
            kind = self.kinds[topic]
            skipped = sum(1 for offset, _ in records if offset in covered)
            if skipped:
                self._count("duplicate", skipped)
            for run in runs(records, kind, covered):
                self.write_run(topic, partition, kind, run, covered)
            if records:
                done[tp] = records[-1][0] + 1
        return done

    def write_run(
        self, topic: str, partition: int, kind: str, run: list[tuple[int, BaseModel]], covered: Covered
    ) -> None:
        """Write the part of `run` that no file holds yet: the files of the run's directory are
        listed first, so a range another worker wrote (a worker killed before its commit, a group
        replaying from 0) is skipped, and no written range overlaps another."""
        key = parquet.partition_of(kind, run[0][1])
        for first, last in parquet.ranges_in(self.root / kind / key.directory(), topic, partition):
            covered.add(first, last)
        pieces = runs(run, kind, covered)
        kept = sum(len(p) for p in pieces)
        if kept < len(run):
            self._count("duplicate", len(run) - kept)
        for piece in pieces:
            first, last = piece[0][0], piece[-1][0]
            path = parquet_write.write_part(
                self.root, kind, key, parquet.part_name(topic, partition, first, last), [r for _, r in piece]
            )
            covered.add(first, last)
            self._count("archived", len(piece))
            log.debug("archive_file_written", path=str(path), rows=len(piece))

    def drop(self, tp: tuple[str, int]) -> None:
        self.buffers.pop(tp, None)
        self.buffer_bytes.pop(tp, None)
        self.covered.pop(tp, None)

    def _count(self, outcome: str, n: int = 1) -> None:
        self.metrics.group(KafkaMetrics).kafka_consumed.labels(outcome=outcome).inc(n)


def consume(
    consumer: Any,
    archiver: Archiver,
    commit: Callable[[dict[tuple[str, int], int]], None],
    stop: threading.Event,
    batch_records: int,
    flush_s: float,
    batch_bytes: int = BATCH_BYTES,
) -> None:
    """Poll until `stop`; write and commit every `batch_records` records, `batch_bytes` bytes of
    records or `flush_s` seconds, and at the end."""
    oldest: float | None = None
    while not stop.is_set():
        batch = consumer.poll(timeout_ms=500, max_records=batch_records)
        for tp, records in batch.items():
            for record in records:
                archiver.add(tp.topic, tp.partition, record.offset, record.value)
        if archiver.pending() and oldest is None:
            oldest = time.monotonic()
        if oldest is not None and (
            archiver.pending() >= batch_records
            or archiver.pending_bytes() >= batch_bytes
            or time.monotonic() - oldest >= flush_s
        ):
            commit(archiver.flush())
            oldest = None
    if archiver.pending():
        commit(archiver.flush())


def run_archiver(
    cfg: Config,
    out: str,
    *,
    batch_records: int = 10_000,
    flush_s: float = 10.0,
    batch_bytes: int = BATCH_BYTES,
    stop: threading.Event | None = None,
) -> int:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition

    kcfg = cfg.kafka
    kinds = {kcfg.samples_topic: "samples", kcfg.scores_topic: "scores", kcfg.pairs_topic: "pairs"}
    metrics = Metrics(max_models=cfg.metrics.max_models, max_versions=cfg.metrics.max_versions, groups=metric_groups())
    archiver = Archiver(out, kinds, metrics)
    stop = stop or threading.Event()
    ready = threading.Event()
    state: dict[str, Any] = {"topics": list(kinds), "out": str(out)}
    server = serve_in_thread(
        metrics_app(metrics, lambda: {"consumer_polling": ready.is_set()}, details=lambda: dict(state)),
        cfg.metrics_listen,
        name="llmwatch-archive-http",
    )
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    consumer: Any = None

    def commit(done: dict[tuple[str, int], int]) -> None:
        if not done:
            return
        try:
            consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in done.items()})
        except Exception as exc:
            # Safe: the files are durable and name their offsets; the next owner skips them.
            log.warning("commit_failed", error=repr(exc))

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            tps = {(tp.topic, tp.partition) for tp in revoked}
            commit(archiver.flush(tps))
            for tp in tps:
                archiver.drop(tp)

        def on_partitions_assigned(self, assigned: Any) -> None:
            for tp in assigned:
                archiver.assigned(tp.topic, tp.partition)
            state["assigned"] = sorted(f"{tp.topic}/{tp.partition}" for tp in assigned)
            log.info("archive_assigned", partitions=state["assigned"])

    try:
        consumer = connect(
            lambda: KafkaConsumer(
                **consumer_settings(kcfg, group_id=f"{kcfg.group_id}-archive", client_id=f"{kcfg.client_id}-archive")
            ),
            "consumer",
            stop,
        )
        if consumer is not None:
            consumer.subscribe(list(kinds), listener=Listener())
            ready.set()
            log.info("archive_started", topics=list(kinds), out=str(out), metrics_port=server.port)
        if consumer is not None:
            consume(consumer, archiver, commit, stop, batch_records, flush_s, batch_bytes)
    finally:
        close_worker(ready, consumer, server, previous)
    return 0
