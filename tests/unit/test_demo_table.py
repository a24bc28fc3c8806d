"""`llmwatch demo`'s pass-rate table: a row per check that gave a verdict, the others named under it."""

from __future__ import annotations

from llmwatch.agent.apps.demo import check_table, metrics_line


def test_a_check_that_never_applied_is_named_not_shown_as_a_row_of_errors() -> None:
    # What a demo run stopped with samples unscored records: `error` for every check of the suite,
    # tool_call included, though no demo call sends tools (it skips them all).
    counts = {
        ("refusal", "A", "pass"): 40.0,
        ("refusal", "A", "fail"): 2.0,
        ("refusal", "A", "error"): 5.0,
        ("tool_call", "A", "error"): 5.0,
        ("tool_call", "A", "skip"): 42.0,
        ("refusal", "B", "pass"): 30.0,
    }
    lines = "\n".join(check_table(counts)).splitlines()
    rows = [ln for ln in lines if ln.startswith("  refusal") or ln.startswith("  tool_call")]
    assert [r.split()[0] for r in rows] == ["refusal"]
    assert "95.2% of    42 (5 err)" in rows[0]
    assert lines[-1] == "    no verdict, not applicable to this traffic: tool_call"


def test_every_check_with_a_verdict_keeps_its_row() -> None:
    counts = {("json_valid", "A", "fail"): 3.0, ("refusal", "A", "pass"): 1.0}
    lines = "\n".join(check_table(counts)).splitlines()
    assert not any("no verdict" in ln for ln in lines)
    assert sum(ln.startswith("  json_valid") or ln.startswith("  refusal") for ln in lines) == 2


def test_the_summary_does_not_offer_the_stopped_proxys_metrics_as_live() -> None:
    # The summary is printed after the proxy stopped: "metrics http://127.0.0.1:9464/metrics"
    # alone sent a newcomer to an address nothing served any more.
    line = metrics_line("127.0.0.1", 9464)
    assert "http://127.0.0.1:9464/metrics" in line
    assert "while the demo ran" in line and "has stopped" in line
    assert "llmwatch proxy --upstream" in line and "llmwatch simulate" in line
