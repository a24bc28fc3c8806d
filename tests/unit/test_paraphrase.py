"""Rewordings for `regress --paraphrases K`: deterministic per case id, K distinct, and the tokens that
carry meaning (numbers, code, JSON, quoted strings, URLs) copied byte for byte."""

from __future__ import annotations

import re

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
