"""Evaluation matrix, stability figures and the decision score, checked against hand computations."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
import yaml
from helpers.samples import write_jsonl
from prometheus_client import generate_latest
from scipy.stats import binomtest

from llmwatch.agent.cli.main import main
from llmwatch.agent.components import load_config
from llmwatch.core.config import ConfigError
from llmwatch.core.metrics import Metrics
from llmwatch.core.records import Sample
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.suite import build_suite
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.evaluate import (
    WeightsMismatch,
    build_report,
    compare_reports,
    export_metrics,
    format_text,
)
from llmwatch.scorers.evaluation.matrix import build_categories, categorize, score_samples
from llmwatch.scorers.evaluation.stability import prompt_hash, sampling_stability, turn_stability
from llmwatch.scorers.stats.proportions import wilson_interval

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
REFUSAL = "I'm sorry, but I can't help with that."
CHECKS = [
    {"name": "refusal", "kind": "refusal"},
    {"name": "complete", "kind": "not_empty_or_truncated"},
]
SCORING = ScoringSection.model_validate({"checks": CHECKS, "embeddings": False})


def make_sample(
    sid: str,
    version: str,
    messages: list[dict],
    answer: str,
    *,
    finish: str = "stop",
    cost: float | None = 0.001,
    latency_ms: float = 800.0,
    ttft_ms: float | None = 120.0,
    route: str = "/v1/chat/completions",
    model: str = "gpt-4o-mini",
    metadata: dict | None = None,
    extra: dict | None = None,
    n: int = 0,
) -> Sample:
    return Sample(
        id=sid,
        timestamp=T0 + timedelta(seconds=n),
        route=route,
        model=model,
        model_version=version,
        status=200,
        latency_ms=latency_ms,
        ttft_ms=ttft_ms,
        stream=ttft_ms is not None,
        finish_reason=finish,
        cost_usd=cost,
        request={"model": model, "messages": messages, **(extra or {})},
        response={
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": finish}],
        },
        metadata=metadata or {},
    )


def scores_of(samples: list[Sample]):
    return [r.score for r in build_suite(SCORING).score(samples)]


def matrix(categories: list[dict], weights: dict | None = None, version: str = "2026-12-01") -> MatrixSection:
    return MatrixSection.model_validate(
        {
            "categories": categories,
            "decision": {"weights": weights or {"quality": 0.7, "stability": 0.3}, "weights_version": version},
        }
    )


# --- categories ---------------------------------------------------------------------------------


def test_categories_match_by_metadata_route_model_and_request_rules_and_the_first_match_wins():
    cfg = matrix(
        [
            {
                "name": "vip_support",
                "weight": 3,
                "match": {"metadata": {"category": "support*"}, "models": ["gpt-4o*"]},
            },
            {"name": "multi_turn_dialogue", "match": {"min_turns": 2}},
            {"name": "extraction", "weight": 2, "match": {"json_mode": True}},
            {"name": "tools", "match": {"has_tools": True}},
            {
                "name": "long_document_summary",
                "match": {"request_matches": "(?i)summari[sz]e", "min_prompt_chars": 500},
            },
            {"name": "embeddings", "match": {"routes": ["/v1/embeddings"]}},
        ]
    )
    cats = build_categories(cfg)
    user = [{"role": "user", "content": "Hi"}]
    dialogue = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "And then?"},
    ]
    doc = [
        {"role": "system", "content": "Summarize the document for an executive."},
        {"role": "user", "content": "Q3 revenue grew. " * 40},
    ]
    cases = {
        "vip_support": make_sample(
            "1", "A", dialogue, "ok", metadata={"category": "support-billing"}
        ),  # also multi-turn: first match wins
        "multi_turn_dialogue": make_sample("2", "A", dialogue, "ok", metadata={"category": "sales"}),
        "extraction": make_sample("3", "A", user, "{}", extra={"response_format": {"type": "json_object"}}),
        "tools": make_sample(
            "4", "A", user, "", extra={"tools": [{"type": "function", "function": {"name": "lookup"}}]}
        ),
        "long_document_summary": make_sample("5", "A", doc, "Revenue grew."),
        "embeddings": make_sample("6", "A", user, "", route="/v1/embeddings"),
        "uncategorized": make_sample("7", "A", [{"role": "user", "content": "Summarize: short."}], "ok"),
    }
    for expected, sample in cases.items():
        assert categorize(sample, cats) == expected, expected


def test_matrix_config_errors_name_the_field_and_what_is_allowed():
    with pytest.raises(ConfigError) as err:
        load_config(
            None, overrides={"matrix": {"categories": [{"name": "code", "match": {"regex": "python"}}]}}, environ={}
        )
    assert "matrix.categories.0.match.regex: unknown field; allowed here:" in str(err.value)
    assert "request_matches" in str(err.value)
    with pytest.raises(
        ConfigError, match=r"matrix.decision.weights.qualty: unknown field; allowed here: quality, stability"
    ):
        load_config(None, overrides={"matrix": {"decision": {"weights": {"qualty": 1}}}}, environ={})
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        load_config(
            None,
            overrides={"matrix": {"categories": [{"name": "code", "match": {"request_matches": "(python"}}]}},
            environ={},
        )
    with pytest.raises(
        ConfigError,
        match=r"matrix.categories\[0\] \(code\).checks\[0\]: unknown check 'json_ok'; checks in the scoring suite or the scores: complete, refusal",
    ):
        build_categories(matrix([{"name": "code", "checks": ["json_ok"]}]), known_checks=["refusal", "complete"])


def test_wilson_interval_agrees_with_scipy_and_stays_inside_zero_one():
    for k, n in [(3, 8), (0, 10), (10, 10), (47, 50)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        lo, hi = wilson_interval(k, n)
        assert lo == pytest.approx(ci.low, abs=1e-9) and hi == pytest.approx(ci.high, abs=1e-9)
        assert 0.0 <= lo <= k / n <= hi <= 1.0


# --- version stability ---------------------------------------------------------------------------


def test_the_version_figure_counts_behaviour_and_performance_signals_and_never_an_inputs_shift():
    # Seen against a real llama.cpp server: a new chat template halved the server's prompt-token
    # count, `input:prompt_tokens` read `shifted` at p 4e-21, and the report said "2 of 9 signals
    # drift, min p_adj 4.2e-21": the shift was in the count and its p shown as the drift's.
    from types import SimpleNamespace

    from llmwatch.scorers.drift.model import Signal
    from llmwatch.scorers.evaluation.stability import version_cell

    def sig(name: str, family: str, verdict: str, p_adj: float) -> Signal:
        return Signal(name, "/v1/chat/completions", "t", 0.0, p_adj, 0.0, 60, 60, p_adj, verdict, family=family)

    report = SimpleNamespace(
        verdict="drift",
        signals=[
            sig("input:prompt_tokens", "inputs", "shifted", 4e-21),
            sig("input:mix:category", "inputs", "stable", 1.0),
            sig("pass_rate:answer_relevance", "behaviour", "drift", 3.7e-4),
            sig("score:answer_relevance", "behaviour", "drift", 4.3e-7),
            sig("output_tokens", "behaviour", "stable", 1.0),
            sig("perf:latency_per_token_ms", "performance", "stable", 1.0),
            sig("perf:latency_ms", "performance", "stable", math.nan),  # context: never tested
        ],
    )
    cell = version_cell("B", report, "A", 60)
    assert cell.detail["signals_tested"] == 4 and cell.detail["signals_drifting"] == 2
    assert cell.value == pytest.approx(1 - 2 / 4)
    assert cell.detail["min_p_adjusted"] == pytest.approx(4.3e-7)


# --- turn stability -------------------------------------------------------------------------------

ROUTER = [
    "My new router keeps dropping the Wi-Fi connection every few minutes. What should I check first?",
    "I updated the firmware like you said, but it still drops. The 5 GHz band seems worse.",
    "Changing the channel to 36 helped a bit. Should I also split the 2.4 and 5 GHz networks?",
    "Now my smart plugs won't reconnect after the split. How do I get them back online?",
]
GOOD = [
    "Start with the basics: restart the router, check for a firmware update in the admin page, and see whether the drops happen on every device or only one.",
    "If the 5 GHz band is worse, try a fixed channel instead of auto, and move the router away from walls and metal shelves.",
    "Splitting the bands can help devices that roam badly; give them different names so you can choose which one each device joins.",
    "Most smart plugs only speak 2.4 GHz: put your phone on the 2.4 GHz network, then re-run the plug's pairing mode from its app.",
]
TRUNCATED = "Splitting the bands can help devices that roam badly; give them different names so"


def conversation(prefix: str, version: str, outcomes: list[str], n0: int = 0) -> list[Sample]:
    """One support chat; each call carries the whole history. outcome: good | truncated | refused_and_cut."""
    out, history = [], [{"role": "system", "content": "You are a helpful home-network support assistant."}]
    for turn, outcome in enumerate(outcomes):
        history = history + [{"role": "user", "content": ROUTER[turn]}]
        if outcome == "good":
            answer, finish = GOOD[turn], "stop"
        elif outcome == "truncated":
            answer, finish = TRUNCATED, "length"
        else:
            answer, finish = REFUSAL, "length"
        out.append(
            make_sample(
                f"{prefix}-t{turn + 1}",
                version,
                list(history),
                answer,
                finish=finish,
                metadata={"category": "support"},
                n=n0 + turn,
            )
        )
        history = history + [{"role": "assistant", "content": answer}]
    return out


def test_a_versions_turn_figure_over_all_categories_is_fitted_within_each_category():
    # Multi-turn support chats hold one level (0.5 at every turn); one-question FAQ calls score
    # 1.0, all at turn 1. Pooled, turn 1 looks better than the later turns (a slope of about
    # -0.17 per turn: the FAQ's level read as decay); within each category nothing decays.
    chats = conversation("c1", "A", ["truncated"] * 4) + conversation("c2", "A", ["truncated"] * 4, 10)
    faq = [
        make_sample(
            f"faq-{i}", "A", [{"role": "user", "content": ROUTER[0]}], GOOD[0], metadata={"category": "faq"}, n=40 + i
        )
        for i in range(8)
    ]
    cfg = matrix(
        [
            {
                "name": "multi_turn_dialogue",
                "checks": ["refusal", "complete"],
                "match": {"metadata": {"category": "support"}},
            },
            {"name": "faq", "checks": ["refusal", "complete"], "match": {"metadata": {"category": "faq"}}},
        ]
    )
    samples = chats + faq
    rows = score_samples(samples, scores_of(samples), build_categories(cfg))
    assert sorted({(r.category, r.score) for r in rows}) == [("faq", 1.0), ("multi_turn_dialogue", 0.5)]
    cells = {(c.category, c.model_version): c for c in turn_stability(rows)}
    assert cells[("multi_turn_dialogue", "A")].detail["slope"] == pytest.approx(0.0)
    assert ("faq", "A") not in cells  # one turn only: no slope
    everything = cells[("all", "A")]
    assert everything.detail["slope"] == pytest.approx(0.0) and everything.detail["within"] == "category"
    assert everything.value == 1.0  # the decision score's stability reads this figure


def test_quality_decays_by_turn_and_the_slope_and_its_standard_error_match_a_hand_fit():
    # Sample scores (mean of 2 checks): conversation 1: 1, 1, .5, .5; conversation 2: 1, .5, .5, 0.
    samples = conversation("c1", "A", ["good", "good", "truncated", "truncated"]) + conversation(
        "c2", "A", ["good", "truncated", "truncated", "refused_and_cut"], 10
    )
    cfg = matrix(
        [
            {
                "name": "multi_turn_dialogue",
                "checks": ["refusal", "complete"],
                "match": {"metadata": {"category": "support"}},
            }
        ]
    )
    rows = score_samples(samples, scores_of(samples), build_categories(cfg))
    assert [r.score for r in rows] == [1.0, 1.0, 0.5, 0.5, 1.0, 0.5, 0.5, 0.0]

    # By hand: x = 1..4 twice, mean 2.5, Sxx = 10; y mean 5/8; Sxy = -1.0 + -1.5 = -2.5 -> slope -0.25.
    # Intercept 0.625 + 0.25 * 2.5 = 1.25; residuals 0, .25, 0, .25, 0, -.25, 0, -.25 -> SSR = 0.25;
    # SE = sqrt(SSR / (n - 2) / Sxx) = sqrt(0.25 / 6 / 10) = sqrt(1 / 240).
    cells = {(c.category, c.model_version): c for c in turn_stability(rows)}
    fit = cells[("multi_turn_dialogue", "A")].detail
    assert fit["slope"] == pytest.approx(-0.25)
    assert fit["stderr"] == pytest.approx(math.sqrt(1 / 240))
    assert fit["intercept"] == pytest.approx(1.25)
    assert {t: v["mean"] for t, v in fit["by_turn"].items()} == pytest.approx(
        {"1": 1.0, "2": 0.75, "3": 0.5, "4": 0.25}
    )
    # 1 - 9 * 0.25 < 0: a conversation loses more than the whole score by turn 10.
    assert cells[("multi_turn_dialogue", "A")].value == 0.0
    assert cells[("all", "A")].detail["slope"] == pytest.approx(-0.25)

    # A gentler decay: conversation 1 only, y = 1, 1, .5, .5 -> slope by hand: Sxy = -1.0, Sxx = 5 -> -0.2.
    gentle = turn_stability(rows[:4])
    assert gentle[0].detail["slope"] == pytest.approx(-0.2)
    assert gentle[0].value == 0.0  # 1 - 9 * 0.2 < 0
    steady = turn_stability(
        score_samples(
            conversation("c3", "A", ["good"] * 4),
            scores_of(conversation("c3", "A", ["good"] * 4)),
            build_categories(cfg),
        )
    )
    assert steady[0].detail["slope"] == 0.0 and steady[0].value == 1.0

    # The matrix cell for the same samples: mean 5/8, 3 of 8 passed every check.
    report = build_report(samples, scores_of(samples), cfg)
    cell = report.cells[0]
    assert (cell.n, cell.mean_score, cell.pass_rate) == (8, 0.625, 3 / 8)
    assert (cell.ci_low, cell.ci_high) == pytest.approx(wilson_interval(3, 8))


# --- sampling stability -----------------------------------------------------------------------------


def test_duplicated_prompts_with_noisy_answers_give_population_variance_and_one_minus_cv_by_hand():
    reset = "How do I reset my password on the customer portal?"
    export = "Can I export my invoices for last year as CSV?"
    good_reset = "Open the portal's sign-in page, choose 'Forgot password', and follow the link we email you."
    good_export = "Yes: go to Billing > Invoices, filter by last year, then choose Export > CSV."
    user = lambda text: [{"role": "user", "content": text}]  # noqa: E731
    samples = [
        # Same prompt four times; whitespace and sampling parameters do not make it another prompt.
        make_sample("r1", "A", user(reset), good_reset, extra={"temperature": 0.2}),
        make_sample(
            "r2",
            "A",
            user("  How do I reset my  password on the customer portal? "),
            good_reset,
            extra={"temperature": 0.9, "seed": 7},
        ),
        make_sample("r3", "A", user(reset), good_reset, finish="length"),  # 0.5
        make_sample("r4", "A", user(reset), good_reset),
        make_sample("e1", "A", user(export), good_export),
        make_sample("e2", "A", user(export), REFUSAL, finish="length"),  # 0.0
        make_sample("e3", "A", user(export), good_export),
        make_sample("once", "A", user("What are your opening hours?"), "Nine to five."),  # no duplicate: no group
    ]
    assert prompt_hash(samples[0].request) == prompt_hash(samples[1].request)
    assert prompt_hash(samples[0].request) != prompt_hash(
        {"messages": user(reset), "response_format": {"type": "json_object"}}
    )
    cfg = matrix([{"name": "instruction_following", "checks": ["refusal", "complete"]}])
    rows = score_samples(samples, scores_of(samples), build_categories(cfg))
    groups, cells = sampling_stability(rows)
    by_n = {g.n: g for g in groups}
    assert sorted(by_n) == [3, 4]

    # Reset: scores 1, 1, .5, 1 -> mean .875, deviations .125, .125, -.375, .125,
    # variance (3 * .015625 + .140625) / 4 = .046875, 1 - CV = 1 - sqrt(.046875) / .875.
    assert by_n[4].mean == pytest.approx(0.875)
    assert by_n[4].variance == pytest.approx(0.046875)
    assert by_n[4].stability == pytest.approx(1 - math.sqrt(0.046875) / 0.875)
    # Export: 1, 0, 1 -> mean 2/3, variance ((1/3)^2 * 2 + (2/3)^2) / 3 = 2/9, CV = sqrt(2/9) / (2/3) = 0.7071.
    assert by_n[3].variance == pytest.approx(2 / 9)
    assert by_n[3].stability == pytest.approx(1 - math.sqrt(2 / 9) / (2 / 3))
    cell = next(c for c in cells if c.category == "instruction_following")
    assert cell.value == pytest.approx(((1 - math.sqrt(0.046875) / 0.875) + (1 - math.sqrt(2 / 9) / (2 / 3))) / 2)
    assert cell.detail["mean_variance"] == pytest.approx((0.046875 + 2 / 9) / 2)
    assert (cell.n_groups, cell.n_samples) == (2, 7)


def test_a_prompt_that_always_fails_is_consistently_bad_not_unstable():
    samples = [
        make_sample(f"x{i}", "A", [{"role": "user", "content": "Write my essay"}], REFUSAL, finish="length")
        for i in range(3)
    ]
    rows = score_samples(samples, scores_of(samples), build_categories(matrix([{"name": "writing"}])))
    groups, _ = sampling_stability(rows)
    # Mean 0 means every score is 0: CV is defined as 0 there, so 1 - CV = 1 (quality shows the problem).
    assert (groups[0].mean, groups[0].variance, groups[0].stability) == (0.0, 0.0, 1.0)


# --- decision score ----------------------------------------------------------------------------------


def two_versions() -> list[Sample]:
    q1 = [{"role": "user", "content": "Summarise our refund policy in one sentence."}]
    q2 = [{"role": "user", "content": "Which plan includes phone support?"}]
    a1 = "Refunds are available within 30 days of purchase for unused licences."
    a2 = "Phone support is included in the Business and Enterprise plans."
    out = []
    # A: every answer passes, repeats agree; $0.004 per request, slower.
    for i in range(2):
        out.append(make_sample(f"a-q1-{i}", "A", q1, a1, cost=0.004, latency_ms=1000.0 + 100 * i, ttft_ms=200.0, n=i))
        out.append(make_sample(f"a-q2-{i}", "A", q2, a2, cost=0.004, latency_ms=1200.0 + 100 * i, ttft_ms=220.0, n=i))
    # B: a quarter as expensive; q1 is truncated once (scores 1, .5), q2 passes twice.
    out.append(make_sample("b-q1-0", "B", q1, a1, cost=0.001, latency_ms=500.0, ttft_ms=90.0))
    out.append(make_sample("b-q1-1", "B", q1, a1, finish="length", cost=0.001, latency_ms=520.0, ttft_ms=95.0))
    out.append(make_sample("b-q2-0", "B", q2, a2, cost=0.001, latency_ms=480.0, ttft_ms=80.0))
    out.append(make_sample("b-q2-1", "B", q2, a2, cost=0.001, latency_ms=510.0, ttft_ms=85.0))
    return out


def test_a_report_without_prices_says_no_version_is_best_and_how_to_price_the_model(tmp_path: Path, capsys):
    # A self-hosted model (SmolLM2 behind llama.cpp) is in no price table: its samples carry no
    # cost, so no version has a decision score. The text used to end the table with no verdict.
    samples = [s.model_copy(update={"cost_usd": None}) for s in two_versions()]
    sdir = tmp_path / "samples"
    sdir.mkdir()
    write_jsonl(sdir / "samples-20261201-0000.jsonl", samples)
    scores = write_jsonl(tmp_path / "scores.jsonl", scores_of(samples))
    assert main(["report", "--samples", str(sdir), "--scores", str(scores)]) == 0
    out = capsys.readouterr().out
    assert "best: none. No decision score: no version has quality, stability and a price" in out, out
    assert "give it a row under metrics.pricing or in a prices_file before the traffic" in out, out


def test_decision_score_divides_weighted_quality_and_stability_by_cost_relative_to_the_cheapest_version():
    samples = two_versions()
    cfg = matrix(
        [{"name": "faq", "weight": 2, "checks": ["refusal", "complete"]}],
        weights={"quality": 0.6, "stability": 0.4},
        version="test-1",
    )
    report = build_report(samples, scores_of(samples), cfg)
    rows = {r.model_version: r for r in report.decision}
    # A: quality 1, stability 1 (both groups constant), USD 4 per 1k requests, 4x the cheapest -> (0.6 + 0.4) / 4.
    assert (rows["A"].quality, rows["A"].stability, rows["A"].cost_per_1k, rows["A"].normalized_cost) == pytest.approx(
        (1.0, 1.0, 4.0, 4.0)
    )
    assert rows["A"].decision_score == pytest.approx(0.25)
    # B: quality (1 + .5 + 1 + 1) / 4 = .875; stability: q1 mean .75, std .25, 1 - CV = 2/3; q2 = 1; mean 5/6.
    assert rows["B"].quality == pytest.approx(0.875)
    assert rows["B"].stability == pytest.approx(5 / 6)
    assert rows["B"].normalized_cost == pytest.approx(1.0)
    assert rows["B"].decision_score == pytest.approx(0.6 * 0.875 + 0.4 * 5 / 6)
    assert report.costs["B"].cost_per_request == pytest.approx(0.001)
    assert report.costs["A"].latency_ms["p50"] == pytest.approx(1150.0)
    assert report.costs["B"].ttft_ms["p50"] == pytest.approx(87.5)
    text = format_text(report)
    assert "weights_version test-1" in text and "best: version B" in text
    assert "(0.6 * quality + 0.4 * stability) / normalized_cost" in text


def cheap_but_worse(n: int = 60, refusals: int = 20) -> list[Sample]:
    """A passes everything at $0.004; B costs a quarter as much but refuses `refusals` of its `n` answers."""
    q = [{"role": "user", "content": "Which plan includes phone support?"}]
    answer = "Phone support is included in the Business and Enterprise plans."
    out = [make_sample(f"a-{i}", "A", q, answer, cost=0.004, n=i) for i in range(n)]
    out += [make_sample(f"b-{i}", "B", q, REFUSAL if i < refusals else answer, cost=0.001, n=i) for i in range(n)]
    return out


def test_a_cheaper_version_that_is_worse_on_a_check_is_never_called_best():
    samples = cheap_but_worse()
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    rows = {r.model_version: r for r in report.decision}
    # The score alone would pick B: a quarter of the cost outweighs a third of refusals.
    assert rows["B"].decision_score > rows["A"].decision_score
    # 40/60 against 60/60 on `refusal`: one-sided test, Holm over B's family, far below alpha.
    assert [(g["check"], g["than"]) for g in rows["B"].worse_on] == [("refusal", "A")]
    assert rows["B"].worse_on[0]["pass_rate"] == pytest.approx(40 / 60)
    assert rows["B"].worse_on[0]["p_adjusted"] < 0.05
    assert not rows["A"].worse_on and rows["A"].eligible and not rows["B"].eligible
    assert rows["B"].verdict(report.decision) == "cheaper, worse on refusal"
    text = format_text(report)
    assert "best: version A" in text and "best: version B" not in text
    assert "cheaper, worse on refusal" in text
    # The verdict's decision-score intervals name their level (1 - alpha), as the table's header does.
    b = rows["B"]
    assert b.decision_low is not None and b.decision_high is not None
    assert (
        f"version B: decision score {b.decision_score:.3f} [{b.decision_low:.3f}, {b.decision_high:.3f}] (95 % interval)"
        in text
    ), text
    # So do the pass-rate intervals of "not eligible" (Wilson at 1 - alpha), which printed "[54%-77%]" alone.
    g = b.worse_on[0]
    assert (
        f"refusal 66.7% [{g['ci_low']:.0%}, {g['ci_high']:.0%}] (95 % interval) of 60 vs "
        f"100.0% [{g['than_ci_low']:.0%}, {g['than_ci_high']:.0%}] (95 % interval) of 60 for version A"
    ) in text, text
    assert (g["ci_low"], g["ci_high"]) == pytest.approx(wilson_interval(40, 60, 1.959963984540054))
    data = report.to_dict()["decision"]
    assert data["best"] == "A" and data["alpha"] == 0.05
    assert {v["model_version"]: v["verdict"] for v in data["versions"]} == {"A": "", "B": "cheaper, worse on refusal"}


def test_the_html_decision_figure_draws_the_intervals_and_marks_the_cheaper_worse_version_not_eligible(monkeypatch):
    # The figure drew B's longer bar alone under "higher is better" while the verdict above named A
    # best: a reader of the picture picked the version the quality guard had ruled out.
    pytest.importorskip("matplotlib")
    from llmwatch.scorers.reports import html

    samples = cheap_but_worse()
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    figures: list = []
    monkeypatch.setattr(html.HtmlDocument, "figure", lambda self, fig, caption="": figures.append((fig, caption)))
    page = html.render_evaluation(report)
    fig, caption = next((f, c) for f, c in figures if c.startswith("Decision score per version"))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["A\n(best)", "B\n(not eligible)"]
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert [b.get_hatch() for b in bars] == [None, "//"]
    # Each score with its bootstrap interval, as error bars and in the table.
    ((_, _, (bar_lines,)),) = [c.lines for c in ax.containers if hasattr(c, "has_xerr") and c.has_xerr]
    spans = sorted((round(float(a), 6), round(float(b), 6)) for (a, _), (b, _) in bar_lines.get_segments())
    rows = {r.model_version: r for r in report.decision}
    assert spans == sorted(
        (round(r.decision_low, 6), round(r.decision_high, 6)) for r in rows.values() if r.decision_low is not None
    )
    b = rows["B"]
    assert f"{b.decision_score:.3f} [{b.decision_low:.3f}-{b.decision_high:.3f}]" in page
    assert "not eligible" in caption and "interval" in caption
    for f, _ in figures:
        html._pyplot().close(f)


def test_long_version_names_are_printed_whole_and_the_text_tables_stay_aligned():
    # Real snapshot names: the checks table cut both to "version gpt-3.5-turb" and ran them
    # together, and the cost and decision rows pushed their figures out from under the headings.
    names = {"A": "gpt-3.5-turbo-0301", "B": "gpt-3.5-turbo-0613-long-snapshot-name"}
    samples = [s.model_copy(update={"model_version": names[s.model_version]}) for s in cheap_but_worse(refusals=10)]
    text = format_text(build_report(samples, scores_of(samples), matrix([{"name": "faq"}])))
    lines = text.splitlines()

    def columns(header: str, row_start: str) -> None:
        head = next(line for line in lines if line.startswith(header))
        row = next(line for line in lines if line.startswith(row_start))
        for name in names.values():
            assert f"version {name} " in head + " "
        # The second version's column starts where its heading does (a rate may be padded by one).
        at = head.index(f"version {names['B']}")
        assert row[at - 2 : at] == "  " and row[at : at + 2].strip(), (head, row)

    columns("  check ", "  refusal ")
    columns("  category ", "  faq ")
    heads = [i for i, line in enumerate(lines) if re.match(r"  version +(requests|quality) ", line)]
    assert len(heads) == 2
    for i in heads:  # the cost table and the decision table: figures right-aligned under their headings
        head = lines[i]
        end = head.index("requests") + len("requests") if "requests" in head else head.index("quality") + len("quality")
        for row in lines[i + 1 : i + 3]:
            assert row.split()[0] in names.values()
            assert row[end - 1] != " " and row[end] == " ", (head, row)


def test_the_html_report_without_any_decision_score_draws_no_empty_figure_and_says_why(monkeypatch):
    # Real samples captured without a cost (AlpacaEval outputs): the figure was an empty axis with
    # ticks around 0 and a cap at 0 per version.
    pytest.importorskip("matplotlib")
    from llmwatch.scorers.reports import html

    samples = [s.model_copy(update={"cost_usd": None}) for s in cheap_but_worse()]
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    assert all(r.decision_score is None for r in report.decision)
    captions: list[str] = []
    monkeypatch.setattr(html.HtmlDocument, "figure", lambda self, fig, caption="": captions.append(caption))
    page = html.render_evaluation(report)
    assert not [c for c in captions if c.startswith("Decision score per version")]
    assert "No decision score to draw: no version has quality, stability and a price" in page


def test_the_html_report_draws_no_turn_figure_when_every_sample_is_a_first_turn(monkeypatch):
    # Real single-turn outputs (AlpacaEval): the figure was one dot per version at turn 1 on an
    # axis zoomed to 0.925-0.933, a picture of a difference rather than of any trend by turn.
    pytest.importorskip("matplotlib")
    from llmwatch.scorers.reports import html

    samples = cheap_but_worse()
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    assert {tuple(d.by_turn) for d in report.turn_decay} == {("1",)}
    captions: list[str] = []
    monkeypatch.setattr(html.HtmlDocument, "figure", lambda self, fig, caption="": captions.append(caption))
    page = html.render_evaluation(report)
    assert not [c for c in captions if c.startswith("Mean score by turn")]
    assert "Nothing to draw by turn: every scored sample is turn 1" in page
    assert "conversations (2+ turns)" in page  # the table stays, with its verdicts


def test_a_difference_within_chance_does_not_disqualify_a_version():
    # 1 refusal in 60 against none: not significant, so the cheaper B stays best.
    samples = cheap_but_worse(refusals=1)
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    assert report.to_dict()["decision"]["best"] == "B"


def test_when_every_version_is_worse_than_another_on_something_no_version_is_best():
    q = [{"role": "user", "content": "Which plan includes phone support?"}]
    answer = "Phone support is included in the Business and Enterprise plans."
    # A refuses a third of the time; B is truncated a third of the time.
    samples = [make_sample(f"a-{i}", "A", q, REFUSAL if i < 20 else answer, n=i) for i in range(60)]
    samples += [make_sample(f"b-{i}", "B", q, answer, finish="length" if i < 20 else "stop", n=i) for i in range(60)]
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    assert report.to_dict()["decision"]["best"] is None
    text = format_text(report)
    assert "best: none. No version qualifies as best" in text
    assert "worse on refusal" in text and "worse on complete" in text


def test_the_decision_score_carries_a_bootstrap_interval_around_it():
    samples = cheap_but_worse(refusals=10)
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    for r in report.decision:
        assert r.decision_low is not None and r.decision_high is not None
        assert r.decision_low <= r.decision_score <= r.decision_high
    b = next(r for r in report.decision if r.model_version == "B")
    # B's quality varies by sample (10 of 60 refused), so its interval has width; it is reproducible.
    assert b.decision_high - b.decision_low > 0.01
    again = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    assert [(r.decision_low, r.decision_high) for r in again.decision] == [
        (r.decision_low, r.decision_high) for r in report.decision
    ]


def test_a_version_without_a_price_gets_no_decision_score_rather_than_a_guess():
    samples = [s.model_copy(update={"cost_usd": None}) if s.model_version == "A" else s for s in two_versions()]
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    rows = {r.model_version: r for r in report.decision}
    assert rows["A"].decision_score is None and "price" in rows["A"].note
    assert rows["B"].normalized_cost == 1.0 and rows["B"].decision_score is not None


def test_decision_figures_are_exported_as_prometheus_gauges():
    samples = two_versions()
    report = build_report(samples, scores_of(samples), matrix([{"name": "faq"}]))
    metrics = Metrics()
    export_metrics(metrics, report)
    text = generate_latest(metrics.registry).decode()
    b = next(r for r in report.decision if r.model_version == "B").decision_score
    assert f'llmwatch_decision_score{{model_version="B"}} {b}' in text
    assert 'llmwatch_category_quality{category="faq",model_version="B"} 0.875' in text
    assert 'llmwatch_stability{category="all",kind="sampling",model_version="A"} 1.0' in text


def test_report_command_prints_the_matrix_and_refuses_to_compare_runs_made_with_other_weights(tmp_path: Path, capsys):
    samples = two_versions()
    sdir = tmp_path / "samples"
    sdir.mkdir()
    write_jsonl(sdir / "samples-20261201-0000.jsonl", samples)
    scores = write_jsonl(tmp_path / "scores.jsonl", scores_of(samples))

    def config(name: str, quality: float, version: str) -> str:
        path = tmp_path / name
        path.write_text(
            yaml.safe_dump(
                {
                    "scoring": {"checks": CHECKS, "embeddings": False},
                    "matrix": {
                        "categories": [{"name": "faq", "checks": ["refusal", "complete"]}],
                        "decision": {
                            "weights": {"quality": quality, "stability": 1 - quality},
                            "weights_version": version,
                        },
                    },
                }
            )
        )
        return str(path)

    def report(config: str, *options: str) -> int:
        return main(["report", "--samples", str(sdir), "--scores", str(scores), "--config", config, *options])

    first = tmp_path / "report-1.json"
    assert report(config("c1.yaml", 0.7, "2026-12-01"), "--out", str(first)) == 0
    out = capsys.readouterr().out
    assert "decision weights 2026-12-01: quality 0.7, stability 0.3" in out
    assert "Quality matrix" in out and "faq" in out and "Cost and latency" in out and "best: version B" in out
    saved = orjson.loads(first.read_bytes())
    assert saved["decision"]["weights_version"] == "2026-12-01"

    other = config("c2.yaml", 0.5, "2027-01-15")
    assert report(other, "--compare", str(first)) == 2
    err = capsys.readouterr().err
    assert (
        "refusing to compare" in err and "2026-12-01" in err and "2027-01-15" in err and "--allow-weights-change" in err
    )

    assert report(other, "--compare", str(first), "--allow-weights-change") == 0
    assert "WARNING: the weights changed" in capsys.readouterr().out

    # Same weights: compared silently, with the deltas.
    assert report(config("c3.yaml", 0.7, "2026-12-01"), "--compare", str(first), "--format", "json") == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["comparison"]["weights_changed"] is False
    assert data["comparison"]["versions"][0]["decision_score"]["delta"] == pytest.approx(0.0)


def test_compare_reports_refuses_different_weights_in_the_library_too():
    samples = two_versions()
    a = build_report(
        samples, scores_of(samples), matrix([{"name": "faq"}], {"quality": 0.7, "stability": 0.3}, "v1")
    ).to_dict()
    b = build_report(
        samples, scores_of(samples), matrix([{"name": "faq"}], {"quality": 0.7, "stability": 0.3}, "v2")
    ).to_dict()
    with pytest.raises(WeightsMismatch, match="weights_version 'v1'"):
        compare_reports(b, a)
    assert compare_reports(b, a, allow_weights_change=True)["weights_changed"] is True
