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

import collections
import os
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Sequence

import orjson
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llmwatch.core.config import Config, ListenError
from llmwatch.core.metrics import Metrics
from llmwatch.core.records import Sample
from llmwatch.scorers.export import ScoreRecorder
from llmwatch.scorers.suite import build_suite

log = structlog.get_logger(__name__)

# tansu holds every JoinGroup open for session_timeout_ms / 2, so kafka-python's 45 s default
# means 22 s per rebalance; 6 s (Kafka's group.min.session.timeout.ms) joins in ~3 s and still
# tolerates a GC pause. Heartbeats every second notice a rebalance quickly.
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000
SCORER_HEADER = "llmwatch-scorer"


class RecentIds:
    """Sample ids scored lately, bounded by count and by age (oldest forgotten first)."""

    def __init__(self, max_size: int = 200_000, ttl_s: float = 3600.0) -> None:
        self._ids: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._max = max_size
        self._ttl = ttl_s

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, sample_id: object) -> bool:
        added = self._ids.get(sample_id)  # type: ignore[call-overload]
        return added is not None and time.monotonic() - added < self._ttl

    def add(self, sample_id: str) -> None:
        now = time.monotonic()
        self._ids[sample_id] = now
        self._ids.move_to_end(sample_id)
        while self._ids:
            oldest_id, oldest = next(iter(self._ids.items()))
            if len(self._ids) <= self._max and now - oldest < self._ttl:
                break
            del self._ids[oldest_id]


def serve_http(address: str, metrics: Metrics, health: Callable[[], dict[str, Any]]) -> ThreadingHTTPServer:
    """`/metrics`, `/healthz` and `/readyz` on a daemon thread; the main thread stays with the consumer."""
    host, _, port = address.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = 200
            if self.path == "/metrics":
                body, ctype = generate_latest(metrics.registry), CONTENT_TYPE_LATEST
            elif self.path in ("/healthz", "/readyz"):
                current = health()
                body, ctype = orjson.dumps(current), "application/json"
                # Ready = connected and polling; a worker with no partition (more workers than
                # partitions) is still ready: it takes over when another one leaves.
                if self.path == "/readyz" and not current.get("ready"):
                    status = 503
            else:
                self.send_error(404)
                return
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every few seconds would drown the structured log

    host = host.strip("[]")
    server_class = ThreadingHTTPServer
    if ":" in host:

        class Server6(ThreadingHTTPServer):
            address_family = socket.AF_INET6

        server_class = Server6
    try:
        server = server_class((host, int(port)), Handler)
    except OSError as exc:
        # As the proxy does (runtime.Agent): name the address and the setting, not just "[Errno 98]".
        raise ListenError(f"cannot listen on {address} (--metrics-listen, config metrics_listen): {exc.strerror or exc}; "
                          f"stop what holds it or choose another address (port 0 picks a free one)") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="llmwatch-scorer-http", daemon=True).start()
    return server


def _connect(factory: Callable[[], Any], what: str, stop: threading.Event) -> Any:
    """Build a client, retrying while the broker is unreachable (a worker may start first)."""
    backoff = 0.5
    while not stop.is_set():
        try:
            return factory()
        except Exception as exc:  # NoBrokersAvailable, KafkaTimeoutError
            log.warning("kafka_unreachable", client=what, error=repr(exc))
            stop.wait(backoff)
            backoff = min(backoff * 2, 5.0)
    return None


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
            log.warning("invalid_sample_record", topic=record.topic, partition=record.partition, offset=record.offset, error=repr(exc)[:200])
            continue
        if sample.id and (sample.id in seen or sample.id in in_batch):
            duplicates += 1
            continue
        if sample.id:
            in_batch.add(sample.id)
        samples.append(sample)
    return samples, duplicates, invalid


def _publish(producer: Any, topic: str, scores: Sequence[Any], worker: bytes, timeout_s: float) -> None:
    headers = [(SCORER_HEADER, worker)]
    futures = [producer.send(topic, key=s.score.sample_id.encode(), value=s.score.to_json(), headers=headers) for s in scores]
    # flush() raises only on time-out; a send the broker refused fails its own future.
    producer.flush(timeout=timeout_s)
    for future in futures:
        if future.failed():
            raise future.exception


def _rewind(consumer: Any, batch: dict[Any, list[Any]]) -> None:
    for tp, records in batch.items():
        if records:
            consumer.seek(tp, records[0].offset)


def run_scorer(cfg: Config, *, stop: threading.Event | None = None, worker_id: str | None = None) -> int:
    """Consume `cfg.kafka.samples_topic` in group `cfg.kafka.group_id` until SIGTERM/SIGINT (or `stop`)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import CommitFailedError

    from llmwatch.collectors.kafka import check_codec, producer_settings

    kcfg = cfg.kafka
    check_codec(kcfg.compression)
    # Built here, in the main thread: rule checks' time limits use SIGALRM.
    suite = build_suite(cfg.scoring)
    metrics = Metrics(max_models=cfg.metrics.max_models, max_versions=cfg.metrics.max_versions)
    recorder = ScoreRecorder(metrics, None)
    seen = RecentIds()
    worker = worker_id or f"{socket.gethostname()}/{os.getpid()}"
    stop = stop or threading.Event()
    state: dict[str, Any] = {"status": "ok", "ready": False, "worker": worker, "group": kcfg.group_id, "topic": kcfg.samples_topic, "assigned": []}

    server = serve_http(cfg.metrics_listen, metrics, lambda: dict(state))
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    log.info("scorer_starting", worker=worker, checks=suite.check_names, bootstrap_servers=kcfg.bootstrap_servers, topic=kcfg.samples_topic, scores_topic=kcfg.scores_topic, group=kcfg.group_id, metrics_port=server.server_address[1])

    consumer = producer = None
    publish_timeout_s = min(kcfg.delivery_timeout_ms / 1000.0, 30.0)
    backoff = 0.5
    try:
        consumer = _connect(
            lambda: KafkaConsumer(
                bootstrap_servers=list(kcfg.bootstrap_servers),
                group_id=kcfg.group_id,
                client_id=f"{kcfg.client_id}-scorer",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                # Also the rebalance timeout: the longest a batch may take before the group moves on.
                max_poll_interval_ms=max(int(cfg.scoring.batch_timeout_s * 1000), 30_000),
                max_poll_records=max(cfg.scoring.batch_size * 4, 32),
                bootstrap_timeout_ms=5_000,
                reconnect_backoff_max_ms=1_000,
                metrics_enabled=False,
            ),
            "consumer",
            stop,
        )
        producer = _connect(lambda: KafkaProducer(**producer_settings(kcfg, client_id=f"{kcfg.client_id}-scorer")), "producer", stop)
        if consumer is not None and producer is not None:
            consumer.subscribe([kcfg.samples_topic])
            state["ready"] = True
        while consumer is not None and producer is not None and not stop.is_set():
            batch = consumer.poll(timeout_ms=500)
            state["assigned"] = sorted(f"{tp.topic}:{tp.partition}" for tp in consumer.assignment())
            if not batch:
                continue
            records = [r for rs in batch.values() for r in rs]
            samples, duplicates, invalid = _decode(records, seen)
            results = suite.score(samples) if samples else []
            try:
                _publish(producer, kcfg.scores_topic, results, worker.encode(), publish_timeout_s)
            except Exception as exc:
                # Not committed, not recorded: read the batch again once the broker answers.
                log.error("scores_publish_failed", samples=len(samples), scores=len(results), error=repr(exc))
                _rewind(consumer, batch)
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
                    metrics.kafka_consumed.labels(outcome=outcome).inc(n)
            try:
                consumer.commit()
            except Exception as exc:  # CommitFailedError (the group rebalanced under us), broker away
                # The partition's next owner reads this batch again: this worker skips it via
                # `seen`, another one scores it a second time.
                log.warning("commit_failed", records=len(records), rebalanced=isinstance(exc, CommitFailedError), error=repr(exc))
    finally:
        state["status"], state["ready"] = "stopping", False
        if consumer is not None:
            try:
                consumer.close()  # LeaveGroup: the others take over at once, not after the session timeout
            except Exception as exc:
                log.warning("consumer_close_failed", error=repr(exc))
        if producer is not None:
            try:
                producer.close(timeout=5)
            except Exception as exc:
                log.warning("producer_close_failed", error=repr(exc))
        server.shutdown()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log.info("scorer_stopped", worker=worker, scores=recorder.recorded)
    return 0
