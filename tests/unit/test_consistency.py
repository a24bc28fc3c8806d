"""Comparing an answer with its re-ask: structured, lexical, hedged, failed; rates with intervals."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from llmwatch.core.pairs import Pair, PairScore
from llmwatch.core.records import Sample
from llmwatch.scorers.evaluation.consistency import compare_answers, consistency_rows, consistency_scores

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def answer(text: str, *, version: str = "A", json_mode: bool = False, status: int = 200) -> Sample:
    request: dict = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    if json_mode:
        request["response_format"] = {"type": "json_object"}
    return Sample(
        timestamp=T0,
        model="m",
        model_version=version,
        status=status,
        latency_ms=1,
        request=request,
        response={"choices": [{"message": {"role": "assistant", "content": text}}]},
    )


PARIS = "The capital of France is Paris, a city on the Seine with about two million people."


def test_the_same_words_agree_and_other_words_do_not() -> None:
    assert compare_answers(answer(PARIS), answer(PARIS)).agree
    v = compare_answers(answer(PARIS), answer("Lyon is the largest city in the Auvergne-Rhone-Alpes region."))
    assert v.compared and not v.agree and v.method == "lexical" and v.confident_unstable


def test_structured_answers_agree_on_their_values_not_their_spacing() -> None:
    same = compare_answers(
        answer('{"a": 1, "b": [2]}', json_mode=True), answer('{ "b": [2],\n "a": 1 }', json_mode=True)
    )
    assert same.agree and same.method == "structured"
    assert not compare_answers(answer('{"a": 1}', json_mode=True), answer('{"a": 2}', json_mode=True)).agree


def test_a_hedged_or_failing_first_answer_is_not_confident_but_unstable() -> None:
    other = answer("Lyon is the largest city in the Auvergne-Rhone-Alpes region.")
    hedged = compare_answers(answer("I think it might be Paris, but I'm not sure."), other)
    assert not hedged.agree and not hedged.confident_unstable
    failing = compare_answers(answer(PARIS), other, [PairScore(check="refusal", result="fail")])
    assert not failing.agree and not failing.confident_unstable


def test_a_failed_call_is_not_compared() -> None:
    v = compare_answers(answer(PARIS), answer("", status=503))
    assert not v.compared and v.method == "unanswered"


def test_embeddings_decide_when_given() -> None:
    def embed(texts):
        return np.array([[1.0, 0.0], [0.95, 0.31]])  # cosine 0.95

    v = compare_answers(answer(PARIS), answer("Paris is France's capital."), embed=embed)
    assert v.method == "embedding" and v.agree


def test_rates_per_version_with_wilson_intervals() -> None:
    def pair(version: str, i: int, same: bool) -> Pair:
        first = answer(PARIS, version=version)
        again = answer(PARIS if same else f"Something else entirely, number {i}.", version=version)
        return Pair(
            id=f"{version}{i}",
            candidate="consistency",
            timestamp=T0,
            route="/v1/chat/completions",
            primary=first,
            shadow=again,
        )

    pairs = [pair("A", i, True) for i in range(100)] + [pair("B", i, i % 2 == 0) for i in range(100)]
    pairs.append(pair("A", 999, False).model_copy(update={"candidate": "some-shadow-candidate"}))  # not a re-ask
    rows = {r.model_version: r for r in consistency_rows(pairs)}
    assert rows["A"].rate == 1.0 and rows["A"].compared == 100
    assert rows["B"].rate == 0.5 and rows["B"].ci is not None and rows["B"].ci[0] < 0.5 < rows["B"].ci[1]
    assert rows["B"].ci[1] < rows["A"].ci[0]
    assert rows["B"].confident_unstable == 50


def test_suite_material_keeps_a_confident_but_unstable_answer_as_a_failure_with_its_re_ask() -> None:
    from llmwatch.scorers.evaluation.suite_build import gather, manifest_entry

    def asked(question: str, text: str) -> Sample:
        s = answer(text)
        messages = [{"role": "user", "content": question}]
        return s.model_copy(update={"id": question, "request": {**s.request, "messages": messages}})

    sure = asked("What is the capital of France?", PARIS)
    hedged = asked("Which river runs through Lyon?", "I think it might be the Rhone, but I'm not sure.")
    stable = asked("How many legs does a spider have?", "A spider has eight legs.")
    other = "Lyon is the largest city in the Auvergne-Rhone-Alpes region."
    pairs = [
        Pair(id=f"p{i}", candidate="consistency", timestamp=T0, route=s.route, primary=s, shadow=answer(again))
        for i, (s, again) in enumerate([(sure, other), (hedged, other), (stable, stable.answer_text())])
    ]
    material = gather(
        [sure, hedged, stable],
        consistency_scores(pairs),
        [],
        re_asks={p.primary.id: p.shadow.answer_text() for p in pairs},
    )
    by_sample = {c.samples[0].id: c for c in material.candidates}
    assert by_sample[sure.id].failure_modes == {"confident_unstable"}
    # A hedged answer that changed is not a hidden error; a stable one is no failure at all.
    assert by_sample[hedged.id].failure_modes == set() and by_sample[stable.id].failure_modes == set()
    assert manifest_entry(by_sample[sure.id])["re_asks"] == [{"sample_id": sure.id, "answer": PARIS, "re_ask": other}]
    assert "re_asks" not in manifest_entry(by_sample[stable.id])
