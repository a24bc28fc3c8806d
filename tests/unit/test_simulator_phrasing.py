"""The simulator's phrasing trait: version B answers worse when a prompt is not in plain form; A never."""

from __future__ import annotations

from llmwatch.agent.apps.simulator.server import PROFILES
from llmwatch.agent.apps.simulator.stability import phrasing_profile, plain_form, rephrase

PROMPT = "How long should I roast a whole chicken, and at what temperature?"


def test_the_rewordings_keep_the_words_and_only_the_original_is_in_plain_form() -> None:
    variants = [rephrase(PROMPT, k) for k in range(5)]
    assert variants[0] == PROMPT and len(set(variants)) == 5
    assert [plain_form(v) for v in variants] == [True, False, False, False, False]
    words = sorted(PROMPT.lower().replace("?", "").replace(",", "").split())
    for v in variants:
        assert sorted(v.lower().replace("?", "").replace(",", "").split()) == words
    assert rephrase(PROMPT, 7) == rephrase(PROMPT, 2)  # deterministic, cycling


def test_b_is_degraded_on_rephrasings_a_is_not() -> None:
    a, b = PROFILES["A"], PROFILES["B"]
    for k in range(5):
        messages = [{"role": "user", "content": rephrase(PROMPT, k)}]
        assert phrasing_profile(a, messages) == a
        degraded = phrasing_profile(b, messages)
        if k == 0:
            assert degraded == b
        else:
            assert degraded.refusal_rate > b.refusal_rate and degraded.off_topic_rate > b.off_topic_rate
