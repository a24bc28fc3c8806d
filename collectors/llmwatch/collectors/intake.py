"""The intake of every call llmwatch sees, and the consumer side of the sample queue.

`Intake` is the one way in, for the proxy and for the OTLP receiver alike: it resolves the model
version, takes the sampling decision, enqueues what is selected and counts it
(`llmwatch_samples_total{reason}` once per selected call, `llmwatch_samples_dropped_total
{reason="queue_full"}` when the bounded queue refuses). It never blocks: a full queue drops.

`Pipeline` is the other end: one daemon thread drains the queue in batches. Building the
`Sample` record and redacting it happen there, not on the hot path. A sink that raises loses
that batch for that sink only: the loss is counted under
`llmwatch_samples_dropped_total{reason="sink_error"}` and logged (at a bounded rate), and the
other sinks and the proxy go on. A sink that refuses part of a batch (disk full, scorer too far
behind) counts the refused samples itself, with its own reason, and returns how many it refused:
per sink, samples selected = written + dropped.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import structlog

from llmwatch.collectors.receivers.proxy.capture import CallFacts, Exchange, to_sample
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.metrics import MetricGroup, Metrics, counter, gauge
from llmwatch.core.queue import BoundedQueue
from llmwatch.core.records import Sample
from llmwatch.core.secrets import SecretMask
from llmwatch.scorers.pipeline.redaction import redact_sample
from llmwatch.scorers.pipeline.sampler import Sampler

log = structlog.get_logger(__name__)


class PipelineMetrics(MetricGroup):
    """The sample pipeline: samples kept, queued, handed to sinks or lost."""

    samples = counter(
        "llmwatch_samples", "Samples selected for storage and scoring, by why they were kept.", ["reason"]
    )
    samples_dropped = counter(
        "llmwatch_samples_dropped",
        "Samples selected but lost before a sink took them, by reason (queue_full, sink_error, write_error, scoring_queue_full, ...).",
        ["reason"],
    )
    samples_written = counter(
        "llmwatch_samples_written",
        "Samples each sink accepted (written to disk, handed to the scorer, buffered for Kafka).",
        ["sink"],
    )
    queue_depth = gauge("llmwatch_queue_depth", "Samples waiting in the in-process queue.")


@dataclass(slots=True)
class Captured:
    """What the hot path enqueues: raw capture plus the facts it already computed for metrics."""

    exchange: Exchange
    facts: CallFacts
    model_version: str | None
    cost_usd: float | None
    reason: str
    price_row: str | None = None  # the price row cost_usd was computed by


@dataclass(frozen=True, slots=True)
class Admission:
    """What the intake did with one call: `reason` is None when sampling skipped it."""

    reason: str | None
    queued: bool


# Most calls are not sampled: one shared (frozen) answer for them, not a frozen dataclass built
# per call (its `__init__` sets each field through `object.__setattr__`).
_SKIPPED = Admission(None, False)


class Intake:
    def __init__(
        self, queue: BoundedQueue[Any], sampler: Sampler, metrics: Metrics, *, default_version: str | None
    ) -> None:
        self.queue = queue
        self.sampler = sampler
        self.metrics = metrics.group(PipelineMetrics)
        self._default_version = default_version
        # Set by the runtime (drift.version_change.enabled): told the version of every successful call.
        self.sentinel: Any = None

    def model_version(self, declared: str | None, response_model: str | None, request_model: str | None) -> str | None:
        """The version a call is labelled with: declared (header, span attribute) -> `model_version.default` -> response model -> request model."""
        return declared or self._default_version or response_model or request_model

    def served(
        self, model: str | None, version: str | None, response_model: str | None, fingerprint: str | None
    ) -> None:
        """One successful call's served version, for the version-change sentinel (O(1), never raises)."""
        if self.sentinel is not None:
            self.sentinel.observe(model, version, response_model, fingerprint)

    def admit(
        self,
        key: str,
        route: str,
        model: str | None,
        *,
        error: bool,
        latency_ms: float,
        build: Callable[[str], Captured | Sample],
    ) -> Admission:
        """Decide on one call and, when it is selected, queue `build(reason)` and count it."""
        reason = self.sampler.decide(key, route, model, error=error, latency_ms=latency_ms)
        if reason is None:
            return _SKIPPED
        m = self.metrics
        m.samples.labels(reason=reason).inc()
        if self.queue.offer(build(reason)):
            return Admission(reason, True)
        m.samples_dropped.labels(reason="queue_full").inc()
        return Admission(reason, False)


class Sink(Protocol):
    name: str
    # Sinks that store or ship samples get redacted copies; a sink that only scores in memory
    # on this host (`raw = True`) sees the original text, so that e.g. `pii_leak` can find PII.
    raw: bool

    def write(self, samples: Sequence[Sample]) -> int | None:
        """Take the batch; None (or 0) when all of it was accepted, else how many were refused
        (the sink has counted those itself, with a reason: `llmwatch_samples_dropped_total`, or
        its own counter such as `llmwatch_kafka_dropped_total`)."""
        ...

    def close(self) -> None: ...


class Pipeline:
    def __init__(
        self,
        queue: BoundedQueue[Any],
        sinks: Sequence[Sink],
        metrics: Metrics,
        *,
        redact: Callable[[Any], Any] | None,
        secrets: SecretMask | None = None,
        batch_size: int = 256,
        min_batch: int = 1,
        linger_s: float = 0.0,
    ) -> None:
        self.queue = queue
        self.sinks = list(sinks)
        self.metrics = metrics.group(PipelineMetrics)
        self._redact = redact
        # The credentials llmwatch sends the upstream, masked in every sample whether redaction is
        # on or off: an upstream quoting them back ("Incorrect API key provided: ...") in a shape no
        # redaction pattern knows would otherwise store them (llmwatch.core.secrets).
        self._secrets = secrets if secrets else None
        self._batch_size = batch_size
        # A batch gathers up to `min_batch` samples, for at most `linger_s` (see BoundedQueue).
        self._min_batch = min_batch
        self._linger_s = linger_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llmwatch-pipeline", daemon=True)
        self.processed = 0
        self._warn = RateLimitedLog()
        self._sink_warn = {sink.name: RateLimitedLog() for sink in self.sinks}

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def build(self, item: Captured | Sample) -> Sample:
        if isinstance(item, Sample):
            return item
        return to_sample(
            item.exchange,
            item.facts,
            model_version=item.model_version,
            cost_usd=item.cost_usd,
            reason=item.reason,
            price_row=item.price_row,
        )

    def unsecret(self, sample: Sample) -> Sample:
        """`sample` with the known secrets masked in what the upstream or the client wrote; the very
        sample when none occurs (the usual case: one serialisation of each body)."""
        mask = self._secrets
        if mask is None:
            return sample
        update = {}
        for field in ("request", "response", "error_type", "finish_reason", "metadata", "capture_notes"):
            value = getattr(sample, field)
            masked = mask.value(value)
            if masked is not value:
                update[field] = masked
        return sample.model_copy(update=update) if update else sample

    def redacted(self, sample: Sample) -> Sample:
        # A Redactor applies the whole policy: field rules, header metadata, the client's
        # request id, and scores_only mode; any other callable only masks the bodies.
        return redact_sample(self._redact, sample)

    def _run(self) -> None:
        while True:
            batch = self.queue.get_batch(
                self._batch_size, timeout=0.2, min_items=self._min_batch, linger_s=self._linger_s, flush=self._stop
            )
            if batch:
                try:
                    self._process(batch)
                except Exception as exc:
                    # This thread is the only consumer: were it to die, every later sample would
                    # pile up unseen. The batch is lost and counted; the thread goes on.
                    self.metrics.samples_dropped.labels(reason="pipeline_error").inc(len(batch))
                    self._warn(log.error, "pipeline_batch_failed", samples=len(batch), error=repr(exc))
            elif self._stop.is_set():
                return

    def _process(self, batch: list[Captured | Sample]) -> None:
        samples = []
        for item in batch:
            try:
                samples.append(self.build(item))
            except Exception:
                self.metrics.samples_dropped.labels(reason="build_error").inc()
                # Only a Captured can fail here: a submitted Sample is passed through as it is.
                request_id = item.exchange.request_id if isinstance(item, Captured) else item.id
                log.exception("sample_build_failed", request_id=request_id)
        if self._secrets is not None:
            samples = [self.unsecret(s) for s in samples]
        redacted: list[Sample] | None = None
        for sink in self.sinks:
            if getattr(sink, "raw", False):
                batch_for_sink = samples
            else:
                if redacted is None:
                    redacted = [self.redacted(s) for s in samples]
                batch_for_sink = redacted
            try:
                refused = sink.write(batch_for_sink) or 0
            except Exception as exc:
                self.metrics.samples_dropped.labels(reason="sink_error").inc(len(samples))
                self._sink_warn[sink.name](
                    log.error, "sink_write_failed", sink=sink.name, samples=len(samples), error=repr(exc)
                )
                continue
            if len(samples) > refused:
                self.metrics.samples_written.labels(sink=sink.name).inc(len(samples) - refused)
        self.processed += len(batch)

    def abandon(self) -> None:
        """The stop is given up while `close` runs in another thread (a second Ctrl-C): the sinks
        that wait on a child (`abandon`, the scorer's) stop waiting and kill it now."""
        for sink in self.sinks:
            give_up = getattr(sink, "abandon", None)
            if give_up is not None:
                give_up()

    def close(self, timeout: float = 5.0) -> None:
        """Drain what is queued (bounded by `timeout`), then close the sinks."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                log.error("sink_close_failed", sink=sink.name, error=repr(exc))
