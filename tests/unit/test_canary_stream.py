"""`llmwatch canary` compares two versions without holding the window (issue 29).

The window (the time both versions were served) comes from one pass keeping each sample's time
(`window_of`), then one streamed pass summarises both versions at once (`summarize_sides`): every
sample scored or its scores read, in file order, as the list-based path (`same_window`,
`load_window`, `compare_versions`) did over lists of every Sample, Score and vector. Both paths
must give the same report, the same errors, and the streamed one must not grow by a Sample per
sample. A fake, deterministic embedder stands in for the model.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from helpers.fake_embedder import FakeEmbedder
from helpers.memory import peak_bytes

from llmwatch.core.jsonio import read_records
from llmwatch.scorers.checks import embeddings as embeddings_module
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.offline import load_window, score_files, summarize_sides
from llmwatch.scorers.drift.canary import (
    CanaryError,
    compare_summaries,
    compare_versions,
    format_text,
    same_window,
    side_of,
    window_of,
)
from llmwatch.scorers.drift.features import summarize

RULES = ScoringSection(embeddings=False)
EMBEDDINGS = ScoringSection(embeddings=True)
# The list-based path keeps every Sample and Score (tens of KB a sample); the streamed one a few
# hundred bytes (ids, score tuples, typed columns). 2 KB leaves room for allocator noise.
MAX_BYTES_PER_SAMPLE = 2_000
PLUS_TWO = timezone(timedelta(hours=2))


def write_samples(path: Path, n: int) -> None:
    """`n` samples: A all along, B (the canary) from a third of the way on, a few of C; some times in +02:00."""
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with open(path, "wb") as out:
        for i in range(n):
            version = "C" if i % 17 == 0 else ("A" if i % 2 or i < n // 3 else "B")
            slow = 1.4 if version == "B" else 1.0
            ts = t0 + timedelta(seconds=3 * i, microseconds=i % 7)
            topic = ("billing", "caching", "joins")[i % 3]
            record = {
                "schema_version": 1,
                "id": f"s{i}",
                "timestamp": (ts.astimezone(PLUS_TWO) if i % 5 == 0 else ts).isoformat(),
                "route": "/v1/chat/completions",
                "operation": "chat",
                "model": "m",
                "model_version": version,
                "status": 500 if i % 41 == 0 else 200,
                "latency_ms": slow * (500.0 + (i * 37) % 400),
                "ttft_ms": 100.0 + (i * 13) % 90,
                "usage": {"input_tokens": 20 + i % 40, "output_tokens": 30 + i % 70},
                "metadata": {"category": topic},
                "request": {"messages": [{"role": "user", "content": f"Explain {topic} number {i % 50}, please."}]},
                "response": {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": f"{topic} {i}: " + "words " * (i % 30)},
                            "finish_reason": "stop",
                        }
                    ]
                },
            }
            out.write(orjson.dumps(record) + b"\n")


def listed(scoring: ScoringSection, samples: str, scores: str | None, **window) -> tuple[bytes, str]:
    """What `llmwatch canary` did before: the window and every Sample, Score and vector in lists."""
    same_window(read_records(samples), "A", "B", **window)
    items, score_list, vectors, _ = load_window(scoring, samples, scores, None, purpose="the canary comparison")
    stable, canary, w = same_window(items, "A", "B", **window)
    report, _, _ = compare_versions(
        (stable, score_list, vectors), (canary, score_list, vectors), stable_version="A", canary_version="B", window=w
    )
    return orjson.dumps(report.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY, default=str), format_text(report)


def streamed(scoring: ScoringSection, samples: str, scores: str | None, **window) -> tuple[bytes, str]:
    w = window_of(read_records(samples), "A", "B", **window)
    reference, current = summarize_sides(
        scoring, samples, scores, side_of(w, "A", "B"), 2, purpose="the canary comparison"
    )
    report, _, _ = compare_summaries(reference, current, stable_version="A", canary_version="B", window=w)
    return orjson.dumps(report.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY, default=str), format_text(report)


@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("canary")
    write_samples(d / "samples.jsonl", 1200)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(embeddings_module, "Embedder", FakeEmbedder)
        score_files(RULES, str(d / "samples.jsonl"), str(d / "rules.jsonl"), out=open("/dev/null", "w"))
        score_files(EMBEDDINGS, str(d / "samples.jsonl"), str(d / "embedded.jsonl"), out=open("/dev/null", "w"))
    return {"samples": str(d / "samples.jsonl"), "rules": str(d / "rules.jsonl"), "embedded": str(d / "embedded.jsonl")}


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings_module, "Embedder", FakeEmbedder)


T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "asked",
    [
        {},
        {"last": timedelta(minutes=20)},
        {"start": (T0 + timedelta(minutes=30)).astimezone(PLUS_TWO), "end": T0 + timedelta(minutes=50)},
        {"end": T0 + timedelta(seconds=1500, microseconds=3)},
    ],
    ids=["overlap", "last", "start-end", "end"],
)
@pytest.mark.parametrize("scores", ["rules", None], ids=["scores-file", "scored-now"])
def test_the_streamed_canary_report_is_the_list_based_one(window, scores, asked) -> None:
    got = streamed(RULES, window["samples"], scores and window[scores], **asked)
    assert got == listed(RULES, window["samples"], scores and window[scores], **asked)
    assert b'"verdict"' in got[0]


@pytest.mark.parametrize("scores", ["embedded", None], ids=["cached-vectors", "embedded-now"])
def test_with_embeddings_the_streamed_canary_report_is_the_list_based_one(window, fake_model, scores) -> None:
    got = streamed(EMBEDDINGS, window["samples"], scores and window[scores])
    assert got == listed(EMBEDDINGS, window["samples"], scores and window[scores])
    w = window_of(read_records(window["samples"]), "A", "B")
    sides = summarize_sides(EMBEDDINGS, window["samples"], None, side_of(w, "A", "B"), 2, purpose="the test")
    assert all(route.embedding is not None for side in sides for route in side.values())  # the vectors were used


def test_the_window_keeps_the_offset_of_the_sample_at_its_end(window) -> None:
    items = list(read_records(window["samples"]))
    for asked in ({}, {"last": timedelta(minutes=7)}):
        w = window_of(iter(items), "A", "B", **asked)
        *_, old = same_window(items, "A", "B", **asked)
        assert (w.start.isoformat(), w.end.isoformat(), w.n_stable, w.n_canary, w.left_out) == (
            old.start.isoformat(),
            old.end.isoformat(),
            old.n_stable,
            old.n_canary,
            old.left_out,
        )


@pytest.mark.parametrize(
    "stable,canary,asked",
    [
        ("A", "A", {}),
        ("A", "Z", {}),
        ("A", "B", {"end": T0 + timedelta(minutes=1)}),
        ("A", "B", {"start": T0 + timedelta(days=30)}),
    ],
)
def test_the_errors_are_those_of_the_list_based_window(window, stable, canary, asked) -> None:
    items = list(read_records(window["samples"]))
    with pytest.raises(CanaryError) as old:
        same_window(items, stable, canary, **asked)
    with pytest.raises(CanaryError) as new:
        window_of(iter(items), stable, canary, **asked)
    assert str(new.value) == str(old.value)


def test_versions_never_served_together_are_refused_with_the_same_spans(tmp_path: Path) -> None:
    write_samples(tmp_path / "s.jsonl", 300)
    items = [s for s in read_records(tmp_path / "s.jsonl") if s.model_version != "B" or s.timestamp > T0]
    items = [s for s in items if s.model_version != "A" or s.timestamp < T0 + timedelta(seconds=200)]
    items = [s for s in items if s.model_version != "B" or s.timestamp > T0 + timedelta(seconds=400)]
    with pytest.raises(CanaryError, match="never served at the same time") as old:
        same_window(items, "A", "B")
    with pytest.raises(CanaryError) as new:
        window_of(iter(items), "A", "B")
    assert str(new.value) == str(old.value)


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, str]]:
    out = {}
    for n in (1500, 4500):
        d = tmp_path_factory.mktemp(f"n{n}")
        write_samples(d / "samples.jsonl", n)
        score_files(RULES, str(d / "samples.jsonl"), str(d / "scores.jsonl"), out=open("/dev/null", "w"))
        out[n] = (str(d / "samples.jsonl"), str(d / "scores.jsonl"))
    return out


def per_extra_sample(windows, run) -> float:
    run(*windows[1500])  # imports and first-use caches count in neither peak
    peaks = {n: peak_bytes(lambda s=s, sc=sc: run(s, sc)) for n, (s, sc) in windows.items()}
    return (peaks[4500] - peaks[1500]) / 3000


# Small reservoirs, full at both sizes (the drift comparison reads only them): what grows is only
# per-sample state. The two summaries are what `compare_summaries` / `compare_versions` compare.
def streamed_summaries(samples: str, scores: str) -> None:
    w = window_of(read_records(samples), "A", "B")
    summarize_sides(RULES, samples, scores, side_of(w, "A", "B"), 2, purpose="the test", reservoir_size=200)


def listed_summaries(samples: str, scores: str) -> None:
    same_window(read_records(samples), "A", "B")
    items, score_list, vectors, _ = load_window(RULES, samples, scores, None, purpose="the test")
    for side in same_window(items, "A", "B")[:2]:
        ids = {s.id for s in side}
        summarize(side, [sc for sc in score_list if sc.sample_id in ids], vectors, reservoir_size=200)


def test_the_streamed_canary_grows_by_a_few_bytes_per_sample(windows) -> None:
    per_sample = per_extra_sample(windows, streamed_summaries)
    assert per_sample < MAX_BYTES_PER_SAMPLE, f"{per_sample:,.0f} bytes of Python allocations per extra sample"


def test_the_bound_catches_the_list_based_canary(windows) -> None:
    per_sample = per_extra_sample(windows, listed_summaries)
    assert per_sample > MAX_BYTES_PER_SAMPLE, f"{per_sample:,.0f} bytes per extra sample"
