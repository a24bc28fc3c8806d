"""`llmwatch regress` against the built-in simulator: profile A is the stable version, B the degraded one."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from helpers.ports import dead_address
from helpers.procs import simulator_url, start_simulator
from helpers.regress import regress_cli, write_suite
from helpers.upstreams import served_in_thread

from llmwatch.scorers.checks.judge import JudgeReplyError, parse_judge_reply
from llmwatch.scorers.evaluation.regress import load_run, load_suite

REPEAT = "30"
SUITE = [
    # Profile B answers ~30% shorter: a one-paragraph answer falls below these lengths.
    {
        "id": "recipe-pasta",
        "category": "instruction_following",
        "input": "Give me a simple recipe for a pasta dinner with garlic.",
        "checks": [
            {"kind": "refusal"},
            {"kind": "not_empty_or_truncated"},
            {"kind": "length", "name": "detailed", "params": {"min_chars": 290}},
        ],
    },
    {
        "id": "python-keyerror",
        "category": "code",
        "input": "How do I fix a KeyError in my Python script?",
        "checks": [{"kind": "refusal"}, {"kind": "length", "name": "detailed", "params": {"min_chars": 290}}],
    },
    {
        "id": "trip-plan",
        "category": "instruction_following",
        "input": [
            {"role": "system", "content": "You are a travel agent."},
            {"role": "user", "content": "Plan a week-long trip itinerary: flights, hotel and passport tips."},
        ],
        "checks": [{"kind": "refusal"}, {"kind": "length", "name": "detailed", "params": {"min_chars": 250}}],
    },
    {
        "id": "topic-json",
        "category": "extraction",
        "input": "Classify this message by topic: my bread dough never rises in the oven",
        "params": {"response_format": {"type": "json_object"}},
        "expected": '"topic":\\s*"cooking"',
        "expected_match": "regex",
        "checks": [{"kind": "json_schema", "params": {"schema": {"type": "object", "required": ["answer", "topic"]}}}],
    },
    {
        "id": "bread-followup",
        "category": "multi_turn_dialogue",
        "input": [
            {"role": "user", "content": "I want to bake bread"},
            {"role": "assistant", "content": "Great, what kind?"},
            {"role": "user", "content": "A simple white loaf, how long in the oven?"},
        ],
        "checks": [{"kind": "refusal"}, {"kind": "not_empty_or_truncated"}],
    },
]


@pytest.fixture(scope="module")
def simulators():
    """Two simulator processes, one per model version; no delays, so 150 calls take about a second."""
    procs = {
        profile: start_simulator("--latency-scale", "0", "--profile", profile, "--seed", "7") for profile in ("A", "B")
    }
    try:
        # Each simulator binds port 0 and prints the URL it got.
        yield {profile: simulator_url(proc) for profile, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.popen.wait(timeout=20)
            proc.stop()


def regress(suite: str, url: str, *extra: str) -> int:
    return regress_cli(suite, url, "--repeat", REPEAT, "--concurrency", "6", *extra)


@pytest.fixture(scope="module")
def baseline_run(simulators, tmp_path_factory):
    base = tmp_path_factory.mktemp("regress")
    suite = write_suite(base / "suite.jsonl", SUITE)
    run = base / "run-a.json"
    assert regress(suite, simulators["A"], "--out", str(run)) == 0
    return suite, run


def test_a_run_records_the_suite_checksum_pass_rates_and_every_attempt(baseline_run):
    suite, run_path = baseline_run
    run = load_run(run_path)
    assert run.suite_checksum == load_suite(suite).checksum
    assert run.model_versions == ["A"] and run.repeat == 30
    assert {c.id for c in run.cases} == {c["id"] for c in SUITE}
    assert len(run.attempts) == 30 * len(SUITE)
    recipe = next(c for c in run.cases if c.id == "recipe-pasta")
    assert recipe.n_judged == 30 and recipe.pass_rate >= 0.8
    assert 0.0 <= recipe.variance <= 0.25
    assert {g.category for g in run.categories} == {
        "instruction_following",
        "code",
        "extraction",
        "multi_turn_dialogue",
    }


def test_a_stable_version_passes_against_its_own_baseline(simulators, baseline_run, tmp_path: Path, capsys):
    suite, run = baseline_run
    capsys.readouterr()
    assert regress(suite, simulators["A"], "--baseline", str(run), "--out", str(tmp_path / "run-a2.json")) == 0
    out = capsys.readouterr().out
    assert f"OK: no case regressed against {run}" in out
    assert "REGRESSED" not in out
    assert "but none could have" not in out  # 30 attempts a side can find a regressed case


def test_a_degraded_version_fails_with_a_report_naming_the_cases_that_regressed(
    simulators, baseline_run, tmp_path: Path, capsys
):
    suite, run = baseline_run
    capsys.readouterr()
    out_path = tmp_path / "run-b.json"
    assert regress(suite, simulators["B"], "--baseline", str(run), "--out", str(out_path)) == 1
    out = capsys.readouterr().out
    assert "served version(s): B" in out
    assert "case(s) dropped by more than 20 points with adjusted p < 0.05:" in out
    assert "  - recipe-pasta (instruction_following): pass rate " in out
    assert "failing checks: detailed x" in out
    saved = load_run(out_path)
    regressed = {c.id for c in saved.comparison.regressed}
    assert "recipe-pasta" in regressed
    for verdict in saved.comparison.regressed:
        assert verdict.delta < -0.2 and verdict.p_adjusted < 0.05
        assert f"  - {verdict.id} ({verdict.category}): pass rate" in out


def test_a_better_version_is_named_improved_with_the_rise_tested_in_the_table_the_summary_and_the_file(
    simulators, tmp_path: Path, capsys
):
    # The degraded B is the baseline, A the version under test: A truly passes the length checks
    # more often. Before, "improved" was any rise past the threshold, untested, with the drop
    # test's adjusted p (1) printed beside it and no line of the summary saying so.
    suite = write_suite(tmp_path / "suite.jsonl", SUITE)
    base = tmp_path / "run-b.json"
    assert regress(suite, simulators["B"], "--out", str(base)) == 0
    capsys.readouterr()
    out_path = tmp_path / "run-a.json"
    assert regress(suite, simulators["A"], "--baseline", str(base), "--out", str(out_path)) == 0  # exit codes kept
    out = capsys.readouterr().out
    saved = load_run(out_path).comparison
    improved = [v for v in saved.cases if v.verdict == "improved"]
    assert "recipe-pasta" in {v.id for v in improved}, [(v.id, v.delta, v.p_adjusted_improved) for v in saved.cases]
    for v in saved.cases:
        # Every improved case rose past the threshold with its own test below alpha; no other did both.
        rose = (
            v.delta is not None and v.delta > 0.2 and v.p_adjusted_improved is not None and v.p_adjusted_improved < 0.05
        )
        assert (v.verdict == "improved") == rose, v
    assert "improved = rise > 20 points and the rise's own adjusted p < 0.05" in out
    assert f"IMPROVED: {len(improved)} case(s) rose by more than 20 points with adjusted p < 0.05" in out
    assert out.index("OK: no case regressed") < out.index("IMPROVED:")
    for v in improved:
        row = next(line for line in out.splitlines() if line.startswith(f"  {v.id} "))
        assert f"improved (rise: adjusted p {v.p_adjusted_improved:.3g})" in row, row
        assert f"  + {v.id} ({v.category}): pass rate {v.baseline_pass_rate:.1%} -> {v.pass_rate:.1%}" in out


def test_a_rise_within_chance_is_stable_not_improved(tmp_path: Path):
    # 0/5 -> 2/5 (the llama.cpp run of the guide): a 40-point rise at one-sided p 0.22 is noise.
    from datetime import datetime, timezone

    from llmwatch.scorers.evaluation.regress import CaseSummary, RegressRun, compare_runs

    def case(n_pass: int) -> CaseSummary:
        return CaseSummary.model_construct(id="c", category="x", n_pass=n_pass, n_judged=5, pass_rate=n_pass / 5)

    baseline = RegressRun.model_construct(cases=[case(0)], created_at=datetime.now(timezone.utc), model_versions=["A"])
    cmp = compare_runs([case(2)], baseline, "b.json")
    (v,) = cmp.cases
    assert v.delta == pytest.approx(0.4) and v.p_adjusted_improved > 0.05 and v.verdict == "stable"


def test_a_changed_suite_refuses_to_compare_before_making_any_call(baseline_run, tmp_path: Path, capsys):
    _, run = baseline_run
    changed = [dict(c) for c in SUITE]
    changed[1] = {
        **changed[1],
        "checks": [{"kind": "refusal"}, {"kind": "length", "name": "detailed", "params": {"min_chars": 200}}],
    }
    suite = write_suite(tmp_path / "suite-v2.jsonl", changed)
    dead = f"http://{dead_address()}"  # nothing listens: a call would fail differently
    capsys.readouterr()
    assert regress(suite, dead, "--baseline", str(run)) == 2
    err = capsys.readouterr().err
    assert "suite checksum differs" in err and str(run) in err and "re-run the baseline" in err


def test_reformatting_the_suite_keeps_its_checksum_and_any_edit_changes_it(tmp_path: Path):
    original = load_suite(write_suite(tmp_path / "a.jsonl", SUITE)).checksum
    # Keys in another order, cases in another order, blank lines: the same suite.
    shuffled = b"\n\n".join(orjson.dumps(dict(reversed(list(c.items())))) for c in reversed(SUITE))
    (tmp_path / "b.jsonl").write_bytes(shuffled)
    assert load_suite(tmp_path / "b.jsonl").checksum == original
    edited = [dict(c) for c in SUITE]
    edited[0] = {**edited[0], "input": edited[0]["input"] + " Quickly."}
    assert load_suite(write_suite(tmp_path / "c.jsonl", edited)).checksum != original


@pytest.mark.parametrize(
    "case, message",
    [
        (
            {"id": "x", "input": "hi", "checks": [{"kind": "regexp"}]},
            "suite.jsonl:2: field 'checks.0.kind': unknown check kind 'regexp'; known kinds:",
        ),
        (
            {"id": "x", "input": "hi", "checks": [{"kind": "length", "params": {"min_char": 3}}]},
            "suite.jsonl:2: field 'checks.0.params': check kind 'length': invalid params: unknown field 'min_char'",
        ),
        ({"id": "x", "input": "hi"}, "suite.jsonl:2: a case needs `expected` and/or `checks`"),
        (
            {"id": "x", "input": "hi", "expected": "a", "params": {"stream": True}},
            "suite.jsonl:2: field 'params': stream cannot be set per case",
        ),
        (
            {"id": "recipe-pasta", "input": "hi", "expected": "a"},
            "suite.jsonl:2: field 'id': case id 'recipe-pasta' is already used on line 1",
        ),
        (
            {"id": "x", "input": [{"role": "assistant", "content": "hi"}], "expected": "a"},
            "suite.jsonl:2: field 'input': the messages need at least one user message",
        ),
    ],
)
def test_suite_errors_name_the_line_and_the_field(tmp_path: Path, capsys, case, message):
    suite = write_suite(tmp_path / "suite.jsonl", [SUITE[0], case])
    assert regress_cli(suite, "http://127.0.0.1:1", model="m") == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_endpoint_is_a_usage_error_not_a_regression(tmp_path: Path, capsys):
    suite = write_suite(tmp_path / "suite.jsonl", SUITE[:1])
    options = ("--repeat", "2", "--max-retries", "0", "--timeout", "2")
    assert regress_cli(suite, f"http://{dead_address()}", *options, model="m") == 2
    assert "no call to http://127.0.0.1:" in capsys.readouterr().err


# --- model as judge ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, score",
    [
        ('{"score": 4, "reason": "minor omission"}', 4.0),
        ('Sure! Here is my grade:\n```json\n{"score": "5", "reason": "complete"}\n```', 5.0),
        ('I would rate it as follows. {"Rating": 2, "explanation": "evasive"} Thanks.', 2.0),
        ("Score: 3/5 - partly correct", 3.0),
        ("4", 4.0),
        ('{"score": 8, "out_of": 10}', None),
        ("The answer is quite good overall.", None),
        ("", None),
    ],
)
def test_judge_replies_are_parsed_leniently_but_never_guessed(reply, score):
    if score is None:
        with pytest.raises(JudgeReplyError):
            parse_judge_reply(reply)
    else:
        assert parse_judge_reply(reply)[0] == score


@pytest.fixture
def judge_server():
    """An OpenAI-compatible judge: grades refusals 1 and anything else 5 in fenced JSON; model "broken" answers prose."""
    seen: list[dict] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        graded = body["messages"][-1]["content"].split("Answer to grade:\n", 1)[-1]
        if body["model"] == "broken":
            content = "I think this answer is pretty good."
        elif "sorry" in graded.lower():
            content = '{"score": 1, "reason": "refused"}'
        else:
            content = 'Here you go:\n```json\n{"score": 5, "reason": "complete"}\n```'
        return web.json_response(
            {
                "id": "j",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    with served_in_thread(app) as url:
        yield url, seen


def test_the_judge_check_grades_every_attempt_and_a_broken_judge_is_recorded_as_errors(
    simulators, judge_server, tmp_path: Path, capsys
):
    url, seen = judge_server
    case = {
        "id": "recipe",
        "category": "instruction_following",
        "input": "Give me a simple recipe for a pasta dinner with garlic.",
        "reference": "Cook pasta, fry garlic in oil, toss together.",
        "checks": [{"kind": "not_empty_or_truncated"}],
    }
    suite = write_suite(tmp_path / "suite.jsonl", [case])
    out = tmp_path / "judged.json"
    judge = ("--judge-url", url, "--judge-model")
    assert regress_cli(suite, simulators["A"], "--repeat", "6", *judge, "grader", "--out", str(out)) == 0
    run = load_run(out)
    assert run.judge_model == "grader"
    judged = [next(r for r in a.checks if r.name == "judge") for a in run.attempts]
    assert {r.result for r in judged} <= {"pass", "fail"} and all(r.value in (0.0, 1.0) for r in judged)
    assert all(r.details["judge_model"] == "grader" for r in judged)
    assert "Reference answer" in seen[0]["messages"][-1]["content"] and seen[0]["temperature"] == 0

    broken = tmp_path / "broken.json"
    capsys.readouterr()
    assert regress_cli(suite, simulators["A"], "--repeat", "4", *judge, "broken", "--out", str(broken)) == 0
    run = load_run(broken)
    for attempt in run.attempts:
        judge = next(r for r in attempt.checks if r.name == "judge")
        assert judge.result == "error" and "no score" in judge.details["error"]
    # The other check still judges: a broken judge does not make the answers fail.
    assert run.cases[0].check_errors == {"judge": 4}
    assert "judge error x4" not in capsys.readouterr().out  # attempts with another verdict are not "unjudged"


def test_the_judge_needs_both_its_url_and_its_model(tmp_path: Path, capsys):
    suite = write_suite(tmp_path / "suite.jsonl", SUITE[:1])
    assert regress_cli(suite, "http://127.0.0.1:1", "--judge-url", "http://127.0.0.1:2", model="m") == 2
    assert "both --judge-url and --judge-model" in capsys.readouterr().err


@pytest.mark.parametrize(
    "url",
    [
        "127.0.0.1:8001",
        "judge.example/v1",
        "ftp://user:hunter2@judge/",
        "user:hunter2@judge",
        "http://user:hunter2@",  # credentials and no host
        "http://:80/v1",
        "ftp://judge/v1?api-key=hunter2",  # a key in the query is not shown either
    ],
)
def test_a_judge_url_that_is_no_http_url_is_refused_before_any_call_without_its_credentials(
    tmp_path: Path, capsys, url: str
):
    # Else every attempt's judge call fails and the judge check is `error` on every case: a typo
    # found only in the report, after the whole suite ran against the upstream.
    suite = write_suite(tmp_path / "suite.jsonl", SUITE[:1])
    assert regress_cli(suite, "http://127.0.0.1:1", "--judge-url", url, "--judge-model", "j", model="m") == 2
    err = capsys.readouterr().err
    assert "--judge-url: expected an http(s) URL such as http://127.0.0.1:8000" in err, err
    assert "hunter2" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_an_http_judge_url_with_credentials_is_accepted():
    from llmwatch.scorers.evaluation.regress import RunSettings, check_settings

    for url in ("http://127.0.0.1:8001/v1", "https://user:key@gateway.example/openai/v1", "HTTP://[::1]:8001/v1"):
        check_settings(RunSettings("http://127.0.0.1:8000", "m", judge_url=url, judge_model="j"), 0.2)


@pytest.fixture
def quoting_endpoints():
    """A local endpoint under /ok/v1 that answers, and one under /refuse/v1 that refuses every
    call with 401 quoting the key it was given, as some servers do."""

    async def ok(request: web.Request) -> web.Response:
        body = await request.json()
        content = "Boil the pasta, fry sliced garlic in olive oil, toss them together with salt. " * 5
        return web.json_response(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
            }
        )

    async def refuse(request: web.Request) -> web.Response:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        body = {"error": {"message": f"Incorrect API key provided: {given}", "type": "invalid_request_error"}}
        return web.json_response(body, status=401)

    app = web.Application()
    app.router.add_post("/ok/v1/chat/completions", ok)
    app.router.add_post("/refuse/v1/chat/completions", refuse)
    with served_in_thread(app) as url:
        yield url


def test_an_endpoint_that_quotes_the_refused_key_does_not_put_it_in_the_error(
    tmp_path: Path, capsys, monkeypatch, quoting_endpoints
):
    # "Incorrect API key provided: <the key>": the endpoint's 401 body went into the error that
    # `regress` prints (and a run file keeps per attempt), key and all.
    key = "sk-Secret-Regress-4242"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    suite = write_suite(tmp_path / "suite.jsonl", SUITE[:1])
    code = regress_cli(suite, f"{quoting_endpoints}/refuse", "--repeat", "2", "--max-retries", "0", model="m")
    err = capsys.readouterr().err
    assert code == 2
    assert "HTTP 401" in err and "Incorrect API key provided: ***" in err
    assert key not in err


def test_a_judge_that_quotes_the_refused_key_does_not_put_it_in_the_run_file(tmp_path: Path, capsys, quoting_endpoints):
    key = "sk-Secret-Judge-7777"
    suite = write_suite(tmp_path / "suite.jsonl", SUITE[:1])
    out = tmp_path / "run.json"
    judge = ("--judge-url", f"{quoting_endpoints}/refuse", "--judge-model", "g", "--judge-api-key", key)
    regress_cli(
        suite, f"{quoting_endpoints}/ok", "--repeat", "2", "--max-retries", "0", *judge, "--out", str(out), model="m"
    )
    printed = "".join(capsys.readouterr())
    assert out.exists(), printed
    text = out.read_text()
    assert "Incorrect API key provided: ***" in text
    assert key not in text and key not in printed


def test_a_run_too_small_to_find_any_regression_says_so_beside_its_ok(tmp_path: Path, capsys):
    # 2 attempts a side: even a case that passed both times and now fails both gives p 1/6 at best,
    # so "OK: no case regressed" was a verdict the run could not have reached otherwise. A simulator
    # of its own: calls to the module's would move their seeded answers under the other tests.
    proc = start_simulator("--latency-scale", "0", "--profile", "A", "--seed", "7")
    try:
        url = simulator_url(proc)
        suite = write_suite(tmp_path / "suite.jsonl", SUITE)
        base = tmp_path / "run-a.json"
        assert regress_cli(suite, url, "--repeat", "2", "--out", str(base)) == 0
        capsys.readouterr()
        assert regress_cli(suite, url, "--repeat", "2", "--baseline", str(base)) == 0
    finally:
        proc.popen.send_signal(signal.SIGTERM)
        proc.popen.wait(timeout=20)
        proc.stop()
    out = capsys.readouterr().out
    assert f"OK: no case regressed against {base}" in out
    assert "but none could have: at these attempts even a case falling to 0 passes gives p 0.167" in out
    assert f"Holm over {len(SUITE)} cases needs p < {0.05 / len(SUITE):.3g}" in out


def test_a_key_on_the_command_line_is_warned_about_without_being_echoed(tmp_path: Path, capsys):
    # Other local users read a flag's value in `ps`; the warning says so and names the variable.
    suite = write_suite(tmp_path / "suite.jsonl", SUITE[:1])
    options = ("--repeat", "2", "--max-retries", "0", "--timeout", "2")
    for flags, variables in (
        (("--api-key", "sk-Flag-Visible-1234"), ["OPENAI_API_KEY"]),
        (("--judge-api-key", "sk-Judge-Visible-5678"), ["LLMWATCH_JUDGE_API_KEY"]),
        ((), []),
    ):
        # An unreachable endpoint: the exit code keeps its meaning (2) with or without the warning.
        assert regress_cli(suite, f"http://{dead_address()}", *options, *flags, model="m") == 2
        err = capsys.readouterr().err
        warnings = [line for line in err.splitlines() if line.startswith("regress: warning:")]
        assert len(warnings) == len(variables), err
        for line, variable in zip(warnings, variables):
            assert f"{flags[0]} puts the key on the command line" in line and "ps" in line
            assert f'{variable}="$(cat key.txt)"' in line
        if flags:
            assert flags[1] not in err
