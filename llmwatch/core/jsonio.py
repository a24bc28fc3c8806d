"""JSON Lines files: where samples (and later scores) are kept on the embedded default.

One writer per record kind appends to `<dir>/<prefix>-<UTC date>-<n>.jsonl`, starting a new file
at midnight or when the current one passes `max_file_bytes`. A batch of records goes to the file
in unbuffered writes of whole lines. When a write fails (disk full, I/O error) the file is cut
back to its last whole line and `JsonlWriteError` says how many lines of the batch were kept and
how many lost; the next batch writes again, so writing resumes by itself when space returns.
Only a process killed mid-write can leave a torn last line; readers skip that one with a warning.

Whole files that must never be seen half-written (scores of `llmwatch score`, baselines, regress
runs, review tasks) go through `atomic_writer` / `atomic_write_bytes`.

Data files hold prompts and answers, so they are private by default: files are created 0600 in
directories created 0700 (`files.mode`, see `set_file_mode`). Every writer of data files
(samples, scores, baselines, reports, review files) creates them through the helpers here.
"""

from __future__ import annotations

import errno
import glob
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, TypeVar, overload

import orjson
import structlog
from pydantic import BaseModel, ValidationError

from llmwatch.core.errors import describe_validation_error
from llmwatch.core.records import RecordError, Sample

M = TypeVar("M", bound=BaseModel)


class JsonlWriteError(OSError):
    """A batch was only partly written: `written` lines are in the file, `lost` are not (no torn line)."""

    def __init__(self, cause: OSError, written: int, lost: int) -> None:
        super().__init__(cause.errno, f"{cause.strerror or cause}; {lost} line(s) not written", cause.filename)
        self.written = written
        self.lost = lost


_file_mode = 0o600


def set_file_mode(mode: int) -> None:
    """Mode of data files created from now on in this process; directories get the matching x bits."""
    global _file_mode
    if mode & ~0o666:
        raise ValueError(f"file mode {mode:#o} has bits beyond rw-rw-rw-")
    _file_mode = mode


def file_mode() -> int:
    return _file_mode


def dir_mode(mode: int | None = None) -> int:
    mode = _file_mode if mode is None else mode
    # Whoever may read the files may list the directory: r -> r-x, w -> -wx.
    return 0o700 | mode | ((mode & 0o044) >> 2) | ((mode & 0o022) >> 1)


def make_dirs(directory: str | os.PathLike[str], mode: int | None = None) -> Path:
    """`mkdir -p` where each directory this call creates gets `dir_mode` (despite the umask);
    directories that already exist keep their mode (they may be shared, like /tmp)."""
    path = Path(directory)
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    wanted = dir_mode(mode)
    for d in reversed(missing):
        try:
            d.mkdir(mode=wanted)
        except FileExistsError:
            continue  # made by someone else in the meantime: not ours to chmod
        os.chmod(d, wanted)
    return path


def open_private(
    path: str | os.PathLike[str], append: bool = False, mode: int | None = None, *, buffered: bool = True
) -> BinaryIO:
    """Open a data file for binary writing; a file this call creates gets `file_mode` exactly.
    Unbuffered (`buffered=False`): each write is one system call whose count is what reached the file."""
    wanted = _file_mode if mode is None else mode
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | getattr(os, "O_CLOEXEC", 0)
    existed = os.path.exists(path)
    fd = os.open(path, flags, wanted)
    try:
        if not existed:
            os.fchmod(fd, wanted)  # the umask may have taken bits the config asked for
        return os.fdopen(fd, "ab" if append else "wb", buffering=-1 if buffered else 0)
    except BaseException:
        os.close(fd)
        raise


class JsonlWriter:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        prefix: str,
        *,
        max_file_bytes: int = 100 * 1024 * 1024,
        file_mode: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.prefix = prefix
        self.max_file_bytes = max_file_bytes
        self._file_mode = file_mode
        self._fh: BinaryIO | None = None
        self._day = ""
        # Bytes of whole lines in the current file: where a failed write is cut back to.
        self._size = 0
        make_dirs(self.directory, file_mode)

    def _next_path(self, day: str) -> Path:
        n = 0
        while True:
            path = self.directory / f"{self.prefix}-{day}-{n:04d}.jsonl"
            if not path.exists() or path.stat().st_size < self.max_file_bytes:
                return path
            n += 1

    def _ensure_file(self) -> BinaryIO:
        day = time.strftime("%Y%m%d", time.gmtime())
        if self._fh is not None and day == self._day and self._size < self.max_file_bytes:
            return self._fh
        self.close()
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._next_path(day)
        # Unbuffered: what a write call reports written is in the file, so a failure can be undone exactly.
        fh = open_private(path, append=True, mode=self._file_mode, buffered=False)
        self._fh = fh
        self._day = day
        self._size = os.fstat(fh.fileno()).st_size
        return fh

    def _write_chunk(self, fh: BinaryIO, lines: list[bytes]) -> None:
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


@overload
def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Sample]: ...
@overload
def iter_jsonl(path: str | os.PathLike[str], model: type[M]) -> Iterator[M]: ...
def iter_jsonl(path: str | os.PathLike[str], model: type[BaseModel] = Sample) -> Iterator[BaseModel]:
    """Yield validated records of a JSON Lines file; raise `RecordError` naming the bad line.

    Blank lines are skipped. A last line without its newline that does not parse is a torn
    write (the writer was killed mid-line): it is skipped with a warning naming the file and
    line, since the record was never complete. A bad line anywhere else is refused.
    """
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                # Only the last line can lack its newline.
                if not raw.endswith(b"\n"):
                    structlog.get_logger(__name__).warning(
                        "torn_last_line_skipped",
                        file=str(path),
                        line=lineno,
                        bytes=len(raw),
                        fix="a writer was killed mid-line; the record was never complete",
                    )
                    return
                raise RecordError(
                    f"{path}:{lineno}: not valid JSON ({exc}); each line must be one JSON object"
                ) from None
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
def read_records(
    source: str | os.PathLike[str], model: type[BaseModel] = Sample, prefix: str = "samples"
) -> Iterator[BaseModel]:
    """Validated records of a file, or of every `<prefix>-*.jsonl` file of a directory in order."""
    for path in jsonl_paths(source, prefix):
        yield from iter_jsonl(path, model)


@contextmanager
def atomic_writer(path: str | os.PathLike[str], *, read_only: bool = False) -> Iterator[BinaryIO]:
    """A private binary file that appears at `path` complete or not at all.

    Written as `<name>.partial` in the same directory (so the rename cannot cross file systems),
    flushed to disk, then renamed over `path`: a reader, or a crash, never sees half a file.
    If the block raises, the partial file is removed and `path` is left as it was. The file gets
    the data-file mode (`set_file_mode`, 0600 by default); `read_only` drops its write bits
    (baselines are immutable).
    """
    target = Path(path)
    make_dirs(target.parent)
    tmp = target.with_name(target.name + ".partial")
    try:
        with open_private(tmp) as fh:
            os.fchmod(fh.fileno(), _file_mode)  # a stale .partial left by a crash keeps no old mode
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if read_only:
            os.chmod(tmp, _file_mode & 0o444)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_directory(target.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, read_only: bool = False) -> Path:
    with atomic_writer(path, read_only=read_only) as fh:
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
