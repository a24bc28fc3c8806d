"""A run that passes because --fail-on leaves out a drifting family does not say nothing drifted.

`llmwatch drift --fail-on inputs` on the demo's B (shorter, slower, refusing more) said "STABLE: no
signal differs from the baseline beyond chance" above "behaviour drift" and "performance drift".
"""

from __future__ import annotations

from helpers.traffic import slower_canary

from llmwatch.scorers.drift.compare import DriftSettings, format_text


def test_a_stable_run_names_the_drifting_family_it_leaves_out():
    report = slower_canary(fail_on=("behaviour",)).drift
    assert report.verdict == "stable" and report.exit_code == 0
    assert report.families["performance"]["verdict"] == "drift"
    assert format_text(report).splitlines()[0] == (
        "STABLE on the families that fail the run (behaviour): none of their signals differs from the baseline "
        "beyond chance; performance drifted, which does not fail the run (--fail-on)"
    )


def test_a_stable_run_with_nothing_left_out_keeps_the_plain_headline():
    report = slower_canary(fail_on=("behaviour",), performance_margin=5.0).drift
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
