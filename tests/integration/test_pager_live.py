"""The drift pager inside the real scorer child: samples in, scored there, evidence back to the parent's gauges."""

from __future__ import annotations

import threading
from datetime import timedelta

import numpy as np
from helpers.samples import NOW, chat_sample

from llmwatch.agent.processes.scoring import ScorerProcess
from llmwatch.core.metrics import Metrics
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.suite import build_suite
from llmwatch.scorers.drift.baseline import freeze, write_baseline
from llmwatch.scorers.drift.config import DriftSection
from llmwatch.scorers.drift.metrics import DriftMetrics
from llmwatch.scorers.drift.pager import PagerReading

REFUSAL = "I'm sorry, but I can't help with that."


def traffic(rng: np.random.Generator, n: int, version: str, refusal: float, start: int = 0):
    out = []
    for i in range(start, start + n):
        words = int(rng.integers(20, 60))
        answer = REFUSAL if rng.random() < refusal else " ".join(["Paris is the capital of France."] * (words // 6))
        out.append(
            chat_sample(
                answer,
                id=f"{version}-{i}",
                timestamp=NOW + timedelta(seconds=i),
                model_version=version,
                latency_ms=float(words * 20),
                usage={"input_tokens": 30, "output_tokens": words},
            )
        )
    return out


def test_a_version_that_refuses_more_pages_from_the_scorer_child_and_the_gauges_say_so(tmp_path):
    rng = np.random.default_rng(1)
    scoring = ScoringSection(embeddings=False)
    base = traffic(rng, 600, "A", 0.02)
    scores = [r.score for r in build_suite(scoring).score(base)]
    path = write_baseline(freeze(base, scores, None, model_version="A"), tmp_path / "base.json")
    drift = DriftSection(baseline=path, interval_s=0.2, pager_samples_per_s=0.1)

    got: list[list[PagerReading]] = []
    decided = threading.Event()

    def on_pager(readings: list[PagerReading]) -> None:
        got.append(readings)
        if any(r.firing and r.model_version == "B" for r in readings):
            decided.set()

    scorer = ScorerProcess(
        scoring.model_dump(mode="json"),
        lambda *a: None,
        max_pending=10_000,
        batch_timeout_s=60.0,
        drift_payload=drift.model_dump(mode="json"),
        on_pager=on_pager,
    )
    scorer.start()
    try:
        assert scorer.ready.wait(60.0), scorer.fatal
        worse = traffic(rng, 1500, "B", 0.30, start=1000)
        for i in range(0, len(worse), 100):
            assert scorer.submit(worse[i : i + 100])
        assert decided.wait(120.0), f"no firing reading for B; last readings {got[-1:]}"
    finally:
        scorer.close(timeout=5.0)
    firing = [r for r in got[-1] if r.firing]
    assert [(r.signal, r.family, r.model_version) for r in firing] == [("pass_rate:refusal", "behaviour", "B")]
    reading = firing[0]
    # Decided at a sample of B's stream, on the samples' own clock.
    assert reading.decisive_at >= (NOW + timedelta(seconds=1000)).timestamp()

    metrics = Metrics()
    metrics.group(DriftMetrics).set_pager(got[-1])
    labels = {
        "signal": "pass_rate:refusal",
        "family": "behaviour",
        "model_version": "B",
        "gen_ai_operation_name": "chat",
    }
    value = metrics.registry.get_sample_value
    assert value("llmwatch_drift_evidence_decisive", labels) == 1.0
    assert value("llmwatch_drift_evidence_decisive_timestamp_seconds", labels) == reading.decisive_at
    assert value("llmwatch_drift_evidence_threshold", labels) == reading.threshold
    assert value("llmwatch_drift_evidence_decisive", {**labels, "signal": "output_tokens:longer"}) == 0.0
