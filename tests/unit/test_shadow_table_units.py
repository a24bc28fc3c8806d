"""`llmwatch shadow report`'s table names the unit of every primary and candidate figure.

Without it a reader could not tell a pass rate of 2.5 % from a p95 of 2.5 ms, or a mean cost in
USD from a rate: the table printed `2.525`, `2244` and `0.0004776` side by side, bare.
"""

from __future__ import annotations

from llmwatch.agent.cli.shadow import HEADERS, format_text, table_rows
from llmwatch.scorers.evaluation.paired import CandidateReport, Row


def _report() -> CandidateReport:
    # The rows as scorers/llmwatch/scorers/evaluation/paired.py builds them: rates in percent
    # (kind rate / rate_up), continuous signals with their unit in `note`, check values unitless.
    rows = [
        Row("error_rate", "*", 198, 2.525, 0.0, -2.53, -4.49, -0.51, 1.0, kind="rate_up", margin=1.0),
        Row("check:refusal", "*", 193, 86.01, 77.72, -8.29, -13.38, -3.03, 0.0069, kind="rate", margin=-1.0),
        Row("latency_p95", "*", 193, 2244.0, 2177.0, 0.97, 0.932, 1.037, 0.45, kind="ratio", note="ms"),
        Row("output_tokens_mean", "*", 193, 82.37, 63.81, 0.775, 0.716, 0.835, 1.0, kind="info", note="tokens"),
        Row("cost_mean", "*", 193, 0.0004776, 0.0003501, 0.733, 0.656, 0.805, 1.0, kind="ratio", note="USD"),
        Row("value:answer_relevance", "*", 50, 0.42, 0.40, -0.02, None, None, 0.3),
        Row("ttft_p95", "*", 0, None, None, None, None, None, None, kind="ratio", note="ms"),
    ]
    return CandidateReport("B", 198, rows, {"mean": None}, "undecided", [], 400)


def _figures() -> dict[str, tuple[str, str]]:
    primary, candidate = HEADERS.index("primary"), HEADERS.index("candidate")
    return {row[0]: (row[primary], row[candidate]) for row in table_rows(_report())}


def test_rates_are_shown_in_percent_and_continuous_signals_in_their_unit():
    figures = _figures()
    assert figures["error_rate"] == ("2.525 %", "0 %")
    assert figures["check:refusal"] == ("86.01 %", "77.72 %")
    assert figures["latency_p95"] == ("2244 ms", "2177 ms")
    assert figures["output_tokens_mean"] == ("82.37 tokens", "63.81 tokens")
    assert figures["cost_mean"] == ("0.0004776 USD", "0.0003501 USD")


def test_a_unitless_check_value_and_a_missing_figure_get_no_unit():
    figures = _figures()
    assert figures["value:answer_relevance"] == ("0.42", "0.4")
    assert figures["ttft_p95"] == ("-", "-")


def test_the_text_report_prints_the_units_in_its_table():
    text = format_text([_report()], 0.05)
    line = next(x for x in text.splitlines() if x.strip().startswith("latency_p95"))
    assert "2244 ms" in line and "2177 ms" in line
