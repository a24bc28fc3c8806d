"""`baseline freeze` and `drift` summarise a window without holding its samples (issue 29).

The streamed summary keeps, per sample, only a few bytes: the id while the scores are joined, a
tuple of shared score entries, and the continuous values in typed arrays (exact quantiles need
them). Rows and vectors live in bounded reservoirs. Whole Samples (tens of KB each as Python
objects) or Score objects (about 2 KB each) kept per sample would show as a far steeper slope.
The bound is on Python allocations (tracemalloc), per sample, so it is about the algorithm and not
about the host's speed or allocator.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.memory import peak_bytes, write_varied_samples

from llmwatch.core.jsonio import read_records
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.offline import score_files, summarize_window
from llmwatch.scorers.drift.features import summarize

RULES_ONLY = ScoringSection(embeddings=False)
# Whole Samples cost about 35 KB each in the old path (measured with bench/offline_scale.py); the
# streamed path about 0.5 KB. 2 KB per sample leaves room for allocator noise and fails the old way.
MAX_BYTES_PER_SAMPLE = 2_000


def write_window(directory: Path, n: int) -> tuple[str, str]:
    """`n` samples of version B with varied prompts, answers and latencies, and their rule-check scores."""
    samples = directory / "samples.jsonl"
    write_varied_samples(samples, n)
    scores = directory / "scores.jsonl"
    score_files(RULES_ONLY, str(samples), str(scores), out=open("/dev/null", "w"))
    return str(samples), str(scores)


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, str]]:
    out = {}
    for n in (1000, 4000):
        d = tmp_path_factory.mktemp(f"n{n}")
        out[n] = write_window(d, n)
    return out


def test_streamed_summary_grows_by_a_few_bytes_per_sample(windows: dict[int, tuple[str, str]]) -> None:
    # A small row reservoir, full at both sizes, so that what grows is only per-sample state. One
    # run first, so that imports and first-use caches do not count in either peak.
    summarize_window(RULES_ONLY, *windows[1000], "B", purpose="the test", reservoir_size=200)
    peaks = {
        n: peak_bytes(
            lambda s=s, sc=sc: summarize_window(RULES_ONLY, s, sc, "B", purpose="the test", reservoir_size=200)
        )
        for n, (s, sc) in windows.items()
    }
    per_sample = (peaks[4000] - peaks[1000]) / 3000
    assert per_sample < MAX_BYTES_PER_SAMPLE, f"peak Python memory {peaks}: {per_sample:,.0f} bytes per extra sample"


def test_the_bound_catches_a_summary_that_holds_the_samples(windows: dict[int, tuple[str, str]]) -> None:
    # The same measure over the list-based path (every Sample and Score read into lists) exceeds
    # the bound: the test above can fail.
    def listed(s: str, sc: str) -> None:
        summarize(list(read_records(s)), list(read_records(sc, Score, prefix="scores")), None, reservoir_size=200)

    listed(*windows[1000])
    peaks = {n: peak_bytes(lambda s=s, sc=sc: listed(s, sc)) for n, (s, sc) in windows.items()}
    assert (peaks[4000] - peaks[1000]) / 3000 > MAX_BYTES_PER_SAMPLE


def test_streamed_summary_equals_the_list_based_one(windows: dict[int, tuple[str, str]]) -> None:
    s, sc = windows[1000]
    streamed = summarize_window(RULES_ONLY, s, sc, None, purpose="the test", reservoir_size=200)
    listed = summarize(list(read_records(s)), list(read_records(sc, Score, prefix="scores")), None, reservoir_size=200)
    assert {k: v.model_dump() for k, v in streamed.routes.items()} == {k: v.model_dump() for k, v in listed.items()}
    assert streamed.sample_count == 1000 and streamed.window_versions == ["B"]
