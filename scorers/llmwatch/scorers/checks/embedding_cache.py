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
from pathlib import Path

import numpy as np
import structlog

from llmwatch.core.jsonio import atomic_writer

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
