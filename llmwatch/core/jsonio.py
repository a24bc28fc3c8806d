"""JSON Lines files: where samples (and later scores) are kept on the embedded default.

One writer per record kind appends to `<dir>/<prefix>-<UTC date>-<n>.jsonl`, starting a new file
at midnight or when the current one passes `max_file_bytes`. A batch of records goes to the file
in unbuffered writes of whole lines. When a write fails (disk full, I/O error) the file is cut
back to its last whole line and `JsonlWriteError` says how many lines of the batch were kept and
how many lost; the next batch writes again, so writing resumes by itself when space returns.
Only a process killed mid-write can leave a torn last line; readers skip that one with a warning.

Whole JSON and YAML documents (baselines, regress runs, manifests, review keys, the config file)
are read by `read_document` / `read_model`, one wording for every way a file can be wrong.

Whole files that must never be seen half-written (scores of `llmwatch score`, baselines, regress
runs, review tasks) go through `atomic_writer` / `atomic_write_bytes`.

Data files hold prompts and answers, so they are private by default: files are created 0600 in
directories created 0700 (`files.mode`, see `set_file_mode`). Every writer of data files
(samples, scores, baselines, reports, review files) creates them through the helpers here.
"""

from __future__ import annotations

import codecs
import errno
import glob
import os
import re
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Literal, TypeVar, overload

import orjson
import structlog
import yaml
from pydantic import BaseModel, ValidationError

from llmwatch.core.errors import describe_validation_error
from llmwatch.core.links import refuse_link
from llmwatch.core.pairs import PAIR_SCHEMA
from llmwatch.core.records import SAMPLE_SCHEMA, RecordError, Sample
from llmwatch.core.scores import SCORE_SCHEMA

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


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


# Never through a link, never onto a FIFO or device: a data file is a regular file this process
# opens itself. O_NOFOLLOW refuses a symlink planted at the name (its target would be written and
# chmodded); O_NONBLOCK makes opening a planted FIFO fail at once (ENXIO) instead of hanging.
_NO_LINKS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _named(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """ELOOP from O_NOFOLLOW reads "too many levels of symbolic links": say what it means."""
    if exc.errno == errno.ELOOP and os.path.islink(path):
        return OSError(
            errno.ELOOP,
            "a symbolic link; llmwatch never writes data through a link (remove it or give another path)",
            str(path),
        )
    return exc


def _open_regular(path: str | os.PathLike[str], flags: int, mode: int) -> tuple[int, bool]:
    """(fd, created) for `path`, opened without following a link; refuses anything but a regular file."""
    try:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | _NO_LINKS, mode)
            created = True
        except FileExistsError:
            fd = os.open(path, (flags & ~os.O_CREAT) | _NO_LINKS | os.O_NONBLOCK)
            created = False
    except OSError as exc:
        raise _named(exc, path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file; llmwatch writes data only to regular files", str(path))
        if not created:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def open_private(
    path: str | os.PathLike[str], append: bool = False, mode: int | None = None, *, buffered: bool = True
) -> BinaryIO:
    """Open a data file for binary writing; a file this call creates gets `file_mode` exactly.
    Unbuffered (`buffered=False`): each write is one system call whose count is what reached the file.
    A symbolic link (or FIFO, device) at `path` is refused (OSError: ELOOP / EINVAL), never followed."""
    wanted = _file_mode if mode is None else mode
    fd, created = _open_regular(path, os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC), wanted)
    try:
        if created:
            os.fchmod(fd, wanted)  # the umask may have taken bits the config asked for
        return os.fdopen(fd, "ab" if append else "wb", buffering=-1 if buffered else 0)
    except BaseException:
        os.close(fd)
        raise


def private_path(path: str | os.PathLike[str], mode: int | None = None) -> None:
    """Give an existing data file the data-file mode, through a descriptor (never through a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NO_LINKS | os.O_NONBLOCK)
    except OSError as exc:
        raise _named(exc, path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.fchmod(fd, _file_mode if mode is None else mode)
    finally:
        os.close(fd)


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
            try:
                st = os.lstat(path)  # the name itself: a link planted there is not ours to follow
            except FileNotFoundError:
                return path
            if stat.S_ISREG(st.st_mode) and st.st_size < self.max_file_bytes:
                return path
            if not stat.S_ISREG(st.st_mode):
                structlog.get_logger(__name__).warning(
                    "data_file_name_skipped",
                    path=str(path),
                    why="not a regular file (a link?); writing to the next name",
                )
            n += 1

    def _ensure_file(self) -> BinaryIO:
        day = time.strftime("%Y%m%d", time.gmtime())
        if self._fh is not None and day == self._day and self._size < self.max_file_bytes:
            return self._fh
        self.close()
        make_dirs(self.directory, self._file_mode)  # removed while running: made again, private
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


def _has_jsonl(source: str | os.PathLike[str], prefix: str) -> bool:
    return bool(glob.glob(str(Path(source) / f"{prefix}-*.jsonl")) or glob.glob(str(Path(source) / "*.jsonl")))


def jsonl_paths(source: str | os.PathLike[str], prefix: str = "samples") -> list[str]:
    """A file, or every `<prefix>-*.jsonl` (then any `*.jsonl`) in a directory, oldest first."""
    path = Path(source)
    if path.is_file():
        return [str(path)]
    if path.is_dir():
        files = sorted(glob.glob(str(path / f"{prefix}-*.jsonl"))) or sorted(glob.glob(str(path / "*.jsonl")))
        if not files:
            raise RecordError(
                f"{source}: no {prefix}-*.jsonl or *.jsonl files in this directory (nor a Parquet dataset of {prefix})"
            )
        from llmwatch.core import parquet

        for name in files:
            refuse_link(name, source)  # a folder's files are its own (llmwatch.core.links)
        # Read as JSON Lines, a folder's Parquet part files were skipped without a word: lost records.
        # Only the Parquet files of this kind count: a data directory's samples-*.jsonl beside its
        # scores/ (or pairs/) part files was refused as "both JSON Lines and Parquet".
        if found := parquet.dataset_files(path, prefix, skip=set(parquet.MODELS) - {prefix}):
            raise RecordError(
                f"{source}: holds both JSON Lines ({len(files)} file(s), e.g. {Path(files[0]).name}) and Parquet "
                f"files ({len(found)}, e.g. {found[0].relative_to(path)}); give a folder of one kind (move the "
                f".jsonl files out, or the Parquet dataset)"
            )
        return files
    if path.exists():
        # `--in <(zcat x.jsonl.gz)`, `--in /dev/stdin`: there, but a pipe was "no such file or directory".
        raise RecordError(
            f"{source}: not a regular file or directory (a pipe or a device); the offline commands read "
            "their input more than once: save it to a file first (e.g. zcat x.jsonl.gz > x.jsonl)"
        )
    # os.path's expanduser, not pathlib's: `~name` of an unknown user stays as it is (pathlib raised).
    expanded = os.path.expanduser(source)
    if str(source).startswith("~") and expanded != str(source) and os.path.exists(expanded):
        # `--samples=~/data` (one word): the shell leaves that `~` alone, and so does llmwatch.
        raise RecordError(
            f"{source}: no such file or directory; the shell did not expand this `~` (as in --samples=~/x): "
            f"give {expanded}, or the option and the path as two words"
        )
    raise RecordError(f"{source}: no such file or directory")


# The records llmwatch writes, by the schema each names, as a reader calls them.
_KINDS = {SAMPLE_SCHEMA: "samples", SCORE_SCHEMA: "scores", PAIR_SCHEMA: "shadow pairs"}


def records_kind(path: str | os.PathLike[str]) -> str | None:
    """The kind of records ("samples", "scores", "shadow pairs") a JSON Lines file holds, by its
    first line's schema, else None: for readers of whole documents given one by mistake."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20)
        data = orjson.loads(first)
    except (OSError, orjson.JSONDecodeError):
        return None
    schema = data.get("schema") if isinstance(data, dict) else None
    return _KINDS.get(schema) if isinstance(schema, str) else None


def _other_kind_of_file(data: dict[str, Any], model: type[BaseModel]) -> str | None:
    """Say so when a record is another kind of llmwatch record than `model` reads.

    `report --samples llmwatch-data/scores` said "unsupported schema 'llmwatch.score/v1' (omit the
    field or convert the file)" and listed six missing fields: the fix is the other folder.
    """
    found = data.get("schema")
    field = model.model_fields.get("schema_")
    wanted = field.default if field is not None else None
    if found == wanted or found not in _KINDS or wanted not in _KINDS:
        return None
    return (
        f"field 'schema' is '{found}': this is a file of {_KINDS[found]}, not of {_KINDS[wanted]} ({wanted}); check which folder "
        "went to which option (a data directory holds samples/, scores/ and pairs/, e.g. --samples "
        "llmwatch-data/samples --scores llmwatch-data/scores, --pairs llmwatch-data/pairs)"
    )


# The magic bytes of the compressed files an export is likely to be (gzip, zstd, bzip2, xz).
_COMPRESSED = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zX": "xz"}


def _compression(raw: bytes) -> str | None:
    """The compression `raw` starts with ("gzip", ...), or None."""
    return next((name for magic, name in _COMPRESSED.items() if raw.startswith(magic)), None)


def _not_utf8(raw: bytes) -> str | None:
    """Where `raw` stops being UTF-8, as "line L, column C (byte 0xNN)" (the column counts characters,
    as an editor does), or None: orjson says "str is not valid UTF-8: surrogates not allowed" at
    column 1 whatever the column, PyYAML "unacceptable character #x00e9" on two lines."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = raw[: exc.start]
        line = head.count(b"\n") + 1
        column = len(head[head.rfind(b"\n") + 1 :].decode("utf-8", errors="replace")) + 1
        return f"line {line}, column {column} (byte 0x{raw[exc.start]:02x})"
    return None


_UTF8_FIX = "save it as UTF-8 (e.g. iconv -f <its encoding> -t utf-8)"

# The field name before a value, at the end of a line's text up to that value.
_FIELD_BEFORE = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*-?$')


def _non_finite(text: str, pos: int) -> str | None:
    """For a line orjson refused at `pos` (a character offset): "field 'x' is NaN, ..." when the value
    there is a NaN or an Infinity. Python's json.dumps writes them (allow_nan defaults to True), JSON
    has neither, and orjson said only "unexpected character ... column 110"."""
    start = pos - 1 if pos and text[pos - 1] == "-" else pos
    token = next((t for t in ("-Infinity", "Infinity", "NaN") if text.startswith(t, start)), None)
    if token is None:
        return None
    field = _FIELD_BEFORE.search(text, 0, pos)
    name = f"field '{field.group(1)}'" if field else "a value"
    return (
        f"{name} is {token}, which JSON does not have (Python's json.dumps writes it unless "
        "allow_nan=False); write null or a finite number"
    )


@overload
def iter_jsonl(path: str | os.PathLike[str], *, folder: str | os.PathLike[str] | None = None) -> Iterator[Sample]: ...
@overload
def iter_jsonl(
    path: str | os.PathLike[str], model: type[M], *, folder: str | os.PathLike[str] | None = None
) -> Iterator[M]: ...
def iter_jsonl(
    path: str | os.PathLike[str], model: type[BaseModel] = Sample, *, folder: str | os.PathLike[str] | None = None
) -> Iterator[BaseModel]:
    """Yield validated records of a JSON Lines file; raise `RecordError` naming the bad line.

    Blank lines are skipped. A last line without its newline that does not parse is a torn
    write (the writer was killed mid-line): it is skipped with a warning naming the file and
    line, since the record was never complete. A bad line anywhere else is refused.
    A file of a dataset `folder` is opened without following a link (one swapped in after the
    listing is refused too); a file the user named alone is followed, as `cat` does.
    """
    with _open_for_reading(path, folder) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                # Windows tools (PowerShell 5's Out-File -Encoding utf8, Notepad) start UTF-8 text with
                # a BOM; JSON allows a reader to ignore it, and the file was refused at line 1.
                raw = raw[len(codecs.BOM_UTF8) :]
            if not raw.strip():
                continue
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                packed = _compression(raw)
                if lineno == 1 and packed:
                    # Read as text, a .jsonl.gz was a "torn last line" (no newline byte in it)
                    # or "not valid JSON (str is not valid UTF-8 ...)".
                    raise RecordError(
                        f"{path}: a {packed}-compressed file, not JSON Lines; decompress it first "
                        "(e.g. gunzip -k, zstd -d)"
                    ) from None
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
                if where := _not_utf8(raw):
                    # A Latin-1 or UTF-16 export: the line is text, in another encoding.
                    raise RecordError(
                        f"{path}:{lineno}: not UTF-8 text at {where.split(', ', 1)[1]}; {_UTF8_FIX}"
                    ) from None
                if why := _non_finite(raw.decode("utf-8"), exc.pos):
                    raise RecordError(f"{path}:{lineno}: {why}") from None
                raise RecordError(
                    f"{path}:{lineno}: not valid JSON ({exc}); each line must be one JSON object"
                ) from None
            if not isinstance(data, dict):
                raise RecordError(f"{path}:{lineno}: expected a JSON object, got {type(data).__name__}")
            try:
                yield model.model_validate(data)
            except ValidationError as exc:
                # Looked at only for a record that failed: each record kind refuses the others'
                # schemas, so a file of another kind always lands here.
                why = _other_kind_of_file(data, model) or describe_validation_error(exc)
                raise RecordError(f"{path}:{lineno}: {why}") from None


def _open_for_reading(path: str | os.PathLike[str], folder: str | os.PathLike[str] | None) -> BinaryIO:
    if folder is None:
        return open(path, "rb")
    try:
        fd = os.open(path, os.O_RDONLY | _NO_LINKS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            refuse_link(path, folder)
        raise
    return os.fdopen(fd, "rb")


@overload
def read_records(source: str | os.PathLike[str], *, prefix: str = "samples") -> Iterator[Sample]: ...
@overload
def read_records(source: str | os.PathLike[str], model: type[M], prefix: str = "samples") -> Iterator[M]: ...
def read_records(
    source: str | os.PathLike[str], model: type[BaseModel] = Sample, prefix: str = "samples"
) -> Iterator[BaseModel]:
    """Validated records of a file, or of every `<prefix>-*.jsonl` file of a directory in order, or
    of a Parquet dataset directory (llmwatch.core.parquet: `<dir>/<prefix>/date=.../...parquet`)."""
    from llmwatch.core import parquet

    if parquet.is_url(source):  # s3://, gs://, file://: a Parquet dataset through pyarrow's filesystems
        yield from parquet.read_dataset(source, model, prefix)
        return
    if parquet.is_parquet_file(source) or Path(source).is_dir() and not _has_jsonl(source, prefix):
        if parquet.is_dataset(source, prefix):
            yield from parquet.read_dataset(source, model, prefix)
            return
    folder = source if Path(source).is_dir() else None
    for path in jsonl_paths(source, prefix):
        yield from iter_jsonl(path, model, folder=folder)


def batches(records: Iterable[T], size: int) -> Iterator[list[T]]:
    """`records` in lists of `size` (the last one shorter, none empty), each a new list: what the
    readers that score or embed a stream of records hand on at once."""
    batch: list[T] = []
    for record in records:
        batch.append(record)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


# The errors of a write that the disk (or a quota) refused: said with the output's name.
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}


@contextmanager
def atomic_writer(path: str | os.PathLike[str], *, read_only: bool = False) -> Iterator[BinaryIO]:
    """A private binary file that appears at `path` complete or not at all.

    Written to a new temporary file in the same directory (so the rename cannot cross file
    systems), flushed to disk, then renamed over `path`: a reader, or a crash, never sees half a
    file. The temporary name is unpredictable and created with O_EXCL | O_NOFOLLOW (mkstemp):
    nothing planted in the directory (a symlink at `<name>.partial`) is ever opened, written or
    chmodded; the rename replaces a link at `path` itself, not its target. If the block raises,
    the temporary file is removed and `path` is left as it was. The file gets the data-file mode
    (`set_file_mode`, 0600 by default); `read_only` drops its write bits (baselines are immutable).
    """
    target = Path(path)
    make_dirs(target.parent)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), _file_mode & 0o444 if read_only else _file_mode)
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        # A write's ENOSPC names no file: stderr said only "[Errno 28] No space left on device".
        raise OSError(
            exc.errno,
            f"{exc.strerror}: cannot write {target}; free space there or write it elsewhere "
            "(a file already at that name is left as it was)",
        ) from None
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
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


# --- whole JSON / YAML documents ------------------------------------------------------------------

DocumentFormat = Literal["json", "yaml"]


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping.

    PyYAML keeps the last of two equal keys: a config with `scoring:` twice (a section pasted at the
    end of the file) ran with the second alone, the first's settings dropped without a word. YAML
    itself says keys are unique. A merge (`<<: *defaults`) overriding a key stays allowed."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    first: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        try:
            earlier = first.setdefault(key, key_node)
        except TypeError:  # an unhashable key: the constructor below says what is wrong with it
            continue
        if earlier is not key_node:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key '{key}' given twice (first at line {earlier.start_mark.line + 1}); merge the two into one",
                key_node.start_mark,
            )
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_document(
    path: str | os.PathLike[str],
    *,
    what: str,
    error: Callable[[str], Exception],
    fmt: DocumentFormat = "json",
    missing: str | None = None,
    fix: str | None = None,
) -> Any:
    """The parsed content of one JSON (or YAML) file; `error(message)` raised for anything else.

    The one reader of whole documents (baselines, regress runs, manifests, review keys, the
    config file, schema files), so that every one says the same things the same way, naming the
    file and, for a parse error, the line and column:

        <what> <path> does not exist[; <missing>]
        <what> <path> cannot be read: <reason>
        <what> <path> is not valid JSON at line 3, column 7: <problem>[; <fix>]
    """
    raw = read_file_bytes(path, what=what, error=error, missing=missing)
    return parse_document(raw, name=f"{what} {Path(path)}", error=error, fmt=fmt, fix=fix)


def read_file_bytes(
    path: str | os.PathLike[str],
    *,
    what: str,
    error: Callable[[str], Exception],
    missing: str | None = None,
    directory: str | None = None,
) -> bytes:
    """The bytes of one file the user named; `error(message)` naming it for anything else:

        <what> <path> does not exist[; <missing>]
        <what> <path> is a directory, not a file[; <directory>, else <missing>]
        <what> <path> cannot be read: <reason>

    A directory is named as such: a newcomer who gives `--config /etc/llmwatch` or `--suite eval`
    was told "cannot be read: Is a directory" or "[Errno 21] Is a directory: 'eval'", no fix.
    """
    source = Path(path)
    name = f"{what} {source}"
    try:
        return source.read_bytes()
    except FileNotFoundError:
        raise error(f"{name} does not exist" + (f"; {missing}" if missing else "")) from None
    except IsADirectoryError:
        hint = directory or missing
        raise error(f"{name} is a directory, not a file" + (f"; {hint}" if hint else "")) from None
    except OSError as exc:
        raise error(f"{name} cannot be read: {exc.strerror or exc}") from None


def parse_document(
    raw: bytes,
    *,
    name: str,
    error: Callable[[str], Exception],
    fmt: DocumentFormat = "json",
    fix: str | None = None,
) -> Any:
    """The parsing half of `read_document`: `<name> is not valid JSON at line L, column C: ...`."""
    tail = f"; {fix}" if fix else ""
    kind = "YAML" if fmt == "yaml" else "JSON"
    # Said before parsing, on one line: PyYAML's own message for either took two lines, orjson's
    # ("str is not valid UTF-8: surrogates not allowed") named neither the cause nor the fix.
    if packed := _compression(raw):
        raise error(f"{name} is a {packed}-compressed file, not {kind}; decompress it first (e.g. gunzip -k, zstd -d)")
    if where := _not_utf8(raw):
        raise error(f"{name} is not UTF-8 text at {where}; {_UTF8_FIX}")
    if fmt == "yaml":
        try:
            return yaml.load(raw, Loader=_UniqueKeyLoader)  # a SafeLoader: no Python objects
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise error(f"{name} is not valid YAML{where}: {problem}{tail}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise error(f"{name} is not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}{tail}") from None


def check_schema(data: Any, expected: str, *, name: str, kind: str, error: Callable[[str], Exception]) -> None:
    """`data` is an object whose `schema` is `expected`, else `error` naming what was found."""
    if not isinstance(data, dict) or data.get("schema") != expected:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise error(f"{name} is not {kind} (schema {found!r}, expected {expected!r})")


def read_model(
    path: str | os.PathLike[str],
    model: type[M],
    *,
    what: str,
    error: Callable[[str], Exception],
    schema: str | None = None,
    kind: str | None = None,
    missing: str | None = None,
    fix: str | None = None,
) -> M:
    """`read_document`, the `schema` check, then the model's validation, with the same wording."""
    data = read_document(path, what=what, error=error, missing=missing, fix=fix)
    name = f"{what} {Path(path)}"
    if schema is not None:
        check_schema(data, schema, name=name, kind=kind or f"a {schema} document", error=error)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(f"{name}: {describe_validation_error(exc)}" + (f"; {fix}" if fix else "")) from None
