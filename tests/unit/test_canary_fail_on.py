"""`llmwatch canary`'s text report: --fail-on leaves a family out of the verdict, not out of the report.

A canary slower per token, judged with `--fail-on behaviour`, passes (exit 0, as asked) but its
performance family is worse: the report said "performance  not_worse (does not fail the run)"
and "NOT WORSE: canary B is not worse than stable A", which a reader takes as "performance is fine".
"""

from __future__ import annotations

from helpers.traffic import slower_canary

from llmwatch.scorers.drift.canary import format_text, readings_of


def test_a_family_left_out_of_fail_on_is_still_reported_worse_and_the_run_passes():
    report = slower_canary(fail_on=("behaviour",))
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

    assert gauge(slower_canary(fail_on=("behaviour",)))["performance"] == 2.0
    assert gauge(slower_canary(fail_on=("behaviour", "performance")))["performance"] == 1.0


def test_with_every_family_failing_the_same_canary_is_worse_and_nothing_is_left_out():
    report = slower_canary(fail_on=("behaviour", "performance"))
    assert report.verdict == "worse" and report.exit_code == 1
    assert report.worse_not_failing == [] and report.family_verdicts()["performance"] == "worse"


def test_the_table_gives_the_raw_p_and_the_correction_as_drift_does():
    # A context figure (uncorrected, p_adj "-") said "changed" with no p at all, and nothing said
    # which signals the correction ran over.
    text = format_text(slower_canary(fail_on=("behaviour", "performance")))
    lines = text.splitlines()
    assert any(line.startswith("alpha 0.05 with holm correction over ") and "context figure" in line for line in lines)
    header = next(line for line in lines if line.startswith("verdict "))
    assert header.split()[4:6] == ["p", "p_adj"], header
    context = next(line for line in lines if " perf:latency_ms " in line)
    p, p_adj = context.split()[4:6]
    assert p_adj == "-" and float(p) > 0, context
