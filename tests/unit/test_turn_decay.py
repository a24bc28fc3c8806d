"""Quality by turn within conversations: the conversation is the unit, the slope says the decay."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from llmwatch.core.records import Sample
from llmwatch.scorers.evaluation.matrix import ScoredSample
from llmwatch.scorers.evaluation.turns import turn_bucket, turn_decay
from llmwatch.scorers.stats.clustered import cluster_bootstrap_slope


def _row(version: str, conversation: str, turn: int, score: float) -> ScoredSample:
    sample = Sample.model_construct(
        id=f"{conversation}-{turn}",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        operation="chat",
        request={"messages": [{"role": "user", "content": "q"}] * turn},
        response=None,
        conversation_id=conversation,
        turn=turn,
    )
    return ScoredSample(sample, "multi_turn_dialogue", version, score, score >= 0.5)


def _traffic(version: str, decay: float, conversations: int, rng: random.Random) -> list[ScoredSample]:
    rows = []
    for c in range(conversations):
        level = rng.uniform(0.6, 0.95)  # conversations differ: a hard topic stays hard
        for turn in range(1, rng.randint(2, 8) + 1):
            p = min(1.0, max(0.0, level - decay * (turn - 1)))
            rows.append(_row(version, f"{version}{c}", turn, 1.0 if rng.random() < p else 0.0))
    return rows


def test_a_version_that_decays_over_turns_is_told_apart_from_one_that_does_not() -> None:
    rng = random.Random(7)
    rows = _traffic("A", 0.0, 120, rng) + _traffic("B", 0.06, 120, rng)
    by_version = {d.model_version: d for d in turn_decay(rows)}
    a, b = by_version["A"], by_version["B"]
    assert a.ci is not None and b.ci is not None
    assert a.ci[0] < 0 < a.ci[1] and a.verdict == "flat"
    assert b.ci[1] < 0 and b.verdict == "decays"
    assert b.ci[1] < a.ci[0]  # the intervals do not overlap
    assert b.by_turn["1"]["mean"] > b.by_turn["7"]["mean"]
    assert b.by_turn["1"]["lo"] <= b.by_turn["1"]["mean"] <= b.by_turn["1"]["hi"]


def test_differences_between_conversations_do_not_pose_as_decay() -> None:
    # Long conversations are the hard ones (low level), but no conversation gets worse turn by
    # turn: a pooled regression would see decay, the within-conversation slope must not.
    rows = []
    rng = random.Random(3)
    for c in range(200):
        turns = 1 + c % 8
        level = 0.95 - 0.1 * turns
        for t in range(1, turns + 1):
            rows.append(_row("A", f"c{c}", t, 1.0 if rng.random() < level else 0.0))
    (d,) = turn_decay(rows)
    assert d.ci is not None and d.ci[0] < 0 < d.ci[1]


def test_turns_of_one_conversation_count_once_in_the_interval() -> None:
    # 4 conversations of 50 turns each: a sample-level interval would be narrow; the cluster
    # bootstrap knows there are 4 units.
    rng = random.Random(1)
    cluster, x, y = [], [], []
    for c in range(4):
        slope = rng.choice([-0.02, 0.02])
        for t in range(1, 51):
            cluster.append(c)
            x.append(t)
            y.append(0.5 + slope * t + rng.gauss(0, 0.01))
    fit = cluster_bootstrap_slope(cluster, x, y, min_clusters=3)
    assert fit.ci is not None and fit.ci[1] - fit.ci[0] > 0.02


def test_too_few_conversations_are_insufficient_and_turns_past_ten_share_a_bucket() -> None:
    rows = [_row("A", "only", t, 1.0) for t in range(1, 13)]
    (d,) = turn_decay(rows)
    assert d.verdict == "insufficient" and d.slope is None
    assert turn_bucket(12) == "10+" and d.by_turn["10+"]["n"] == 3


def test_the_report_sets_the_turn_gauges_per_version() -> None:
    from prometheus_client import generate_latest

    from llmwatch.core.metrics import Metrics
    from llmwatch.scorers.evaluation.evaluate import EvaluationReport, export_metrics

    rng = random.Random(5)
    rows = _traffic("A", 0.0, 60, rng) + _traffic("B", 0.08, 60, rng)
    decay = turn_decay(rows)
    report = EvaluationReport(
        n_samples=len(rows),
        versions=["A", "B"],
        categories=[],
        cells=[],
        overall_quality={},
        stability=[],
        stability_by_version={},
        costs={},
        decision=[],
        weights={},
        weights_version="test",
        turn_decay=decay,
    )
    metrics = Metrics()
    export_metrics(metrics, report)
    text = generate_latest(metrics.registry).decode()
    b = next(d for d in decay if d.model_version == "B")
    assert b.ci is not None
    assert f'llmwatch_turn_decay_slope{{bound="upper",model_version="B"}} {b.ci[1]}' in text
    assert 'llmwatch_turn_quality{model_version="A",turn="1"}' in text
    assert 'llmwatch_turn_conversations{model_version="B"} 60.0' in text
