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
