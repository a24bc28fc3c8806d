"""Every drift signal carries what its effect measures (kind, unit, the text table's label), declared
where its family computes it (families.py, model.Effect), and says it exactly as the name-keyed
`describe_effect` / `effect_label` chains it replaced did: the JSON's effect_kind / effect_unit and
the text tables' labels are unchanged byte for byte, tested and insufficient signals alike."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from synthetic import Behaviour, window  # noqa: E402

from llmwatch.scorers.drift.families import family_signals  # noqa: E402
from llmwatch.scorers.drift.features import RouteStats, summarize  # noqa: E402
from llmwatch.scorers.drift.model import DriftSettings, Effect, Signal, effect_label  # noqa: E402
from llmwatch.scorers.drift.rows import HASHED_WORDS, hashed_words_vector, pack_vector, prompt_digest  # noqa: E402


def old_describe_effect(name: str) -> tuple[str, str]:
    """The if-chain as it was (scorers/llmwatch/scorers/drift/model.py before the effects moved)."""
    if name.startswith("pass_rate:"):
        return "difference", "pass rate (0.01 = 1 point)"
    if name == "failure_modes":
        return "difference", "share of the failure mode named (0.01 = 1 point)"
    if name.startswith("score:"):
        return "difference", "median score (check units)"
    if name == "turn_decay":
        return "difference", "slope, check pass share per turn"
    if name == "output_tokens" or name == "input:prompt_tokens":
        return "relative change", "median, of the baseline's"
    if name.startswith("perf:"):
        # Changed on purpose since (test_drift_performance_tail): the location test's effect follows
        # its z; a row the tail test decided says "p95, of the baseline's" (none in this fixture).
        return "relative change", "larger of p50 and p95 (the smaller when lower), of the baseline's"
    if name == "embedding":
        return "distance", "1 - cosine of the answer-embedding centroids"
    if name.startswith("input:mix:"):
        return "distance", "total variation of the mix"
    if name in ("input:prompt_embedding", "input:prompt_words"):
        return "separation", "2 * AUC - 1"
    return "", ""


def old_effect_label(sig: Signal) -> str:
    unit = {
        "pass_rate:": "pass rate",
        "failure_modes": "mode share",
        "score:": "score",
        "turn_decay": "slope",
        "output_tokens": "median",
        "input:prompt_tokens": "median",
        "perf:": "p50|p95",
        "embedding": "1-cos",
        "input:mix:": "TVD",
        "input:prompt_": "",
    }
    short = next((u for prefix, u in unit.items() if sig.name.startswith(prefix)), "")
    kind = {"difference": "diff", "relative change": "rel", "distance": "dist", "separation": "sep"}.get(
        sig.effect_kind, ""
    )
    return f"{kind} {short}".strip()


def _routes(rng: np.random.Generator, n: int, b: Behaviour, version: str) -> dict[str, RouteStats]:
    """Synthetic traffic with every figure a family reads: checks, scores, answer embeddings,
    latency, cost, two categories and languages, conversations of three turns, hashed-words prompts."""
    routes = summarize(*window(rng, n, b, version=version, prefix=version))
    for i, row in enumerate(r for rs in routes.values() for r in rs.rows):
        row.category = ("billing", "login")[i % 2]
        row.language = ("en", "de")[i % 3 == 0]
        row.conversation, row.turn = f"{version}-c{i // 3}", 1 + i % 3
        prompt = f"{row.category} question {i % 25} about things"
        row.prompt_hash, row.prompt_vec = prompt_digest(prompt), pack_vector(hashed_words_vector(prompt))
        row.prompt_space = HASHED_WORDS
    return routes


@pytest.fixture(scope="module")
def signals() -> list[Signal]:
    rng = np.random.default_rng(5)
    base = _routes(rng, 400, Behaviour(), "A")
    settings = DriftSettings(mmd_permutations=50, max_permutations=200, interval_draws=50)
    tested, _ = family_signals(base, _routes(rng, 300, Behaviour(latency_ms=1500.0, refusal=0.08), "B"), settings)
    # A window too small for any test: every signal insufficient, described all the same.
    short, _ = family_signals(base, _routes(rng, 12, Behaviour(), "B"), settings)
    return tested + short


def test_every_signal_family_is_present_tested_and_insufficient(signals: list[Signal]):
    names = {(s.name, s.verdict == "insufficient") for s in signals}
    for prefix in (
        "pass_rate:",
        "score:",
        "output_tokens",
        "failure_modes",
        "embedding",
        "turn_decay",
        "perf:",
        "input:prompt_tokens",
        "input:mix:",
        "input:prompt_words",
    ):
        assert {done for name, done in names if name.startswith(prefix)} >= {True, False} or prefix.startswith(
            "input:mix:"
        ), prefix
        assert any(name.startswith(prefix) for name, _ in names), prefix


def test_each_signal_says_its_effect_exactly_as_before(signals: list[Signal]):
    for sig in signals:
        assert sig.effect_kind, f"{sig.name} has no effect description"
        assert (sig.effect_kind, sig.effect_unit) == old_describe_effect(sig.name), sig.name
        assert effect_label(sig) == old_effect_label(sig), sig.name


def test_an_effect_of_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="effect kind 'ratio'"):
        Effect("ratio", "candidate / primary", "x")
