"""JSON Lines files: where samples (and later scores) are kept on the embedded default.

One writer per record kind appends to `<dir>/<prefix>-<UTC date>-<n>.jsonl`, starting a new file
at midnight or when the current one passes `max_file_bytes`. Each record is one `write` of a
complete line, flushed per batch, so a reader never sees half a record unless the process is
killed mid-write; readers report such a torn last line instead of skipping it silently.

Data files hold prompts and answers, so they are private by default: files are created 0600 in
directories created 0700 (`files.mode`, see `set_file_mode`). Every writer of data files
(samples, scores, baselines, reports, review files) creates them through the helpers here.
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from pydantic import BaseModel

from llmwatch.core.records import RecordError, Sample, iter_jsonl


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


def open_private(path: str | os.PathLike[str], append: bool = False, mode: int | None = None) -> BinaryIO:
    """Open a data file for binary writing; a file this call creates gets `file_mode` exactly."""
    wanted = _file_mode if mode is None else mode
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | getattr(os, "O_CLOEXEC", 0)
    existed = os.path.exists(path)
    fd = os.open(path, flags, wanted)
    try:
        if not existed:
            os.fchmod(fd, wanted)  # the umask may have taken bits the config asked for
        return os.fdopen(fd, "ab" if append else "wb")
    except BaseException:
        os.close(fd)
        raise


def write_private(path: str | os.PathLike[str], data: bytes, *, read_only: bool = False) -> Path:
    """Write `data` to `path` atomically (a `.partial` file, then rename), with the private mode;
    `read_only` drops the write bits afterwards (baselines are immutable)."""
    target = Path(path)
    make_dirs(target.parent)
    tmp = target.with_name(target.name + ".partial")
    try:
        with open_private(tmp) as fh:
            os.fchmod(fh.fileno(), _file_mode)  # a stale .partial left by a crash keeps no old mode
            fh.write(data)
        if read_only:
            os.chmod(tmp, _file_mode & 0o444)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


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
        self._size = 0
        make_dirs(self.directory, file_mode)

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
        self._fh = open_private(path, append=True, mode=self._file_mode)
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
