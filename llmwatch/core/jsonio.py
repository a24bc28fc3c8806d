"""JSON Lines files: where samples (and later scores) are kept on the embedded default.

One writer per record kind appends to `<dir>/<prefix>-<UTC date>-<n>.jsonl`, starting a new file
at midnight or when the current one passes `max_file_bytes`. Each record is one `write` of a
complete line, flushed per batch, so a reader never sees half a record unless the process is
killed mid-write; readers report such a torn last line instead of skipping it silently.

Whole files that must never be seen half-written (scores of `llmwatch score`, baselines, regress
runs, review tasks) go through `atomic_writer` / `atomic_write_bytes`.
"""

from __future__ import annotations

import glob
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, TypeVar, overload

import orjson
from pydantic import BaseModel, ValidationError

from llmwatch.core.errors import describe_validation_error
from llmwatch.core.records import RecordError, Sample

M = TypeVar("M", bound=BaseModel)


class JsonlWriter:
    def __init__(self, directory: str | os.PathLike[str], prefix: str, *, max_file_bytes: int = 100 * 1024 * 1024) -> None:
        self.directory = Path(directory)
        self.prefix = prefix
        self.max_file_bytes = max_file_bytes
        self._fh: BinaryIO | None = None
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


@overload
def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Sample]: ...
@overload
def iter_jsonl(path: str | os.PathLike[str], model: type[M]) -> Iterator[M]: ...
def iter_jsonl(path: str | os.PathLike[str], model: type[BaseModel] = Sample) -> Iterator[BaseModel]:
    """Yield validated records of a JSON Lines file; raise `RecordError` naming the bad line.

    Blank lines are skipped. A final line without a newline that does not parse
    is treated as a torn write (the writer was killed mid-line) only if it is the
    last line; it is reported like any other bad line so that nothing is lost silently.
    """
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise RecordError(f"{path}:{lineno}: not valid JSON ({exc}); each line must be one JSON object") from None
            if not isinstance(data, dict):
                raise RecordError(f"{path}:{lineno}: expected a JSON object, got {type(data).__name__}")
            try:
                yield model.model_validate(data)
            except ValidationError as exc:
                raise RecordError(f"{path}:{lineno}: {describe_validation_error(exc)}") from None


@overload
def read_records(source: str | os.PathLike[str], *, prefix: str = "samples") -> Iterator[Sample]: ...
@overload
def read_records(source: str | os.PathLike[str], model: type[M], prefix: str = "samples") -> Iterator[M]: ...
def read_records(source: str | os.PathLike[str], model: type[BaseModel] = Sample, prefix: str = "samples") -> Iterator[BaseModel]:
    """Validated records of a file, or of every `<prefix>-*.jsonl` file of a directory in order."""
    for path in jsonl_paths(source, prefix):
        yield from iter_jsonl(path, model)


@contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file that appears at `path` complete or not at all.

    Written as `<name>.partial` in the same directory (so the rename cannot cross file systems),
    flushed to disk, then renamed over `path`: a reader, or a crash, never sees half a file.
    If the block raises, the partial file is removed and `path` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".partial")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_directory(target.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_writer(path) as fh:
        fh.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is; not every platform or file
    # system lets a directory be opened for that, and the file itself is already safe.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
