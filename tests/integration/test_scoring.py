"""Scoring off the hot path: checks configured per route/model, broken checks isolated, metrics and files."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone

import openai
import orjson
import pytest
from helpers.agents import metric, proxy_url, read_samples, scrape, wait_until

from llmwatch.core.config import ConfigError
from llmwatch.core.records import Sample
from llmwatch.scorers.checks import rules
from llmwatch.scorers.checks.base import error_outcome, failed
from llmwatch.scorers.checks.config import CheckSpec, ScoringSection
from llmwatch.scorers.checks.embeddings import EMBEDDING_CHECKS
from llmwatch.scorers.checks.registry import CHECK_KINDS, build_check
from llmwatch.scorers.checks.suite import Suite, build_suite, validate_scoring
from llmwatch.scorers.evaluation.regress import load_suite

RULES_ONLY = {"enabled": True, "embeddings": False}


def sample(answer: str = "Roast it at 220 C for an hour.", **kw) -> Sample:
    base = dict(
        id=kw.pop("id", "s1"),
        timestamp=datetime.now(timezone.utc),
        model="gpt-4o",
        model_version="A",
        status=200,
        latency_ms=900.0,
        request={"model": "gpt-4o", "messages": [{"role": "user", "content": "How do I roast a chicken?"}]},
        response={"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]},
        operation="chat",
    )
    base.update(kw)
    return Sample(**base)


def test_default_suite_scores_generative_calls_and_only_json_mode_gets_json_valid():
    suite = build_suite(ScoringSection(embeddings=False))
    plain = {r.score.check for r in suite.score([sample()])}
    assert plain == {"refusal", "not_empty_or_truncated", "language_match", "pii_leak"}
    json_req = {
        "model": "gpt-4o",
        "response_format": {"type": "json_object"},
        "messages": [{"role": "user", "content": "JSON please"}],
    }
    results = {r.score.check: r.score for r in suite.score([sample('{"answer": 1}', request=json_req)])}
    assert results["json_valid"].result == "pass"


def test_checks_filter_by_route_model_and_operation():
    specs = [
        CheckSpec(name="only_mini", kind="length", models=["gpt-4o-mini*"], params={"max_chars": 5}),
        CheckSpec(name="only_embeddings_route", kind="length", routes=["/v1/embeddings"], params={"max_chars": 5}),
        CheckSpec(name="everything", kind="length", params={"max_chars": 5}),
    ]
    suite = Suite(specs)
    assert [r.score.check for r in suite.score([sample(model="gpt-4o")])] == ["everything"]
    assert {r.score.check for r in suite.score([sample(model="gpt-4o-mini-2024")])} == {"only_mini", "everything"}


def test_a_check_that_raises_is_recorded_as_error_and_the_others_still_run(monkeypatch):
    def explode(sample, params):
        raise RuntimeError("boom")

    monkeypatch.setitem(rules.RULE_CHECKS, "explode", rules.RuleCheck(explode, rules.NotEmptyParams))
    suite = Suite([CheckSpec(name="bad", kind="explode"), CheckSpec(name="refusal", kind="refusal")])
    results = {r.score.check: r.score for r in suite.score([sample()])}
    assert results["bad"].result == "error" and results["bad"].details["exception"] == "RuntimeError"
    assert results["refusal"].result == "pass"


def test_a_check_that_runs_too_long_is_stopped_and_recorded_as_error():
    # Catastrophic backtracking: would run for minutes without the time limit.
    suite = Suite(
        [
            CheckSpec(name="evil", kind="regex", params={"must_match": ["^(a+)+$"]}),
            CheckSpec(name="refusal", kind="refusal"),
        ],
        check_timeout_s=0.3,
    )
    results = {r.score.check: r.score for r in suite.score([sample("a" * 40 + "!")])}
    assert results["evil"].result == "error" and results["evil"].details["exception"] == "CheckTimeout"
    assert results["refusal"].result == "pass"


def test_bad_check_config_names_the_check_and_field():
    with pytest.raises(ConfigError) as err:
        validate_scoring(ScoringSection(checks=[CheckSpec(name="r", kind="regex", params={"must_match": ["("]})]))
    assert "scoring.checks[0] (r)" in str(err.value)
    with pytest.raises(ConfigError, match="unknown check kind 'jsonn_valid'.*json_valid"):
        validate_scoring(ScoringSection(checks=[CheckSpec(name="x", kind="jsonn_valid")]))
    with pytest.raises(ConfigError, match="used twice"):
        validate_scoring(
            ScoringSection(
                embeddings=False, checks=[CheckSpec(name="x", kind="refusal"), CheckSpec(name="x", kind="length")]
            )
        )


def test_one_registry_knows_every_check_kind_and_which_family_runs_it():
    assert set(CHECK_KINDS) == set(rules.RULE_CHECKS) | set(EMBEDDING_CHECKS)
    assert CHECK_KINDS["regex"].family == "rule" and CHECK_KINDS["regex"].params_model is rules.RegexParams
    assert CHECK_KINDS["embedding_relevance"].family == "embedding"
    with pytest.raises(ValueError, match="'embedding_relevance' is an embedding check.*per-sample kinds: .*regex"):
        build_check("rel", "embedding_relevance", {})


def test_a_kind_added_to_a_family_table_is_known_to_the_suite_and_regress(monkeypatch, tmp_path):
    monkeypatch.setitem(
        rules.RULE_CHECKS, "always_fails", rules.RuleCheck(lambda s, p: failed(why="test"), rules.NotEmptyParams)
    )
    assert CHECK_KINDS["always_fails"].family == "rule"
    [scored] = Suite([CheckSpec(name="af", kind="always_fails")]).score([sample()])
    assert (scored.score.result, scored.score.details) == ("fail", {"why": "test"})
    suite_file = tmp_path / "suite.jsonl"
    suite_file.write_text('{"id": "c1", "input": "hi", "checks": [{"kind": "always_fails"}]}\n')
    assert [c.kind for c in load_suite(suite_file).checks["c1"]] == ["always_fails"]


def test_embedding_params_are_validated_at_start_up_through_the_registry_without_the_model():
    spec = CheckSpec(name="rel", kind="embedding_relevance", params={"threshold": 0.5})
    with pytest.raises(ConfigError, match=r"scoring.checks\[0\] \(rel\).params: .*unknown field 'threshold'"):
        validate_scoring(ScoringSection(checks=[spec]))


def test_error_outcomes_are_built_one_way_for_exceptions_and_for_stated_reasons():
    assert error_outcome(KeyError("choices")).details == {"exception": "KeyError", "message": "'choices'"}
    assert error_outcome(RuntimeError("x" * 900)).details["message"] == "x" * 500
    judged = error_outcome("judge answered HTTP 503", judge_model="j")
    assert (judged.result, judged.value, judged.details) == (
        "error",
        None,
        {"error": "judge answered HTTP 503", "judge_model": "j"},
    )


async def test_sidecar_scores_samples_in_a_child_process_and_exports_quality_metrics(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, scoring=RULES_ONLY)
    c = openai.AsyncOpenAI(base_url=proxy_url(agent) + "/v1", api_key="sk-x", max_retries=0)
    for i in range(8):
        await c.chat.completions.create(
            model="sim-gpt-4o-mini", messages=[{"role": "user", "content": "How do I bake bread?"}], seed=i
        )
    await c.chat.completions.create(
        model="sim-gpt-4o-mini",
        messages=[{"role": "user", "content": "Give JSON"}],
        response_format={"type": "json_object"},
        seed=99,
    )
    await wait_until(lambda: agent.recorder.recorded >= 9 * 4 + 1, timeout=60)
    samples = await scrape(agent)
    labels = {"gen_ai_request_model": "sim-gpt-4o-mini", "model_version": "A"}
    assert metric(samples, "llmwatch_check_total", check="refusal", **labels) == 9
    assert metric(samples, "llmwatch_check_total", check="json_valid", **labels) == 1
    assert metric(samples, "llmwatch_quality_score_count", check="refusal", **labels) == metric(
        samples, "llmwatch_check_total", check="refusal", result="pass", **labels
    ) + metric(samples, "llmwatch_check_total", check="refusal", result="fail", **labels)
    assert metric(samples, "llmwatch_scoring_lag_seconds_count", **labels) == 9
    assert metric(samples, "llmwatch_scoring_duration_seconds_count", check="refusal") == 9
    await agent.stop()
    lines = [
        orjson.loads(ln)
        for f in (agent.cfg.data_dir / "scores").glob("scores-*.jsonl")
        for ln in f.read_bytes().splitlines()
    ]
    assert len(lines) == agent.recorder.recorded
    assert {ln["check"] for ln in lines} >= {"refusal", "not_empty_or_truncated", "pii_leak", "json_valid"}


async def test_a_crashing_scorer_process_is_restarted_and_its_batch_recorded_as_errors(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, scoring=RULES_ONLY)
    await wait_until(lambda: agent.scorer.ready.is_set(), timeout=60)
    # Stopped first, so that the sample is surely in flight (handed over, unanswered) when it dies.
    pid = agent.scorer._proc.pid
    os.kill(pid, signal.SIGSTOP)
    c = openai.AsyncOpenAI(base_url=proxy_url(agent) + "/v1", api_key="sk-x", max_retries=0)
    r = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "still up?"}])
    assert r.choices[0].message.content, "traffic flows while the scorer is stuck"
    await wait_until(lambda: agent.scorer.pending == 1)
    os.kill(pid, signal.SIGKILL)
    await wait_until(lambda: agent.scorer.restarts >= 1 and agent.scorer.ready.is_set(), timeout=60)
    for i in range(3):
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "and now?"}], seed=i)
    # The sample in flight at the crash: one error per check; then three samples scored normally.
    await wait_until(lambda: agent.recorder.recorded >= 4 + 3 * 4, timeout=60)
    samples = await scrape(agent)
    assert metric(samples, "llmwatch_check_total", check="refusal", result="error") == 1
    assert (
        metric(samples, "llmwatch_check_total", check="refusal", result="pass")
        + metric(samples, "llmwatch_check_total", check="refusal", result="fail")
        == 3
    )


def write_samples(path, samples):
    path.write_bytes(b"".join(s.to_json() + b"\n" for s in samples))


def test_score_command_scores_a_file_and_prints_pass_rates(tmp_path):
    src = tmp_path / "samples.jsonl"
    write_samples(
        src, [sample(id=f"s{i}") for i in range(5)] + [sample("I'm sorry, but I can't help with that.", id="r1")]
    )
    out = tmp_path / "out" / "scores.jsonl"
    env = {"LLMWATCH_SCORING__EMBEDDINGS": "false", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "score", "--in", str(src), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    scores = [orjson.loads(ln) for ln in out.read_bytes().splitlines()]
    refusals = [s for s in scores if s["check"] == "refusal"]
    assert len(refusals) == 6 and sum(s["result"] == "fail" for s in refusals) == 1
    assert "refusal" in result.stdout and "83.3% of" in result.stdout


def test_score_command_names_the_bad_line_and_writes_nothing(tmp_path):
    src = tmp_path / "samples.jsonl"
    write_samples(src, [sample(id="ok")])
    with open(src, "ab") as fh:
        fh.write(
            b'{"request": {}, "response": {}, "model": "m", "status": "two hundred", "latency_ms": 1, "timestamp": 0}\n'
        )
    out = tmp_path / "scores.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", "score", "--in", str(src), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"LLMWATCH_SCORING__EMBEDDINGS": "false", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert f"{src}:2" in result.stderr and "status" in result.stderr
    assert not out.exists() and not list(tmp_path.glob("*partial*")), "no output, not even a temporary file"


async def test_live_evaluation_matrix_exports_category_quality_stability_and_decision(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, scoring=RULES_ONLY, drift={"interval_s": 1.0})
    c = openai.AsyncOpenAI(base_url=proxy_url(agent) + "/v1", api_key="sk-x", max_retries=0)
    for i in range(12):
        # The same prompt several times: sampling stability needs repeated prompts.
        await c.chat.completions.create(
            model="sim-gpt-4o-mini",
            messages=[{"role": "user", "content": "Extract the date from: shipped on 3 May 2024"}],
            extra_headers={"x-llmwatch-category": "extraction", "x-llmwatch-conversation-id": f"conv-{i % 3}"},
        )
    await wait_until(lambda: agent.recorder.recorded >= 12 * 4, timeout=60)

    async def exported() -> dict:
        return await scrape(agent)

    deadline = asyncio.get_running_loop().time() + 30
    while True:
        samples = await exported()
        if (
            metric(samples, "llmwatch_decision_score", model_version="A") > 0
            or asyncio.get_running_loop().time() > deadline
        ):
            break
        await asyncio.sleep(0.5)
    assert metric(samples, "llmwatch_decision_score", model_version="A") > 0
    categories = {
        dict(ls)["category"]
        for n, ls in samples
        if n == "llmwatch_category_quality" and dict(ls).get("model_version") == "A"
    }
    assert categories == {"extraction"}, "the category came from the x-llmwatch-category header"
    assert any(n == "llmwatch_stability" and dict(ls).get("kind") == "sampling" for n, ls in samples)
    records = read_samples(agent)
    assert {r["metadata"].get("category") for r in records} == {"extraction"}
    assert {r["metadata"].get("conversation_id") for r in records} == {"conv-0", "conv-1", "conv-2"}
