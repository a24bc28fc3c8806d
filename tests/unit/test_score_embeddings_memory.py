"""`llmwatch score` with embeddings on writes its vector cache as it scores, never holding it (issue 29).

The cache beside the scores file keeps an answer and a prompt vector per sample (1.5 KB each).
`score` used to keep them all in a dict until the end and then stack them into one more array:
about 3 GB at a million samples. Now each batch's vectors are appended to private temporary files
and the `.npz` is assembled from them at the end through the atomic writer: the same file that
`write_cache` writes from the dict (the same members, byte for byte), the previous cache left as
it was if scoring fails. A fake, deterministic embedder stands in for the model.
"""

from __future__ import annotations

import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers.fake_embedder import FakeEmbedder
from helpers.memory import peak_bytes

from llmwatch.core.jsonio import read_records
from llmwatch.core.records import RecordError
from llmwatch.scorers.checks import embeddings as embeddings_module
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.embedding_cache import CacheWriter, cache_path, read_cache, write_cache
from llmwatch.scorers.checks.offline import _into, _keep_vectors, offline_scoring, score_files
from llmwatch.scorers.checks.suite import build_suite

EMBEDDINGS = ScoringSection(embeddings=True)
# The dict kept two 384-float vectors a sample (about 3.5 KB with their keys) and stacked them
# again at the end; the writer keeps 16 bytes an entry. 1 KB a sample leaves room for noise.
MAX_BYTES_PER_SAMPLE = 1_000


def write_samples(path: Path, n: int, *, start: int = 0) -> None:
    """`n` chat samples with distinct answers, prompts that repeat every 300, and a few failed calls."""
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with open(path, "wb") as out:
        for i in range(start, start + n):
            topic = ("billing", "caching", "joins", "invoices")[i % 4]
            record = {
                "schema_version": 1,
                "id": f"s{i}",
                "timestamp": (t0 + timedelta(seconds=6 * i)).isoformat(),
                "route": "/v1/chat/completions",
                "operation": "chat",
                "model": "gpt-4o-mini",
                "model_version": "B",
                "status": 500 if i % 97 == 0 else 200,
                "latency_ms": 500.0 + (i * 37) % 400,
                "request": {"messages": [{"role": "user", "content": f"Explain {topic} number {i % 300}, please."}]},
                "response": {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": f"Here is {topic} {i}: " + "words " * (i % 50)},
                            "finish_reason": "stop",
                        }
                    ]
                },
            }
            out.write(orjson.dumps(record) + b"\n")


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings_module, "Embedder", FakeEmbedder)


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def score_with_a_dict(samples: str, out: Path) -> None:
    """What `score` did before: every batch's vectors into one dict, `write_cache` at the end."""
    suite = build_suite(offline_scoring(EMBEDDINGS))
    known: dict = {}
    batch = []
    for sample in read_records(samples):
        batch.append(sample)
        if len(batch) == 256:
            suite.score(batch)
            _keep_vectors(suite.embedder, batch, _into(known))
            batch = []
    if batch:
        suite.score(batch)
        _keep_vectors(suite.embedder, batch, _into(known))
    write_cache(cache_path(out), known, quantized=False)


def test_the_cache_score_writes_is_the_one_the_dict_wrote(tmp_path: Path) -> None:
    write_samples(tmp_path / "samples.jsonl", 700)
    scores = tmp_path / "scores.jsonl"
    score_files(EMBEDDINGS, str(tmp_path / "samples.jsonl"), str(scores), out=open("/dev/null", "w"))
    score_with_a_dict(str(tmp_path / "samples.jsonl"), tmp_path / "old.jsonl")
    got, expected = members(cache_path(scores)), members(cache_path(tmp_path / "old.jsonl"))
    assert list(got) == ["format.npy", "quantized.npy", "ids.npy", "keys.npy", "vectors.npy"]
    assert got == expected
    assert len(read_cache(cache_path(scores), quantized=False)) == 700 - 8 + 700  # answers of successful calls, prompts
    assert cache_path(scores).stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary files left


@pytest.mark.parametrize(
    "entries",
    [
        [],  # an empty cache: (0, 384) vectors, '<U1' ids, as np.savez wrote it
        [("s1", "a", 1.0), ("prompt:s1", "bb", 2.0), ("ß-ü-\U0001f600", "c", 3.0)],  # widths, non-ASCII ids
        [("s1", "a", 1.0), ("s2", "b", 2.0), ("s1", "cc", 3.0), ("s3", "d", 4.0), ("s2", "e", 5.0)],  # an id twice
    ],
)
def test_the_writer_writes_what_write_cache_writes_from_a_dict(tmp_path: Path, entries: list) -> None:
    writer = CacheWriter(tmp_path / "new.npz", quantized=True)
    as_dict = {}
    for key, text_hash, value in entries:
        vector = np.full(384, value, dtype=np.float32)
        writer.add(key, text_hash, vector)
        as_dict[key] = (text_hash, vector)  # a key added again keeps its place and takes the new value
    writer.close()
    write_cache(tmp_path / "old.npz", as_dict, quantized=True)
    assert members(tmp_path / "new.npz") == members(tmp_path / "old.npz")
    got = read_cache(tmp_path / "new.npz", quantized=True)
    assert list(got) == list(as_dict)
    assert all(got[k][0] == as_dict[k][0] and np.array_equal(got[k][1], as_dict[k][1]) for k in got)


def test_a_bad_line_leaves_the_previous_cache_and_no_temporary_files(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    write_samples(samples, 600)
    scores = tmp_path / "scores.jsonl"
    score_files(EMBEDDINGS, str(samples), str(scores), out=open("/dev/null", "w"))
    before = cache_path(scores).read_bytes()
    write_samples(samples, 400, start=1000)
    with open(samples, "ab") as fh:
        fh.write(b'{"id": "broken"\n')
    with pytest.raises(RecordError, match="samples.jsonl:401"):
        score_files(EMBEDDINGS, str(samples), str(scores), out=open("/dev/null", "w"))
    assert cache_path(scores).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "samples.jsonl",
        "scores.jsonl",
        "scores.jsonl.embeddings.npz",
    ]


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    # Both sizes fill the embedder's bounded memo of recent texts (2,048), so only per-sample state differs.
    out = {}
    for n in (3000, 6000):
        d = tmp_path_factory.mktemp(f"n{n}")
        write_samples(d / "samples.jsonl", n)
        out[n] = str(d / "samples.jsonl")
    return out


def per_extra_sample(windows: dict[int, str], tmp_path: Path, run) -> float:
    run(windows[3000], tmp_path / "warm.jsonl")  # imports and first-use caches count in neither peak
    peaks = {n: peak_bytes(lambda s=s, n=n: run(s, tmp_path / f"scores{n}.jsonl")) for n, s in windows.items()}
    return (peaks[6000] - peaks[3000]) / 3000


def test_score_with_embeddings_grows_by_a_few_bytes_per_sample(windows: dict[int, str], tmp_path: Path) -> None:
    def run(samples: str, scores: Path) -> None:
        score_files(EMBEDDINGS, samples, str(scores), out=open("/dev/null", "w"))

    per_sample = per_extra_sample(windows, tmp_path, run)
    assert per_sample < MAX_BYTES_PER_SAMPLE, f"{per_sample:,.0f} bytes of Python allocations per extra sample"


def test_the_bound_catches_the_dict_of_every_vector(windows: dict[int, str], tmp_path: Path) -> None:
    per_sample = per_extra_sample(windows, tmp_path, score_with_a_dict)
    assert per_sample > MAX_BYTES_PER_SAMPLE, f"{per_sample:,.0f} bytes per extra sample"
