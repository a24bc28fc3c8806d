"""Answer (and prompt) embeddings kept beside a scores file, so that `baseline freeze` and `drift` of scored
samples do not run the embedding model again.

`llmwatch score --out scores.jsonl` writes `scores.jsonl.embeddings.npz` (for a directory of
scores: `DIR/embeddings.npz`): per sample id, the answer's vector and a hash of the answer text
it was computed from. A reader takes a vector only when the id and the text hash both match and
the cache was made with the same model setting (fp32 or int8); anything else is embedded again.
A missing, unreadable or foreign cache is never an error: it only costs the time it saves.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from array import array
from pathlib import Path
from typing import IO, Iterator

import numpy as np
import structlog

from llmwatch.core.jsonio import atomic_writer, make_dirs

log = structlog.get_logger(__name__)

FORMAT = "llmwatch.embeddings/v1"
# Prompt vectors share the file under this prefix of the sample id (drift's prompt matching and
# clusters); a reader that does not know them never looks them up.
PROMPT_PREFIX = "prompt:"


def cache_path(scores_path: str | os.PathLike[str]) -> Path:
    path = Path(scores_path)
    return path / "embeddings.npz" if path.is_dir() else path.with_name(path.name + ".embeddings.npz")


def text_key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def write_cache(path: Path, entries: dict[str, tuple[str, np.ndarray]], *, quantized: bool) -> None:
    """Atomically and privately (0600, like every data file: it holds a vector per answer), never through a link."""
    ids = list(entries)
    vectors = np.stack([entries[i][1] for i in ids]).astype(np.float32) if ids else np.zeros((0, 384), dtype=np.float32)
    with atomic_writer(path) as fh:
        np.savez(
            fh,
            format=np.array(FORMAT),
            quantized=np.array(quantized),
            ids=np.array(ids, dtype=str),
            keys=np.array([entries[i][0] for i in ids], dtype=str),
            vectors=vectors,
        )


def read_cache(path: Path, *, quantized: bool) -> dict[str, tuple[str, np.ndarray]]:
    if not path.is_file():
        return {}
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["format"]) != FORMAT or bool(data["quantized"]) != quantized:
                log.info("embedding_cache_not_used", path=str(path), reason="other format or model setting")
                return {}
            vectors = data["vectors"]
            return {str(i): (str(k), vectors[n]) for n, (i, k) in enumerate(zip(data["ids"], data["keys"]))}
    except (OSError, ValueError, KeyError) as exc:
        log.warning(
            "embedding_cache_unreadable",
            path=str(path),
            error=type(exc).__name__,
            fix="delete it; the embeddings are computed again",
        )
        return {}


def _id_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


class _StringColumn:
    """Strings appended to a private temporary file (UTF-32, numpy's `U` layout), 4 bytes of length each in memory."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "xb", opener=_private)
        self.path = path
        self.lengths = array("I")
        self.width = 1  # np.array([], dtype=str) is '<U1', as `np.savez` wrote an empty cache

    def append(self, value: str) -> None:
        data = value.encode("utf-32-le", "surrogatepass")
        self._fh.write(data)
        self.lengths.append(len(data) // 4)
        self.width = max(self.width, len(data) // 4)

    def finish(self) -> None:
        self._fh.close()

    def width_of(self, order: np.ndarray | None) -> int:
        """The `U` width of the rows written (of `order` only, when given: as wide as the dict's)."""
        if order is None or not len(order):
            return self.width
        return max(1, int(np.frombuffer(self.lengths, dtype=np.uint32)[order].max()))

    def rows(self, order: np.ndarray | None) -> Iterator[np.ndarray]:
        """The column as `<U{width}` arrays of `_WRITE_CHUNK` rows, in file order or in `order`."""
        lengths = np.frombuffer(self.lengths, dtype=np.uint32).astype(np.int64)
        dtype = np.dtype(f"<U{self.width_of(order)}")
        with open(self.path, "rb") as fh:
            if order is None:
                for start in range(0, len(lengths), _WRITE_CHUNK):
                    part = lengths[start : start + _WRITE_CHUNK]
                    data = fh.read(int(part.sum()) * 4)
                    ends = np.cumsum(part) * 4
                    yield np.array(
                        [data[e - 4 * n : e].decode("utf-32-le", "surrogatepass") for e, n in zip(ends, part)],
                        dtype=dtype,
                    )
            else:
                offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])) * 4
                fd = fh.fileno()
                for start in range(0, len(order), _WRITE_CHUNK):
                    part = order[start : start + _WRITE_CHUNK]
                    yield np.array(
                        [
                            os.pread(fd, int(lengths[r]) * 4, int(offsets[r])).decode("utf-32-le", "surrogatepass")
                            for r in part
                        ],
                        dtype=dtype,
                    )


def _private(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)


class CacheWriter:
    """The cache written as scoring goes, never held whole (issue 29).

    `write_cache` needs every vector in a dict until the end: at a million samples (an answer
    and a prompt vector each) about 3 GB. Here each entry is appended to private temporary files
    beside the cache (the vectors as raw float32 rows, ids and text hashes as UTF-32 strings),
    keeping 16 bytes an entry in memory; `close` assembles the same `.npz` that `write_cache`
    writes (the same members, dtypes and row order) through the atomic writer, so the cache file
    is either the previous one or the whole new one, never half. As with the dict, an id added
    twice keeps its first row and its last vector and text hash.
    """

    def __init__(self, path: Path, *, quantized: bool) -> None:
        self.path = path
        self.quantized = quantized
        make_dirs(path.parent)
        self._dir = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".parts", dir=path.parent))  # 0700
        self._ids = _StringColumn(self._dir / "ids")
        self._keys = _StringColumn(self._dir / "keys")
        self._vectors = open(self._dir / "vectors", "xb", opener=_private)
        self._hashes = array("Q")
        self.dim: int | None = None

    def __len__(self) -> int:
        return len(self._hashes)

    def add(self, key: str, text_hash: str, vector: np.ndarray) -> None:
        row = np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
        if self.dim is None:
            self.dim = len(row)
        elif len(row) != self.dim:
            raise ValueError(f"a vector of {len(row)} values in a cache of {self.dim}")
        self._vectors.write(row.astype("<f4", copy=False).tobytes())
        self._ids.append(key)
        self._keys.append(text_hash)
        self._hashes.append(_id_hash(key))

    def close(self) -> None:
        """Write the cache at `path` (atomically, 0600) and remove the temporary files."""
        try:
            self._vectors.close()
            self._ids.finish()
            self._keys.finish()
            id_rows, value_rows = _first_rows_last_values(np.frombuffer(self._hashes, dtype=np.uint64))
            n = len(self._hashes) if id_rows is None else len(id_rows)
            dim = self.dim or 384
            with atomic_writer(self.path) as fh, zipfile.ZipFile(fh, mode="w", compression=zipfile.ZIP_STORED) as zf:
                _write_member(zf, "format", np.array(FORMAT))
                _write_member(zf, "quantized", np.array(self.quantized))
                _write_column(zf, "ids", self._ids, n, id_rows)
                _write_column(zf, "keys", self._keys, n, value_rows)
                with zf.open("vectors.npy", "w", force_zip64=True) as out:
                    _write_header(out, np.dtype("<f4"), (n, dim))
                    with open(self._dir / "vectors", "rb") as src:
                        if value_rows is None:
                            while chunk := src.read(_COPY_BYTES):
                                out.write(chunk)
                        else:
                            for row in value_rows:
                                out.write(os.pread(src.fileno(), dim * 4, int(row) * dim * 4))
        finally:
            self.abort()

    def abort(self) -> None:
        """Remove the temporary files (the cache at `path` is left as it was)."""
        for fh in (self._vectors, self._ids._fh, self._keys._fh):
            fh.close()
        shutil.rmtree(self._dir, ignore_errors=True)


# Rows of ids or text hashes assembled at a time, and bytes of vectors copied at a time, when the
# cache is written: bounded whatever the number of entries (a few hundred KB each).
_WRITE_CHUNK = 4096
_COPY_BYTES = 1 << 20


def _first_rows_last_values(hashes: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """For ids added more than once, as a dict keeps them: each id's first row, with its last row's
    value; (None, None) when every id is there once (the rows are written as they are)."""
    if not len(hashes):
        return None, None
    order = np.argsort(hashes, kind="stable")
    ordered = hashes[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    if len(starts) == len(hashes):
        return None, None
    ends = np.concatenate((starts[1:], [len(hashes)])) - 1
    first, last = order[starts], order[ends]
    by_first = np.argsort(first, kind="stable")
    return first[by_first], last[by_first]


def _write_header(out: IO[bytes], dtype: np.dtype, shape: tuple[int, ...]) -> None:
    # The header `np.save` writes for such an array (format 1.0 while it fits, as it chooses).
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(out, header)
    except ValueError:
        np.lib.format.write_array_header_2_0(out, header)


def _write_member(zf: zipfile.ZipFile, name: str, value: np.ndarray) -> None:
    with zf.open(name + ".npy", "w", force_zip64=True) as out:
        np.lib.format.write_array(out, value, allow_pickle=False)


def _write_column(zf: zipfile.ZipFile, name: str, column: _StringColumn, n: int, rows: np.ndarray | None) -> None:
    with zf.open(name + ".npy", "w", force_zip64=True) as out:
        _write_header(out, np.dtype(f"<U{column.width_of(rows)}"), (n,))
        for chunk in column.rows(rows):
            out.write(chunk.tobytes())


def _npy_header(fh) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        raise ValueError(f"npy format {version}")
    if fortran or dtype.hasobject:
        raise ValueError("not a C-ordered plain array")
    return shape, dtype


class CacheIndex:
    """The cache read row by row, for a window streamed in bounded memory (issue 29).

    `read_cache` builds a dict with a Python string pair and a vector per entry: at a million
    samples (answer and prompt vectors: two million entries of 384 float32) that is over 3 GB.
    Here the ids and text hashes are kept as 64-bit hashes in arrays (24 bytes an entry) and a
    vector is read from the file only when asked for (`np.savez` stores its members uncompressed,
    so a row is at a fixed offset). A vector is returned only when the id and the text hash match,
    as with `read_cache`.
    """

    def __init__(
        self, path: Path, hashes: np.ndarray, rows: np.ndarray, keys: np.ndarray, start: int, dim: int
    ) -> None:
        self.path = path
        self._hashes = hashes  # sorted id hashes
        self._rows = rows  # the row of each sorted hash
        self._keys = keys  # text hash of each row
        self._start = start  # file offset of row 0 of the vectors
        self.dim = dim
        self._fd = os.open(path, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self._hashes)

    def get(self, key: str, text_hash: str) -> np.ndarray | None:
        if not len(self._hashes):
            return None
        h = np.uint64(_id_hash(key))
        at = int(np.searchsorted(self._hashes, h))
        if at >= len(self._hashes) or self._hashes[at] != h:
            return None
        row = int(self._rows[at])
        if int(self._keys[row]) != int(text_hash, 16):
            return None
        size = self.dim * 4
        data = os.pread(self._fd, size, self._start + row * size)
        if len(data) != size:
            return None
        return np.frombuffer(data, dtype="<f4").copy()

    def close(self) -> None:
        os.close(self._fd)


# Rows of ids and text hashes read at a time while indexing: bounded whatever the cache's size.
_INDEX_CHUNK = 65536


def open_cache(path: Path, *, quantized: bool) -> CacheIndex | None:
    """A `CacheIndex` of the cache at `path`; None when there is none or it cannot be used (never an error)."""
    import zipfile

    if not path.is_file():
        return None
    try:
        with zipfile.ZipFile(path) as zf:
            with zf.open("format.npy") as fh:
                fmt = str(np.lib.format.read_array(fh))
            with zf.open("quantized.npy") as fh:
                same_setting = bool(np.lib.format.read_array(fh)) == quantized
            if fmt != FORMAT or not same_setting:
                log.info("embedding_cache_not_used", path=str(path), reason="other format or model setting")
                return None
            hashes = _read_column(zf, "ids.npy", _id_hash)
            keys = _read_column(zf, "keys.npy", lambda k: int(k, 16))
            info = zf.getinfo("vectors.npy")
            if info.compress_type != zipfile.ZIP_STORED:
                raise ValueError("compressed vectors")
            header_offset = info.header_offset
        with open(path, "rb") as raw:
            raw.seek(header_offset)
            local = raw.read(30)
            if local[:4] != b"PK\x03\x04":
                raise ValueError("no local file header")
            raw.seek(
                header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
            )
            shape, dtype = _npy_header(raw)
            start = raw.tell()
        if dtype != np.dtype("<f4") or len(shape) != 2 or shape[0] != len(hashes) or len(keys) != len(hashes):
            raise ValueError("unexpected vectors array")
        order = np.argsort(hashes, kind="stable")
        return CacheIndex(path, hashes[order], order.astype(np.int64), keys, start, int(shape[1]))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        log.warning(
            "embedding_cache_unreadable",
            path=str(path),
            error=type(exc).__name__,
            fix="delete it; the embeddings are computed again",
        )
        return None


def _read_column(zf, name: str, convert) -> np.ndarray:
    """A string array member as uint64 values of `convert`, read `_INDEX_CHUNK` rows at a time."""
    with zf.open(name) as fh:
        shape, dtype = _npy_header(fh)
        if len(shape) != 1 or dtype.kind != "U":
            raise ValueError(f"{name}: not a string column")
        out = np.empty(shape[0], dtype=np.uint64)
        done = 0
        while done < shape[0]:
            n = min(_INDEX_CHUNK, shape[0] - done)
            chunk = np.frombuffer(fh.read(n * dtype.itemsize), dtype=dtype, count=n)
            out[done : done + n] = [convert(str(v)) for v in chunk]
            done += n
        return out
