"""The files exporter: samples to rotating JSON Lines under `<data_dir>/samples`."""

from __future__ import annotations

from typing import Sequence

from llmwatch.core.jsonio import JsonlWriter
from llmwatch.core.records import Sample


class FileSink:
    name = "files"
    # Files outlive the process and may be copied anywhere: they only ever get redacted samples.
    raw = False

    def __init__(self, directory: str, max_file_bytes: int) -> None:
        self._writer = JsonlWriter(directory, "samples", max_file_bytes=max_file_bytes)

    def write(self, samples: Sequence[Sample]) -> None:
        self._writer.write_lines(s.to_json() for s in samples)

    def close(self) -> None:
        self._writer.close()
