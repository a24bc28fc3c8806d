"""`llmwatch canary`'s text report: --fail-on leaves a family out of the verdict, not out of the report.

A canary slower per token, judged with `--fail-on behaviour`, passes (exit 0, as asked) but its
performance family is worse: the report said "performance  not_worse (does not fail the run)"
and "NOT WORSE: canary B is not worse than stable A", which a reader takes as "performance is fine".
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
from helpers.traffic import MIX, MODEL, traffic

from llmwatch.scorers.drift.canary import compare_versions, format_text, readings_of, same_window
from llmwatch.scorers.drift.compare import DriftSettings


def _slower_canary(**settings):
    rng = np.random.default_rng(6)
    a = traffic(rng, 800, MODEL, MIX, prefix="a", version="A")
    b = traffic(rng, 800, replace(MODEL, ms_per_token=MODEL.ms_per_token * 1.6), MIX, prefix="b", version="B")
    b = ([s.model_copy(update={"timestamp": s.timestamp + timedelta(seconds=0.5)}) for s in b[0]], b[1], b[2])
    stable, canary, window = same_window(a[0] + b[0], "A", "B")
    report, _, _ = compare_versions(
        (stable, a[1], a[2]),
        (canary, b[1], b[2]),
        stable_version="A",
        canary_version="B",
        window=window,
        settings=DriftSettings(**settings),
    )
    return report


def test_a_family_left_out_of_fail_on_is_still_reported_worse_and_the_run_passes():
    report = _slower_canary(fail_on=("behaviour",))
    assert report.verdict == "not_worse" and report.exit_code == 0
    assert report.family_verdicts()["performance"] == "worse"
    text = format_text(report)
    head, families = text.splitlines()[0], text.splitlines()[2:5]
    assert head.startswith(
        "NOT WORSE: canary B is not worse than stable A in the same window on the families that fail the run (behaviour); "
        "worse on performance/perf:latency_per_token_ms (higher)"
    ), text
    assert head.endswith(", which do not fail the run (--fail-on)")
    assert "  performance  worse (does not fail the run)" in families, text
    assert report.to_dict()["worse_not_failing"][0]["signal"] == "perf:latency_per_token_ms"


def test_the_gauge_reads_a_family_left_out_of_fail_on_as_worse_without_paging():
    # The live gauge is what LLMWatchCanaryWorse pages on (== 1). A family the operator left out of
    # drift.fail_on reads 2: worse on the dashboard, no page; one in fail_on still reads 1.
    def gauge(report):
        return {r.key: r.value for r in readings_of(report) if r.kind == "verdict"}

    assert gauge(_slower_canary(fail_on=("behaviour",)))["performance"] == 2.0
    assert gauge(_slower_canary(fail_on=("behaviour", "performance")))["performance"] == 1.0


def test_with_every_family_failing_the_same_canary_is_worse_and_nothing_is_left_out():
    report = _slower_canary(fail_on=("behaviour", "performance"))
    assert report.verdict == "worse" and report.exit_code == 1
    assert report.worse_not_failing == [] and report.family_verdicts()["performance"] == "worse"


def test_the_table_gives_the_raw_p_and_the_correction_as_drift_does():
    # A context figure (uncorrected, p_adj "-") said "changed" with no p at all, and nothing said
    # which signals the correction ran over.
    text = format_text(_slower_canary(fail_on=("behaviour", "performance")))
    lines = text.splitlines()
    assert any(line.startswith("alpha 0.05 with holm correction over ") and "context figure" in line for line in lines)
    header = next(line for line in lines if line.startswith("verdict "))
    assert header.split()[4:6] == ["p", "p_adj"], header
    context = next(line for line in lines if " perf:latency_ms " in line)
    p, p_adj = context.split()[4:6]
    assert p_adj == "-" and float(p) > 0, context
