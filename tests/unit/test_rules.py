from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from helpers.samples import NOW, chat_sample
from pydantic import ValidationError

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.rules import RULE_CHECKS, CheckOutcome, build_rule_check, run_check


def tool_call_sample() -> Sample:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
        ],
    }
    response = {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }
    return chat_sample(response=response, finish_reason="tool_calls")


def streamed_sample(parts: list[str]) -> Sample:
    # The sidecar assembles streamed chunks into one chat.completion-shaped body.
    response = {
        "id": "chatcmpl-stream-7",
        "object": "chat.completion",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(parts)}, "finish_reason": "stop"}],
    }
    usage = {"output_tokens": len(parts), "estimated": True}
    return chat_sample(response=response, stream=True, ttft_ms=180.0, usage=usage)


def run(kind: str, sample: Sample, params: dict[str, Any] | None = None) -> CheckOutcome:
    return run_check(build_rule_check(kind, params), sample)


# --- Score record ------------------------------------------------------------------------------------


def test_score_round_trips_through_json_lines():
    score = Score(
        sample_id="smp-1",
        check="answer_is_json",
        kind="json_valid",
        result="fail",
        value=0.0,
        details={"error": "unexpected character", "line": 1},
        model="gpt-4o",
        model_version="gpt-4o-2024-08-06",
        route="/v1/chat/completions",
        sample_timestamp=NOW,
        scored_at=NOW,
    )
    line = score.to_json()
    assert orjson.loads(line)["sample_timestamp"] == "2024-05-01T12:00:00Z"
    assert Score.from_json(line) == score


def test_score_from_outcome_carries_the_sample_identity():
    sample = chat_sample(route="/v1/chat/completions")
    score = Score.from_outcome(sample, CheckOutcome("pass", 1.0, {"x": 1}), check="ok", kind="json_valid")
    assert (score.sample_id, score.model, score.model_version, score.route) == (
        "smp-0001",
        "gpt-4o-mini",
        "gpt-4o-mini-2024-07-18",
        "/v1/chat/completions",
    )
    assert score.sample_timestamp == NOW and score.scored_at.tzinfo is not None


def test_score_rejects_values_outside_zero_to_one_and_unknown_results():
    with pytest.raises(ValidationError):
        Score(sample_id="s", check="c", kind="k", result="pass", value=1.5, sample_timestamp=NOW)
    with pytest.raises(ValidationError):
        Score(sample_id="s", check="c", kind="k", result="ok", value=None, sample_timestamp=NOW)


def test_naive_timestamps_in_a_score_are_read_as_utc():
    line = orjson.dumps(
        {
            "sample_id": "s",
            "check": "c",
            "kind": "k",
            "result": "skip",
            "value": None,
            "sample_timestamp": "2024-05-01T12:00:00",
            "scored_at": "2024-05-01T12:00:01",
        }
    )
    assert Score.from_json(line).sample_timestamp == NOW


# --- json_valid --------------------------------------------------------------------------------------


def test_plain_json_object_is_valid():
    assert run("json_valid", chat_sample('{"city": "Paris", "population": 2102650}')).result == "pass"


def test_json_in_markdown_fence_is_valid_when_fences_allowed():
    outcome = run("json_valid", chat_sample('```json\n{"city": "Paris"}\n```'), {"allow_fences": True})
    assert outcome.result == "pass"
    assert outcome.details["fenced"] is True and outcome.details["fence_lang"] == "json"


def test_json_in_markdown_fence_fails_with_a_hint_when_fences_not_allowed():
    outcome = run("json_valid", chat_sample('```json\n{"city": "Paris"}\n```'))
    assert outcome.result == "fail" and "allow_fences" in outcome.details["hint"]


def test_nested_json_containing_code_fences_inside_a_markdown_fence_is_valid():
    doc = {"steps": [{"lang": "python", "code": "```python\nprint('hi')\n```"}], "meta": {"depth": {"level": 3}}}
    answer = "\n```json\n" + json.dumps(doc, indent=2) + "\n```\n"
    assert run("json_valid", chat_sample(answer), {"allow_fences": True, "require_object": True}).result == "pass"


def test_tilde_and_longer_backtick_fences_are_accepted():
    for answer in ("~~~\n[1, 2, 3]\n~~~", '````json\n{"a": "```"}\n````'):
        assert run("json_valid", chat_sample(answer), {"allow_fences": True}).result == "pass", answer


def test_prose_around_a_fenced_json_block_is_not_valid_json():
    answer = 'Here is the data:\n```json\n{"city": "Paris"}\n```'
    assert run("json_valid", chat_sample(answer), {"allow_fences": True}).result == "fail"


def test_invalid_json_reports_the_error_line_and_column_in_the_answer():
    outcome = run("json_valid", chat_sample('{\n  "a": 1,\n  "b": 2,,\n}'))
    assert outcome.result == "fail" and outcome.value == 0.0
    assert (outcome.details["line"], outcome.details["column"]) == (3, 10)
    assert "expected" in outcome.details["error"]


def test_error_position_inside_a_fence_counts_from_the_start_of_the_answer():
    answer = '```json\n{"a": tru}\n```'
    outcome = run("json_valid", chat_sample(answer), {"allow_fences": True})
    assert (outcome.details["position"], outcome.details["line"], outcome.details["column"]) == (14, 2, 7)
    assert answer[outcome.details["position"] :].startswith("tru}")


def test_json_array_fails_when_an_object_is_required():
    outcome = run("json_valid", chat_sample("[1, 2]"), {"require_object": True})
    assert outcome.result == "fail" and outcome.details["got"] == "array"
    assert run("json_valid", chat_sample("[1, 2]")).result == "pass"


def test_json_with_emoji_cjk_and_accents_is_valid():
    answer = '{"greeting": "¡Hola, señor! 👋", "city": "東京", "note": "Zoë’s café"}'
    assert run("json_valid", chat_sample(answer), {"require_object": True}).result == "pass"


def test_trailing_text_after_json_is_invalid():
    assert run("json_valid", chat_sample('{"a": 1} Hope this helps!')).result == "fail"


@pytest.mark.parametrize("answer", ["", "   \n", "```json\n\n```"])
def test_empty_answers_are_not_valid_json(answer):
    outcome = run("json_valid", chat_sample(answer), {"allow_fences": True})
    assert outcome.result == "fail" and outcome.details["error"] == "answer is empty"


def test_none_response_is_an_empty_answer():
    assert run("json_valid", chat_sample(response=None)).details["error"] == "answer is empty"


def test_non_dict_response_bodies_are_read_as_text_or_nothing():
    assert run("json_valid", chat_sample(response='{"raw": true}')).result == "pass"
    assert run("json_valid", chat_sample(response=[{"unexpected": "list"}])).result == "fail"


def test_streaming_assembled_json_is_valid():
    sample = streamed_sample(['{"ci', 'ty": "Pa', 'ris"}'])
    assert run("json_valid", sample, {"require_object": True}).result == "pass"


def test_content_checks_skip_failed_upstream_calls():
    sample = chat_sample(
        response={"error": {"message": "Rate limit reached", "type": "rate_limit_error"}},
        status=429,
        error_type="rate_limit_error",
        finish_reason=None,
    )
    for kind, params in [("json_valid", None), ("refusal", None), ("pii_leak", None), ("not_empty_or_truncated", None)]:
        outcome = run(kind, sample, params)
        assert outcome.result == "skip" and outcome.value is None
        assert outcome.details == {"reason": "upstream_error", "status": 429, "error_type": "rate_limit_error"}


def test_tool_call_only_answers_are_skipped_by_content_checks():
    assert run("json_valid", tool_call_sample()).details["reason"] == "tool_call"


# --- json_schema ---------------------------------------------------------------------------------------

PERSON_SCHEMA = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "emails": {"type": "array", "items": {"type": "string", "format": "email"}},
    },
    "additionalProperties": False,
}


def test_answer_conforming_to_an_inline_schema_passes():
    answer = '```json\n{"name": "Zoë", "age": 31}\n```'
    assert run("json_schema", chat_sample(answer), {"schema": PERSON_SCHEMA, "allow_fences": True}).result == "pass"


def test_schema_violations_are_listed_with_json_paths():
    outcome = run("json_schema", chat_sample('{"name": 7, "age": -1, "extra": true}'), {"schema": PERSON_SCHEMA})
    assert outcome.result == "fail"
    by_path = {e["path"]: e["keyword"] for e in outcome.details["errors"]}
    assert by_path == {"$.name": "type", "$.age": "minimum", "$": "additionalProperties"}
    assert outcome.details["more_errors"] is False


def test_schema_errors_are_capped_at_max_errors():
    schema = {"type": "array", "items": {"type": "integer"}}
    outcome = run("json_schema", chat_sample('["a", "b", "c", "d"]'), {"schema": schema, "max_errors": 2})
    assert [e["path"] for e in outcome.details["errors"]] == ["$[0]", "$[1]"]
    assert outcome.details["more_errors"] is True


def test_unparseable_answer_fails_the_schema_check_with_the_parse_error():
    outcome = run("json_schema", chat_sample('{"name": "Zoë",'), {"schema": PERSON_SCHEMA})
    assert outcome.result == "fail" and "error" in outcome.details and "errors" not in outcome.details


def test_schema_can_be_loaded_from_a_json_or_yaml_file(tmp_path):
    json_file = tmp_path / "person.json"
    json_file.write_bytes(orjson.dumps(PERSON_SCHEMA))
    yaml_file = tmp_path / "person.yaml"
    yaml_file.write_text("type: object\nrequired: [name]\n")
    sample = chat_sample('{"name": "Zoë", "age": 31}')
    assert run("json_schema", sample, {"schema_file": str(json_file)}).result == "pass"
    assert run("json_schema", chat_sample('{"age": 31}'), {"schema_file": str(yaml_file)}).result == "fail"


def test_formats_are_only_enforced_when_check_formats_is_set():
    sample = chat_sample('{"name": "Zoë", "age": 31, "emails": ["not-an-address"]}')
    assert run("json_schema", sample, {"schema": PERSON_SCHEMA}).result == "pass"
    assert run("json_schema", sample, {"schema": PERSON_SCHEMA, "check_formats": True}).result == "fail"


def test_an_invalid_schema_is_rejected_at_config_time():
    with pytest.raises(ValueError, match=r"check kind 'json_schema'.*not a valid Draft 2020-12 JSON Schema.*\$\.type"):
        build_rule_check("json_schema", {"schema": {"type": "strnig"}})


def test_schema_and_schema_file_are_mutually_exclusive_and_one_is_required():
    for params in ({}, {"schema": PERSON_SCHEMA, "schema_file": "person.json"}):
        with pytest.raises(ValueError, match="exactly one of 'schema'.*'schema_file'"):
            build_rule_check("json_schema", params)


def test_an_unreadable_schema_file_error_names_the_path(tmp_path):
    with pytest.raises(ValueError, match="schema_file '.*missing.json': cannot read"):
        build_rule_check("json_schema", {"schema_file": str(tmp_path / "missing.json")})
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="broken.json'.*not valid JSON"):
        build_rule_check("json_schema", {"schema_file": str(broken)})


ORDER_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Order",
    "type": "object",
    "required": ["id", "items"],
    "properties": {
        "id": {"type": "string", "pattern": "^ord_[0-9]+$"},
        "status": {"enum": ["open", "paid"]},
        "total": {"type": ["number", "null"], "minimum": 0, "exclusiveMaximum": 10000},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string", "minLength": 2, "maxLength": 4}, "qty": {"type": "integer"}},
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": {"type": "string"},
}
ORDER_INSTANCES = [
    {"id": "ord_1", "items": [{"sku": "AB", "qty": 1}]},
    {"id": "ord_1", "items": [{"sku": "AB", "qty": 1.0}], "total": None, "status": "paid", "note": "gift"},
    {"id": "ord_1", "items": [{"sku": "AB", "qty": True}]},
    {"id": "ord_1", "items": [{"sku": "🙂🙂", "qty": 2}], "total": 9999.5},
    {"id": "ord_1", "items": [{"sku": "A"}]},
    {"id": "ord_1", "items": [{"sku": "ABCDE"}]},
    {"id": "ord_1", "items": [{"sku": "AB", "colour": "red"}]},
    {"id": "ord_1", "items": []},
    {"id": "ord_1", "items": [{}, {}, {}, {}]},
    {"id": "ord_x", "items": [{}]},
    {"id": 1, "items": [{}]},
    {"id": "ord_1", "items": [{}], "total": -1},
    {"id": "ord_1", "items": [{}], "total": 10000},
    {"id": "ord_1", "items": [{}], "total": False},
    {"id": "ord_1", "items": [{}], "status": "shipped"},
    {"id": "ord_1", "items": [{}], "note": 5},
    {"items": [{}]},
    ["ord_1"],
    "ord_1",
    None,
]


@pytest.mark.parametrize("index", range(len(ORDER_INSTANCES)))
def test_json_schema_verdicts_agree_with_the_jsonschema_library(index):
    from jsonschema import Draft202012Validator

    doc = ORDER_INSTANCES[index]
    expected = "pass" if Draft202012Validator(ORDER_SCHEMA).is_valid(doc) else "fail"
    assert run("json_schema", chat_sample(json.dumps(doc)), {"schema": ORDER_SCHEMA}).result == expected


def test_schemas_with_references_and_combinators_are_validated_too():
    schema = {
        "$defs": {"qty": {"type": "integer", "minimum": 1}},
        "type": "object",
        "properties": {"qty": {"$ref": "#/$defs/qty"}, "code": {"anyOf": [{"type": "string"}, {"const": 0}]}},
    }
    assert run("json_schema", chat_sample('{"qty": 2, "code": 0}'), {"schema": schema}).result == "pass"
    outcome = run("json_schema", chat_sample('{"qty": 0, "code": 1}'), {"schema": schema})
    assert sorted(e["path"] for e in outcome.details["errors"]) == ["$.code", "$.qty"]


def test_schema_error_messages_are_truncated():
    outcome = run(
        "json_schema",
        chat_sample(json.dumps({"name": "x" * 5000, "age": 1})),
        {"schema": {"properties": {"name": {"maxLength": 10}}}},
    )
    assert len(outcome.details["errors"][0]["message"]) <= 200


# --- regex -----------------------------------------------------------------------------------------------


def test_answer_matching_every_required_pattern_passes():
    outcome = run("regex", chat_sample("Order #A-1234 confirmed."), {"must_match": [r"#[A-Z]-\d{4}", "confirmed"]})
    assert outcome.result == "pass" and outcome.value == 1.0


def test_missing_required_pattern_fails_and_names_it():
    outcome = run("regex", chat_sample("Order pending."), {"must_match": [r"#[A-Z]-\d{4}", "Order"]})
    assert outcome.result == "fail" and outcome.details["missing"] == [r"#[A-Z]-\d{4}"]


def test_forbidden_pattern_fails_with_its_position_but_not_the_matched_text():
    answer = "Sure. Internal note: password=hunter2"
    outcome = run("regex", chat_sample(answer), {"must_not_match": [r"password=\S+"]})
    assert outcome.details["forbidden"] == [{"pattern": r"password=\S+", "position": 21}]
    assert b"hunter2" not in orjson.dumps(outcome.details)


def test_regex_flags_apply_to_all_patterns():
    sample = chat_sample("Summary:\nPARIS is the capital")
    assert run("regex", sample, {"must_match": ["^paris"]}).result == "fail"
    assert run("regex", sample, {"must_match": ["^paris"], "flags": ["ignorecase", "multiline"]}).result == "pass"


def test_regex_handles_unicode_answers():
    assert (
        run(
            "regex", chat_sample("東京は日本の首都です 🗼"), {"must_match": ["東京"], "must_not_match": ["大阪"]}
        ).result
        == "pass"
    )


def test_a_bad_regex_is_a_config_error_naming_the_pattern():
    with pytest.raises(ValueError, match=r"check kind 'regex'.*must_not_match\[1\].*'\(unclosed'"):
        build_rule_check("regex", {"must_not_match": ["ok", "(unclosed"]})


def test_regex_requires_at_least_one_pattern():
    with pytest.raises(ValueError, match="must_match.*must_not_match"):
        build_rule_check("regex", {"flags": ["ignorecase"]})


def test_unknown_regex_flag_error_lists_the_allowed_flags():
    with pytest.raises(ValueError, match=r"field 'flags\.0'.*'ignorecase', 'multiline' or 'dotall'"):
        build_rule_check("regex", {"must_match": ["x"], "flags": ["verbose"]})


# --- length ------------------------------------------------------------------------------------------------


def test_answer_within_character_bounds_passes():
    outcome = run("length", chat_sample("Paris."), {"min_chars": 1, "max_chars": 10})
    assert outcome.result == "pass" and outcome.details == {"chars": 6}


def test_answer_over_max_chars_fails_and_names_the_bound():
    outcome = run("length", chat_sample("x" * 50), {"max_chars": 10})
    assert outcome.result == "fail" and outcome.details["violations"] == ["max_chars"]


def test_token_bounds_use_reported_usage_when_present():
    outcome = run("length", chat_sample("one two three", usage={"output_tokens": 900}), {"max_tokens": 500})
    assert outcome.result == "fail" and outcome.details["tokens_source"] == "usage"


def test_token_bounds_fall_back_to_a_word_and_punctuation_count():
    outcome = run("length", chat_sample("Hello, world! 你好世界", usage={}), {"min_tokens": 8})
    assert outcome.details == {"tokens": 8, "tokens_source": "approximation"}
    assert outcome.result == "pass"


def test_empty_answer_fails_a_minimum_length():
    assert run("length", chat_sample(""), {"min_chars": 1}).details["violations"] == ["min_chars"]


def test_min_above_max_is_a_config_error():
    with pytest.raises(ValueError, match="'min_tokens' \\(10\\) must not exceed 'max_tokens' \\(5\\)"):
        build_rule_check("length", {"min_tokens": 10, "max_tokens": 5})


def test_negative_bound_error_names_the_field():
    with pytest.raises(ValueError, match="check kind 'length'.*field 'max_chars'.*greater than or equal to 0"):
        build_rule_check("length", {"max_chars": -1})


# --- refusal -------------------------------------------------------------------------------------------------


def test_plain_english_refusal_is_flagged_with_the_matched_phrase():
    outcome = run("refusal", chat_sample("I'm sorry, but I can't help with that."))
    assert outcome.result == "fail" and outcome.value == 0.0
    assert outcome.details == {"matched": "i'm sorry, but i can't help", "language": "en"}


def test_refusal_with_curly_apostrophes_is_flagged():
    assert run("refusal", chat_sample("I’m sorry, but I can’t assist with that request.")).result == "fail"


@pytest.mark.parametrize(
    "answer",
    [
        "I cannot assist with creating malware.",
        "As an AI language model, I do not have personal opinions.",
        "I'm unable to provide medical diagnoses.",
        "Thanks for asking. Unfortunately, I won't be able to help — I must decline.",
        "**I'm sorry, but I can't help with that.**",
        "I apologize, but I cannot   fulfill this\nrequest.",
    ],
)
def test_common_english_refusals_are_flagged(answer):
    assert run("refusal", chat_sample(answer)).result == "fail"


@pytest.mark.parametrize(
    ("answer", "language"),
    [
        ("Lo siento, pero no puedo ayudarte con eso.", "es"),
        ("Je suis désolé, mais je ne peux pas vous aider avec cette demande.", "fr"),
        ("Es tut mir leid, aber ich kann Ihnen dabei nicht helfen.", "de"),
        ("Desculpe, mas não posso ajudar com isso.", "pt"),
        ("Mi dispiace, ma non posso aiutarti con questa richiesta.", "it"),
        ("抱歉，我无法提供这方面的帮助。", "zh"),
        ("申し訳ありませんが、そのご依頼にはお応えできません。", "ja"),
        ("Извините, но я не могу помочь с этим запросом.", "ru"),
    ],
)
def test_refusals_in_other_languages_are_flagged(answer, language):
    outcome = run("refusal", chat_sample(answer))
    assert outcome.result == "fail" and outcome.details["language"] == language


def test_a_refusal_quoted_late_in_a_long_answer_is_not_flagged():
    answer = (
        "Here is a customer-support script you can adapt. Greet the caller, confirm their account number, "
        "and summarise the issue back to them so they feel heard. "
        * 4
        + "If the request is out of policy, the agent should say: I'm sorry, but I can't help with that."
    )
    assert run("refusal", chat_sample(answer)).result == "pass"


def test_a_refusal_quoted_inside_a_sentence_is_not_flagged():
    answer = 'The chatbot replied "I can\'t help with that", which frustrated users. Here is how to fix it.'
    assert run("refusal", chat_sample(answer)).result == "pass"


@pytest.mark.parametrize(
    "answer",
    [
        "I can help with that! The capital of France is Paris.",
        "I'm sorry for the confusion earlier — here is the corrected code.",
        "I cannot stress enough how important backups are.",
        "No puedes olvidar el protector solar.",
        "",
    ],
)
def test_helpful_answers_are_not_refusals(answer):
    assert run("refusal", chat_sample(answer)).result == "pass"


def test_refusal_window_is_configurable():
    answer = "Let me think about this carefully. " * 3 + "I cannot assist with that."
    assert run("refusal", chat_sample(answer)).result == "fail"
    assert run("refusal", chat_sample(answer), {"window_chars": 40}).result == "pass"


def test_extra_refusal_patterns_are_matched_case_insensitively():
    outcome = run("refusal", chat_sample("Das verstößt gegen unsere RICHTLINIEN."), {"extra_patterns": ["richtlinien"]})
    assert outcome.result == "fail" and outcome.details["pattern"] == "richtlinien"


# --- not_empty_or_truncated -----------------------------------------------------------------------------------


def test_a_complete_answer_passes():
    assert run("not_empty_or_truncated", chat_sample("Paris.")).result == "pass"


@pytest.mark.parametrize(
    ("answer", "reason"), [("", "empty"), ("  \n\t", "whitespace_only"), ("\u200b\u200b ", "whitespace_only")]
)
def test_empty_and_invisible_answers_fail(answer, reason):
    outcome = run("not_empty_or_truncated", chat_sample(answer))
    assert outcome.result == "fail" and outcome.details["reason"] == reason


def test_finish_reason_length_fails_as_truncated():
    outcome = run("not_empty_or_truncated", chat_sample("The history of Paris begins in", finish_reason="length"))
    assert outcome.details == {"reason": "truncated", "finish_reason": "length"}


def test_truncation_is_read_from_the_response_when_the_sample_lacks_finish_reason():
    sample = chat_sample("The history of Paris", finish_reason=None)
    sample.response["choices"][0]["finish_reason"] = "length"
    assert run("not_empty_or_truncated", sample).details["reason"] == "truncated"


def test_responses_api_incomplete_for_max_output_tokens_counts_as_truncated():
    response = {
        "object": "response",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "Paris is"}]}],
    }
    outcome = run("not_empty_or_truncated", chat_sample(response=response, finish_reason=None, route="/v1/responses"))
    assert outcome.details == {"reason": "truncated", "finish_reason": "length"}


def test_extra_truncation_reasons_can_be_configured():
    sample = chat_sample("", finish_reason="content_filter")
    assert (
        run("not_empty_or_truncated", sample, {"truncation_reasons": ["length", "content_filter"]}).details["reason"]
        == "truncated"
    )


def test_tool_call_answers_are_not_empty():
    outcome = run("not_empty_or_truncated", tool_call_sample())
    assert outcome.result == "pass" and outcome.details == {"tool_calls": 1}
    assert run("not_empty_or_truncated", tool_call_sample(), {"allow_tool_calls": False}).result == "fail"


def test_none_response_is_empty():
    assert run("not_empty_or_truncated", chat_sample(response=None, finish_reason=None)).details["reason"] == "empty"


def test_streaming_assembled_answer_is_not_empty():
    assert run("not_empty_or_truncated", streamed_sample(["Par", "is", "."])).result == "pass"


# --- language_match ------------------------------------------------------------------------------------------


SAME_LANGUAGE = [
    ("en", "What is the capital of France? Please answer briefly.", "The capital of France is Paris, on the Seine."),
    ("es", "¿Cuál es la capital de Francia? Responde en una frase.", "La capital de Francia es París, junto al Sena."),
    ("fr", "Quelle est la capitale de la France ? Réponds en une phrase.", "La capitale de la France est Paris."),
    ("de", "Was ist die Hauptstadt von Frankreich? Bitte kurz.", "Die Hauptstadt von Frankreich ist Paris."),
    ("it", "Qual è la capitale della Francia? Rispondi in breve.", "La capitale della Francia è Parigi, molto bella."),
    ("pt", "Qual é a capital da França? Responda em uma frase.", "A capital da França é Paris, que fica no rio Sena."),
    ("nl", "Wat is de hoofdstad van Frankrijk? Antwoord in een zin.", "De hoofdstad van Frankrijk is Parijs."),
    ("zh", "法国的首都是哪里？请简单回答。", "法国的首都是巴黎，位于塞纳河畔。"),
    (
        "ja",
        "フランスの首都はどこですか？簡単に答えてください。",
        "フランスの首都はパリで、セーヌ川のほとりにあります。",
    ),
]


@pytest.mark.parametrize(("language", "prompt", "answer"), SAME_LANGUAGE)
def test_answer_in_the_prompts_language_passes(language, prompt, answer):
    outcome = run("language_match", chat_sample(answer, prompt=prompt))
    assert outcome.result == "pass", outcome.details
    assert outcome.details == {"prompt_language": language, "answer_language": language}


def test_answer_in_another_latin_language_fails():
    sample = chat_sample("La capital de Francia es París, una ciudad con muchos museos.")
    outcome = run("language_match", sample)
    assert outcome.result == "fail" and outcome.details == {"prompt_language": "en", "answer_language": "es"}


def test_answer_in_another_script_fails():
    assert run("language_match", chat_sample("法国的首都是巴黎，位于塞纳河畔，是一座历史悠久的城市。")).result == "fail"
    outcome = run("language_match", chat_sample("フランスの首都はパリです。", prompt="法国的首都是哪里？请简单回答。"))
    assert outcome.details == {"prompt_language": "zh", "answer_language": "ja"}


def test_cyrillic_prompt_and_answer_match_at_script_level():
    sample = chat_sample("Столица Франции — Париж, город на Сене.", prompt="Какая столица у Франции? Ответь кратко.")
    outcome = run("language_match", sample)
    assert outcome.result == "pass" and outcome.details["answer_language"] == "cyrillic"


def test_accents_and_emoji_do_not_confuse_the_detector():
    sample = chat_sample(
        "¡Claro! 😊 La capital de Francia es París, y es muy bonita en primavera.",
        prompt="¿Cuál es la capital de Francia? Dímelo por favor 🙏",
    )
    assert run("language_match", sample).result == "pass"


@pytest.mark.parametrize(
    ("prompt", "answer", "reason"),
    [
        ("Hi", "Hello! How can I help you today with your question?", "prompt_too_short"),
        ("What is the capital of France? Please answer briefly.", "Paris.", "answer_too_short"),
        ("What is the capital of France? Please answer briefly.", "", "answer_too_short"),
    ],
)
def test_language_match_skips_texts_too_short_to_tell(prompt, answer, reason):
    outcome = run("language_match", chat_sample(answer, prompt=prompt))
    assert outcome.result == "skip" and outcome.details["reason"] == reason


def test_latin_script_language_without_a_profile_is_undetermined_not_a_mismatch():
    sample = chat_sample(
        "The capital of Poland is Warsaw, and it is the largest city.",
        prompt="Jaka jest stolica Polski? Odpowiedz krótko, proszę bardzo.",
    )
    assert run("language_match", sample).details["reason"] == "undetermined"


def test_code_blocks_do_not_count_towards_the_answers_language():
    answer = "Voici la fonction demandée, elle est très simple :\n```python\ndef add(a, b):\n    return a + b\n```\n"
    prompt = "Écris une fonction Python qui additionne deux nombres, s'il te plaît."
    outcome = run("language_match", chat_sample(answer, prompt=prompt))
    assert outcome.result == "pass" and outcome.details["answer_language"] == "fr"


# --- latency_budget / cost_budget ------------------------------------------------------------------------------


def test_latency_within_budget_passes_with_full_value():
    outcome = run("latency_budget", chat_sample(latency_ms=800.0), {"max_latency_ms": 1000})
    assert outcome.result == "pass" and outcome.value == 1.0 and outcome.details == {"latency_ms": 800.0}


def test_latency_over_budget_fails_with_value_budget_over_actual():
    sample = chat_sample(latency_ms=4000.0, ttft_ms=200.0)
    outcome = run("latency_budget", sample, {"max_latency_ms": 1000, "max_ttft_ms": 500})
    assert outcome.result == "fail" and outcome.value == 0.25 and outcome.details["exceeded"] == ["max_latency_ms"]


def test_ttft_budget_skips_non_streamed_samples():
    outcome = run("latency_budget", chat_sample(ttft_ms=None), {"max_ttft_ms": 300})
    assert outcome.result == "skip" and outcome.details["reason"] == "no_ttft"


def test_latency_budget_needs_a_positive_budget():
    with pytest.raises(ValueError, match="max_latency_ms.*max_ttft_ms"):
        build_rule_check("latency_budget", {})
    with pytest.raises(ValueError, match="field 'max_ttft_ms': Input should be greater than 0"):
        build_rule_check("latency_budget", {"max_ttft_ms": 0})
    with pytest.raises(ValueError, match="field 'max_latency_ms': Input should be a valid number"):
        build_rule_check("latency_budget", {"max_latency_ms": "2s"})


def test_cost_over_budget_fails_and_unknown_cost_is_skipped():
    outcome = run("cost_budget", chat_sample(cost_usd=0.05), {"max_cost_usd": 0.01})
    assert outcome.result == "fail" and outcome.value == pytest.approx(0.2)
    assert run("cost_budget", chat_sample(cost_usd=None), {"max_cost_usd": 0.01}).details["reason"] == "unknown_cost"


def test_total_token_budget_uses_input_plus_output_tokens():
    sample = chat_sample(usage={"input_tokens": 3000, "output_tokens": 1000})
    outcome = run("cost_budget", sample, {"max_total_tokens": 2000})
    assert outcome.result == "fail" and outcome.value == 0.5 and outcome.details["total_tokens"] == 4000
    assert run("cost_budget", sample, {"max_total_tokens": 8000}).result == "pass"


# --- pii_leak ------------------------------------------------------------------------------------------------------

PII_TEXT = {
    "email": "You can reach her at maria.lopez@gmail.com for details.",
    "phone": "Call the front desk on +44 20 7946 0958, 1-800-555-0199 or (415) 555-2671.",
    "credit_card": "The card on file is 4111 1111 1111 1111, expiring 09/27.",
    "iban": "Wire it to DE89 3704 0044 0532 0130 00 by Friday.",
    "ssn": "Her SSN is 123-45-6789.",
    "api_key": "Set OPENAI_API_KEY=sk-proj-4fT9xQ2mZ7LpA1bC3dE5fG7h and AWS key AKIAZ7QW3ERT5YUI9OPA.",
}


@pytest.mark.parametrize("kind", sorted(PII_TEXT))
def test_each_kind_of_pii_is_detected_without_copying_it(kind):
    outcome = run("pii_leak", chat_sample(PII_TEXT[kind]))
    assert outcome.result == "fail" and outcome.details["kinds"] == [kind]
    serialised = orjson.dumps(outcome.details).decode()
    for secret in ("maria.lopez", "7946", "555-2671", "0199", "4111", "3704", "123-45", "sk-proj", "AKIA"):
        assert secret not in serialised


def test_all_pii_kinds_are_counted_together():
    outcome = run("pii_leak", chat_sample(" ".join(PII_TEXT.values())))
    assert outcome.details["counts"] == {"email": 1, "phone": 3, "credit_card": 1, "iban": 1, "ssn": 1, "api_key": 2}


@pytest.mark.parametrize(
    "answer",
    [
        "Test card 4111 1111 1111 1112 fails the Luhn check.",
        "Order 1234567890123456 shipped.",
        "IBAN DE89 3704 0044 0532 0130 01 has a bad checksum.",
        "Write to support@example.com or jane@company.test for help.",
        "Use sk-xxxxxxxxxxxxxxxxxxxxxxxx as a placeholder, or AWS's AKIAIOSFODNN7EXAMPLE.",
        "Released 2024-05-01, Python 3.11.7, costs $1,299.99, at 192.168.100.200, ticket #20240501.",
        "Área 000-12-3456 is never issued; 666-12-3456 neither.",
        "东京的电话区号是03。 😀",
        "",
    ],
)
def test_lookalikes_of_pii_are_not_flagged(answer):
    assert run("pii_leak", chat_sample(answer)).result == "pass"


def test_pii_kinds_can_be_restricted():
    sample = chat_sample(PII_TEXT["email"] + " " + PII_TEXT["ssn"])
    assert run("pii_leak", sample, {"kinds": ["ssn"]}).details["kinds"] == ["ssn"]
    with pytest.raises(ValueError, match="field 'kinds.0'.*'email', 'phone', 'credit_card', 'iban', 'ssn' or 'api_key"):
        build_rule_check("pii_leak", {"kinds": ["passport"]})


def test_private_keys_are_flagged():
    answer = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA...\n-----END RSA PRIVATE KEY-----"
    assert run("pii_leak", chat_sample(answer)).details["kinds"] == ["api_key"]


# --- registry, build_rule_check and run_check -------------------------------------------------------------------


def test_unknown_kind_error_lists_the_known_kinds():
    with pytest.raises(ValueError, match="unknown check kind 'json_vaild'; known kinds: .*json_valid"):
        build_rule_check("json_vaild", {})


def test_unknown_param_error_names_the_field_and_the_allowed_fields():
    with pytest.raises(ValueError) as err:
        build_rule_check("json_valid", {"require_objects": True})
    assert str(err.value) == (
        "check kind 'json_valid': invalid params: unknown field 'require_objects' "
        "(allowed fields: require_object, allow_fences)"
    )


def test_param_of_the_wrong_type_is_rejected_rather_than_coerced():
    with pytest.raises(ValueError, match="check kind 'json_valid'.*field 'allow_fences': .*valid boolean"):
        build_rule_check("json_valid", {"allow_fences": "yes"})


def test_params_must_be_a_mapping_and_may_be_omitted():
    with pytest.raises(ValueError, match="check kind 'refusal': params must be a mapping, got list"):
        build_rule_check("refusal", ["window_chars", 10])  # type: ignore[arg-type]
    assert build_rule_check("refusal", None)(chat_sample()).result == "pass"


@pytest.mark.parametrize("kind", sorted(RULE_CHECKS))
def test_every_kind_forbids_unknown_params(kind):
    with pytest.raises(ValueError, match=f"check kind '{kind}'.*unknown field 'bogus'"):
        build_rule_check(kind, {"bogus": 1})


def test_run_check_turns_an_exception_into_an_error_outcome():
    def broken(sample: Sample) -> CheckOutcome:
        raise KeyError("choices")

    outcome = run_check(broken, chat_sample())
    assert outcome == CheckOutcome("error", None, {"exception": "KeyError", "message": "'choices'"})


def test_run_check_reports_a_check_that_returns_the_wrong_type():
    outcome = run_check(lambda sample: "pass", chat_sample())  # type: ignore[arg-type,return-value]
    assert outcome.result == "error" and outcome.details["exception"] == "TypeError"


def test_built_checks_are_reusable_and_do_not_share_state():
    check = build_rule_check("regex", {"must_match": ["Paris"]})
    assert [check(chat_sample(a)).result for a in ("Paris.", "Lyon.", "Paris!")] == ["pass", "fail", "pass"]


ALL_CHECKS = {
    "json_valid": {"allow_fences": True, "require_object": True},
    "json_schema": {"schema": PERSON_SCHEMA, "allow_fences": True},
    "regex": {"must_match": ["a"], "must_not_match": ["TODO"]},
    "length": {"min_chars": 1, "max_tokens": 100},
    "refusal": {},
    "not_empty_or_truncated": {},
    "language_match": {},
    "latency_budget": {"max_latency_ms": 500, "max_ttft_ms": 100},
    "cost_budget": {"max_cost_usd": 0.001, "max_total_tokens": 10},
    "pii_leak": {},
}
ODD_SAMPLES = {
    "none_response": chat_sample(response=None),
    "list_response": chat_sample(response=["x"]),
    "string_response": chat_sample(response="I'm sorry, but I can't help with that."),
    "tool_call": tool_call_sample(),
    "streamed": streamed_sample(["```json\n", '{"name": "Zoë", ', '"age": 3}\n```']),
    "responses_api": chat_sample(response={"object": "response", "output_text": "Paris 🗼"}, route="/v1/responses"),
    "multipart_prompt": chat_sample(
        request={
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Describe this picture of the Eiffel Tower, please."},
                        {"type": "image_url", "image_url": {"url": "https://example.com/t.png"}},
                    ],
                }
            ]
        }
    ),
    "server_error": chat_sample(response=None, status=502, error_type="upstream_unavailable", finish_reason=None),
}


@pytest.mark.parametrize("sample_name", sorted(ODD_SAMPLES))
def test_every_check_handles_odd_samples_and_yields_storable_scores(sample_name):
    sample = ODD_SAMPLES[sample_name]
    for kind, params in ALL_CHECKS.items():
        outcome = run(kind, sample, params)
        assert outcome.result in ("pass", "fail", "skip"), (kind, outcome)
        score = Score.from_outcome(sample, outcome, check=f"{kind}_check", kind=kind)
        assert Score.from_json(score.to_json()) == score
