"""JSON Lines files: where samples (and later scores) are kept on the embedded default.

One writer per record kind appends to `<dir>/<prefix>-<UTC date>-<n>.jsonl`, starting a new file
at midnight or when the current one passes `max_file_bytes`. Each record is one `write` of a
complete line, flushed per batch, so a reader never sees half a record unless the process is
killed mid-write; readers report such a torn last line instead of skipping it silently.
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path
from typing import Iterable, Iterator

from pydantic import BaseModel

from llmwatch.core.records import RecordError, Sample, iter_jsonl


class JsonlWriter:
    def __init__(self, directory: str | os.PathLike[str], prefix: str, *, max_file_bytes: int = 100 * 1024 * 1024) -> None:
        self.directory = Path(directory)
        self.prefix = prefix
        self.max_file_bytes = max_file_bytes
        self._fh = None
        self._day = ""
        self._size = 0
        self.directory.mkdir(parents=True, exist_ok=True)

    def _next_path(self, day: str) -> Path:
        n = 0
        while True:
            path = self.directory / f"{self.prefix}-{day}-{n:04d}.jsonl"
            if not path.exists() or path.stat().st_size < self.max_file_bytes:
                return path
            n += 1

    def _ensure_file(self) -> None:
        day = time.strftime("%Y%m%d", time.gmtime())
        if self._fh is not None and day == self._day and self._size < self.max_file_bytes:
            return
        self.close()
        path = self._next_path(day)
        self._fh = open(path, "ab")
        self._day = day
        self._size = path.stat().st_size

    def write_lines(self, lines: Iterable[bytes]) -> int:
        count = 0
        for line in lines:
            self._ensure_file()
            data = line + b"\n"
            self._fh.write(data)  # type: ignore[union-attr]
            self._size += len(data)
            count += 1
        if self._fh is not None:
            self._fh.flush()
        return count

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def jsonl_paths(source: str | os.PathLike[str], prefix: str = "samples") -> list[str]:
    """A file, or every `<prefix>-*.jsonl` (then any `*.jsonl`) in a directory, oldest first."""
    path = Path(source)
    if path.is_file():
        return [str(path)]
    if path.is_dir():
        files = sorted(glob.glob(str(path / f"{prefix}-*.jsonl"))) or sorted(glob.glob(str(path / "*.jsonl")))
        if not files:
            raise RecordError(f"{source}: no {prefix}-*.jsonl or *.jsonl files in this directory")
        return files
    raise RecordError(f"{source}: no such file or directory")


def read_records(source: str | os.PathLike[str], model: type[BaseModel] = Sample, prefix: str = "samples") -> Iterator[BaseModel]:
    for path in jsonl_paths(source, prefix):
        yield from iter_jsonl(path, model)
