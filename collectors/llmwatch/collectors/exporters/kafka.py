"""Samples to Kafka: the scale-out transport (`kafka.enabled: true`).

The sidecar produces each redacted sample to `kafka.samples_topic`; `llmwatch scorer` workers in
one consumer group score them (agent/llmwatch/agent/processes/kafka_scorer.py), and `llmwatch aggregate` reads both topics
(agent/llmwatch/agent/processes/kafka_aggregate.py). All Kafka client code lives here: producer and consumer settings,
the codec check, the connect-with-retry helper, the dedupe memory and the producer sink; the
workers keep only their run loops. The proxy must never notice Kafka, so
`KafkaSampleSink.write` only appends to a bounded buffer of its own and returns: a background
thread creates the producer (retrying while the broker is unreachable) and sends. kafka-python
has no memory bound of its own, hence `max_buffered`: samples queued here plus samples sent and
not yet acknowledged. Beyond it new samples are dropped and counted; a broker outage therefore
costs bounded memory and some counted samples, never proxy latency or an exception.

A sample that waits here longer than `delivery_timeout_ms` (no broker to send it to) is given up
and counted as `delivery_timeout`, as kafka-python does for the ones it holds. kafka-python logs
every failed connection attempt (a few ERROR lines a second while the broker is away): its
warnings and errors are let through at most once per `_WARN_EVERY_S` per logger, with a count.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import structlog
from pydantic import Field, ValidationError, field_validator, model_validator

from llmwatch.core.component import Component, Context, Factory, Passive
from llmwatch.core.config import ConfigError, SecretText, Section, host_port
from llmwatch.core.extras import require
from llmwatch.core.metrics import MetricGroup, Metrics, counter, gauge
from llmwatch.core.records import Sample

log = structlog.get_logger(__name__)


# --- the `kafka` section ---------------------------------------------------------------------


class KafkaSection(Section):
    """Scale-out transport: the sidecar produces redacted samples, `llmwatch scorer` workers consume them."""

    enabled: bool = False
    bootstrap_servers: list[str] = Field(default_factory=lambda: ["127.0.0.1:9092"])
    samples_topic: str = Field("llmwatch.samples", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    scores_topic: str = Field("llmwatch.scores", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    # Shadow evaluation's pair records (llmwatch.pair/v1), when shadow.enabled.
    pairs_topic: str = Field("llmwatch.pairs", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    compression: Literal["gzip", "lz4", "zstd", "snappy", "none"] = "gzip"
    # A little lingering turns one request per sample into one per batch, at no cost to the proxy.
    linger_ms: int = Field(20, ge=0, le=60_000)
    batch_size: int = Field(65_536, ge=1024, le=16_777_216)
    # Samples handed to the sink and not yet acknowledged by the broker; beyond it they are dropped
    # and counted, so a broker outage costs bounded memory, never proxy latency.
    max_buffered: int = Field(10_000, ge=1)
    # After this long without an acknowledgement a sample is given up (counted as delivery_failed).
    delivery_timeout_ms: int = Field(120_000, ge=1000)
    group_id: str = Field("llmwatch-scorers", min_length=1)
    # `llmwatch aggregate`: bytes of encoded records its join may hold, samples waiting for their
    # scores and scores waiting for their sample, each (so at most twice this, plus Python's
    # overhead on the parsed records). A sample can be up to capture.max_body_bytes twice over, so
    # the 100,000-record bound alone allowed ~100 GB; past this the oldest are dropped and counted.
    aggregate_join_max_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024)
    client_id: str = Field("llmwatch", min_length=1)
    # PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS); used by every client
    # llmwatch opens: the sidecar's producer, the topic admin, `scorer`, `aggregate` and `archive`.
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    # PEM file of the CA that signed the broker's certificate (unset: the system's CAs); *SSL only.
    ssl_cafile: Path | None = None
    # PEM client certificate, for a broker that asks for one (mutual TLS); needs ssl_keyfile.
    ssl_certfile: Path | None = None
    # PEM private key of ssl_certfile (unencrypted).
    ssl_keyfile: Path | None = None
    # Check that the broker's certificate names the host connected to.
    ssl_check_hostname: bool = True
    # SASL_* only: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    # Set it through the environment variable LLMWATCH_KAFKA__SASL_PASSWORD (from a Secret), taken
    # as written; never logged, echoed in an error or shown in the section's repr.
    sasl_password: SecretText = None

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        # `--kafka a:9092,b:9092` and `LLMWATCH_KAFKA__BOOTSTRAP_SERVERS=a:9092,b:9092` arrive as one string.
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("give at least one HOST:PORT")
        return [host_port(v) for v in value]

    @field_validator("ssl_cafile", "ssl_certfile", "ssl_keyfile")
    @classmethod
    def _readable_file(cls, value: Path | None) -> Path | None:
        # Checked at start-up: otherwise every connection attempt would fail, retried for ever.
        if value is None:
            return None
        if not value.is_file():
            what = "a folder" if value.is_dir() else "not there"
            raise ValueError(f"{str(value)!r} is {what}; give the path of a PEM file (mount the Secret that holds it)")
        if not os.access(value, os.R_OK):
            raise ValueError(
                f"{str(value)!r} is not readable by this process (uid {os.getuid()}); fix its owner or mode"
            )
        return value

    @model_validator(mode="after")
    def _consistent_security(self) -> "KafkaSection":
        # Messages name fields, never values: the password must not reach an error.
        sasl = self.security_protocol.startswith("SASL_")
        tls = self.security_protocol.endswith("SSL")
        if sasl:
            missing = [
                f"kafka.{name}"
                for name, value in (
                    ("sasl_mechanism", self.sasl_mechanism),
                    ("sasl_username", self.sasl_username),
                    ("sasl_password", self.sasl_password and self.sasl_password.get_secret_value()),
                )
                if not value
            ]
            if missing:
                raise ValueError(
                    f"kafka.security_protocol {self.security_protocol} needs {', '.join(missing)}"
                    " (set the password through the environment variable LLMWATCH_KAFKA__SASL_PASSWORD)"
                )
        else:
            given = [f"kafka.{n}" for n in ("sasl_mechanism", "sasl_username", "sasl_password") if getattr(self, n)]
            if given:
                raise ValueError(
                    f"{', '.join(given)} given but kafka.security_protocol is {self.security_protocol}:"
                    " set it to SASL_SSL (or SASL_PLAINTEXT), or remove them"
                )
        if not tls:
            given = [f"kafka.{n}" for n in ("ssl_cafile", "ssl_certfile", "ssl_keyfile") if getattr(self, n)]
            if given:
                raise ValueError(
                    f"{', '.join(given)} given but kafka.security_protocol is {self.security_protocol}:"
                    " set it to SSL (or SASL_SSL), or remove them"
                )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("a client certificate needs both kafka.ssl_certfile and kafka.ssl_keyfile")
        return self


def connection_settings(cfg: KafkaSection) -> dict[str, Any]:
    """kafka-python's connection arguments for `cfg`: every client llmwatch opens (producers, the
    consumers, the topic admin) starts from these, so none of them can connect in plaintext
    to a broker configured as secured."""
    settings: dict[str, Any] = {
        "bootstrap_servers": list(cfg.bootstrap_servers),
        "security_protocol": cfg.security_protocol,
    }
    if cfg.security_protocol.endswith("SSL"):
        settings["ssl_check_hostname"] = cfg.ssl_check_hostname
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(cfg, name)
            if path is not None:
                settings[name] = str(path)
    if cfg.security_protocol.startswith("SASL_") and cfg.sasl_password is not None:
        password = cfg.sasl_password.get_secret_value()
        # kafka-python logs its whole configuration at DEBUG (KafkaAdminClient): masked there.
        _kafka_secret_filter.add(password)
        settings["sasl_mechanism"] = cfg.sasl_mechanism
        settings["sasl_plain_username"] = cfg.sasl_username
        settings["sasl_plain_password"] = password
    return settings


# --- its metrics -----------------------------------------------------------------------------


class KafkaMetrics(MetricGroup):
    """The Kafka transport: samples produced and lost by the sidecar, consumed by workers."""

    kafka_produced = counter("llmwatch_kafka_produced", "Samples acknowledged by the Kafka broker.")
    kafka_dropped = counter(
        "llmwatch_kafka_dropped",
        "Samples not delivered to Kafka, by reason (buffer_full, send_failed, delivery_failed, delivery_timeout, closed).",
        ["reason"],
    )
    kafka_buffer_depth = gauge(
        "llmwatch_kafka_buffer_depth", "Samples handed to the Kafka sink and not yet acknowledged."
    )
    kafka_consumed = counter(
        "llmwatch_kafka_consumed",
        "Records read by a Kafka worker, by outcome (scorer: scored, duplicate, invalid; aggregate: duplicate, duplicate_score, invalid, join_overflow_sample, join_overflow_score; archive: archived, duplicate, invalid).",
        ["outcome"],
    )


# --- the sink --------------------------------------------------------------------------------

# Seconds between two "still failing" log lines while the broker is unreachable.
_WARN_EVERY_S = 10.0

# tansu holds every JoinGroup open for session_timeout_ms / 2, so kafka-python's 45 s default
# means 22 s per rebalance; 6 s (Kafka's group.min.session.timeout.ms) joins in ~3 s and still
# tolerates a GC pause. Heartbeats every second notice a rebalance quickly.
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000


class _RateLimitFilter(logging.Filter):
    """One WARNING-or-worse record per logger per `every_s`; the next one says how many were held back."""

    def __init__(self, every_s: float) -> None:
        super().__init__()
        self._every_s = every_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(record.name, float("-inf")) < self._every_s:
                self._held[record.name] = self._held.get(record.name, 0) + 1
                return False
            self._last[record.name] = now
            held = self._held.pop(record.name, 0)
        if held:
            record.msg = f"{record.msg} ({held} similar messages suppressed in the last {self._every_s:g} s)"
        return True


class _SecretFilter(logging.Filter):
    """Masks the SASL password in kafka-python's own records (it logs its configuration at DEBUG)."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()

    def add(self, secret: str) -> None:
        if secret:
            self._secrets.add(secret)

    def filter(self, record: logging.LogRecord) -> bool:
        if self._secrets:
            message = record.getMessage()
            if any(secret in message for secret in self._secrets):
                for secret in self._secrets:
                    message = message.replace(secret, "**********")
                record.msg, record.args = message, None
        return True


_kafka_log_filter = _RateLimitFilter(_WARN_EVERY_S)
_kafka_secret_filter = _SecretFilter()


def quiet_kafka_logs() -> None:
    """Rate-limit kafka-python's own warnings and errors (each of its module loggers: a filter on
    the parent `kafka` logger would not see its children's records)."""
    import kafka  # noqa: F401  (its modules create their loggers on import)
    import kafka.admin  # noqa: F401
    import kafka.producer  # noqa: F401

    for name in list(logging.root.manager.loggerDict):
        if name == "kafka" or name.startswith("kafka."):
            logger = logging.getLogger(name)
            for filter_ in (_kafka_secret_filter, _kafka_log_filter):
                if filter_ not in logger.filters:
                    logger.addFilter(filter_)


def check_codec(compression: str) -> None:
    """Refuse at start-up a codec whose library is missing (else every send would fail)."""
    from kafka import codec

    available = {
        "none": True,
        "gzip": codec.has_gzip(),
        "lz4": codec.has_lz4(),
        "zstd": codec.has_zstd(),
        "snappy": codec.has_snappy(),
    }
    if not available[compression]:
        package = {"lz4": "lz4", "zstd": "zstandard", "snappy": "python-snappy"}[compression]
        raise ConfigError(f"kafka.compression: {compression} needs the `{package}` package; install it or choose gzip")


def producer_settings(cfg: KafkaSection, client_id: str | None = None) -> dict[str, Any]:
    return {
        **connection_settings(cfg),
        "client_id": client_id or cfg.client_id,
        "compression_type": None if cfg.compression == "none" else cfg.compression,
        "linger_ms": cfg.linger_ms,
        "batch_size": cfg.batch_size,
        "acks": "all",
        # An idempotent producer stays wedged after the broker loses its producer id (a restarted
        # broker, an expired id); consumers dedupe by sample id, so retries may duplicate instead.
        "enable_idempotence": False,
        "delivery_timeout_ms": cfg.delivery_timeout_ms,
        "request_timeout_ms": min(30_000, max(cfg.delivery_timeout_ms - cfg.linger_ms, 500)),
        # send() waits this long for unknown topic metadata; it runs on our thread, not the pipeline's.
        "max_block_ms": 2_000,
        # Never longer than a sample may wait: the sink expires waiting samples between attempts.
        "bootstrap_timeout_ms": min(5_000, cfg.delivery_timeout_ms),
        # Reconnect within a second of the broker coming back (kafka-python's default backs off to 30 s).
        "reconnect_backoff_max_ms": 1_000,
        "metrics_enabled": False,
    }


def consumer_settings(cfg: KafkaSection, *, group_id: str, client_id: str, **overrides: Any) -> dict[str, Any]:
    """KafkaConsumer arguments shared by the scorer workers and the aggregator; offsets are committed by hand."""
    settings: dict[str, Any] = {
        **connection_settings(cfg),
        "group_id": group_id,
        "client_id": client_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
        "bootstrap_timeout_ms": 5_000,
        "reconnect_backoff_max_ms": 1_000,
        "metrics_enabled": False,
    }
    settings.update(overrides)
    return settings


def connect(factory: Callable[[], Any], what: str, stop: threading.Event) -> Any:
    """Build a client, retrying while the broker is unreachable (a worker may start first); None once `stop` is set."""
    # kafka-python logs each failed connect and bootstrap retry, about ten lines a second with
    # no broker: rate-limited as the sink's are, so that `kafka_unreachable` stays readable.
    quiet_kafka_logs()
    backoff = 0.5
    while not stop.is_set():
        try:
            return factory()
        except Exception as exc:  # NoBrokersAvailable, KafkaTimeoutError
            log.warning(
                "kafka_unreachable",
                client=what,
                error=repr(exc),
                fix="retrying; start the broker, or point --kafka (kafka.bootstrap_servers) at one that is up",
            )
            stop.wait(backoff)
            backoff = min(backoff * 2, 5.0)
    return None


def close_worker(
    ready: threading.Event,
    consumer: Any,
    server: Any,
    previous_handlers: Mapping[signal.Signals, Any],
    *,
    also: Sequence[tuple[str, Callable[[], None]]] = (),
) -> None:
    """The consumer workers' shutdown (`llmwatch scorer`, `aggregate`, `archive`), in this order.

    Not ready any more; the consumer closed first (LeaveGroup: the group's other members take
    over its partitions at once, not after the session timeout); then each of `also` (the
    scorer's producer); then the metrics server; then the signal handlers the worker replaced.
    A close that fails is logged (`<what>_close_failed`) and the rest still happens: a worker on
    its way out must not keep its port or handlers because the broker went first.
    """
    ready.clear()
    closers: list[tuple[str, Callable[[], None]]] = []
    if consumer is not None:
        closers.append(("consumer", consumer.close))
    closers.extend(also)
    closers.append(("metrics_server", server.close))
    for what, close in closers:
        try:
            close()
        except Exception as exc:
            log.warning(f"{what}_close_failed", error=repr(exc))
    for sig, handler in previous_handlers.items():
        signal.signal(sig, handler)


def publish(
    producer: Any,
    topic: str,
    records: Sequence[tuple[bytes, bytes]],
    headers: list[tuple[str, bytes]],
    timeout_s: float,
) -> None:
    """Send (key, value) records and wait until every one is acknowledged; raises when any was not."""
    futures = [producer.send(topic, key=key, value=value, headers=headers) for key, value in records]
    # flush() raises only on time-out; a send the broker refused fails its own future.
    producer.flush(timeout=timeout_s)
    for future in futures:
        if future.failed():
            raise future.exception


def rewind(consumer: Any, batch: dict[Any, list[Any]]) -> None:
    """Seek each partition back to the first record of a polled batch, so that the next poll reads it again."""
    for tp, records in batch.items():
        if records:
            consumer.seek(tp, records[0].offset)


def record_error(exc: BaseException) -> str:
    """Why a consumed record was refused, for a log line: the error's kind and the fields at fault,
    never a value. pydantic's own message quotes the input (`input_value={...}`): the record's
    prompt, or a key in it."""
    if isinstance(exc, ValidationError):
        fields = "; ".join(".".join(str(p) for p in e["loc"]) + f": {e['type']}" for e in exc.errors()[:5])
        return f"ValidationError ({exc.error_count()} for {exc.title}): {fields}"[:200]
    return f"{type(exc).__name__}: {exc}"[:200]


def _digest(value: str) -> bytes:
    return hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class RecentIds:
    """Ids seen lately, bounded by count and by age (oldest forgotten first): the consumers' dedupe memory.

    Each id is held as a 16-byte digest: an id read from a topic is any string a producer wrote, and
    200,000 ids of a megabyte each would be 200 GB. (Two ids sharing a digest, 1 in 2^64 for a
    billion ids, would make the second one a duplicate.)"""

    def __init__(self, max_size: int = 200_000, ttl_s: float = 3600.0) -> None:
        self._ids: collections.OrderedDict[bytes, float] = collections.OrderedDict()
        self._max = max_size
        self._ttl = ttl_s

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, sample_id: object) -> bool:
        added = self._ids.get(_digest(sample_id)) if isinstance(sample_id, str) else None
        return added is not None and time.monotonic() - added < self._ttl

    def add(self, sample_id: str) -> None:
        now = time.monotonic()
        key = _digest(sample_id)
        self._ids[key] = now
        self._ids.move_to_end(key)
        while self._ids:
            oldest_id, oldest = next(iter(self._ids.items()))
            if len(self._ids) <= self._max and now - oldest < self._ttl:
                break
            del self._ids[oldest_id]


def sample_key(sample: Sample) -> bytes:
    # Turns of one conversation stay in one partition, in order. Everything else is keyed by its own
    # id: keying by route+model would put a single-model service on a single partition (one busy
    # worker, the rest idle), and a redelivered duplicate still lands where the original did.
    conversation = sample.metadata.get("conversation_id")
    if conversation:
        return str(conversation).encode()
    return (sample.id or f"{sample.route}|{sample.model}").encode()


class KafkaSampleSink:
    name = "kafka"
    # Only redacted samples leave this host (and samples never carry headers).
    raw = False

    def __init__(
        self,
        cfg: KafkaSection,
        metrics: Metrics,
        *,
        topic: str | None = None,
        key: Callable[[Any], bytes] = sample_key,
        produced: Any = None,
        dropped: Any = None,
        track_depth: bool = True,
    ) -> None:
        """`topic`, `key` and the counters default to the samples'; shadow evaluation reuses the
        sink for pair records (`kafka.pairs_topic`) with its own counters."""
        check_codec(cfg.compression)
        quiet_kafka_logs()
        self._cfg = cfg
        self._topic = topic or cfg.samples_topic
        self._key = key
        self._max = cfg.max_buffered
        self._timeout_s = cfg.delivery_timeout_ms / 1000.0
        # (when handed over, sample): waiting for a producer, oldest first.
        self._pending: collections.deque[tuple[float, Sample]] = collections.deque()
        self._outstanding = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._closed = False
        self._producer: Any = None
        kafka = metrics.group(KafkaMetrics)
        self._produced = produced if produced is not None else kafka.kafka_produced
        self._dropped = dropped if dropped is not None else kafka.kafka_dropped
        self._last_warn = 0.0
        if track_depth:
            kafka.kafka_buffer_depth.set_function(lambda: self._outstanding)
        self._thread = threading.Thread(target=self._run, name="llmwatch-kafka", daemon=True)
        self._thread.start()

    @property
    def outstanding(self) -> int:
        return self._outstanding

    @property
    def connected(self) -> bool:
        return self._producer is not None

    def write(self, samples: Sequence[Sample]) -> int:
        """Buffer samples for sending; how many were refused (counted in `llmwatch_kafka_dropped_total`)."""
        self._expire()
        now = time.monotonic()
        with self._lock:
            room = 0 if self._closed else max(self._max - self._outstanding, 0)
            accepted = samples[:room]
            self._outstanding += len(accepted)
            self._pending.extend((now, s) for s in accepted)
        lost = len(samples) - len(accepted)
        if lost:
            self._dropped.labels(reason="closed" if self._closed else "buffer_full").inc(lost)
        if accepted:
            self._wake.set()
        return lost

    def _expire(self) -> None:
        """Give up samples that waited here past `delivery_timeout_ms` (counted `delivery_timeout`)."""
        cutoff = time.monotonic() - self._timeout_s
        expired = 0
        with self._lock:
            while self._pending and self._pending[0][0] < cutoff:
                self._pending.popleft()
                expired += 1
            self._outstanding -= expired
        if expired:
            self._dropped.labels(reason="delivery_timeout").inc(expired)
            now = time.monotonic()
            if now - self._last_warn > _WARN_EVERY_S:
                self._last_warn = now
                log.warning(
                    "kafka_samples_expired",
                    samples=expired,
                    delivery_timeout_ms=self._cfg.delivery_timeout_ms,
                    buffered=self._outstanding,
                )

    # --- sender thread ------------------------------------------------------------------------

    def _connect(self) -> Any:
        from kafka import KafkaProducer

        backoff = 0.5
        failures = 0
        while not self._closing.is_set():
            self._expire()
            try:
                producer = KafkaProducer(**producer_settings(self._cfg))
            except Exception as exc:
                failures += 1
                if failures == 1 or time.monotonic() - self._last_warn > _WARN_EVERY_S:
                    self._last_warn = time.monotonic()
                    log.warning(
                        "kafka_unreachable",
                        bootstrap_servers=self._cfg.bootstrap_servers,
                        security_protocol=self._cfg.security_protocol,
                        attempts=failures,
                        buffered=self._outstanding,
                        error=repr(exc),
                    )
                self._closing.wait(backoff)
                # Back off, but come round often enough to expire what waited too long.
                backoff = min(backoff * 2, 5.0, max(self._timeout_s, 0.5))
                continue
            if self._closed:  # close() gave up waiting for this connection attempt
                producer.close(timeout=0)
                return None
            log.info(
                "kafka_connected",
                bootstrap_servers=self._cfg.bootstrap_servers,
                topic=self._topic,
                compression=self._cfg.compression,
            )
            return producer
        return None

    def _run(self) -> None:
        producer = self._connect()
        if producer is None:
            return
        self._producer = producer
        while True:
            self._wake.wait(0.2)
            self._wake.clear()
            self._expire()
            while True:
                with self._lock:
                    if not self._pending:
                        break
                    _, sample = self._pending.popleft()
                self._send(producer, sample)
            if self._closing.is_set() and not self._pending:
                return

    def _send(self, producer: Any, sample: Sample) -> None:
        try:
            future = producer.send(self._topic, key=self._key(sample), value=sample.to_json())
        except Exception as exc:  # no metadata within max_block_ms, record too large, producer closed
            self._settle("send_failed", exc)
            return
        future.add_callback(self._acked)
        future.add_errback(self._failed)

    # Callbacks run on kafka-python's IO thread: keep them to a counter update.
    def _acked(self, _metadata: Any) -> None:
        with self._lock:
            if self._closed:
                return
            self._outstanding -= 1
        self._produced.inc()

    def _failed(self, exc: BaseException) -> None:
        self._settle("delivery_failed", exc)

    def _settle(self, reason: str, exc: BaseException) -> None:
        with self._lock:
            if self._closed:
                return
            self._outstanding -= 1
        self._dropped.labels(reason=reason).inc()
        now = time.monotonic()
        if now - self._last_warn > _WARN_EVERY_S:
            self._last_warn = now
            log.warning(
                "kafka_delivery_failed", reason=reason, topic=self._topic, buffered=self._outstanding, error=repr(exc)
            )

    # --- shutdown -----------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Send what is buffered and wait for acknowledgements (bounded); count the rest as `closed`."""
        deadline = time.monotonic() + timeout
        self._closing.set()
        self._wake.set()
        self._thread.join(max(timeout, 0.1))
        producer = self._producer
        if producer is not None:
            try:
                producer.flush(timeout=max(deadline - time.monotonic(), 0.1))
            except Exception as exc:  # KafkaTimeoutError: the broker is away; those samples are lost
                log.warning("kafka_flush_incomplete", buffered=self._outstanding, error=repr(exc))
        with self._lock:
            self._closed = True
            lost = self._outstanding
            self._outstanding = 0
            self._pending.clear()
        if lost:
            self._dropped.labels(reason="closed").inc(lost)
        if producer is not None:
            try:
                producer.close(timeout=1)
            except Exception as exc:
                log.warning("kafka_close_failed", error=repr(exc))


def create_topics(
    target: KafkaSection | Sequence[str], partitions: dict[str, int], *, replication_factor: int = 1
) -> None:
    """Create topics that do not exist yet, with the partition count given, on the broker of
    `target`: a `kafka` section (its security settings included) or plaintext HOST:PORTs.

    Create them before any client touches them: brokers that auto-create topics (tansu always
    does, Kafka by default) would otherwise make them with their own default partition count,
    and the partition count is the most scorer workers that can share the load.
    """
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    cfg = target if isinstance(target, KafkaSection) else KafkaSection(bootstrap_servers=list(target))
    quiet_kafka_logs()
    admin = KafkaAdminClient(**connection_settings(cfg), client_id="llmwatch-admin")
    try:
        for name, count in partitions.items():
            try:
                admin.create_topics([NewTopic(name, num_partitions=count, replication_factor=replication_factor)])
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


# --- the component ---------------------------------------------------------------------------


def _check(ctx: Context, kafka: KafkaSection) -> None:
    if kafka.enabled:
        require("kafka", "kafka.enabled", "set kafka.enabled: false")


def _create(ctx: Context, kafka: KafkaSection) -> Component | None:
    if not kafka.enabled:
        return None
    # In addition to local scoring, unless `scoring.enabled: false` (scorer workers then do it all).
    sink = KafkaSampleSink(kafka, ctx.metrics)
    ctx.add_sink(sink)  # the pipeline writes to it and closes it
    return Passive(sink)


KAFKA = Factory("kafka", "exporter", KafkaSection, _create, metrics=(KafkaMetrics,), check=_check)
