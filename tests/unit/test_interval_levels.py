"""Every interval llmwatch prints names its level, and what the outputs call an interval keeps it.

From the statistics audit: `shadow report`'s similarity line printed `0.912 [0.881, 0.938]` with
no level (it is a 90 % interval at the default alpha, not the 95 % a reader assumes); regress's
FLAKY marker printed `(28.0%-78.7%)` the same way; regress called a case flaky when "the Wilson
interval of its pass rate excludes 0 and 1", which for 0 < k < n always holds; and the shadow
report's paired-bootstrap ratio interval misses more often than it says below 100 pairs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmwatch.agent.cli.shadow import format_text, render_html
from llmwatch.scorers.evaluation.config import ShadowMargins
from llmwatch.scorers.evaluation.paired import RATIO_MIN_PAIRS, PairColumns, compare_columns
from llmwatch.scorers.evaluation.regress import Attempt, RegressSuite, SuiteCase, summarize_cases
from llmwatch.scorers.stats.format import interval_text


def test_an_interval_is_written_with_its_level():
    assert interval_text(0.8812, 0.93845, 0.9) == "[0.881, 0.938] (90 % interval)"
    assert interval_text(0.28, 0.787, 0.95, ".1%") == "[28.0%, 78.7%] (95 % interval)"
    assert interval_text(None, 1.0, 0.9) == "[-, 1.000] (90 % interval)"


def _columns(n: int, seed: int = 3) -> PairColumns:
    """n pairs as `shadow report` streams them: latency and cost both sides, an answer similarity."""
    rng = np.random.default_rng(seed)
    cols = PairColumns()
    cols.candidate, cols.n = "B", n
    prompt = rng.lognormal(0.0, 0.5, n)
    for p, c in zip(prompt * rng.lognormal(0, 0.2, n), prompt * rng.lognormal(0, 0.2, n)):
        cols.latency.extend([1000 * p, 1000 * c])
        cols.cost.extend([1e-4 * p, 1e-4 * c])
    cols.similarity.extend(rng.uniform(0.7, 1.0, n).tolist())
    return cols


@pytest.mark.parametrize("alpha, level", [(0.05, "90 %"), (0.025, "95 %")])
def test_the_shadow_similarity_interval_names_its_level_in_text_html_and_json(alpha, level):
    pytest.importorskip("matplotlib")
    report = compare_columns(_columns(40), ShadowMargins(), alpha=alpha)
    line = next(x for x in format_text([report], alpha).splitlines() if "answer similarity" in x)
    assert f"({level} interval) over 40 pairs" in line, line
    assert f"({level} interval) over 40 pairs" in render_html([report], {}, alpha)
    sim = json.loads(json.dumps(report.as_dict()))["similarity"]
    assert sim["confidence"] == pytest.approx(1 - 2 * alpha) and sim["ci_low"] < sim["mean"] < sim["ci_high"]


@pytest.mark.parametrize("n", [10, 24, 25, 99, 100])
def test_a_ratio_interval_on_too_few_pairs_is_flagged_in_json_text_and_html(n):
    pytest.importorskip("matplotlib")
    # Measured (docs/design/statistics.md): a p95 ratio's bootstrap interval is too narrow below 25
    # pairs and flagged; a mean ratio's Fieller interval keeps its level from 10 (test_stats_reference),
    # so it never is.
    report = compare_columns(_columns(n), ShadowMargins(), alpha=0.05)
    rows = {r["signal"]: r for r in report.as_dict()["rows"]}
    assert rows["cost_mean"]["interval_too_narrow"] is False
    assert rows["latency_p95"]["interval_too_narrow"] is (n < RATIO_MIN_PAIRS["p95"] == 25)
    text, html = format_text([report], 0.05), render_html([report], {}, 0.05)
    line = "latency_p95: fewer than 25 pairs: this interval is too narrow"
    assert (line in text) is (n < 25) and (line in html) is (n < 25), n
    assert "cost_mean: fewer than" not in text and "cost_mean: fewer than" not in html


def _suite() -> RegressSuite:
    return RegressSuite("s.jsonl", [SuiteCase(id="c", input="hi", expected="hello")], "0" * 64, {})


@pytest.mark.parametrize("confidence", [0.5, 0.95, 0.999999])
@pytest.mark.parametrize("n", [1, 2, 5, 30, 400])
def test_a_case_is_flaky_exactly_when_it_passed_and_failed_at_least_once(n, confidence):
    for k in range(n + 1):
        attempts = [Attempt(case_id="c", repeat=i, result="pass" if i < k else "fail") for i in range(n)]
        # An error is not a judgement: it makes no case flaky.
        attempts.append(Attempt(case_id="c", repeat=n, result="error"))
        (case,), _ = summarize_cases(_suite(), attempts, confidence=confidence)
        assert case.flaky is (0 < k < n), (k, n)
