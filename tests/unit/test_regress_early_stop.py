"""`llmwatch regress --early-stop`: the same verdicts as fixed repeats for fewer calls, counted at
the simulator itself; pass^k and flaky cases in the run; a grown suite is refused with its new cases named."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web
from helpers.regress import regress_cli, write_suite
from helpers.upstreams import serve

from llmwatch.agent.apps.simulator.server import SimProfile, create_app
from llmwatch.agent.cli.main import main
from llmwatch.scorers.evaluation.regress import load_run

REPEAT = 30
# Version A answers cleanly; version B refuses ~60% of requests. Cases with a refusal (or JSON)
# check regress from A to B; cases that only need a non-empty answer stay stable (a refusal is not empty).
CLEAN = dict(latency_scale=0.0, refusal_rate=0.0, invalid_json_rate=0.0, off_topic_rate=0.0, truncation_rate=0.0)
PROFILES = {"A": SimProfile(name="A", **CLEAN), "B": SimProfile(name="B", **{**CLEAN, "refusal_rate": 0.6})}
SUITE = [
    {
        "id": "recipe",
        "category": "instruction_following",
        "input": "Give me a simple recipe for a pasta dinner with garlic.",
        "checks": [{"kind": "refusal"}, {"kind": "not_empty_or_truncated"}],
    },
    {
        "id": "python-keyerror",
        "category": "code",
        "input": "How do I fix a KeyError in my Python script?",
        "checks": [{"kind": "refusal"}],
    },
    {
        "id": "trip",
        "category": "instruction_following",
        "input": "Plan a week-long trip itinerary: flights, hotel and passport tips.",
        "checks": [{"kind": "refusal"}],
    },
    {
        "id": "topic-json",
        "category": "extraction",
        "input": "Classify this message by topic: my bread dough never rises in the oven",
        "params": {"response_format": {"type": "json_object"}},
        "checks": [{"kind": "json_schema", "params": {"schema": {"type": "object", "required": ["answer", "topic"]}}}],
    },
    {
        "id": "bread-answered",
        "category": "instruction_following",
        "input": "How long should white bread bake?",
        "checks": [{"kind": "not_empty_or_truncated"}],
    },
    {
        "id": "soup-answered",
        "category": "instruction_following",
        "input": "What goes into a vegetable soup?",
        "checks": [{"kind": "not_empty_or_truncated"}],
    },
]
REGRESSING = {"recipe", "python-keyerror", "trip", "topic-json"}


@pytest.fixture(scope="module")
def counted():
    """Both versions served from one background loop; every chat call each one answers is counted."""
    calls: Counter[str] = Counter()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def counting(name: str):
        @web.middleware
        async def count(request: web.Request, handler):
            if request.path.endswith("/chat/completions"):
                calls[name] += 1
            return await handler(request)

        return count

    async def start():
        out = {}
        for name, profile in PROFILES.items():
            app = create_app(profile, seed=11)
            app.middlewares.append(counting(name))
            out[name] = await serve(app)
        return out

    servers = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=20)
    try:
        yield {name: url for name, (_, url) in servers.items()}, calls
    finally:
        for runner, _ in servers.values():
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def regress(suite: str, url: str, *extra: str) -> int:
    return regress_cli(suite, url, "--repeat", str(REPEAT), "--concurrency", "6", "--max-retries", "0", *extra)


@pytest.fixture(scope="module")
def baseline(counted, tmp_path_factory):
    urls, _ = counted
    base = tmp_path_factory.mktemp("early")
    suite = write_suite(base / "suite.jsonl", SUITE)
    assert regress(suite, urls["A"], "--out", str(base / "a.json")) == 0
    return suite, base / "a.json"


def test_early_stopping_reaches_the_fixed_repeats_verdicts_with_fewer_calls(counted, baseline, tmp_path: Path, capsys):
    urls, calls = counted
    suite, run_a = baseline
    before = calls["B"]
    assert regress(suite, urls["B"], "--baseline", str(run_a), "--out", str(tmp_path / "fixed.json")) == 1
    fixed_calls = calls["B"] - before
    before = calls["B"]
    assert (
        regress(suite, urls["B"], "--baseline", str(run_a), "--out", str(tmp_path / "early.json"), "--early-stop") == 1
    )
    early_calls = calls["B"] - before
    fixed, early = load_run(tmp_path / "fixed.json"), load_run(tmp_path / "early.json")
    assert fixed_calls == REPEAT * len(SUITE) == fixed.calls
    assert early_calls == early.calls == len(early.attempts)
    assert early_calls < fixed_calls and early.calls_saved == fixed_calls - early_calls
    verdicts = lambda run: {v.id: v.verdict for v in run.comparison.cases}  # noqa: E731
    assert verdicts(early) == verdicts(fixed)
    assert {v.id for v in early.comparison.regressed} == REGRESSING
    assert any(c.stopped_early for c in early.cases) and not any(c.stopped_early for c in fixed.cases)
    out = capsys.readouterr().out
    assert f"early stopping at 95% confidence: {early_calls} calls instead of {fixed_calls}" in out


def test_without_a_baseline_cases_stop_once_clearly_above_the_pass_threshold(counted, tmp_path: Path):
    urls, calls = counted
    suite = write_suite(tmp_path / "suite.jsonl", SUITE)
    before = calls["A"]
    assert regress(suite, urls["A"], "--early-stop", "--out", str(tmp_path / "a.json")) == 0
    run = load_run(tmp_path / "a.json")
    assert calls["A"] - before == run.calls < REPEAT * len(SUITE)
    for case in run.cases:
        # All passing: decided once the Wilson lower bound clears 0.8, long before 30 attempts.
        assert case.pass_k is True and case.stopped_early and case.ci_low > 0.8
        assert 5 <= case.attempts < REPEAT


def test_pass_k_and_flaky_cases_are_reported_beside_the_mean_pass_rate(baseline, counted, tmp_path: Path, capsys):
    urls, _ = counted
    suite, _ = baseline
    capsys.readouterr()
    assert regress(suite, urls["B"], "--out", str(tmp_path / "b.json")) == 0
    run = load_run(tmp_path / "b.json")
    cases = {c.id: c for c in run.cases}
    for cid in REGRESSING:
        c = cases[cid]
        assert 0 < c.n_pass < c.n_judged and c.pass_k is False
        assert c.flaky and 0 < c.ci_low <= c.pass_rate <= c.ci_high < 1
    for cid in set(cases) - REGRESSING:
        assert cases[cid].pass_k is True and not cases[cid].flaky
    out = capsys.readouterr().out
    # Flaky is passed-and-failed, with no confidence level in it; the interval beside it names its own.
    assert "pass^k" in out and "flaky (passed and failed at least once in their repeats): " in out
    assert "FLAKY [" in out and "] (95 % interval)" in out
    by_cat = {g.category: g for g in run.categories}
    assert by_cat["extraction"].pass_k_rate == 0.0 and 0 < by_cat["instruction_following"].pass_k_rate < 1


def test_a_grown_suite_is_refused_with_the_added_cases_named_before_any_call(baseline, counted, tmp_path: Path, capsys):
    urls, calls = counted
    _, run_a = baseline
    grown = write_suite(
        tmp_path / "suite-v2.jsonl",
        SUITE + [{"id": "new-failure", "input": "Summarise this email thread", "checks": [{"kind": "refusal"}]}],
    )
    before = dict(calls)
    capsys.readouterr()
    assert regress(grown, urls["B"], "--baseline", str(run_a)) == 2
    err = capsys.readouterr().err
    assert "suite checksum differs" in err and "1 case(s) added since the baseline: new-failure" in err
    assert dict(calls) == before


def test_early_stop_options_are_checked(tmp_path: Path, capsys):
    suite = write_suite(tmp_path / "suite.jsonl", SUITE)
    assert regress(suite, "http://127.0.0.1:1", "--early-stop", "--confidence", "1.5") == 2
    assert "--confidence must be in (0, 1)" in capsys.readouterr().err
    assert regress(suite, "http://127.0.0.1:1", "--early-stop", "--pass-threshold", "0") == 2
    assert "--pass-threshold must be in (0, 1)" in capsys.readouterr().err


def test_the_ci_example_is_a_workflow_whose_regress_flags_exist_and_that_fails_on_exit_1_only_by_regress(capsys):
    import re

    import yaml

    workflow = yaml.safe_load((Path(__file__).resolve().parents[2] / "docs" / "ci" / "regress.yml").read_text())
    steps = workflow["jobs"]["regress"]["steps"]
    script = next(s["run"] for s in steps if "llmwatch regress" in s.get("run", ""))
    with pytest.raises(SystemExit):
        main(["regress", "--help"])
    known = set(re.findall(r"--[a-z][a-z-]+", capsys.readouterr().out))
    used = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", script.split("llmwatch regress", 1)[1].split("| tee", 1)[0]))
    assert {"--early-stop", "--baseline", "--threshold"} <= used <= known
    # The step's status is regress's own exit code (tee would hide it otherwise).
    assert "PIPESTATUS[0]" in script and 'exit "$code"' in script
