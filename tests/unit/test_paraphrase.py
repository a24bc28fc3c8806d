"""Rewordings for `regress --paraphrases K`: deterministic per case id, K distinct, and the tokens that
carry meaning (numbers, code, JSON, quoted strings, URLs) copied byte for byte."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmwatch.scorers.evaluation.paraphrase import protected_spans, reword, reword_messages, rewordings

PROMPTS = [
    "Give me a simple recipe for a pasta dinner with garlic.",
    "How do I fix a KeyError in my Python script?",
    "Plan a week-long trip itinerary: flights, hotel and passport tips.",
    "Classify this message by topic: my bread dough never rises in the oven",
    "I want a quick summary. Do not use jargon.",
]


def test_the_same_case_id_gets_the_same_rewordings_and_another_id_other_ones():
    for text in PROMPTS:
        assert reword(text, 5, "case-a") == reword(text, 5, "case-a")
    assert [reword(t, 5, "case-a") for t in PROMPTS] != [reword(t, 5, "case-b") for t in PROMPTS]


def test_k_rewordings_are_distinct_from_each_other_and_from_the_original():
    for text in PROMPTS:
        for k in (1, 3, 8):
            out = reword(text, k, "id")
            assert len(out) == k
            assert len(set(out)) == k
            assert text not in out


def test_k_zero_gives_none():
    assert reword(PROMPTS[0], 0, "id") == []


def test_the_transforms_used_are_the_documented_kinds():
    seen = {t for text in PROMPTS for r in rewordings(text, 8, "id") for t in r.transforms}
    # Word-level, structural and formatting transforms all occur on ordinary prompts.
    assert {"synonyms", "please", "punctuation"} <= seen
    assert seen & {"bullets", "reorder"}


def test_a_one_word_prompt_still_gets_k_distinct_wordings_and_says_which_are_whitespace_only():
    out = rewordings("Hi", 6, "id")
    assert len({r.text for r in out}) == 6
    assert all(r.text.strip().rstrip(".?") == "Hi" for r in out)
    assert any(r.whitespace_only for r in out)


def test_synonyms_keep_capitalisation_and_whole_words():
    out = reword("Fix the prefix. Give me a simple fixture.", 12, "caps")
    assert any("Resolve the prefix" in t for t in out)
    assert all("prefix" in t and "fixture" in t for t in out)  # "fix" inside a word is never swapped


def test_a_word_that_is_also_a_noun_is_swapped_only_as_a_verb_and_acronyms_never():
    out = reword("I need a quick fix with the help of BASIC. Fix it and help me.", 12, "nouns")
    assert any("Resolve it" in t for t in out) and any("assist me" in t for t in out)
    assert all("fix with the help of BASIC" in t for t in out)


def test_numbers_code_json_and_quoted_strings_are_never_touched():
    text = (
        'Fix this: `d["simple"]` raises KeyError 42 times in v2.1, see https://example.com/fix?simple=1. '
        'Use {"help": [1, 2], "quick": "simple"} and the phrase "give me a simple fix" or \'simple help\'.\n'
        "```python\nsimple = fix(help)\n```"
    )
    kept = [
        '`d["simple"]`',
        "42",
        "v2.1,",
        "https://example.com/fix?simple=1.",
        '{"help": [1, 2], "quick": "simple"}',
        '"give me a simple fix"',
        "'simple help'",
        "```python\nsimple = fix(help)\n```",
    ]
    for r in reword(text, 10, "guarded"):
        for token in kept:
            assert token in r


def test_protected_spans_find_each_kind():
    text = 'A `x` b 3.5 c {"k": [1]} d "q" e [EMAIL] f'
    spans = [text[a:b] for a, b in protected_spans(text)]
    assert spans == ["`x`", "3.5", '{"k": [1]}', '"q"', "[EMAIL]"]


def test_reordering_never_moves_a_sentence_that_refers_back():
    text = "Read the report. Then summarize it."
    assert all(not t.lower().startswith("then") for t in reword(text, 10, "anaphora"))


def test_only_the_last_user_message_is_reworded():
    messages = [
        {"role": "system", "content": "You are a simple helpful assistant."},
        {"role": "user", "content": "Give me a simple recipe."},
        {"role": "assistant", "content": "Sure, which kind?"},
        {"role": "user", "content": "A quick one, please explain the steps."},
    ]
    out = reword_messages(messages, 3, "chat")
    assert len(out) == 3
    for copy, r in out:
        assert copy[:3] == messages[:3]
        assert copy[3]["content"] == r.text != messages[3]["content"]
    assert messages[3]["content"] == "A quick one, please explain the steps."  # the input is not modified


def test_a_list_content_has_its_text_part_reworded_and_other_parts_kept():
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    messages = [{"role": "user", "content": [image, {"type": "text", "text": "Describe this simple picture."}]}]
    out = reword_messages(messages, 2, "parts")
    assert len(out) == 2
    for copy, r in out:
        assert copy[0]["content"][0] == image
        assert copy[0]["content"][1]["text"] == r.text


_WORDS = st.sampled_from(
    "give me a simple quick recipe fix help explain the problem please can you I want do not and for with it".split()
)
_NUMBER = st.one_of(
    st.integers(min_value=0, max_value=10**9).map(str),
    st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda x: f"{x:.2f}"),
)
# Code made of the very words the synonym table swaps: only the protection keeps it intact.
_CODE = st.lists(st.one_of(_WORDS, st.sampled_from(["=", "(", ")", "x.y"])), min_size=1, max_size=5).map(
    lambda w: "`" + " ".join(w) + "`"
)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.one_of(_WORDS, _NUMBER, _CODE, st.sampled_from([".", ",", "?", ":"])), min_size=1, max_size=30),
    key=st.text(min_size=1, max_size=8),
    k=st.integers(min_value=1, max_value=5),
)
def test_numbers_and_code_spans_survive_every_rewording(parts, key, k):
    text = " ".join(parts)
    numbers = re.findall(r"\d+(?:\.\d+)?", text)
    codes = re.findall(r"`[^`\n]+`", text)
    out = reword(text, k, key)
    assert len(set(out)) == k and text not in out
    for r in out:
        assert re.findall(r"\d+(?:\.\d+)?", r) == numbers  # the same numbers, in the same order
        for code in codes:
            assert code in r


# --- how regress uses them ----------------------------------------------------------------------


def _suite(tmp_path, cases):
    import orjson

    from llmwatch.scorers.evaluation.regress import load_suite

    path = tmp_path / "suite.jsonl"
    path.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in cases))
    return load_suite(path)


def _attempt(case_id, variant, result, score, version="A"):
    from llmwatch.scorers.evaluation.regress import Attempt

    return Attempt(case_id=case_id, repeat=0, result=result, score=score, variant=variant, model_version=version)


def test_a_case_flips_when_a_rewordings_pass_rate_crosses_the_threshold_and_the_spread_is_over_wording_means(tmp_path):
    from llmwatch.scorers.evaluation.regress import case_spreads, version_spreads

    suite = _suite(
        tmp_path,
        [
            {"id": "steady", "input": "Give me a simple recipe.", "checks": [{"kind": "not_empty_or_truncated"}]},
            {"id": "fragile", "input": "Explain a quick fix.", "checks": [{"kind": "not_empty_or_truncated"}]},
        ],
    )
    attempts = [
        *[_attempt("steady", v, "pass", 1.0) for v in range(3) for _ in range(4)],
        *[_attempt("fragile", 0, "pass", 1.0) for _ in range(4)],
        *[_attempt("fragile", 1, r, s) for r, s in [("pass", 1.0), ("fail", 0.0), ("fail", 0.0), ("fail", 0.0)]],
        *[_attempt("fragile", 2, "pass", 1.0) for _ in range(4)],
    ]
    steady, fragile = case_spreads(suite, attempts, 2, pass_threshold=0.8)
    assert (steady.flips, steady.score_range, steady.score_std) == (False, 0.0, 0.0)
    assert fragile.flips is True
    assert [v.passed for v in fragile.variants] == [True, False, True]
    assert fragile.score_range == 0.75 and fragile.score_min == 0.25
    [a] = version_spreads(suite, attempts, 2, pass_threshold=0.8, confidence=0.95)
    assert (a.model_version, a.cases, a.n_flipped, a.flip_share) == ("A", 2, 1, 0.5)
    assert a.mean_range == 0.375 and a.flip_ci is not None and a.flip_ci[0] < 0.5 < a.flip_ci[1]


def test_a_version_summary_counts_only_the_attempts_that_version_served(tmp_path):
    from llmwatch.scorers.evaluation.regress import version_spreads

    suite = _suite(tmp_path, [{"id": "c", "input": "Explain it.", "checks": [{"kind": "not_empty_or_truncated"}]}])
    attempts = [_attempt("c", 0, "pass", 1.0, "A"), _attempt("c", 1, "pass", 1.0, "A")]
    attempts += [_attempt("c", 0, "pass", 1.0, "B"), _attempt("c", 1, "fail", 0.0, "B")]
    by = {v.model_version: v for v in version_spreads(suite, attempts, 1, pass_threshold=0.8, confidence=0.95)}
    assert (by["A"].n_flipped, by["A"].mean_range) == (0, 0.0)
    assert (by["B"].n_flipped, by["B"].mean_range) == (1, 1.0)


def test_dynamic_replay_calls_after_each_user_turn_that_has_a_recorded_answer_and_at_the_last():
    from llmwatch.scorers.evaluation.regress import dynamic_turns

    u, a, s = ({"role": "user"}, {"role": "assistant"}, {"role": "system"})
    assert dynamic_turns([s, u]) == [1]
    assert dynamic_turns([s, u, a, u, a, u]) == [1, 3, 5]
    assert dynamic_turns([u, u, a, u]) == [1, 3]  # two user messages in a row go together
    assert dynamic_turns([u, a, u, a]) == [0, 2]  # a recorded answer after the last user turn is dropped


# --- rewordings from a model ------------------------------------------------------------------------


def test_a_models_reply_is_read_as_a_json_array_of_strings_or_refused():
    import pytest

    from llmwatch.scorers.evaluation.paraphrase import parse_model_reply

    assert parse_model_reply('```json\n["a", "b"]\n```') == ["a", "b"]
    assert parse_model_reply('Here: ["a"]') == ["a"]
    for reply in ("Sure, here are some.", '["a", 3]', "[not json]", '{"a": 1}'):
        with pytest.raises(ValueError):
            parse_model_reply(reply)


def test_model_rewordings_that_change_a_protected_token_or_add_a_number_are_replaced_by_built_in_ones():
    from llmwatch.scorers.evaluation.paraphrase import accept_model_rewordings

    text = 'Convert "42 apples" to JSON with `key=value` for 3 baskets.'
    candidates = [
        'Please convert "42 apples" to JSON using `key=value` for 3 baskets.',  # kept
        'Convert "forty-two apples" to JSON with `key=value` for 3 baskets.',  # quoted string changed
        'Convert "42 apples" to JSON with `key = value` for 3 baskets.',  # code changed
        'Convert "42 apples" to JSON with `key=value` for 3 baskets in 2 steps.',  # a number added
        text,  # the original
    ]
    kept, refused = accept_model_rewordings(text, candidates, 3, "case", "m")
    assert kept[0].text == candidates[0] and kept[0].transforms == ("model:m",)
    assert [r.transforms == ("model:m",) for r in kept] == [True, False, False]
    assert len({r.text for r in kept} | {text}) == 4
    assert len(refused) == 4


def test_a_paraphrase_url_that_is_no_http_url_is_refused_before_any_call_without_its_credentials() -> None:
    from llmwatch.scorers.evaluation.regress import RegressError, RunSettings, check_settings

    def with_url(url: str) -> RunSettings:
        return RunSettings("http://127.0.0.1:8000", "m", paraphrases=2, paraphrase_url=url, paraphrase_model="m")

    for url in ("127.0.0.1:8000", "notaurl", "ftp://user:hunter2@host/", "user:hunter2@gateway"):
        with pytest.raises(RegressError, match="--paraphrase-url: expected an http\\(s\\) URL") as refused:
            check_settings(with_url(url), 0.2)
        assert "hunter2" not in str(refused.value)
    for url in ("http://127.0.0.1:8000", "https://user:key@gateway.example/openai/v1"):
        check_settings(with_url(url), 0.2)
