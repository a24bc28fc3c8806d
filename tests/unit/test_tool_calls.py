"""The `tool_call` check: every call of an answer held to the request's own tools, schemas,
tool_choice and parallel_tool_calls (issue 27); and the simulator's tool calls it is tried on."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator

from llmwatch.agent.apps.simulator.server import PROFILES, _example_value, _plan_tool_calls
from llmwatch.core.records import Sample
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.registry import build_check
from llmwatch.scorers.checks.suite import build_suite
from llmwatch.scorers.drift.features import failure_mode
from llmwatch.scorers.evaluation.suite_build import failure_modes

WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {"name": "get_time"}},  # no parameters: takes none
]


def call(name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}


def sample(calls: list[dict[str, Any]] | None, content: str | None = None, **request: Any) -> Sample:
    req = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS, **request}
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    return Sample(
        id="s1",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        model="gpt-4o",
        status=200,
        latency_ms=100.0,
        request=req,
        response={"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}]},
    )


CHECK = build_check("tool_call", "tool_call", {})


def test_a_call_that_fits_its_schema_passes_with_the_names_called():
    out = CHECK.run(sample([call("get_weather", {"city": "Paris", "days": 3})]))
    assert out.result == "pass" and out.value == 1.0
    assert out.details["calls"] == 1 and out.details["names"] == ["get_weather"]


def test_a_function_without_parameters_takes_an_empty_object():
    assert CHECK.run(sample([call("get_time", {})])).result == "pass"
    assert CHECK.run(sample([call("get_time", "[]")])).details["reasons"] == ["arguments_schema"]


@pytest.mark.parametrize(
    ("arguments", "keyword"),
    [
        ({"city": "Paris", "days": "three"}, "type"),
        ({"city": "Paris"}, "required"),
        ({"city": "Paris", "days": 9}, "maximum"),
        ({"city": "Paris", "days": 2, "unit": "kelvin"}, "enum"),
        ({"city": "Paris", "days": 2, "country": "FR"}, "additionalProperties"),
    ],
)
def test_arguments_that_break_the_schema_fail_with_the_keyword_and_path(arguments, keyword):
    out = CHECK.run(sample([call("get_weather", arguments)]))
    assert out.result == "fail" and out.value == 0.0
    assert out.details["reasons"] == ["arguments_schema"]
    (failure,) = out.details["failures"]
    assert failure["name"] == "get_weather" and failure["index"] == 0
    assert failure["errors"][0]["keyword"] == keyword


def test_an_unknown_tool_and_arguments_that_are_not_json_are_reasons_of_their_own():
    out = CHECK.run(sample([call("get_wether", {"city": "Paris", "days": 1})]))
    assert out.details["reasons"] == ["unknown_tool"] and out.details["failures"][0]["name"] == "get_wether"
    out = CHECK.run(sample([call("get_weather", '{"city": "Paris", "days": ')]))
    assert out.details["reasons"] == ["arguments_not_json"] and "error" in out.details["failures"][0]


def test_the_value_is_the_share_of_calls_that_conform():
    calls = [call("get_weather", {"city": "Paris", "days": 1}), call("nope", {})]
    out = CHECK.run(sample(calls))
    assert out.result == "fail" and out.value == 0.5
    assert [f["index"] for f in out.details["failures"]] == [1]


def test_tool_choice_is_held_to():
    text_only = sample(None, content="It is sunny.", tool_choice="required")
    assert CHECK.run(text_only).details["reasons"] == ["tool_choice_required"]
    called = sample([call("get_weather", {"city": "Paris", "days": 1})], tool_choice="none")
    assert CHECK.run(called).details["reasons"] == ["tool_choice_none"]
    named = {"type": "function", "function": {"name": "get_time"}}
    wrong = sample([call("get_weather", {"city": "Paris", "days": 1})], tool_choice=named)
    assert CHECK.run(wrong).details["reasons"] == ["tool_choice_function"]
    assert CHECK.run(sample([call("get_time", {})], tool_choice=named)).result == "pass"
    # auto (the default) lets the model answer in text.
    assert CHECK.run(sample(None, content="It is sunny.")).result == "pass"


def test_parallel_calls_fail_only_where_the_request_forbade_them():
    calls = [call("get_weather", {"city": "Paris", "days": 1}), call("get_time", {})]
    assert CHECK.run(sample(calls)).result == "pass"
    out = CHECK.run(sample(calls, parallel_tool_calls=False))
    assert out.details["reasons"] == ["parallel_calls"] and out.value == 0.0


def test_responses_api_and_legacy_function_call_are_read():
    responses = Sample(
        id="r1",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        model="gpt-4o",
        status=200,
        latency_ms=1.0,
        route="/v1/responses",
        request={
            "model": "gpt-4o",
            "input": "hi",
            "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMS}],
        },
        response={"output": [{"type": "function_call", "name": "get_weather", "arguments": '{"city": "Oslo"}'}]},
    )
    assert CHECK.run(responses).details["reasons"] == ["arguments_schema"]
    legacy = sample(None, functions=[{"name": "get_weather", "parameters": WEATHER_PARAMS}], tools=[])
    legacy.response["choices"][0]["message"]["function_call"] = {
        "name": "get_weather",
        "arguments": '{"city":"Oslo","days":2}',
    }
    assert CHECK.run(legacy).result == "pass"


def test_samples_it_cannot_judge_are_skipped_or_errors_not_failures():
    no_tools = sample([call("x", {})])
    no_tools.request.pop("tools")
    assert CHECK.run(no_tools).details["reason"] == "no_tools"
    failed_call = sample(None).model_copy(update={"status": 500})
    assert CHECK.run(failed_call).result == "skip"
    # The request's own schema is broken: the model cannot be blamed for it.
    bad_tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]
    out = CHECK.run(sample([call("f", {})], tools=bad_tools))
    assert out.result == "error" and "not a valid Draft 2020-12 JSON Schema" in out.details["error"]


def test_the_default_suite_runs_it_only_on_calls_that_offer_tools_and_a_failure_is_the_tool_calls_mode():
    suite = build_suite(ScoringSection(embeddings=False))
    bad = sample([call("get_weather", {"city": "Paris"})])
    results = {r.score.check: r.score for r in suite.score([bad])}
    assert results["tool_call"].result == "fail"
    assert failure_mode(bad, results) == "tool_calls"
    assert "tool_calls" in failure_modes(bad, list(results.values()))
    plain = sample(None, content="Sunny.")
    plain.request.pop("tools")
    assert "tool_call" not in {r.score.check for r in suite.score([plain])}


# --- the simulator's side ------------------------------------------------------------------------


SCHEMAS = [
    WEATHER_PARAMS,
    {
        "type": "object",
        "properties": {
            "restaurant": {"type": "string"},
            "people": {"type": "integer", "minimum": 1},
            "date": {"type": "string", "format": "date"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "address": {
                "type": "object",
                "properties": {"zip": {"type": "string", "maxLength": 5}},
                "required": ["zip"],
            },
            "price": {"type": "number", "exclusiveMinimum": 0},
            "ok": {"type": "boolean"},
            "note": {"type": ["string", "null"]},
        },
        "required": ["restaurant", "people", "date", "tags", "address"],
    },
    {"type": "object", "properties": {}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_simulators_arguments_satisfy_the_schema_and_are_the_same_each_time(schema):
    value = _example_value(schema, ["Lyon", "dinner"])
    assert (
        list(Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER).iter_errors(value)) == []
    )
    assert _example_value(schema, ["Lyon", "dinner"]) == value


def test_version_b_breaks_about_a_quarter_of_its_calls_and_a_never_does():
    body = {"tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMAS[1]}}]}
    messages = [{"role": "user", "content": "Book dinner in Lyon"}]
    for profile, low, high in ((PROFILES["A"], 0, 0), (PROFILES["B"], 60, 140)):
        rng = random.Random(7)
        plans = [_plan_tool_calls(rng, profile, body, messages, "Book dinner in Lyon") for _ in range(400)]
        hows = [p[0].broken for p in plans if p]
        assert len(hows) == 400
        assert low <= sum(h != "ok" for h in hows) <= high
        if profile.name == "B":
            assert {"wrong_type", "missing_required", "unknown_name"} <= set(hows)
        # Each broken call really is refused by the check's reading of the same contract.
        for p in plans:
            sample_ = sample([call(p[0].name, p[0].arguments)], tools=body["tools"])
            assert (CHECK.run(sample_).result == "pass") == (p[0].broken == "ok")


def test_the_report_shows_the_tool_call_conformance_rate_per_version():
    from llmwatch.core.scores import Score
    from llmwatch.scorers.evaluation.config import MatrixSection
    from llmwatch.scorers.evaluation.evaluate import build_report, format_text

    samples, scores = [], []
    for i, (version, ok) in enumerate([("A", True)] * 4 + [("B", True)] * 3 + [("B", False)]):
        args = {"city": "Paris", "days": 2} if ok else {"city": "Paris"}
        s = sample([call("get_weather", args)]).model_copy(update={"id": f"s{i}", "model_version": version})
        samples.append(s)
        scores.append(Score.from_outcome(s, CHECK.run(s), check="tool_call", kind="tool_call"))
    report = build_report(samples, scores, MatrixSection())
    assert report.checks["A"]["tool_call"] == {"n": 4, "passed": 4, "pass_rate": 1.0}
    assert report.checks["B"]["tool_call"] == {"n": 4, "passed": 3, "pass_rate": 0.75}
    text = format_text(report)
    assert "tool-call conformance" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("tool_call"))
    assert "100.0% | 4" in line and "75.0% | 4" in line
    assert report.to_dict()["checks"]["B"]["tool_call"]["pass_rate"] == 0.75
