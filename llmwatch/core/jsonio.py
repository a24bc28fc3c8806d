"""JSON Lines files: where samples (and later scores) are kept on the embedded default.

One writer per record kind appends to `<dir>/<prefix>-<UTC date>-<n>.jsonl`, starting a new file
at midnight or when the current one passes `max_file_bytes`. A batch of records goes to the file
in unbuffered writes of whole lines. When a write fails (disk full, I/O error) the file is cut
back to its last whole line and `JsonlWriteError` says how many lines of the batch were kept and
how many lost; the next batch writes again, so writing resumes by itself when space returns.
Only a process killed mid-write can leave a torn last line; readers skip that one with a warning.
"""

from __future__ import annotations

import errno
import glob
import io
import os
import time
from pathlib import Path
from typing import Iterable, Iterator

from pydantic import BaseModel

from llmwatch.core.records import RecordError, Sample, iter_jsonl


class JsonlWriteError(OSError):
    """A batch was only partly written: `written` lines are in the file, `lost` are not (no torn line)."""

    def __init__(self, cause: OSError, written: int, lost: int) -> None:
        super().__init__(cause.errno, f"{cause.strerror or cause}; {lost} line(s) not written", cause.filename)
        self.written = written
        self.lost = lost


class JsonlWriter:
    def __init__(self, directory: str | os.PathLike[str], prefix: str, *, max_file_bytes: int = 100 * 1024 * 1024) -> None:
        self.directory = Path(directory)
        self.prefix = prefix
        self.max_file_bytes = max_file_bytes
        self._fh: io.FileIO | None = None
        self._day = ""
        # Bytes of whole lines in the current file: where a failed write is cut back to.
        self._size = 0
        self.directory.mkdir(parents=True, exist_ok=True)

    def _next_path(self, day: str) -> Path:
        n = 0
        while True:
            path = self.directory / f"{self.prefix}-{day}-{n:04d}.jsonl"
            if not path.exists() or path.stat().st_size < self.max_file_bytes:
                return path
            n += 1

    def _ensure_file(self) -> io.FileIO:
        day = time.strftime("%Y%m%d", time.gmtime())
        if self._fh is not None and day == self._day and self._size < self.max_file_bytes:
            return self._fh
        self.close()
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._next_path(day)
        # Unbuffered: what a write call reports written is in the file, so a failure can be undone exactly.
        fh = io.FileIO(path, "ab")
        self._fh = fh
        self._day = day
        self._size = os.fstat(fh.fileno()).st_size
        return fh

    def _write_chunk(self, fh: io.FileIO, lines: list[bytes]) -> None:
        """Write `lines` whole; on failure cut the file back to the last whole line and raise."""
        data = memoryview(b"".join(lines))
        done = 0
        try:
            while done < len(data):
                n = fh.write(data[done:])
                if not n:
                    raise OSError(errno.EIO, "write returned 0 bytes")
                done += n
        except OSError as exc:
            kept, kept_bytes = 0, 0
            for line in lines:
                if kept_bytes + len(line) > done:
                    break
                kept += 1
                kept_bytes += len(line)
            try:
                os.ftruncate(fh.fileno(), self._size + kept_bytes)
                self._size += kept_bytes
            except OSError:
                # Could not even cut back: drop the handle so the next batch reopens and the
                # size is read afresh from the file.
                self.close()
            raise _Partial(exc, kept) from exc
        self._size += done

    def write_lines(self, lines: Iterable[bytes]) -> int:
        """Append `lines` (each without its newline); the count written, or `JsonlWriteError`."""
        pending = [line + b"\n" for line in lines]
        written = 0
        try:
            while pending:
                fh = self._ensure_file()
                # Up to the rotation threshold in one chunk; at least one line per file.
                room = self.max_file_bytes - self._size
                take, taken_bytes = 0, 0
                for line in pending:
                    if take and taken_bytes + len(line) > room:
                        break
                    take += 1
                    taken_bytes += len(line)
                self._write_chunk(fh, pending[:take])
                written += take
                del pending[:take]
        except _Partial as exc:
            written += exc.kept
            raise JsonlWriteError(exc.cause, written, len(pending) - exc.kept) from exc.cause
        except OSError as exc:  # opening or rotating the file failed
            raise JsonlWriteError(exc, written, len(pending)) from exc
        return written

    def close(self) -> None:
        if self._fh is not None:
            fh, self._fh = self._fh, None
            try:
                fh.close()
            except OSError:
                pass


class _Partial(Exception):
    def __init__(self, cause: OSError, kept: int) -> None:
        self.cause = cause
        self.kept = kept


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
