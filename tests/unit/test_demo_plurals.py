"""The demo's story agrees its nouns with its counts: "1 sample was", "2 samples were", never "1 samples".

A short run printed "version B no comparison: 1 samples scored" and "stable over 1 signals"."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter

from llmwatch.agent.apps.demo import drift_summary, error_legend
from llmwatch.agent.apps.demo_stability import StabilityFigures, counted, stability_lines
from llmwatch.agent.components import load_config
from llmwatch.scorers.evaluation.consistency import ConsistencyRow
from llmwatch.scorers.evaluation.sensitivity import PromptSensitivity
from llmwatch.scorers.evaluation.turns import TurnDecay


def test_a_count_agrees_with_its_noun():
    assert [counted(n, "sample") for n in (0, 1, 2, 1.0)] == ["0 samples", "1 sample", "2 samples", "1 sample"]
    assert counted(1, "re-ask") == "1 re-ask" and counted(3, "analysis", "analyses") == "3 analyses"


def _agent(tmp_path: Path, unscored_at_stop: int, passes_b: int) -> SimpleNamespace:
    registry = CollectorRegistry()
    Counter("llmwatch_samples_unscored", "", ["reason"], registry=registry).labels("shutdown").inc(unscored_at_stop)
    checks = Counter("llmwatch_check", "", ["check", "model_version", "result"], registry=registry)
    checks.labels("refusal", "A", "pass").inc(100)
    checks.labels("refusal", "B", "pass").inc(passes_b)
    return SimpleNamespace(
        cfg=load_config(None).model_copy(update={"data_dir": tmp_path}),
        metrics=SimpleNamespace(registry=registry),
        # Version A compared on one signal, B not yet.
        drift_state={("A", "chat", "pass_rate:refusal"): (0.0, 0.5, False, 100)},
        drift_effects={},
    )


def test_the_summary_says_one_sample_and_one_signal(tmp_path: Path):
    agent = _agent(tmp_path, 1, 1)
    text = drift_summary(agent)  # type: ignore[arg-type]
    assert "stable over 1 signal\n" in text + "\n", text
    assert "version B    no comparison: 1 sample scored, 50 needed" in text, text
    assert "1 samples" not in text and "1 signals" not in text
    legend = error_legend(agent)  # type: ignore[arg-type]
    assert "1 sample was still waiting for the scorer" in legend, legend
    assert "were still waiting" in error_legend(_agent(tmp_path, 2, 1))  # type: ignore[arg-type]


def test_stability_counts_of_one_are_singular():
    figures = StabilityFigures(
        turn_decay=[TurnDecay("B", "decays", -0.095, (-0.128, -0.061), 0.02, 1, 30, 80)],
        consistency=[ConsistencyRow("B", 20, 1, 11, 0.647, (0.41, 0.83), 3, 0.18, {"lexical": 1})],
        sensitivity=[PromptSensitivity("B", "measured", 0.145, (0.121, 0.170), 1, 40, 60)],
    )
    _, line = stability_lines(figures, ["B"])
    assert "(1 conversation)" in line and "(1 re-ask)" in line and "(1 request rephrased)" in line, line
