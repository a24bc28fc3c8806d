"""`llmwatch aggregate`: one consumer of the samples and scores topics, for a fleet of workers.

Scorer workers are at-least-once: a worker killed between publishing scores and committing its
offsets leaves that batch to be scored again by the partition's next owner. Their per-worker
counters can therefore count a (sample, check) twice in that window. The aggregator is where
the fleet's numbers are made exact and where drift sees every partition at once:

* every score is keyed by (sample_id, check); the first one counts, later ones are duplicates
  (`llmwatch_kafka_consumed_total{outcome="duplicate_score"}`), so `llmwatch_check_total` and
  `llmwatch_quality_score` from the aggregator count each scored sample exactly once;
* samples are joined with their scores and fed into the same aggregate stage as the sidecar's
  scorer (`scorers/llmwatch/scorers/drift/aggregate.py`): drift windows per model version compared with the baseline,
  and the evaluation matrix, every `drift.interval_s`, set as the same gauges.

It runs as a single member of its own consumer group (`<group_id>-aggregator`): the state is in
memory, so one instance reads every partition. Offsets are committed after each poll, at least
once; the dedupe memory covers redeliveries within its time to live (1 h). The join is bounded by
count (`MAX_PENDING`) and by the encoded bytes of what it holds (`kafka.aggregate_join_max_bytes`),
samples and scores each; what falls out is counted `join_overflow_sample` or `join_overflow_score`.
The embedding signal needs
answer vectors, which the topics do not carry: it is computed in the sidecar mode only.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import OrderedDict
from typing import Any

import orjson
import structlog
from pydantic import ValidationError

from llmwatch.agent.components import Config, metric_groups
from llmwatch.collectors.exporters.kafka import (
    KafkaMetrics,
    RecentIds,
    close_worker,
    connect,
    consumer_settings,
    record_error,
)
from llmwatch.collectors.exporters.prometheus import metrics_app, serve_in_thread
from llmwatch.collectors.exporters.scores import ScoreRecorder
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.metrics import OTHER, Metrics
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.registry import CHECK_KINDS
from llmwatch.scorers.checks.suite import DEFAULT_EMBEDDING_CHECKS, DEFAULT_RULE_CHECKS
from llmwatch.scorers.drift.aggregate import WindowAggregator
from llmwatch.scorers.drift.baseline import load_baseline
from llmwatch.scorers.drift.metrics import CanaryMetrics, DriftMetrics
from llmwatch.scorers.evaluation.consistency import CONSISTENCY_CANDIDATE
from llmwatch.scorers.evaluation.judge import check_name
from llmwatch.scorers.evaluation.metrics import EvaluationMetrics

log = structlog.get_logger(__name__)

# A sample joins the drift window this long after it arrived, so that its scores (published by
# a worker a moment later, on another topic) are there too.
JOIN_DELAY_S = 3.0
MAX_PENDING = 100_000
# Scores held per sample the join may hold: the held scores' bound is MAX_PENDING times this (a
# sample has a score per check; a producer can name any number of checks for one sample id).
SCORES_PER_SAMPLE = 10


def known_check_names(cfg: Config) -> list[str]:
    """Check names llmwatch writes: every registered kind, the built-in suite's names, the configured
    checks, the judge's criteria (`judge:<name>`) and the consistency probe's. They keep their own
    `check` label however many made-up names the scores topic carries, and whenever they first come."""
    names = set(CHECK_KINDS)
    names.update(spec["name"] for spec in DEFAULT_RULE_CHECKS + DEFAULT_EMBEDDING_CHECKS)
    names.update(spec.name for spec in cfg.scoring.checks or ())
    names.update(check_name(c.name) for rubric in cfg.judge.rubrics for c in rubric.criteria)
    names.add(CONSISTENCY_CANDIDATE)
    return sorted(names)


class Aggregator:
    """The consumer-independent part: dedupe and join, then the shared aggregate stage and its gauges (testable without a broker)."""

    def __init__(self, cfg: Config, metrics: Metrics) -> None:
        self.metrics = metrics
        self.recorder = ScoreRecorder(metrics, None, known=known_check_names(cfg))
        self.seen_scores = RecentIds()
        # Samples waiting for the join delay, oldest first, with their encoded size.
        self.pending: OrderedDict[str, tuple[float, Sample, int]] = OrderedDict()
        self.pending_bytes = 0
        # Scores waiting for their sample, oldest first: bounded like `pending`, since a score whose
        # sample already left the join (it came after the join delay) or never comes would stay for ever.
        self.scores: OrderedDict[str, list[Score]] = OrderedDict()
        self.held_scores = 0  # the scores in `self.scores`, all lists together
        self.score_bytes: dict[str, int] = {}  # encoded bytes of each sample id's held scores
        self.held_score_bytes = 0
        # A sample is up to capture.max_body_bytes twice over (request and response): the count
        # bounds alone let the join hold ~100 GB. The bytes of its records are bounded too.
        self.max_bytes = cfg.kafka.aggregate_join_max_bytes
        self._warn_overflow = RateLimitedLog()
        baseline = load_baseline(cfg.drift.baseline) if cfg.drift.baseline else None
        self.stage = WindowAggregator(baseline, cfg.drift, cfg.matrix)
        self.windows = self.stage.windows

    def add_score(self, score: Score, size: int | None = None) -> bool:
        """Count and hold one score; `size` is its encoded record's length (measured when not given)."""
        key = f"{score.sample_id}\x00{score.check}"
        if key in self.seen_scores:
            self.metrics.group(KafkaMetrics).kafka_consumed.labels(outcome="duplicate_score").inc()
            return False
        self.seen_scores.add(key)
        self.recorder.record([score], [0.0])
        size = size if size is not None else len(score.to_json())
        self.scores.setdefault(score.sample_id, []).append(score)
        self.score_bytes[score.sample_id] = self.score_bytes.get(score.sample_id, 0) + size
        self.held_scores += 1
        self.held_score_bytes += size
        lost_scores = 0
        while (
            len(self.scores) > MAX_PENDING
            or self.held_scores > MAX_PENDING * SCORES_PER_SAMPLE
            or self.held_score_bytes > self.max_bytes
        ):
            sid, lost = self.scores.popitem(last=False)
            self.held_scores -= len(lost)
            self.held_score_bytes -= self.score_bytes.pop(sid)
            lost_scores += len(lost)
        if lost_scores:
            self._overflow("join_overflow_score", lost_scores)
        return True

    def _overflow(self, outcome: str, n: int) -> None:
        """Count records dropped from the join, and say so (at most one line per 10 s): counts and
        bounds only, never a record's content or id."""
        self.metrics.group(KafkaMetrics).kafka_consumed.labels(outcome=outcome).inc(n)
        self._warn_overflow(
            log.warning,
            "join_overflow",
            outcome=outcome,
            dropped=n,
            pending_samples=len(self.pending),
            pending_sample_bytes=self.pending_bytes,
            held_scores=self.held_scores,
            held_score_bytes=self.held_score_bytes,
            max_records=MAX_PENDING,
            max_bytes=self.max_bytes,
        )

    def add_record(self, record: Any, *, is_score: bool) -> None:
        """One consumer record of the scores topic (`is_score`) or the samples topic; one that is
        not a score or a sample is counted `invalid` and logged, and the consumer goes on past it."""
        try:
            data = orjson.loads(record.value)
            if is_score:
                self.add_score(Score.model_validate(data), size=len(record.value))
            else:
                self.add_sample(Sample.model_validate(data), size=len(record.value))
        except (orjson.JSONDecodeError, ValidationError, TypeError) as exc:
            self.metrics.group(KafkaMetrics).kafka_consumed.labels(outcome="invalid").inc()
            # Where it is and why, never the record itself (it may be megabytes, or a secret).
            log.warning(
                "invalid_record",
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                error=record_error(exc),
            )

    def add_sample(self, sample: Sample, now: float | None = None, size: int | None = None) -> None:
        """Hold one sample for the join; `size` is its encoded record's length (measured when not given)."""
        if sample.id in self.pending:
            self.metrics.group(KafkaMetrics).kafka_consumed.labels(outcome="duplicate").inc()
            return
        # Drift keeps a window per model_version, and the topic may name any number of them: each
        # one past the label cap would hold a window (memory without bound) for gauges that all
        # read `other` anyway. Those versions share one `other` window, as they share the series.
        if self.metrics.version_label(sample.model_version) == OTHER:
            sample = sample.model_copy(update={"model_version": OTHER})
        size = size if size is not None else len(sample.to_json())
        self.pending[sample.id] = (now if now is not None else time.monotonic(), sample, size)
        self.pending_bytes += size
        lost = 0
        while len(self.pending) > MAX_PENDING or self.pending_bytes > self.max_bytes:
            _, (_, _, dropped_size) = self.pending.popitem(last=False)
            self.pending_bytes -= dropped_size
            lost += 1
        if lost:
            self._overflow("join_overflow_sample", lost)

    def flush(self, now: float | None = None) -> int:
        """Move samples that have waited `JOIN_DELAY_S` into the windows, with whatever scores arrived."""
        now = now if now is not None else time.monotonic()
        ready: list[Sample] = []
        while self.pending:
            sid, (arrived, sample, size) = next(iter(self.pending.items()))
            if now - arrived < JOIN_DELAY_S:
                break
            self.pending.popitem(last=False)
            self.pending_bytes -= size
            ready.append(sample)
        if ready:
            joined = [s for sample in ready for s in self.scores.pop(sample.id, [])]
            self.held_scores -= len(joined)
            self.held_score_bytes -= sum(self.score_bytes.pop(sample.id, 0) for sample in ready)
            self.stage.add(ready, joined)
        return len(ready)

    def refresh(self, now: float | None = None) -> int:
        """Set the gauges from whatever readings are due; the number of drift readings."""
        if not self.stage.due(now):
            return 0
        readings = self.stage.readings(now)
        self.metrics.group(EvaluationMetrics).set_evaluation(readings.evaluation or [])
        self.metrics.group(DriftMetrics).set_drift(readings.drift or [])
        self.metrics.group(DriftMetrics).set_pager(readings.pager or [])
        if readings.canary is not None:
            self.metrics.group(CanaryMetrics).set_canary(readings.canary)
        return len(readings.drift or [])


def run_aggregator(cfg: Config, *, stop: threading.Event | None = None) -> int:
    from kafka import KafkaConsumer

    kcfg = cfg.kafka
    metrics = Metrics(max_models=cfg.metrics.max_models, max_versions=cfg.metrics.max_versions, groups=metric_groups())
    agg = Aggregator(cfg, metrics)
    stop = stop or threading.Event()
    ready = threading.Event()
    state: dict[str, Any] = {"topics": [kcfg.samples_topic, kcfg.scores_topic]}
    server = serve_in_thread(
        metrics_app(metrics, lambda: {"consumer_polling": ready.is_set()}, details=lambda: dict(state)),
        cfg.metrics_listen,
        name="llmwatch-aggregator-http",
    )
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    consumer = None
    try:
        consumer = connect(
            lambda: KafkaConsumer(
                **consumer_settings(
                    kcfg, group_id=f"{kcfg.group_id}-aggregator", client_id=f"{kcfg.client_id}-aggregator"
                )
            ),
            "consumer",
            stop,
        )
        if consumer is not None:
            consumer.subscribe([kcfg.samples_topic, kcfg.scores_topic])
            ready.set()
            log.info(
                "aggregator_started", topics=state["topics"], baseline=str(cfg.drift.baseline), metrics_port=server.port
            )
        while consumer is not None and not stop.is_set():
            batch = consumer.poll(timeout_ms=500)
            for tp, records in batch.items():
                for record in records:
                    agg.add_record(record, is_score=tp.topic == kcfg.scores_topic)
            agg.flush()
            agg.refresh()
            if batch:
                try:
                    consumer.commit()
                except Exception as exc:
                    log.warning("commit_failed", error=repr(exc))
    finally:
        close_worker(ready, consumer, server, previous)
    return 0
