"""A stand-in for the embedding model in unit tests: deterministic vectors, no model files."""

from __future__ import annotations

import hashlib

import numpy as np


class FakeEmbedder:
    """Unit vectors from a hash of the text: the same text gives the same vector whatever the batch."""

    dimension = 384
    texts = 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def encode(self, texts, batch_size: int = 32) -> np.ndarray:
        FakeEmbedder.texts += len(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            if text.strip():
                seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
                v = np.random.default_rng(seed).standard_normal(self.dimension)
                out[i] = v / np.linalg.norm(v)
        return out
