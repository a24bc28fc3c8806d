"""The `turn_decay` behaviour signal: quality that falls faster over a conversation's turns than
the baseline's is drift; the same decay is not."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.baseline import freeze
from llmwatch.scorers.drift.compare import DriftSettings, compare
from llmwatch.scorers.drift.features import summarize

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def window(version: str, decay: float, conversations: int, seed: int) -> tuple[list[Sample], list[Score]]:
    rng = random.Random(seed)
    samples, scores = [], []
    for c in range(conversations):
        for turn in range(1, 7):
            sid = f"{version}-{seed}-{c}-{turn}"
            ts = T0 + timedelta(seconds=len(samples))
            messages = [{"role": "user", "content": f"question {c % 40} about topic {turn}"}] * turn
            samples.append(
                Sample(
                    id=sid,
                    timestamp=ts,
                    model="m",
                    model_version=version,
                    status=200,
                    latency_ms=100 + rng.random(),
                    request={"model": "m", "messages": messages},
                    response={"choices": [{"message": {"role": "assistant", "content": "an answer of some words"}}]},
                    conversation_id=f"h-{version}{seed}{c}",
                    turn=turn,
                )
            )
            ok = rng.random() < 0.9 - decay * (turn - 1)
            scores.append(
                Score(
                    sample_id=sid,
                    check="refusal",
                    kind="rule",
                    result="pass" if ok else "fail",
                    value=1.0 if ok else 0.0,
                    sample_timestamp=ts,
                )
            )
    return samples, scores


def turn_signal(decay_now: float, seed: int):
    base = freeze(*window("A", 0.0, 150, 1), None, model_version="A")
    samples, scores = window("B", decay_now, 150, seed)
    report = compare(
        base.routes, summarize(samples, scores), baseline_version="A", current_versions=["B"], settings=DriftSettings()
    )
    return next(sig for sig in report.signals if sig.name == "turn_decay")


def test_a_version_that_decays_over_turns_drifts_on_turn_decay() -> None:
    sig = turn_signal(0.1, seed=2)
    assert sig.family == "behaviour" and sig.verdict == "drift"
    assert sig.effect_size < 0 and sig.direction == "decays faster"
    assert sig.detail["current_slope"] < sig.detail["baseline_slope"]


def test_the_same_behaviour_over_turns_is_stable() -> None:
    sig = turn_signal(0.0, seed=3)
    assert sig.verdict == "stable"
