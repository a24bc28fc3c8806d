"""`llmwatch scorer`: one member of a Kafka consumer group that scores the samples topic.

Run as many as the samples topic has partitions; the group splits the partitions among them and
moves them when one joins, leaves or dies. Each batch goes, in this order:

    poll -> score (main thread, the same `Suite` as everywhere) -> publish every Score to the
    scores topic (keyed by sample id) and flush -> record metrics -> commit offsets

so a sample's offset is committed only once its scores are on the scores topic (at-least-once).
A crash between publish and commit makes the partition's next owner score that batch again;
consumers of the scores topic dedupe by (sample_id, check). Redeliveries to this same worker
(a commit lost to a rebalance, a producer retry that duplicated a sample) are skipped with a
bounded set of recently scored sample ids and counted as `duplicate`.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from typing import Any, Sequence

import structlog

from llmwatch.agent.components import Config, metric_groups
from llmwatch.collectors.exporters.kafka import (
    KafkaMetrics,
    RecentIds,
    check_codec,
    close_worker,
    connect,
    consumer_settings,
    producer_settings,
    publish,
    record_error,
    rewind,
)
from llmwatch.collectors.exporters.prometheus import metrics_app, serve_in_thread
from llmwatch.collectors.exporters.scores import ScoreRecorder
from llmwatch.core.metrics import Metrics
from llmwatch.core.records import Sample
from llmwatch.scorers.checks.suite import build_suite

log = structlog.get_logger(__name__)

SCORER_HEADER = "llmwatch-scorer"


def _decode(records: Sequence[Any], seen: RecentIds) -> tuple[list[Sample], int, int]:
    """The batch's samples not scored yet, and how many records were duplicates or not samples."""
    samples: list[Sample] = []
    in_batch: set[str] = set()
    duplicates = invalid = 0
    for record in records:
        try:
            sample = Sample.from_json(record.value)
        except Exception as exc:
            # A poison record must not stall its partition: count it and move past it.
            invalid += 1
            log.warning(
                "invalid_sample_record",
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                error=record_error(exc),
            )
            continue
        if sample.id and (sample.id in seen or sample.id in in_batch):
            duplicates += 1
            continue
        if sample.id:
            in_batch.add(sample.id)
        samples.append(sample)
    return samples, duplicates, invalid


def run_scorer(cfg: Config, *, stop: threading.Event | None = None, worker_id: str | None = None) -> int:  # noqa: C901
    """Consume `cfg.kafka.samples_topic` in group `cfg.kafka.group_id` until SIGTERM/SIGINT (or `stop`)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import CommitFailedError

    kcfg = cfg.kafka
    check_codec(kcfg.compression)
    # Built here, in the main thread: rule checks' time limits use SIGALRM.
    suite = build_suite(cfg.scoring)
    metrics = Metrics(max_models=cfg.metrics.max_models, max_versions=cfg.metrics.max_versions, groups=metric_groups())
    recorder = ScoreRecorder(metrics, None)
    seen = RecentIds()
    worker = worker_id or f"{socket.gethostname()}/{os.getpid()}"
    stop = stop or threading.Event()
    # Ready = connected and polling; a worker with no partition (more workers than partitions)
    # is still ready: it takes over when another one leaves.
    ready = threading.Event()
    state: dict[str, Any] = {"worker": worker, "group": kcfg.group_id, "topic": kcfg.samples_topic, "assigned": []}
    server = serve_in_thread(
        metrics_app(metrics, lambda: {"consumer_polling": ready.is_set()}, details=lambda: dict(state)),
        cfg.metrics_listen,
        name="llmwatch-scorer-http",
    )
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    log.info(
        "scorer_starting",
        worker=worker,
        checks=suite.check_names,
        bootstrap_servers=kcfg.bootstrap_servers,
        topic=kcfg.samples_topic,
        scores_topic=kcfg.scores_topic,
        group=kcfg.group_id,
        metrics_port=server.port,
    )

    consumer = producer = None
    publish_timeout_s = min(kcfg.delivery_timeout_ms / 1000.0, 30.0)
    backoff = 0.5
    try:
        consumer = connect(
            lambda: KafkaConsumer(
                **consumer_settings(
                    kcfg,
                    group_id=kcfg.group_id,
                    client_id=f"{kcfg.client_id}-scorer",
                    # Also the rebalance timeout: the longest a batch may take before the group moves on.
                    max_poll_interval_ms=max(int(cfg.scoring.batch_timeout_s * 1000), 30_000),
                    max_poll_records=max(cfg.scoring.batch_size * 4, 32),
                )
            ),
            "consumer",
            stop,
        )
        producer = connect(
            lambda: KafkaProducer(**producer_settings(kcfg, client_id=f"{kcfg.client_id}-scorer")), "producer", stop
        )
        if consumer is not None and producer is not None:
            consumer.subscribe([kcfg.samples_topic])
            ready.set()
        while consumer is not None and producer is not None and not stop.is_set():
            batch = consumer.poll(timeout_ms=500)
            state["assigned"] = sorted(f"{tp.topic}:{tp.partition}" for tp in consumer.assignment())
            if not batch:
                continue
            records = [r for rs in batch.values() for r in rs]
            samples, duplicates, invalid = _decode(records, seen)
            results = suite.score(samples) if samples else []
            try:
                publish(
                    producer,
                    kcfg.scores_topic,
                    [(r.score.sample_id.encode(), r.score.to_json()) for r in results],
                    [(SCORER_HEADER, worker.encode())],
                    publish_timeout_s,
                )
            except Exception as exc:
                # Not committed, not recorded: read the batch again once the broker answers.
                log.error("scores_publish_failed", samples=len(samples), scores=len(results), error=repr(exc))
                rewind(consumer, batch)
                stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.5
            recorder.record([r.score for r in results], [r.duration_s for r in results])
            for sample in samples:
                if sample.id:
                    seen.add(sample.id)
            for outcome, n in (("scored", len(samples)), ("duplicate", duplicates), ("invalid", invalid)):
                if n:
                    metrics.group(KafkaMetrics).kafka_consumed.labels(outcome=outcome).inc(n)
            try:
                consumer.commit()
            except Exception as exc:  # CommitFailedError (the group rebalanced under us), broker away
                # The partition's next owner reads this batch again: this worker skips it via
                # `seen`, another one scores it a second time.
                log.warning(
                    "commit_failed",
                    records=len(records),
                    rebalanced=isinstance(exc, CommitFailedError),
                    error=repr(exc),
                )
    finally:
        close_worker(
            ready,
            consumer,
            server,
            previous,
            also=[("producer", lambda: producer.close(timeout=5))] if producer is not None else [],
        )
        log.info("scorer_stopped", worker=worker, scores=recorder.recorded)
    return 0
