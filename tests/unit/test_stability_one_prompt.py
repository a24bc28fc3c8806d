"""`llmwatch report`'s stability lines mark a sampling stability computed from one prompt.

Sampling stability is the mean over prompt groups; from a single group it is one prompt's spread,
not an estimate for the version (the demo printed "code B 0.848 (..., 1 prompts, ...)" unmarked).
"""

from __future__ import annotations

from llmwatch.scorers.evaluation.evaluate import _stability_text
from llmwatch.scorers.evaluation.stability import StabilityCell


def _sampling(groups: int) -> StabilityCell:
    return StabilityCell("sampling", "code", "B", 0.848, groups, 2 * groups, {"mean_variance": 0.0092})


def test_one_prompt_is_said_to_be_no_stability_estimate():
    assert _stability_text(_sampling(1)) == (
        "0.848 (var 0.0092, 1 prompt, 2 samples; one prompt only: not a stability estimate)"
    )


def test_two_prompts_or_more_are_shown_without_the_caveat():
    assert _stability_text(_sampling(2)) == "0.848 (var 0.0092, 2 prompts, 4 samples)"
    assert _sampling(2).caveat == ""


def test_turn_and_missing_figures_carry_no_prompt_caveat():
    turn = StabilityCell("turn", "all", "B", 0.977, 1, 30, {"slope": -0.0025, "stderr": 0.02})
    empty = StabilityCell("sampling", "all", "B", None, 1, 1, {"verdict": "insufficient"})
    assert turn.caveat == "" and empty.caveat == ""
