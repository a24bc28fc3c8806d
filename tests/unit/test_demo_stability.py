"""The demo summary's stability lines: each version's three figures with their intervals, or why not."""

from __future__ import annotations

from pathlib import Path

from llmwatch.agent.apps.demo_stability import StabilityFigures, stability_figures, stability_lines
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.consistency import ConsistencyRow
from llmwatch.scorers.evaluation.sensitivity import PromptSensitivity
from llmwatch.scorers.evaluation.turns import TurnDecay


def test_each_version_names_its_three_figures_with_their_intervals() -> None:
    figures = StabilityFigures(
        turn_decay=[TurnDecay("B", "decays", -0.095, (-0.128, -0.061), 0.02, 12, 30, 80)],
        consistency=[ConsistencyRow("B", 20, 17, 11, 0.647, (0.41, 0.83), 3, 0.18, {"lexical": 17})],
        sensitivity=[PromptSensitivity("B", "measured", 0.145, (0.121, 0.170), 12, 40, 60)],
    )
    header, line = stability_lines(figures, ["B"])
    assert "turn decay" in header and "consistency" in header and "prompt sensitivity" in header
    assert "turn decay -0.095/turn [-0.128, -0.061] (12 conversations)" in line
    assert "consistency 0.65 [0.41, 0.83] (17 re-asks)" in line
    assert "prompt sensitivity 0.145 [0.121, 0.170] (12 requests rephrased)" in line


def test_a_run_with_nothing_on_disk_says_why_each_figure_is_missing(tmp_path: Path) -> None:
    figures = stability_figures(tmp_path, MatrixSection())
    (_, line) = stability_lines(figures, ["A"])
    assert "turn decay n/a" in line and "consistency n/a" in line and "prompt sensitivity n/a" in line
