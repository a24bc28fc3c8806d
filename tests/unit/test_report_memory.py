"""`llmwatch report` and `llmwatch shadow report` hold no Sample, Score or Pair per record (issue 29).

The streamed report keeps per sample a few typed columns, a tuple of shared score entries and,
for the offline conversation linking, its history's digests; the streamed shadow report keeps per
pair a few floats and small codes. Whole Samples (tens of KB each as Python objects), Scores
(about 2 KB) or Pairs (two Samples) kept per record show as a far steeper slope. The bound is on
Python allocations (tracemalloc) per extra record, so it is about the algorithm and not about the
host's speed or allocator. Each bound is shown to catch the list-based path it replaced.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import orjson
import pytest
from helpers.memory import peak_bytes

from llmwatch.agent.components import load_config
from llmwatch.core.jsonio import read_records
from llmwatch.core.pairs import Pair
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.offline import score_files
from llmwatch.scorers.evaluation.evaluate import build_report
from llmwatch.scorers.evaluation.paired import PairColumns, compare, compare_columns
from llmwatch.scorers.evaluation.report_stream import build_report_streamed

RULES_ONLY = ScoringSection(embeddings=False)
# The list-based report measured about 15,000 bytes per extra sample here, the streamed one about
# 600 (most of it the conversation linking's digests, which `link_samples` keeps too).
MAX_REPORT_BYTES_PER_SAMPLE = 2_000
# The list-based shadow report measured about 14,000 bytes per extra pair, the streamed one about 160.
MAX_SHADOW_BYTES_PER_PAIR = 1_000
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _answer_text(i: int) -> str:
    return f"Here is answer {i}: " + "words " * (i % 60)


def _answer(i: int) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": _answer_text(i)}, "finish_reason": "stop"}]}


def write_window(directory: Path, n: int) -> tuple[str, str]:
    """`n` chat samples of two versions, conversations of three turns written without their ids
    (so the report links them by their histories), repeated prompts, costs; and their scores."""
    samples = directory / "samples.jsonl"
    with open(samples, "wb") as out:
        for i in range(n):
            # Three samples a conversation (turns 1, 2, 3); its opening question recurs every 97.
            topic = ("billing", "caching", "joins", "invoices")[i // 3 % 97 % 4]
            messages = [{"role": "user", "content": f"Explain {topic} number {i // 3 % 97} in detail, please."}]
            for turn in range(i % 3):
                # The history resends the conversation's earlier answers, as a chat client does.
                earlier = _answer_text(i - i % 3 + turn)
                messages += [{"role": "assistant", "content": earlier}, {"role": "user", "content": "More?"}]
            record = {
                "id": f"s{i}",
                "timestamp": (T0 + timedelta(seconds=6 * i)).isoformat(),
                "model": "gpt-4o-mini",
                "model_version": "AB"[i % 2],
                "status": 200,
                "latency_ms": 500.0 + (i * 37) % 400,
                "ttft_ms": 100.0 + (i * 13) % 90,
                "usage": {"input_tokens": 20 + i % 40, "output_tokens": 30 + i % 70},
                "cost_usd": 0.0001 * (1 + i % 3),
                "request": {"model": "gpt-4o-mini", "messages": messages},
                "response": _answer(i),
            }
            out.write(orjson.dumps(record) + b"\n")
    scores = directory / "scores.jsonl"
    with open("/dev/null", "w") as null:
        score_files(RULES_ONLY, str(samples), str(scores), out=null)
    return str(samples), str(scores)


def write_pairs(directory: Path, n: int) -> str:
    path = directory / "pairs.jsonl"

    def side(i: int, ms: float) -> dict[str, Any]:
        return {
            "id": f"p{i}-{ms}",
            "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
            "model": "m",
            "status": 200 if i % 50 else 502,
            "latency_ms": ms,
            "ttft_ms": ms / 5,
            "usage": {"output_tokens": 10 + i % 30},
            "cost_usd": 0.001,
            "request": {"messages": [{"role": "user", "content": f"question {i} " + "about things " * (i % 20)}]},
            "response": _answer(i),
        }

    with open(path, "wb") as out:
        for i in range(n):
            scores = [
                {"check": c, "kind": c, "result": "pass" if (i + k) % 7 else "fail"}
                for k, c in enumerate(("not_empty", "refusal", "pii_leak"))
            ]
            record = {
                "id": f"pair{i}",
                "candidate": "cand",
                "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
                "route": "/v1/chat/completions",
                "category": ("code", "chat", None)[i % 3],
                "primary": side(i, 400.0 + i % 90),
                "shadow": side(i, 410.0 + i % 80),
                "primary_scores": scores,
                "shadow_scores": scores[::-1],
            }
            out.write(orjson.dumps(record) + b"\n")
    return str(path)


def per_extra_record(run: Callable[[Any], object], inputs: dict[int, Any]) -> float:
    run(inputs[1000])  # imports and first-use caches count in neither peak
    peaks = {n: peak_bytes(lambda x=x: run(x)) for n, x in inputs.items()}
    return (peaks[4000] - peaks[1000]) / 3000


CFG = load_config(None, overrides={"scoring": {"embeddings": False}}, environ={})


def streamed_report(paths: tuple[str, str]) -> Any:
    return build_report_streamed(CFG, *paths)


def listed_report(paths: tuple[str, str]) -> Any:
    samples = list(read_records(paths[0]))
    scores = list(read_records(paths[1], Score, prefix="scores"))
    known = {c.name for c in CFG.scoring.checks or ()} | {sc.check for sc in scores}
    return build_report(samples, scores, CFG.matrix, known_checks=sorted(known))


def streamed_shadow(path: str) -> Any:
    cols = PairColumns()
    for pair in read_records(path, Pair, prefix="pairs"):
        cols.add(pair)
    return compare_columns(cols, CFG.shadow.margins)


def listed_shadow(path: str) -> Any:
    return compare(list(read_records(path, Pair, prefix="pairs")), CFG.shadow.margins)


@pytest.fixture(autouse=True)
def small_resampling_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bootstraps draw their replicates in chunks of a few million values: memory that stops
    # growing once a window fills a chunk (at 4,000 samples a version, tens of MB). Smaller chunks
    # here, full at both sizes, so that what grows between them is only per-record state.
    import llmwatch.scorers.evaluation.decision as decision
    import llmwatch.scorers.stats.clustered as clustered
    import llmwatch.scorers.stats.paired as paired

    monkeypatch.setattr(decision, "_DRAWS_PER_CHUNK", 50_000)
    monkeypatch.setattr(paired, "_DRAWS_PER_CHUNK", 50_000)
    monkeypatch.setattr(clustered, "_CELLS", 50_000)


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, str]]:
    return {n: write_window(tmp_path_factory.mktemp(f"w{n}"), n) for n in (1000, 4000)}


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    return {n: write_pairs(tmp_path_factory.mktemp(f"p{n}"), n) for n in (1000, 4000)}


def without_time(report: Any) -> dict[str, Any]:
    data = report.to_dict()
    del data["created_at"]
    return orjson.loads(orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=str))


def test_streamed_report_grows_by_a_few_hundred_bytes_per_sample(windows: dict[int, tuple[str, str]]) -> None:
    per_sample = per_extra_record(streamed_report, windows)
    assert per_sample < MAX_REPORT_BYTES_PER_SAMPLE, f"{per_sample:,.0f} bytes of Python memory per extra sample"


def test_the_report_bound_catches_a_report_that_holds_the_samples(windows: dict[int, tuple[str, str]]) -> None:
    assert per_extra_record(listed_report, windows) > MAX_REPORT_BYTES_PER_SAMPLE


def test_streamed_report_equals_the_list_based_one(windows: dict[int, tuple[str, str]]) -> None:
    streamed, listed = streamed_report(windows[1000]), listed_report(windows[1000])
    assert without_time(streamed) == without_time(listed)
    # The window exercises what needs per-sample values: linked conversations, prompt groups.
    assert any(d.conversations > 0 for d in streamed.turn_decay)
    assert any(c.kind == "sampling" for c in streamed.stability)


def test_streamed_shadow_report_grows_by_a_few_hundred_bytes_per_pair(pair_files: dict[int, str]) -> None:
    per_pair = per_extra_record(streamed_shadow, pair_files)
    assert per_pair < MAX_SHADOW_BYTES_PER_PAIR, f"{per_pair:,.0f} bytes of Python memory per extra pair"


def test_the_shadow_bound_catches_a_report_that_holds_the_pairs(pair_files: dict[int, str]) -> None:
    assert per_extra_record(listed_shadow, pair_files) > MAX_SHADOW_BYTES_PER_PAIR


def topic_embedder(texts: list[str]) -> Any:
    """Clusters by meaning stand-in: a text's vector is its topic's direction plus a little noise
    of its own (so "billing number 3" and "billing number 40" are rephrasings of one request);
    the same text, the same vector, whatever the batch."""
    import hashlib

    import numpy as np

    def unit(key: str) -> Any:
        seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(64)
        return v / np.linalg.norm(v)

    topics = ("billing", "caching", "joins", "invoices")
    return np.asarray([unit(next((w for w in topics if w in t), "")) + 0.1 * unit(t) for t in texts])


def test_streamed_report_with_embeddings_equals_the_list_based_one(windows: dict[int, tuple[str, str]]) -> None:
    # Prompt sensitivity clusters by meaning in blocks of embeddings, keeping only the leaders:
    # with an embedder that does not depend on the batch, the figure is the list path's.
    streamed = build_report_streamed(CFG, *windows[1000], sensitivity_embed=topic_embedder)
    samples = list(read_records(windows[1000][0]))
    scores = list(read_records(windows[1000][1], Score, prefix="scores"))
    known = {c.name for c in CFG.scoring.checks or ()} | {sc.check for sc in scores}
    listed = build_report(samples, scores, CFG.matrix, known_checks=sorted(known), sensitivity_embed=topic_embedder)
    assert without_time(streamed) == without_time(listed)
    assert all(p.verdict == "measured" and p.clusters >= 4 for p in streamed.prompt_sensitivity)
