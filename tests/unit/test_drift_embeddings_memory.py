"""`baseline freeze` and `drift` with embeddings on summarise a window without holding it (issue 29).

The drift statistics on embeddings read a bounded number of vectors per route: the answer
centroid (a running sum), 500 answer vectors and the 5,000 rows' prompt vectors with the lowest id
hashes. The streamed summary reads each batch's vectors from the cache beside the scores file (a
row at a time, never the whole file) or embeds them, and drops them once the batch is summarised;
the list-based path held every Sample, every Score and two vectors per sample. A fake,
deterministic embedder stands in for the model: the same text gives the same vector whatever the
batch, so both paths must give exactly the same summary.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.fake_embedder import FakeEmbedder
from helpers.memory import peak_bytes, write_varied_samples

from llmwatch.scorers.checks import embeddings as embeddings_module
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.embedding_cache import cache_path, open_cache
from llmwatch.scorers.checks.offline import load_window, score_files, summarize_window
from llmwatch.scorers.drift.features import summarize

EMBEDDINGS = ScoringSection(embeddings=True)
# The list-based path kept about 30 KB a sample here (Samples, Scores, two vectors, the whole
# cache as a dict); the streamed one a few hundred bytes. 2 KB leaves room for allocator noise.
MAX_BYTES_PER_SAMPLE = 2_000


class NoModel:
    def __init__(self, *a: object, **k: object) -> None:
        raise AssertionError("the embedding model was loaded although every vector was cached")


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory):
    """Per size: the samples file and its scores, scored with embeddings on (the vectors cached beside them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(embeddings_module, "Embedder", FakeEmbedder)
        out = {}
        for n in (1000, 4000):
            d = tmp_path_factory.mktemp(f"n{n}")
            write_varied_samples(d / "samples.jsonl", n, two_routes=True, failures=True, prompt_cycle=300)
            score_files(EMBEDDINGS, str(d / "samples.jsonl"), str(d / "scores.jsonl"), out=open("/dev/null", "w"))
            out[n] = (str(d / "samples.jsonl"), str(d / "scores.jsonl"))
        yield out


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings_module, "Embedder", FakeEmbedder)


def listed(samples: str, scores: str | None, reservoir_size: int = 200):
    """The list-based path: `load_window` (every Sample, Score and vector) then `summarize`."""
    prompts: dict = {}
    items, score_list, vectors, _ = load_window(EMBEDDINGS, samples, scores, None, purpose="the test", prompts=prompts)
    return summarize(items, score_list, vectors, prompt_embeddings=prompts, reservoir_size=reservoir_size)


def dumped(routes) -> dict:
    return {k: v.model_dump() for k, v in routes.items()}


def test_the_cache_is_read_by_row_and_matches_the_dict_reader(windows) -> None:
    _, scores = windows[1000]
    index = open_cache(cache_path(scores), quantized=False)
    assert index is not None
    try:
        # 1,000 answers (less the failed calls) and 1,000 prompts.
        assert len(index) == 1000 - 11 + 1000
        from llmwatch.scorers.checks.embedding_cache import read_cache

        for key, (text_hash, vector) in list(read_cache(cache_path(scores), quantized=False).items())[:50]:
            got = index.get(key, text_hash)
            assert got is not None and np.array_equal(got, vector)
            assert index.get(key, "0" * 16) is None  # another text under the same id: embedded again
        assert index.get("no-such-id", "0" * 16) is None
    finally:
        index.close()
    assert open_cache(cache_path(scores), quantized=True) is None  # an fp32 cache is not an int8 one


def test_streamed_summary_with_cached_vectors_equals_the_list_based_one_without_the_model(
    windows, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, sc = windows[1000]
    monkeypatch.setattr(embeddings_module, "Embedder", NoModel)
    streamed = summarize_window(EMBEDDINGS, s, sc, None, purpose="the test", reservoir_size=200)
    expected = listed(s, sc)
    assert dumped(streamed.routes) == dumped(expected)
    for route in streamed.routes.values():
        assert route.embedding is not None and len(route.embedding.reservoir) > 100
        assert all(row.prompt_space == "minilm" for row in route.rows)  # the prompt vectors reach the rows


def test_streamed_summary_that_scores_and_embeds_now_equals_the_list_based_one(windows, fake_model) -> None:
    s, _ = windows[1000]
    streamed = summarize_window(EMBEDDINGS, s, None, None, purpose="the test", reservoir_size=200)
    assert dumped(streamed.routes) == dumped(listed(s, None))
    assert all(r.embedding is not None for r in streamed.routes.values())


def test_a_vector_missing_from_the_cache_is_embedded_in_its_batch(windows, tmp_path: Path, fake_model) -> None:
    s, sc = windows[1000]
    empty = tmp_path / "scores.jsonl"
    empty.write_bytes(Path(sc).read_bytes())  # the same scores, no cache beside them
    FakeEmbedder.texts = 0
    streamed = summarize_window(EMBEDDINGS, s, str(empty), None, purpose="the test", reservoir_size=200)
    assert FakeEmbedder.texts == (1000 - 11) + 1000  # every answer of a successful call, every prompt
    assert dumped(streamed.routes) == dumped(listed(s, sc))


def test_streamed_summary_with_embeddings_grows_by_a_few_bytes_per_sample(windows, fake_model) -> None:
    # Small reservoirs, full at both sizes: what grows is only per-sample state. One run first, so
    # that imports and first-use caches count in neither peak.
    def streamed(s: str, sc: str) -> None:
        summarize_window(EMBEDDINGS, s, sc, "B", purpose="the test", reservoir_size=200, embedding_reservoir=50)

    streamed(*windows[1000])
    peaks = {n: peak_bytes(lambda s=s, sc=sc: streamed(s, sc)) for n, (s, sc) in windows.items()}
    per_sample = (peaks[4000] - peaks[1000]) / 3000
    assert per_sample < MAX_BYTES_PER_SAMPLE, f"peak Python memory {peaks}: {per_sample:,.0f} bytes per extra sample"


def test_the_bound_catches_the_list_based_path(windows, fake_model) -> None:
    listed(*windows[1000])
    peaks = {n: peak_bytes(lambda s=s, sc=sc: listed(s, sc)) for n, (s, sc) in windows.items()}
    assert (peaks[4000] - peaks[1000]) / 3000 > MAX_BYTES_PER_SAMPLE


def test_a_broken_cache_is_embedded_again_not_an_error(windows, tmp_path: Path, fake_model) -> None:
    s, sc = windows[1000]
    scores = tmp_path / "scores.jsonl"
    scores.write_bytes(Path(sc).read_bytes())
    cache_path(scores).write_bytes(Path(cache_path(sc)).read_bytes()[:5000])  # cut short
    assert open_cache(cache_path(scores), quantized=False) is None
    FakeEmbedder.texts = 0
    streamed = summarize_window(EMBEDDINGS, s, str(scores), None, purpose="the test", reservoir_size=200)
    assert FakeEmbedder.texts == (1000 - 11) + 1000
    assert dumped(streamed.routes) == dumped(listed(s, sc))
