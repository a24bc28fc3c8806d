"""Embeddings are computed once per sample: `score` keeps them beside its scores, and
`baseline freeze` / `drift` of scored files read them instead of running the model again.

The cache is trusted only for the same sample id, the same answer text and the same model
setting; anything else is embedded again, and a broken cache is never an error.
"""

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from llmwatch.agent.components import Config
from llmwatch.core.records import Sample
from llmwatch.scorers.checks import embeddings as embeddings_module
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.embedding_cache import PROMPT_PREFIX, cache_path, read_cache, text_key, write_cache
from llmwatch.scorers.checks.offline import load_window, score_files


def sample(i: int, answer: str) -> Sample:
    return Sample(
        id=f"s{i}",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        route="/v1/chat/completions",
        operation="chat",
        model="m",
        model_version="A",
        status=200,
        latency_ms=100.0,
        request={"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]},
        response={
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]
        },
    )


def write_samples(path: Path, samples: list[Sample]) -> None:
    path.write_bytes(b"".join(s.to_json() + b"\n" for s in samples))


def config(tmp_path: Path, **scoring) -> ScoringSection:
    """The `scoring` section of a config (what offline scoring reads)."""
    return Config.model_validate(
        {"upstream": "http://127.0.0.1:9/", "data_dir": str(tmp_path), "scoring": scoring}
    ).scoring


class NoModel:
    def __init__(self, *a, **k):
        raise AssertionError("the embedding model was loaded although every vector was cached")


def record_embedder(monkeypatch) -> list[list[str]]:
    """Replace the model with one that records the texts it is asked to embed (zero vectors)."""
    asked: list[list[str]] = []

    class Recording:
        def __init__(self, *a, **k):
            pass

        def encode(self, texts):
            asked.append(list(texts))
            return np.zeros((len(texts), 384), dtype=np.float32)

    monkeypatch.setattr(embeddings_module, "Embedder", Recording)
    return asked


def test_cache_round_trip_and_where_it_lives(tmp_path):
    scores = tmp_path / "scores.jsonl"
    assert cache_path(scores) == tmp_path / "scores.jsonl.embeddings.npz"
    assert cache_path(tmp_path) == tmp_path / "embeddings.npz"
    v = np.arange(384, dtype=np.float32)
    write_cache(cache_path(scores), {"s1": (text_key("hello"), v)}, quantized=False)
    got = read_cache(cache_path(scores), quantized=False)
    assert got["s1"][0] == text_key("hello") and np.array_equal(got["s1"][1], v)
    assert read_cache(cache_path(scores), quantized=True) == {}  # an int8 cache is not an fp32 one


def test_a_broken_cache_is_ignored_not_an_error(tmp_path):
    path = tmp_path / "scores.jsonl.embeddings.npz"
    path.write_bytes(b"not a zip file")
    assert read_cache(path, quantized=False) == {}


def test_drift_and_freeze_of_scored_files_read_the_cached_vectors_without_the_model(tmp_path, monkeypatch):
    samples = [sample(i, f"answer number {i}") for i in range(5)]
    samples_path = tmp_path / "samples.jsonl"
    write_samples(samples_path, samples)
    scores_path = tmp_path / "scores.jsonl"
    scores_path.write_text("")
    cached = {s.id: (text_key(s.answer_text()), np.full(384, i, dtype=np.float32)) for i, s in enumerate(samples)}
    write_cache(cache_path(scores_path), cached, quantized=False)
    monkeypatch.setattr(embeddings_module, "Embedder", NoModel)
    _, _, vectors, _ = load_window(
        config(tmp_path, embeddings=True), str(samples_path), str(scores_path), None, purpose="the drift window"
    )
    assert set(vectors) == {s.id for s in samples}
    assert np.array_equal(vectors["s3"], cached["s3"][1])


def test_a_changed_answer_is_embedded_again(tmp_path, monkeypatch):
    samples = [sample(0, "old answer"), sample(1, "kept answer")]
    samples_path = tmp_path / "samples.jsonl"
    scores_path = tmp_path / "scores.jsonl"
    scores_path.write_text("")
    write_cache(
        cache_path(scores_path),
        {s.id: (text_key(s.answer_text()), np.ones(384, dtype=np.float32)) for s in samples},
        quantized=False,
    )
    samples[0] = sample(0, "a new answer under the same id")
    write_samples(samples_path, samples)
    asked = record_embedder(monkeypatch)
    _, _, vectors, _ = load_window(
        config(tmp_path, embeddings=True), str(samples_path), str(scores_path), None, purpose="the baseline"
    )
    assert asked == [["a new answer under the same id"]]
    assert np.array_equal(vectors["s1"], np.ones(384, dtype=np.float32))


@pytest.mark.skipif(embeddings_module._packaged_model_path() is None, reason="needs the packaged embedding model")
def test_score_writes_the_vectors_the_offline_commands_then_reuse(tmp_path, monkeypatch):
    samples = [
        sample(i, text)
        for i, text in enumerate(
            ["Boil the egg for six minutes.", "Paris is the capital of France.", "Use a binary search."]
        )
    ]
    samples_path = tmp_path / "samples.jsonl"
    write_samples(samples_path, samples)
    scores_path = tmp_path / "scores.jsonl"
    cfg = config(tmp_path, embeddings=True)
    score_files(cfg, str(samples_path), str(scores_path), out=open(tmp_path / "out.txt", "w"))
    cached = read_cache(cache_path(scores_path), quantized=False)
    # Answers under the sample id, prompts (what relevance embedded anyway) under "prompt:<id>".
    assert set(cached) == {s.id for s in samples} | {PROMPT_PREFIX + s.id for s in samples}
    model = embeddings_module.Embedder(threads=1)
    fresh = model.encode([s.answer_text() for s in samples])
    for s, v in zip(samples, fresh):
        assert float(np.dot(cached[s.id][1], v)) > 0.999
    for s, v in zip(samples, model.encode([s.prompt_text() for s in samples])):
        assert float(np.dot(cached[PROMPT_PREFIX + s.id][1], v)) > 0.999
    monkeypatch.setattr(embeddings_module, "Embedder", NoModel)
    prompts: dict = {}
    _, _, vectors, _ = load_window(
        cfg, str(samples_path), str(scores_path), None, purpose="the baseline", prompts=prompts
    )
    assert set(vectors) == {s.id for s in samples}
    assert set(prompts) == {s.id for s in samples}


def test_prompt_vectors_come_from_the_cache_and_a_changed_prompt_is_embedded_again(tmp_path, monkeypatch):
    samples = [sample(0, "an answer"), sample(1, "another answer")]
    samples_path = tmp_path / "samples.jsonl"
    scores_path = tmp_path / "scores.jsonl"
    scores_path.write_text("")
    entries = {s.id: (text_key(s.answer_text()), np.ones(384, dtype=np.float32)) for s in samples}
    entries.update(
        {PROMPT_PREFIX + s.id: (text_key(s.prompt_text()), np.full(384, 2.0, dtype=np.float32)) for s in samples}
    )
    write_cache(cache_path(scores_path), entries, quantized=False)
    samples[1].request["messages"][0]["content"] = "a question that was edited after scoring"
    write_samples(samples_path, samples)
    asked = record_embedder(monkeypatch)
    prompts: dict = {}
    load_window(
        config(tmp_path, embeddings=True),
        str(samples_path),
        str(scores_path),
        None,
        purpose="the drift window",
        prompts=prompts,
    )
    assert asked == [["a question that was edited after scoring"]]
    assert np.array_equal(prompts["s0"], np.full(384, 2.0, dtype=np.float32))
    # Embeddings off: no prompt vectors, no model.
    monkeypatch.setattr(embeddings_module, "Embedder", NoModel)
    prompts = {}
    load_window(
        config(tmp_path, embeddings=False),
        str(samples_path),
        str(scores_path),
        None,
        purpose="the drift window",
        prompts=prompts,
    )
    assert prompts == {}
