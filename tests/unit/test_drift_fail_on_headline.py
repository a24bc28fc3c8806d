"""A run that passes because --fail-on leaves out a drifting family does not say nothing drifted.

`llmwatch drift --fail-on inputs` on the demo's B (shorter, slower, refusing more) said "STABLE: no
signal differs from the baseline beyond chance" above "behaviour drift" and "performance drift".
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
from helpers.traffic import MIX, MODEL, traffic

from llmwatch.scorers.drift.canary import compare_versions, same_window
from llmwatch.scorers.drift.compare import DriftSettings, format_text


def _slower(**settings):
    rng = np.random.default_rng(6)
    a = traffic(rng, 800, MODEL, MIX, prefix="a", version="A")
    b = traffic(rng, 800, replace(MODEL, ms_per_token=MODEL.ms_per_token * 1.6), MIX, prefix="b", version="B")
    b = ([s.model_copy(update={"timestamp": s.timestamp + timedelta(seconds=0.5)}) for s in b[0]], b[1], b[2])
    stable, canary, window = same_window(a[0] + b[0], "A", "B")
    report, _, _ = compare_versions(
        (stable, a[1], a[2]), (canary, b[1], b[2]), stable_version="A", canary_version="B", window=window,
        settings=DriftSettings(**settings),
    )  # fmt: skip
    return report.drift


def test_a_stable_run_names_the_drifting_family_it_leaves_out():
    report = _slower(fail_on=("behaviour",))
    assert report.verdict == "stable" and report.exit_code == 0
    assert report.families["performance"]["verdict"] == "drift"
    assert format_text(report).splitlines()[0] == (
        "STABLE on the families that fail the run (behaviour): none of their signals differs from the baseline "
        "beyond chance; performance drifted, which does not fail the run (--fail-on)"
    )


def test_a_stable_run_with_nothing_left_out_keeps_the_plain_headline():
    report = _slower(fail_on=("behaviour",), performance_margin=5.0)
    assert report.verdict == "stable" and report.families["performance"]["verdict"] != "drift"
    assert format_text(report).splitlines()[0] == "STABLE: no signal differs from the baseline beyond chance"


def test_an_inputs_shift_is_named_a_shift_not_a_drift():
    # `inputs` shifts, it never drifts (the family line says "inputs  shifted"): the headline of a
    # default run (fail_on behaviour and performance) whose users asked differently said "inputs drifted".
    from llmwatch.scorers.drift.compare import DriftReport

    families = {
        "inputs": {"verdict": "shifted"},
        "behaviour": {"verdict": "stable"},
        "performance": {"verdict": "stable"},
    }
    report = DriftReport("A", ["B"], 800, DriftSettings(), [], "stable", families)
    head = format_text(report).splitlines()[0]
    assert head.endswith("; inputs shifted, which does not fail the run (--fail-on)"), head
    assert "drifted" not in head
