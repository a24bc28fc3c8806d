"""The files exporter: samples to rotating JSON Lines under `<data_dir>/samples`."""

from __future__ import annotations

from typing import Sequence

import structlog

from llmwatch.collectors.intake import PipelineMetrics
from llmwatch.core.component import Component, Context, Factory, Passive
from llmwatch.core.config import FilesSection
from llmwatch.core.jsonio import JsonlWriteError, JsonlWriter
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.metrics import Metrics
from llmwatch.core.records import Sample

log = structlog.get_logger(__name__)


class FileSink:
    name = "files"
    # Files outlive the process and may be copied anywhere: they only ever get redacted samples.
    raw = False

    def __init__(self, directory: str, max_file_bytes: int, metrics: Metrics | None = None) -> None:
        self._writer = JsonlWriter(directory, "samples", max_file_bytes=max_file_bytes)
        self._metrics = metrics.group(PipelineMetrics) if metrics is not None else None
        self._warn = RateLimitedLog()

    def write(self, samples: Sequence[Sample]) -> int | None:
        try:
            self._writer.write_lines(s.to_json() for s in samples)
        except JsonlWriteError as exc:
            # Disk full or an I/O error: the file was cut back to whole lines, the next batch
            # tries again (so writing resumes when space returns), and the loss is counted.
            if self._metrics is not None:
                self._metrics.samples_dropped.labels(reason="write_error").inc(exc.lost)
            self._warn(
                log.error, "samples_write_failed", directory=str(self._writer.directory), lost=exc.lost, error=str(exc)
            )
            return exc.lost
        return None

    def close(self) -> None:
        self._writer.close()


def _create(ctx: Context, files: FilesSection) -> Component | None:
    if not files.enabled:
        return None
    sink = FileSink(str(ctx.setting("data_dir") / "samples"), files.max_file_bytes, ctx.metrics)
    ctx.add_sink(sink)  # the pipeline writes to it and closes it
    return Passive(sink)


FILES = Factory("files", "exporter", FilesSection, _create, metrics=(PipelineMetrics,))
