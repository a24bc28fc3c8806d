"""The helpers of bench/stability_power.py: the figures the stability guide quotes come from them."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from stability_power import conversations, reasks_for_width, wilson_exact, wilson_simulated  # noqa: E402

from llmwatch.scorers.evaluation.turns import turn_decay


def test_the_exact_wilson_width_and_coverage_agree_with_seeded_draws() -> None:
    width, coverage = wilson_exact(0.9, 200)
    sim_width, sim_coverage = wilson_simulated(0.9, 200, 4000, seed=1)
    assert width == pytest.approx(sim_width, abs=0.002)
    assert coverage == pytest.approx(sim_coverage, abs=0.015)
    assert 0.9 < coverage < 1.0


def test_the_reasks_for_a_width_are_the_fewest_that_reach_it() -> None:
    for p, target in [(0.7, 0.1), (0.9, 0.05), (0.99, 0.05)]:
        n = reasks_for_width(p, target)
        assert wilson_exact(p, n)[0] <= target < wilson_exact(p, n - 1)[0]
    # A rate near 1 is pinned down with fewer re-asks than one in the middle.
    assert reasks_for_width(0.99, 0.05) < reasks_for_width(0.9, 0.05) < reasks_for_width(0.7, 0.05)


def test_simulated_conversations_decay_at_the_slope_asked_for() -> None:
    rows = conversations(600, 6, 0.05, random.Random(3))
    assert len(rows) == 3600 and {r.sample.turn for r in rows} == set(range(1, 7))
    assert len({r.sample.conversation_id for r in rows}) == 600
    (d,) = turn_decay(rows)
    assert d.slope is not None and d.ci is not None
    assert d.ci[0] <= -0.05 <= d.ci[1] and d.verdict == "decays"
    (flat,) = turn_decay(conversations(600, 6, 0.0, random.Random(4)))
    assert flat.ci is not None and flat.ci[0] < 0 < flat.ci[1]
