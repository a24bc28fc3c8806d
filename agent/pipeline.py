"""The consumer side of the sample queue: build, redact, hand to sinks, off the event loop.

One daemon thread drains the queue in batches. Building the `Sample` record and redacting it
happen here, not on the hot path. A sink that raises loses that batch for that sink only: the
loss is counted under `llmwatch_samples_dropped_total{reason="sink_error"}` and logged, and the
other sinks and the proxy go on.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import structlog

from agent.metrics import Metrics
from agent.queue import BoundedQueue
from agent.records import Sample
from collectors.files import JsonlWriter
from collectors.proxy_capture import CallFacts, Exchange, to_sample

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class Captured:
    """What the hot path enqueues: raw capture plus the facts it already computed for metrics."""

    exchange: Exchange
    facts: CallFacts
    model_version: str | None
    cost_usd: float | None
    reason: str


class Sink(Protocol):
    name: str

    def write(self, samples: Sequence[Sample]) -> None: ...

    def close(self) -> None: ...


class FileSink:
    name = "files"

    def __init__(self, directory: str, max_file_bytes: int) -> None:
        self._writer = JsonlWriter(directory, "samples", max_file_bytes=max_file_bytes)

    def write(self, samples: Sequence[Sample]) -> None:
        self._writer.write_lines(s.to_json() for s in samples)

    def close(self) -> None:
        self._writer.close()


class Pipeline:
    def __init__(
        self,
        queue: BoundedQueue[Any],
        sinks: Sequence[Sink],
        metrics: Metrics,
        *,
        redact: Callable[[Any], Any] | None,
        batch_size: int = 256,
    ) -> None:
        self.queue = queue
        self.sinks = list(sinks)
        self.metrics = metrics
        self._redact = redact
        self._batch_size = batch_size
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llmwatch-pipeline", daemon=True)
        self.processed = 0

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def build(self, item: Captured) -> Sample:
        sample = to_sample(item.exchange, item.facts, model_version=item.model_version, cost_usd=item.cost_usd, reason=item.reason)
        if self._redact is not None:
            sample.request = self._redact(sample.request)
            sample.response = self._redact(sample.response)
            sample.redacted = True
        return sample

    def _run(self) -> None:
        while True:
            batch = self.queue.get_batch(self._batch_size, timeout=0.2)
            self.metrics.queue_depth.set(self.queue.depth())
            if batch:
                self._process(batch)
            elif self._stop.is_set():
                return

    def _process(self, batch: list[Captured]) -> None:
        samples = []
        for item in batch:
            try:
                samples.append(self.build(item))
            except Exception:
                self.metrics.samples_dropped.labels(reason="build_error").inc()
                log.exception("sample_build_failed", request_id=item.exchange.request_id)
        for sink in self.sinks:
            try:
                sink.write(samples)
                self.metrics.samples_written.labels(sink=sink.name).inc(len(samples))
            except Exception as exc:
                self.metrics.samples_dropped.labels(reason="sink_error").inc(len(samples))
                log.error("sink_write_failed", sink=sink.name, samples=len(samples), error=repr(exc))
        self.processed += len(batch)

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
