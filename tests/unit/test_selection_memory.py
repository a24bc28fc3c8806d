"""`suite build` and `review export` pick a bounded number of cases from a window without holding it (issue 29).

Both used to read every Sample and Score into lists (tens of KB a sample as Python objects). Now
`suite_build.gather` keeps a compact member per usable sample (id, time, route, model, version)
and shared verdict tuples, and `review.ExportScan` a few dozen bytes per reviewable sample in
typed arrays; the chosen samples are read again. The bounds are on Python allocations
(tracemalloc) per extra sample, so they are about the algorithm and not the host's speed. A second
test per command runs the same measure over the list-based way and shows that it exceeds the
bound, so the first can fail.

The near-duplicate rule is pinned sub-quadratic without timing: the similarity computations
`gather` makes (`Material.comparisons`) grow about linearly with distinct prompts that share a
template phrase, where comparing with every representative that shares a shingle grows with
their square.
"""

from __future__ import annotations

import random
import string
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import orjson
import pytest
from helpers.memory import peak_bytes

from llmwatch.core.jsonio import read_records
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.offline import score_files
from llmwatch.scorers.evaluation import suite_build
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.matrix import build_categories
from llmwatch.scorers.evaluation.review import ExportScan, export_from_scan

RULES_ONLY = ScoringSection(embeddings=False)
# A whole Sample with its Scores costs over 10 KB as Python objects; the compact state a few hundred
# bytes (suite: a member, its id and time, its verdict tuple) or a few dozen (review: typed arrays).
SUITE_MAX_BYTES_PER_SAMPLE = 2_000
REVIEW_MAX_BYTES_PER_SAMPLE = 1_000
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def write_window(directory: Path, n: int) -> tuple[str, str]:
    """`n` samples of versions A and B over 40 recurring prompts, with long answers, and their rule-check scores."""
    samples = directory / "samples.jsonl"
    with open(samples, "wb") as out:
        for i in range(n):
            topic = ("billing", "caching", "joins", "invoices")[i % 4]
            record = {
                "schema_version": 1,
                "id": f"s{i}",
                "timestamp": (T0 + timedelta(seconds=6 * i)).isoformat(),
                "model": "gpt-4o-mini",
                "model_version": "AB"[i % 2],
                "status": 200,
                "latency_ms": 500.0,
                "usage": {"input_tokens": 20, "output_tokens": 30 + i % 70},
                "metadata": {"category": topic},
                "request": {
                    "messages": [{"role": "user", "content": f"Explain {topic} case {i % 10} in detail, please."}]
                },
                "response": {
                    "choices": [
                        {
                            "message": {
                                "role": "assistant",
                                "content": f"Here is {topic} {i}: " + "words " * (50 + i % 50),
                            },
                            "finish_reason": "stop",
                        }
                    ]
                },
            }
            out.write(orjson.dumps(record) + b"\n")
    scores = directory / "scores.jsonl"
    with open("/dev/null", "w") as sink:
        score_files(RULES_ONLY, str(samples), str(scores), out=sink)
    return str(samples), str(scores)


def per_extra_sample(windows: dict[int, tuple[str, str]], run: Callable[[str, str], object]) -> float:
    run(*windows[1000])  # imports and first-use caches count in neither peak
    peaks = {n: peak_bytes(lambda s=s, sc=sc: run(s, sc)) for n, (s, sc) in windows.items()}
    return (peaks[4000] - peaks[1000]) / 3000


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, str]]:
    return {n: write_window(tmp_path_factory.mktemp(f"n{n}"), n) for n in (1000, 4000)}


CATEGORIES = build_categories(MatrixSection())


def streamed_gather(s: str, sc: str) -> suite_build.Material:
    return suite_build.gather(read_records(s), read_records(sc, Score, prefix="scores"), CATEGORIES)


def test_suite_material_grows_by_a_few_hundred_bytes_per_sample(windows):
    per_sample = per_extra_sample(windows, streamed_gather)
    assert per_sample < SUITE_MAX_BYTES_PER_SAMPLE, f"{per_sample:,.0f} bytes per extra sample"


def test_the_suite_bound_catches_material_gathered_from_lists(windows):
    def listed(s: str, sc: str) -> suite_build.Material:
        return suite_build.gather(list(read_records(s)), list(read_records(sc, Score, prefix="scores")), CATEGORIES)

    assert per_extra_sample(windows, listed) > SUITE_MAX_BYTES_PER_SAMPLE


def export(s: str, out: Path, samples: Callable[[], object]) -> None:
    scan = ExportScan(("A", "B"))
    scan.add_samples(samples(), CATEGORIES, "uncategorized")
    scan.add_scores(read_records(s.replace("samples.jsonl", "scores.jsonl"), Score, prefix="scores"))
    out.unlink(missing_ok=True)
    out.with_name(out.stem + ".key.json").unlink(missing_ok=True)
    export_from_scan(scan, samples, versions=("A", "B"), n=20, out_path=out, seed=3)


def test_review_export_grows_by_a_few_dozen_bytes_per_sample(windows, tmp_path):
    def streamed(s: str, sc: str) -> None:
        export(s, tmp_path / "tasks.jsonl", lambda: read_records(s))

    per_sample = per_extra_sample(windows, streamed)
    assert per_sample < REVIEW_MAX_BYTES_PER_SAMPLE, f"{per_sample:,.0f} bytes per extra sample"
    assert len((tmp_path / "tasks.jsonl").read_bytes().splitlines()) == 20


def test_the_review_bound_catches_an_export_that_holds_the_samples(windows, tmp_path):
    def listed(s: str, sc: str) -> None:
        held = list(read_records(s))
        export(s, tmp_path / "tasks.jsonl", lambda: held)

    assert per_extra_sample(windows, listed) > REVIEW_MAX_BYTES_PER_SAMPLE


# --- near-duplicates: comparisons, not seconds ----------------------------------------------------


def templated(n: int, seed: int = 5) -> list[Sample]:
    """`n` distinct prompts that share a template phrase (as an app's prompts do), none a near-duplicate."""
    rng = random.Random(seed)
    # Letters only: normalise folds digits, so "w1" and "w2" would be one word.
    vocab = sorted({"".join(rng.choices(string.ascii_lowercase, k=6)) for _ in range(5000)})
    return [
        Sample(
            id=f"t{i}",
            timestamp=T0 + timedelta(seconds=i),
            model="m",
            status=200,
            latency_ms=1.0,
            request={
                "messages": [
                    {"role": "user", "content": "please answer the question below " + " ".join(rng.sample(vocab, 8))}
                ]
            },
            response={"choices": [{"message": {"content": "ok"}}]},
        )
        for i in range(n)
    ]


def shingle_index_comparisons(samples: list[Sample]) -> int:
    """What the old rule computed: every representative sharing any shingle with the new prompt."""
    index: dict[str, list[int]] = defaultdict(list)
    count = reps = 0
    for s in samples:
        sh = suite_build.shingles(suite_build.prompt_text(suite_build.prompt_messages(s)))
        count += len({j for x in sh for j in index.get(x, ())})
        for x in sh:
            index[x].append(reps)
        reps += 1
    return count


def test_near_duplicate_collapsing_makes_at_most_about_one_comparison_per_prompt():
    # Distinct prompts sharing a template: a rule that compares each with every representative
    # sharing a shingle makes n(n-1)/2 comparisons; the LSH rule, whose crowded buckets stop
    # growing, a bounded number per prompt (well under one on average here).
    for n in (2000, 8000):
        material = suite_build.gather(templated(n), [], CATEGORIES, similarity="text")
        assert len(material.candidates) == n  # none is a near-duplicate: all stay representatives
        assert material.comparisons <= n, (n, material.comparisons)
    # The same window under the old rule: quadratic, so the bound above can fail.
    assert shingle_index_comparisons(templated(2000)) >= 2000 * 1999 / 2 * 0.9


def test_near_duplicates_are_still_found_among_templated_prompts():
    window = templated(300)
    # Every 10th prompt again a day later with its last word changed: 10 of 12 distinct 3-gram
    # shingles shared (Jaccard 0.83, over the 0.7 threshold).
    twins = []
    for i, s in enumerate(window[::10]):
        text = s.request["messages"][0]["content"].split()
        text[-1] = "changed"
        twins.append(
            s.model_copy(
                update={
                    "id": f"twin{i}",
                    "timestamp": T0 + timedelta(days=1, seconds=i),
                    "request": {"messages": [{"role": "user", "content": " ".join(text)}]},
                }
            )
        )
    material = suite_build.gather(window + twins, [], CATEGORIES, similarity="text")
    assert material.n_duplicates == len(twins)
    merged = {frozenset(m.id for m in c.samples) for c in material.candidates if len(c.samples) > 1}
    assert merged == {frozenset({window[10 * i].id, f"twin{i}"}) for i in range(len(twins))}
