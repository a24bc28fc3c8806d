"""`llmwatch regress --paraphrases K` and `--multi-turn dynamic` against a real `llmwatch simulate`.

Prompt sensitivity: the simulator opens each answer by naming the prompt's subject words ("Here is
what matters about simple, recipe, ..."), so a case that expects the word "simple" there passes in
every wording that keeps it and fails in a rewording that swaps it for "basic": a verdict flip the
test predicts from the rewordings themselves. Dynamic replay: a real `llmwatch proxy` with every
call sampled stands between regress and the simulator, so the samples are what the simulator was
sent, and each later turn must carry the simulator's own earlier answers, never the recorded ones.
"""

from __future__ import annotations

import glob
import re
import signal
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from helpers.ports import dead_address
from helpers.procs import Proc, simulator_url, start_configured_proxy, start_simulator
from helpers.regress import regress_cli, write_suite
from helpers.upstreams import served_in_thread

from llmwatch.scorers.evaluation.paraphrase import reword_messages
from llmwatch.scorers.evaluation.regress import SuiteCase, load_run

REPEAT = 4
K = 3
SIMPLE = {
    "id": "pasta-simple",
    "category": "instruction_following",
    "input": "Give me a simple recipe for a pasta dinner with garlic.",
    # A seeded request gets the same answer every time from version A: the verdict per wording is exact.
    "params": {"seed": 11},
    "expected": r"^Here is what matters about [^.]*\bsimple\b",
    "expected_match": "regex",
}
SUITE = [
    SIMPLE,
    {
        "id": "python-keyerror",
        "category": "code",
        "input": "How do I fix a KeyError in my Python script?",
        "checks": [{"kind": "refusal"}, {"kind": "not_empty_or_truncated"}],
    },
    {
        "id": "topic-json",
        "category": "extraction",
        "input": 'Classify this message by topic and reply in JSON: "my bread dough never rises in the oven" (2 loaves)',
        "params": {"response_format": {"type": "json_object"}},
        "checks": [{"kind": "json_schema", "params": {"schema": {"type": "object", "required": ["answer"]}}}],
    },
]
MARK = "RECORDED-ANSWER"
DIALOGUE = {
    "id": "bread-dialogue",
    "category": "multi_turn_dialogue",
    "input": [
        {"role": "system", "content": "You are a baking assistant."},
        {"role": "user", "content": "I want to bake bread at home."},
        {"role": "assistant", "content": f"{MARK}-1: great, what kind?"},
        {"role": "user", "content": "A simple white loaf."},
        {"role": "assistant", "content": f"{MARK}-2: use strong flour."},
        {"role": "user", "content": "How long should it bake in the oven?"},
    ],
    "checks": [{"kind": "not_empty_or_truncated"}],
}


@pytest.fixture(scope="module")
def simulator():
    proc = start_simulator("--latency-scale", "0", "--profile", "A", "--seed", "7")
    try:
        yield simulator_url(proc)
    finally:
        if proc.popen.poll() is None:
            proc.popen.send_signal(signal.SIGTERM)
            proc.popen.wait(timeout=20)
        proc.stop()


def regress(suite: str, url: str, *extra: str) -> int:
    return regress_cli(suite, url, "--concurrency", "4", *extra)


def expected_flip() -> list[bool]:
    """Per wording of SIMPLE (the original first), whether it keeps the word the case expects."""
    rewordings = reword_messages(SuiteCase.model_validate(SIMPLE).messages(), K, SIMPLE["id"])
    return [True] + [bool(re.search(r"\bsimple\b", r.text)) for _, r in rewordings]


def test_paraphrases_report_each_cases_spread_and_a_per_version_summary_without_changing_pass_rates(
    simulator, tmp_path: Path, capsys
):
    keeps = expected_flip()
    assert not all(keeps), "precondition: one of the case's rewordings swaps 'simple' (the synonym table)"
    suite = write_suite(tmp_path / "suite.jsonl", SUITE)
    out = tmp_path / "run.json"
    code = regress(
        suite, simulator, "--repeat", str(REPEAT), "--paraphrases", str(K), "--format", "json", "--out", str(out)
    )
    out_text = capsys.readouterr().out
    # structlog's default (the test leaves logging unconfigured) prints to stdout before the document.
    report = orjson.loads(out_text[out_text.index("{\n") :])
    assert code == 0, "a flip is reported, not a failure, without --paraphrase-max-flips"

    # Pass rates and the attempts they count are the cases as written.
    assert [c["n_judged"] for c in report["cases"]] == [REPEAT] * len(SUITE)
    assert report["calls"] == REPEAT * len(SUITE)
    assert report["upstream_calls"] == REPEAT * len(SUITE) * (K + 1)

    para = report["paraphrases"]
    assert para["k"] == K and para["max_flip_share"] is None and para["gate_failed"] is False
    spreads = {c["id"]: c for c in para["cases"]}
    assert set(spreads) == {c["id"] for c in SUITE}
    for c in spreads.values():
        assert [v["variant"] for v in c["variants"]] == list(range(K + 1))
        assert all(v["attempts"] == REPEAT for v in c["variants"])
        assert c["variants"][0]["text"] is None and all(v["text"] for v in c["variants"][1:])
        means = [v["mean_score"] for v in c["variants"]]
        assert c["score_min"] == min(means) and c["score_max"] == max(means)
        assert c["score_range"] == pytest.approx(max(means) - min(means))
        assert c["score_std"] >= 0
    # Numbers and quoted strings reach the endpoint unchanged in every rewording.
    for v in spreads["topic-json"]["variants"][1:]:
        assert '"my bread dough never rises in the oven"' in v["text"] and "(2 loaves)" in v["text"]

    simple = spreads["pasta-simple"]
    assert [v["passed"] for v in simple["variants"]] == keeps
    assert simple["flips"] is True
    assert simple["score_range"] == 1.0

    [version] = para["versions"]
    assert version["model_version"] == "A"
    assert version["cases"] == len(SUITE)
    flipped = sum(c["flips"] for c in spreads.values())
    assert version["n_flipped"] == flipped and version["flip_share"] == pytest.approx(flipped / len(SUITE))
    lo, hi = version["flip_ci"]
    assert lo <= version["flip_share"] <= hi
    lo, hi = version["range_ci"]
    assert lo <= version["mean_range"] <= hi

    # The stored run keeps every attempt with its wording, and the rewordings are the same on every run.
    stored = load_run(out)
    assert sorted({a.variant for a in stored.attempts}) == list(range(K + 1))
    again = tmp_path / "again.json"
    regress(suite, simulator, "--repeat", "1", "--paraphrases", str(K), "--format", "json", "--out", str(again))
    capsys.readouterr()
    assert [[v.text for v in c.variants] for c in load_run(again).paraphrases.cases] == [
        [v.text for v in c.variants] for c in stored.paraphrases.cases
    ]


def test_the_paraphrase_gate_fails_the_run_only_when_asked_and_the_text_report_names_the_flips(
    simulator, tmp_path: Path, capsys
):
    suite = write_suite(tmp_path / "suite.jsonl", SUITE)
    code = regress(suite, simulator, "--repeat", "2", "--paraphrases", str(K), "--paraphrase-max-flips", "0")
    text = capsys.readouterr().out
    assert code == 1
    assert "prompt sensitivity: 3 rewording(s)" in text
    assert re.search(r"pasta-simple .* FLIPS", text)
    assert re.search(r"version A: 3 case\(s\); mean range [0-9.]+ \(95% CI", text)
    assert "paraphrase gate (--paraphrase-max-flips 0): FAILED" in text

    assert regress(suite, simulator, "--repeat", "1", "--paraphrase-max-flips", "0.5") == 2
    assert "needs --paraphrases" in capsys.readouterr().err


# --- dynamic multi-turn replay ------------------------------------------------------------------


def start_proxy(tmp_path: Path, upstream: str) -> tuple[Proc, dict]:
    return start_configured_proxy(
        tmp_path, {"upstream": upstream, "sampling": {"rate": 1.0}, "scoring": {"enabled": False}}
    )


def sent_requests(data_dir: Path) -> list[tuple[list[dict], str]]:
    """(messages, answer) of every chat call the proxy relayed, from its samples."""
    out = []
    for path in sorted(glob.glob(str(data_dir / "samples" / "*.jsonl"))):
        for line in Path(path).read_bytes().splitlines():
            sample = orjson.loads(line)
            answer = sample["response"]["choices"][0]["message"]["content"]
            out.append((sample["request"]["messages"], answer))
    return out


def test_dynamic_replay_feeds_the_candidates_own_answers_back_and_static_the_recorded_ones(
    simulator, tmp_path: Path, capsys
):
    suite = write_suite(tmp_path / "dialogue.jsonl", [DIALOGUE])
    proxy, ports = start_proxy(tmp_path, simulator)
    via = f"http://127.0.0.1:{ports['proxy_port']}"
    try:
        static_out, dynamic_out = tmp_path / "static.json", tmp_path / "dynamic.json"
        assert regress(suite, via, "--repeat", "3", "--out", str(static_out)) == 0
        # A static baseline is not comparable with a dynamic run: refused before any call.
        assert regress(suite, via, "--repeat", "3", "--multi-turn", "dynamic", "--baseline", str(static_out)) == 2
        assert "replayed multi-turn cases static" in capsys.readouterr().err
        # More user turns than --max-turns: refused before any call, naming the case.
        assert regress(suite, via, "--repeat", "3", "--multi-turn", "dynamic", "--max-turns", "2") == 2
        assert "bread-dialogue (3 turns)" in capsys.readouterr().err
        assert regress(suite, via, "--repeat", "3", "--multi-turn", "dynamic", "--out", str(dynamic_out)) == 0
    finally:
        proxy.popen.send_signal(signal.SIGTERM)  # a clean stop writes every sample held
        proxy.popen.wait(timeout=60)
        proxy.stop()

    sent = sent_requests(tmp_path / "data")
    static = [(m, a) for m, a in sent if any(MARK in str(x.get("content")) for x in m)]
    dynamic = [(m, a) for m, a in sent if not any(MARK in str(x.get("content")) for x in m)]
    assert len(static) == 3, "static: one call per attempt, the recorded transcript as written"
    assert all(m == DIALOGUE["input"] for m, _ in static)
    assert len(dynamic) == 3 * 3, "dynamic: one call per user turn, and the refused runs made none"

    def users(messages):
        return [x["content"] for x in messages if x["role"] == "user"]

    script = users(DIALOGUE["input"])
    by_turns = {n: [(m, a) for m, a in dynamic if len(users(m)) == n] for n in (1, 2, 3)}
    assert {n: len(v) for n, v in by_turns.items()} == {1: 3, 2: 3, 3: 3}
    for n in (2, 3):
        for messages, _ in by_turns[n]:
            assert users(messages) == script[:n] and messages[0] == DIALOGUE["input"][0]
            # The turn before, as the simulator received and answered it, is this request's prefix.
            prior, fed = messages[:-2], messages[-2]
            assert fed["role"] == "assistant"
            assert any(m == prior and a == fed["content"] for m, a in by_turns[n - 1]), (
                "an earlier answer was not the candidate's own"
            )

    run = load_run(dynamic_out)
    assert run.multi_turn == "dynamic" and run.upstream_calls == 9
    answers = {a for _, a in by_turns[1]} | {a for _, a in by_turns[2]}
    for attempt in run.attempts:
        assert attempt.turns == 3 and len(attempt.turn_answers) == 2
        assert set(attempt.turn_answers) <= answers


# --- rewordings from a model --------------------------------------------------------------------


@pytest.fixture
def rewording_server():
    """An OpenAI-compatible rewording model: "good" answers a fenced JSON array (the request with a polite
    lead, upper-cased, with a thank-you), "broken" answers prose, "no-choices" a body without choices. Records each request's headers."""
    seen: list[dict] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"authorization": request.headers.get("Authorization"), "body": body})
        text = body["messages"][-1]["content"].split("Request:\n", 1)[1]
        if body["model"] == "no-choices":
            # A 200 whose body is no chat completion (a proxy's error page as JSON, a wrong route).
            return web.json_response({"id": "p", "object": "chat.completion", "created": 0, "choices": None})
        if body["model"] == "good":
            content = (
                "```json\n" + orjson.dumps([f"Kindly: {text}", text.upper(), f"{text} Thanks."]).decode() + "\n```"
            )
        else:
            content = "Sure! Here are some ways to say it."
        return web.json_response(
            {
                "id": "p",
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


def test_rewordings_from_a_model_are_kept_when_they_keep_the_protected_tokens_and_made_up_otherwise(
    simulator, rewording_server, tmp_path: Path, capsys, monkeypatch
):
    url, seen = rewording_server
    secret = "sk-paraphrase-secret-0042"
    monkeypatch.setenv("PARAPHRASE_API_KEY", secret)
    suite = write_suite(tmp_path / "suite.jsonl", SUITE)
    out = tmp_path / "model.json"
    args = ["--repeat", "1", "--paraphrases", str(K), "--paraphrase-url", url, "--out", str(out)]
    assert regress(suite, simulator, *args, "--paraphrase-model", "good") == 0
    printed = capsys.readouterr()
    assert [s["authorization"] for s in seen] == [f"Bearer {secret}"] * len(SUITE), "one call per case, with the key"
    assert secret not in printed.out + printed.err and secret not in out.read_text()

    report = load_run(out).paraphrases
    assert report.source == "model:good"
    by = {c.id: c for c in report.cases}
    text = SIMPLE["input"]
    assert [v.text for v in by["pasta-simple"].variants[1:]] == [f"Kindly: {text}", text.upper(), f"{text} Thanks."]
    assert all(v.transforms == ["model:good"] for v in by["pasta-simple"].variants[1:])
    # Upper-casing the quoted string of topic-json changed it: refused, and a built-in one comes after the model's.
    quoted = by["topic-json"].variants[1:]
    assert [v.transforms == ["model:good"] for v in quoted] == [True, True, False]
    assert [v.text for v in quoted[:2]] == [f"Kindly: {SUITE[2]['input']}", f"{SUITE[2]['input']} Thanks."]
    assert '"my bread dough never rises in the oven"' in quoted[2].text
    assert report.model_fallbacks == 1
    assert report.model_errors == {"changed code, JSON, a quoted string, a URL or a number": 1}
    assert "rewordings from model:good; built-in ones made up for 1 case(s)" in printed.out

    # A model that answers prose, or an endpoint that is down: every rewording built in, the run goes on.
    builtin = tmp_path / "builtin.json"
    assert regress(suite, simulator, "--repeat", "1", "--paraphrases", str(K), "--out", str(builtin)) == 0
    expected = [[v.text for v in c.variants] for c in load_run(builtin).paraphrases.cases]
    for model_url, model in ((url, "broken"), (f"http://{dead_address()}", "any")):
        fallback = tmp_path / f"{model}.json"
        code = regress(
            suite, simulator, "--repeat", "1", "--paraphrases", str(K), "--paraphrase-url", model_url,
            "--paraphrase-model", model, "--max-retries", "0", "--out", str(fallback),
        )  # fmt: skip
        assert code == 0
        report = load_run(fallback).paraphrases
        assert report.model_fallbacks == len(SUITE)
        assert [[v.text for v in c.variants] for c in report.cases] == expected
    assert secret not in capsys.readouterr().err


def test_a_rewording_reply_without_choices_is_an_unusable_reply_made_up_with_built_in_ones_not_a_traceback(
    simulator, rewording_server, tmp_path: Path, capsys
):
    url, _ = rewording_server
    suite = write_suite(tmp_path / "suite.jsonl", SUITE)
    out = tmp_path / "no-choices.json"
    code = regress(
        suite, simulator, "--repeat", "1", "--paraphrases", str(K), "--paraphrase-url", url,
        "--paraphrase-model", "no-choices", "--max-retries", "0", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    report = load_run(out).paraphrases
    assert report.model_fallbacks == len(SUITE)
    assert [reason.startswith("unusable reply") for reason in report.model_errors] == [True]
    assert all(len(c.variants) == K + 1 for c in report.cases)
    assert f"built-in ones made up for {len(SUITE)} case(s) (unusable reply" in capsys.readouterr().out
