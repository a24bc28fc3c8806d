"""Prompt sensitivity's clustering by meaning holds the clusters' leaders, not every phrasing's vector (issue 29).

The streamed `report` with embeddings on clustered each route's distinct phrasings by embedding them
all in one call and keeping the vectors (a float64 copy, its normalised copy and a leaders matrix
as large: about 10 KB a phrasing, 5 GB at a million samples). `_clusters` now embeds 2,048 texts at
a time, drops each block's vectors once its rows are placed and keeps only the leaders, as float32;
past a cap of leaders a phrasing that matches none is a cluster of its own, counted, so the memory
holds whatever the input. tracemalloc traces numpy's buffers too.
"""

from __future__ import annotations

import hashlib
import tracemalloc
from datetime import datetime, timezone
from typing import Callable

import numpy as np
import pytest

import llmwatch.scorers.drift.prompt_space  # noqa: F401  (imported by the first clustering: not in the measure)
from llmwatch.core.records import Sample
from llmwatch.scorers.evaluation import sensitivity
from llmwatch.scorers.evaluation.matrix import ScoredSample

DIM = 384
# Per extra phrasing: its cluster index in the result (an int and a list slot) and allocator noise.
# Holding the vectors cost about 10,000 bytes a phrasing.
MAX_BYTES_PER_PHRASING = 300


def _unit(seed_text: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(seed_text.encode(), digest_size=8).digest(), "little")
    v = np.random.default_rng(seed).standard_normal(DIM)
    return v / np.linalg.norm(v)


def rephrasing_embedder(texts: list[str]) -> np.ndarray:
    """`r{request} p{phrasing}`: the request's direction plus a little noise of the phrasing's own
    (cosine about 0.98 within a request, about 0 across); the same text, the same vector, whatever the batch."""
    out = np.empty((len(texts), DIM), dtype=np.float32)
    for i, t in enumerate(texts):
        request = next(w for w in t.split() if w.startswith("r"))  # the report passes "user: r.. p.."
        out[i] = _unit(request) + 0.1 * _unit(t)
    return out


def distinct_embedder(texts: list[str]) -> np.ndarray:
    """A random direction per text: every phrasing is its own request."""
    return np.asarray([_unit(t) for t in texts], dtype=np.float32)


def peak_bytes(texts: list[str], embed: Callable[[list[str]], np.ndarray], **kw: int) -> tuple[int, list[int], int]:
    tracemalloc.start()
    try:
        ids, unled = sensitivity._clusters(texts, embed, 0.9, **kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, ids, unled


def texts_of(n: int, requests: int) -> list[str]:
    return [f"r{i % requests} p{i}" for i in range(n)]


def test_clustering_grows_with_the_clusters_not_the_phrasings() -> None:
    small, large = texts_of(4_096, 200), texts_of(12_288, 200)
    p_small, ids_small, _ = peak_bytes(small, rephrasing_embedder)
    p_large, ids_large, unled = peak_bytes(large, rephrasing_embedder)

    # Each request's phrasings are one cluster, in the order the requests first appear.
    assert ids_large == [i % 200 for i in range(12_288)] and ids_small == ids_large[:4_096] and unled == 0
    per_phrasing = (p_large - p_small) / (len(large) - len(small))
    assert per_phrasing < MAX_BYTES_PER_PHRASING, f"{per_phrasing:.0f} bytes per extra phrasing"


def test_past_the_leader_cap_a_new_phrasing_is_a_cluster_of_its_own_and_memory_stays_bounded() -> None:
    small, large = texts_of(4_096, 10**9), texts_of(12_288, 10**9)  # every phrasing a request of its own
    p_small, _, unled_small = peak_bytes(small, distinct_embedder, max_leaders=500)
    p_large, ids, unled = peak_bytes(large, distinct_embedder, max_leaders=500)

    assert ids == list(range(12_288)), "clusters of their own, leaders or not"
    assert (unled_small, unled) == (4_096 - 500, 12_288 - 500)
    per_phrasing = (p_large - p_small) / (len(large) - len(small))
    assert per_phrasing < MAX_BYTES_PER_PHRASING, f"{per_phrasing:.0f} bytes per extra phrasing"


def test_a_rephrasing_of_a_phrasing_past_the_cap_cannot_join_it_and_the_cap_still_gathers_its_leaders() -> None:
    # Leaders: r0..r2 (cap 3). Then r3 twice: past the cap neither leads, so they are two clusters.
    texts = ["r0 a", "r1 a", "r2 a", "r3 a", "r0 b", "r3 b", "r2 b"]
    ids, unled = sensitivity._clusters(texts, rephrasing_embedder, 0.9, max_leaders=3)
    assert ids == [0, 1, 2, 3, 0, 4, 2] and unled == 2


def test_blocks_of_embedding_give_the_clusters_of_one_call() -> None:
    texts = texts_of(700, 90) + texts_of(300, 10**9)
    calls: list[int] = []

    def counted(batch: list[str]) -> np.ndarray:
        calls.append(len(batch))
        return rephrasing_embedder(batch)

    one_call, _ = sensitivity._clusters(texts, counted, 0.9, embed_block=len(texts))
    in_blocks, _ = sensitivity._clusters(texts, counted, 0.9, embed_block=128)
    assert in_blocks == one_call and calls == [1_000] + [128] * 7 + [104]


def row(version: str, text: str, score: float) -> ScoredSample:
    sample = Sample.model_construct(
        id=f"{version}-{text}",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        route="/v1/chat/completions",
        operation="chat",
        request={"messages": [{"role": "user", "content": text}]},
        response=None,
        conversation_id=None,
        turn=1,
    )
    return ScoredSample(sample, "general", version, score, score >= 0.5)


def test_the_figure_says_how_many_phrasings_came_past_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [row("A", f"r{c} p{p}", 0.2 * p) for c in range(6) for p in range(3)]
    (plain,) = sensitivity.prompt_sensitivity(rows, embed=rephrasing_embedder)
    assert plain.clusters == 6 and "cap" not in plain.method

    monkeypatch.setattr(sensitivity, "MAX_LEADERS", 4)
    (capped,) = sensitivity.prompt_sensitivity(rows, embed=rephrasing_embedder)
    # Two requests come after the four leaders: their six phrasings are clusters of one, left out.
    assert capped.clusters == 4 and capped.phrasings == 12
    assert "6 phrasings matched none of the first 4 leaders" in capped.method
