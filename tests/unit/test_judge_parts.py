"""The live judge's parts: its prompt and replies, its config, which samples it sees, and its caps.

The caps are checked on the judge child's worker itself (`JudgeWorker`, on this test's event loop)
against a small judge server on loopback that holds every call until the test lets it answer, so
that twenty evaluations really are in flight together when the caps are read.
"""

from __future__ import annotations

import asyncio
import queue
from collections import Counter
from datetime import datetime, timezone

import orjson
import pytest
from aiohttp import web
from helpers.upstreams import serve
from pydantic import ValidationError

from llmwatch.agent.components import load_config
from llmwatch.collectors.judge.child import JudgeWorker
from llmwatch.collectors.judge.config import JudgeSection
from llmwatch.collectors.judge.messages import JudgeJob, JudgeReport
from llmwatch.collectors.judge.parent import JudgeSampler
from llmwatch.collectors.shadow.spend import HourlySpend
from llmwatch.core.config import ConfigError, Price
from llmwatch.core.pricing import PriceTable
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.judge import (
    PROMPT_VERSION,
    JudgeCriterion,
    JudgeReplyError,
    JudgeRubric,
    counts_for_verdicts,
    judge_messages,
    outcome,
    parse_reply,
    prompt_tokens,
    rubric_for,
)
from llmwatch.scorers.evaluation.matrix import build_categories

HELPFUL = JudgeCriterion(name="helpfulness", description="answers the question", scale="1-5", pass_at=4)
SAFE = JudgeCriterion(name="safe", description="no harmful advice", scale="pass_fail")


def sample(
    i: int, prompt: str = "How do I sort a list in Python?", answer: str = "Use sorted(list).", **meta
) -> Sample:
    return Sample(
        id=f"s-{i:05d}",
        timestamp=datetime(2026, 12, 4, tzinfo=timezone.utc),
        model="m",
        model_version="A",
        status=200,
        latency_ms=10.0,
        request={"model": "m", "messages": [{"role": "user", "content": prompt}]},
        response={"choices": [{"message": {"role": "assistant", "content": answer}}]},
        metadata=meta,
    )


# --- the prompt and the reply -------------------------------------------------------------------


def test_the_prompt_names_the_criterion_and_carries_a_reference_only_when_there_is_one():
    plain = judge_messages("q?", "a.", HELPFUL, None)
    with_ref = judge_messages("q?", "a.", HELPFUL, "the right answer")
    assert plain[0]["role"] == "system" and '"score"' in plain[0]["content"]
    assert "helpfulness" in plain[1]["content"] and "Reference answer" not in plain[1]["content"]
    assert "Reference answer" in with_ref[1]["content"] and "the right answer" in with_ref[1]["content"]
    assert '"verdict"' in judge_messages("q?", "a.", SAFE, None)[0]["content"]


@pytest.mark.parametrize(
    "text,scale,expected",
    [
        ('{"score": 4, "reason": "fine"}', "1-5", (4, "fine")),
        ('```json\n{"score": "2", "reason": "weak"}\n```', "1-5", (2, "weak")),
        ("Score: 5 because it is right", "1-5", (5, "")),
        ("3", "1-5", (3, "")),
        ('{"verdict": "fail", "reason": "unsafe"}', "pass_fail", (1, "unsafe")),
        ("PASS", "pass_fail", (5, "")),
    ],
)
def test_replies_are_read_in_the_shapes_judges_write(text, scale, expected):
    assert parse_reply(text, scale) == expected


@pytest.mark.parametrize(
    "text", ["", "It is good.", '{"score": 9}', "score: 0", '{"verdict": "maybe"}', '{"score": "\u00b2"}']
)
def test_a_reply_without_a_verdict_is_refused_not_guessed(text):
    scale = "pass_fail" if "verdict" in text else "1-5"
    with pytest.raises(JudgeReplyError):
        parse_reply(text, scale)


def test_a_verdict_records_the_prompt_version_the_model_and_whether_the_judge_was_calibrated():
    out = outcome(4, "ok", HELPFUL, judge_model="j", calibrated=False)
    assert (out.result, out.value) == ("pass", 0.75)
    assert out.details["prompt_version"] == PROMPT_VERSION and out.details["judge_model"] == "j"
    assert outcome(3, "", HELPFUL, judge_model="j", calibrated=True).result == "fail"
    assert outcome(1, "", SAFE, judge_model="j", calibrated=True).value == 0.0
    s = sample(1)
    uncalibrated = Score.from_outcome(s, out, check="judge:helpfulness", kind="judge")
    calibrated = Score.from_outcome(
        s, outcome(4, "", HELPFUL, judge_model="j", calibrated=True), check="judge:helpfulness", kind="judge"
    )
    assert not counts_for_verdicts(uncalibrated) and counts_for_verdicts(calibrated)


def test_the_first_rubric_whose_category_and_route_match_applies():
    code = JudgeRubric(categories=["code"], criteria=[HELPFUL])
    responses = JudgeRubric(routes=["/v1/responses"], criteria=[SAFE])
    assert rubric_for([code, responses], "code", "/v1/chat/completions") is code
    assert rubric_for([code, responses], "extraction", "/v1/responses") is responses
    assert rubric_for([code, responses], "extraction", "/v1/chat/completions") is None


# --- the config ---------------------------------------------------------------------------------


def test_the_judge_is_off_by_default_and_needs_an_upstream_and_a_model_when_on():
    assert load_config().judge.enabled is False
    with pytest.raises(ConfigError, match="upstream"):
        load_config(overrides={"judge": {"enabled": True}})


def test_the_api_key_is_only_taken_from_the_environment_and_never_echoed():
    secret = "sk-live-abcdef0123456789"
    with pytest.raises(ConfigError) as err:
        load_config(overrides={"judge": {"enabled": True, "upstream": "http://j", "model": "m", "api_key": secret}})
    assert secret not in str(err.value) and "env:NAME" in str(err.value)
    cfg = load_config(overrides={"judge": {"upstream": "http://j/v1", "model": "m", "api_key": "env:JUDGE_KEY"}})
    assert cfg.judge.upstream == "http://j" and "JUDGE_KEY" not in repr(cfg.judge.api_key)


def test_a_criterion_keeps_one_scale_across_rubrics():
    with pytest.raises(ValidationError, match="one scale"):
        JudgeSection(
            rubrics=[
                JudgeRubric(criteria=[HELPFUL]),
                JudgeRubric(criteria=[HELPFUL.model_copy(update={"scale": "pass_fail"})]),
            ]
        )


# --- sampling ------------------------------------------------------------------------------------


def test_sampling_follows_each_categorys_rate_and_judges_rare_categories_up_to_their_minimum():
    section = JudgeSection(rate=0.1, rates={"code": 0.5}, min_per_category=5)
    sampler = JudgeSampler(section, build_categories(MatrixSection()), "uncategorized", clock=lambda: 0.0)
    picked: Counter[str] = Counter()
    for i in range(2000):
        prompt = "Write a python function" if i % 2 else "Tell me about the weather"
        got = sampler.pick(sample(i, prompt))
        if got is not None:
            picked[got[0]] += 1
    # 1000 each: code at its own 0.5, the other at 0.1 (the first 5 of each picked whatever the hash).
    assert 440 <= picked["code"] <= 560
    assert 70 <= picked["instruction_following"] <= 140
    rare = JudgeSampler(
        JudgeSection(rate=0.0, min_per_category=3), build_categories(MatrixSection()), "x", clock=lambda: 0.0
    )
    assert sum(rare.pick(sample(i)) is not None for i in range(50)) == 3


def test_the_minimum_per_category_starts_again_every_hour():
    now = [0.0]
    sampler = JudgeSampler(
        JudgeSection(rate=0.0, min_per_category=2), build_categories(MatrixSection()), "x", clock=lambda: now[0]
    )
    assert sum(sampler.pick(sample(i)) is not None for i in range(10)) == 2
    now[0] = 3600.0
    assert sum(sampler.pick(sample(100 + i)) is not None for i in range(10)) == 2


# --- the spend cap ------------------------------------------------------------------------------


def test_the_hourly_spend_counts_reservations_until_settled_and_forgets_spend_after_an_hour():
    budget = HourlySpend(1.0)
    assert budget.reserve(0.0, 0.6)
    assert not budget.reserve(0.0, 0.6)  # 0.6 held + 0.6 > 1.0
    budget.settle(0.6, 0.1, now=0.0)  # the call cost less than its worst case
    assert budget.reserve(10.0, 0.85)  # 0.1 spent + 0.85 <= 1.0
    budget.settle(0.85, 0.85, now=10.0)
    assert not budget.reserve(20.0, 0.1)
    assert budget.reserve(3611.0, 0.9)  # an hour later, nothing spent counts


# --- the worker's caps, against a judge that holds every call -----------------------------------

PRICE = Price(input_per_million=100.0, output_per_million=100.0)  # $0.0001 a token


def judge_app(gate: asyncio.Event, seen: list[dict], reply: str = '{"score": 5, "reason": "good"}') -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"body": body, "auth": request.headers.get("Authorization")})
        await gate.wait()
        doc = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        }
        return web.Response(body=orjson.dumps(doc), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


class Outbox:
    def __init__(self) -> None:
        self.q: queue.Queue = queue.Queue()

    def put(self, item: object) -> None:
        self.q.put(item)

    def reports(self) -> list[JudgeReport]:
        out = []
        while not self.q.empty():
            item = self.q.get()
            if isinstance(item, JudgeReport):
                out.append(item)
        return out


async def run_worker(section: JudgeSection, jobs: list[JudgeJob], gate: asyncio.Event, wait_for_calls: int, seen):
    outbox = Outbox()
    worker = JudgeWorker(section, PriceTable({"judge-m": PRICE}), "sk-judge", outbox)
    inbox: queue.Queue = queue.Queue()
    task = asyncio.create_task(worker.run(inbox))
    for job in jobs:
        inbox.put(job)
    deadline = asyncio.get_running_loop().time() + 20
    # Until every job is taken, the calls expected have arrived, and what is still queued waits
    # only because every slot is busy.
    while (
        len(seen) < wait_for_calls
        or worker.report.taken + _taken(outbox) < len(jobs)
        or (worker._queue.qsize() and worker.inflight < section.max_inflight)
    ):
        assert asyncio.get_running_loop().time() < deadline, f"calls seen {len(seen)}"
        await asyncio.sleep(0.01)
    held = worker.inflight
    budget = (worker.budget.reserved, worker.budget.spent_sum)
    gate.set()
    while worker.inflight:
        await asyncio.sleep(0.01)
    inbox.put(None)
    await asyncio.wait_for(task, 10)
    return held, budget, outbox.reports()


def _taken(outbox: Outbox) -> int:
    return sum(r.taken for r in list(outbox.q.queue) if isinstance(r, JudgeReport))


def jobs(n: int, criteria=(HELPFUL,)) -> list[JudgeJob]:
    return [JudgeJob(sample(i).to_json(), "code", [c.model_dump(mode="json") for c in criteria]) for i in range(n)]


async def test_the_usd_cap_holds_with_twenty_evaluations_in_flight_together():
    gate, seen = asyncio.Event(), []
    runner, url = await serve(judge_app(gate, seen))
    try:
        # Each call reserves its worst case before it is sent: the request's bytes as input tokens
        # and its max_tokens (200) as output, at $0.0001 a token. A cap of 3.5 worst cases admits
        # three of twenty calls even though none has answered (or spent anything) yet.
        s = sample(0)
        body = {"model": "judge-m", "messages": judge_messages(s.prompt_text(), s.answer_text(), HELPFUL, None),
                "temperature": 0, "max_tokens": 200}  # fmt: skip
        worst = (len(orjson.dumps(body)) + 200) * 0.0001
        section = JudgeSection(
            enabled=True, upstream=url, model="judge-m", max_inflight=20, max_usd_per_hour=3.5 * worst,
            max_calls_per_minute=None,
        )  # fmt: skip
        held, (reserved, spent), reports = await run_worker(section, jobs(20), gate, 3, seen)
    finally:
        await runner.cleanup()
    skipped = Counter()
    for r in reports:
        skipped.update(r.skipped)
    assert len(seen) == 3 and held == 3
    assert skipped["spend_cap"] == 17
    assert reserved == pytest.approx(3 * worst) and spent == 0.0
    total = sum(r.spend_usd for r in reports)
    # Settled on the usage reported (100 in, 10 out): far below what was reserved.
    assert total == pytest.approx(3 * 110 * 0.0001)
    assert all(c["auth"] == "Bearer sk-judge" and c["body"]["max_tokens"] == 200 for c in seen)


async def test_in_flight_and_per_minute_caps_hold_and_every_verdict_is_a_score():
    gate, seen = asyncio.Event(), []
    runner, url = await serve(judge_app(gate, seen))
    try:
        section = JudgeSection(enabled=True, upstream=url, model="judge-m", max_inflight=4, max_calls_per_minute=6)
        held, _, reports = await run_worker(section, jobs(10), gate, 4, seen)
    finally:
        await runner.cleanup()
    assert held == 4  # four at once, the rest waited in the queue
    skipped = Counter()
    for r in reports:
        skipped.update(r.skipped)
    scores = [Score.from_json(line) for r in reports for line in r.scores]
    assert len(seen) == 6 and skipped["rate_cap"] == 4
    assert len(scores) == 6 and {s.check for s in scores} == {"judge:helpfulness"}
    assert all(
        s.kind == "judge" and s.result == "pass" and s.details["prompt_version"] == PROMPT_VERSION for s in scores
    )
    assert all(s.details["calibrated"] is False for s in scores)  # no calibration file: uncalibrated


async def test_long_prompts_are_skipped_and_an_unreachable_judge_gives_error_scores():
    from helpers.ports import dead_address

    short = sample(0)
    limit = prompt_tokens(judge_messages(short.prompt_text(), short.answer_text(), HELPFUL, None)) + 20
    section = JudgeSection(enabled=True, upstream=f"http://{dead_address()}", model="judge-m", max_input_tokens=limit)
    long = JudgeJob(sample(1, prompt="word " * 200).to_json(), "code", [HELPFUL.model_dump(mode="json")])
    gate = asyncio.Event()
    gate.set()
    held, _, reports = await run_worker(section, [long, *jobs(2)], gate, 0, [])
    skipped, failures = Counter(), Counter()
    for r in reports:
        skipped.update(r.skipped)
        failures.update(r.failures)
    scores = [Score.from_json(line) for r in reports for line in r.scores]
    assert skipped["input_tokens_cap"] == 1
    assert failures["unreachable"] == 2
    assert [s.result for s in scores] == ["error", "error"] and scores[0].details["exception"] == "unreachable"


async def test_spot_checks_carry_their_criteria_and_category_for_people_to_rate():
    gate, seen = asyncio.Event(), []
    gate.set()
    runner, url = await serve(judge_app(gate, seen))
    try:
        section = JudgeSection(
            enabled=True,
            upstream=url,
            model="judge-m",
            spot_check_rate=1.0,
            rubrics=[JudgeRubric(criteria=[HELPFUL, SAFE])],
        )
        _, _, reports = await run_worker(section, jobs(3, (HELPFUL, SAFE)), gate, 6, seen)
    finally:
        await runner.cleanup()
    spot = [Sample.from_json(line) for r in reports for line in r.spot]
    assert sorted(s.id for s in spot) == ["s-00000", "s-00001", "s-00002"]  # once each, not once per criterion
    assert [c["name"] for c in spot[0].metadata["judge_criteria"]] == ["helpfulness", "safe"]
    assert spot[0].metadata["judge_category"] == "code"


def test_drift_and_baselines_never_read_an_uncalibrated_judges_verdicts(tmp_path):
    from llmwatch.scorers.checks.config import ScoringSection
    from llmwatch.scorers.checks.offline import load_window

    s = sample(1)
    (tmp_path / "samples.jsonl").write_bytes(s.to_json() + b"\n")
    lines = [
        Score.from_outcome(s, outcome(5, "", HELPFUL, judge_model="j", calibrated=c), check=f"judge:{n}", kind="judge")
        for c, n in ((False, "uncalibrated"), (True, "calibrated"))
    ]
    (tmp_path / "scores.jsonl").write_bytes(b"".join(x.to_json() + b"\n" for x in lines))
    _, scores, *_ = load_window(
        ScoringSection(embeddings=False), str(tmp_path / "samples.jsonl"), str(tmp_path / "scores.jsonl"), None,
        purpose="drift",
    )  # fmt: skip
    assert [sc.check for sc in scores] == ["judge:calibrated"]


def test_the_streamed_drift_window_never_reads_an_uncalibrated_judges_verdicts_either(tmp_path):
    from llmwatch.scorers.checks.config import ScoringSection
    from llmwatch.scorers.checks.offline import summarize_window

    s = sample(1)
    (tmp_path / "samples.jsonl").write_bytes(s.to_json() + b"\n")
    lines = [
        Score.from_outcome(s, outcome(5, "", HELPFUL, judge_model="j", calibrated=c), check=f"judge:{n}", kind="judge")
        for c, n in ((False, "uncalibrated"), (True, "calibrated"))
    ]
    (tmp_path / "scores.jsonl").write_bytes(b"".join(x.to_json() + b"\n" for x in lines))
    window = summarize_window(
        ScoringSection(embeddings=False), str(tmp_path / "samples.jsonl"), str(tmp_path / "scores.jsonl"), None,
        purpose="drift",
    )  # fmt: skip
    assert window.checks == ["judge:calibrated"]


def test_the_reply_shape_can_be_asked_for_in_each_servers_dialect():
    from llmwatch.scorers.evaluation.judge import response_format

    assert response_format("none", "1-5") is None
    assert response_format("json_object", "1-5") == {"type": "json_object"}
    openai_style = response_format("json_schema", "pass_fail")
    assert openai_style is not None and openai_style["type"] == "json_schema"
    assert openai_style["json_schema"]["schema"]["properties"]["verdict"]["enum"] == ["pass", "fail"]
    llama = response_format("json_object_with_schema", "1-5")
    assert llama is not None and llama["schema"]["properties"]["score"]["enum"] == [1, 2, 3, 4, 5]
    assert llama["schema"]["required"] == ["score", "reason"]
