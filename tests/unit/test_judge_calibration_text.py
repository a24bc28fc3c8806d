"""`llmwatch judge calibrate`'s summary does not read as more certain than its labels allow.

With three labels that all agree, the kappa interval of the percentile bootstrap is "[1.00, 1.00]"
and, under `--min-labels 3`, the line said only "calibrated: kappa lower bound 1.00 >= 0.6 on 3
labels": a reviewer reads certain agreement where the sensitivity's own Wilson bound is 0.21.
"""

from __future__ import annotations

from llmwatch.scorers.evaluation.judge_calibration import Calibration, CalibrationEntry, format_calibration


def _line(**entry) -> str:
    fields = dict(
        judge_model="judge-m", criterion="helpfulness", prompt_version="llmwatch-pointwise/1", scale="1-5", pass_at=4
    )
    calibration = Calibration(
        created_at="2026-12-05T00:00:00Z",
        min_agreement=0.6,
        min_labels=3,
        confidence=0.95,
        entries=[CalibrationEntry(**fields, **entry)],
    )
    return format_calibration(calibration).splitlines()[-1]


def test_a_calibration_on_few_labels_with_a_zero_width_interval_says_both():
    line = _line(
        labels=3,
        kappa=1.0,
        kappa_low=1.0,
        kappa_high=1.0,
        calibrated=True,
        why="kappa lower bound 1.00 >= 0.6 on 3 labels",
    )
    assert line.endswith(
        "calibrated: kappa lower bound 1.00 >= 0.6 on 3 labels; every bootstrap resample gave this kappa: an interval of "
        "width 0 at this n, not certainty; on 3 labels, under the 50 a kappa interval needs to be narrow"
    ), line


def test_a_calibration_on_enough_labels_with_a_real_interval_is_shown_plainly():
    line = _line(
        labels=120,
        kappa=0.99,
        kappa_low=0.97,
        kappa_high=1.0,
        calibrated=True,
        why="kappa lower bound 0.97 >= 0.6 on 120 labels",
    )
    assert "[0.97, 1.00]" in line and line.endswith("calibrated: kappa lower bound 0.97 >= 0.6 on 120 labels"), line


def test_an_uncalibrated_judge_gets_the_zero_width_note_but_no_few_labels_note():
    line = _line(
        labels=20, kappa=1.0, kappa_low=1.0, kappa_high=1.0, calibrated=False, why="20 labels, fewer than min_labels 50"
    )
    assert line.endswith(
        "UNCALIBRATED: 20 labels, fewer than min_labels 50; every bootstrap resample gave this kappa: "
        "an interval of width 0 at this n, not certainty"
    ), line
