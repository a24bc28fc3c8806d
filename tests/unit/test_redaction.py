"""Redaction: PII and secrets are masked in stored text; ordinary numbers survive."""

from datetime import datetime, timezone

import orjson
import pytest
from helpers.samples import chat_sample

from llmwatch.core.records import Sample
from llmwatch.scorers.checks.rules import build_rule_check
from llmwatch.scorers.pipeline import pii
from llmwatch.scorers.pipeline.redaction import RedactionSection, Redactor, luhn_valid

ALL = ["email", "phone", "card", "key", "iban", "ssn"]


def test_email_phone_card_and_key_are_masked():
    r = Redactor(ALL)
    text = (
        "Mail jane.doe+shop@example.co.uk or call +1 415-555-0134. "
        "Card 4111 1111 1111 1111, key sk-proj-abcdefghijklmnopqrstuvwx1234."
    )
    out = r.text(text)
    assert "jane.doe" not in out and "[EMAIL]" in out
    assert "555-0134" not in out and "[PHONE]" in out
    assert "4111" not in out and "[CARD]" in out
    assert "sk-proj" not in out and "[SECRET]" in out


def test_luhn_invalid_digit_runs_are_kept():
    r = Redactor(ALL)
    assert "1234 5678 9012 3456" in r.text("order 1234 5678 9012 3456 shipped")
    assert luhn_valid("4111111111111111")
    assert not luhn_valid("1234567890123456")


def test_years_prices_and_versions_are_not_phone_numbers():
    r = Redactor(ALL)
    text = "In 2024 the price rose to 1,299.99 USD; see version 3.11.7 and figure 12."
    assert r.text(text) == text


def test_aws_github_and_bearer_tokens_are_secrets():
    r = Redactor(["key"])
    out = r.text("AKIAIOSFODNN7EXAMPLE ghp_" + "a" * 36 + " Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345")
    assert out.count("[SECRET]") == 3


def test_iban_and_ssn_are_masked():
    r = Redactor(ALL)
    out = r.text("IBAN DE89 3704 0044 0532 0130 00 and SSN 123-45-6789")
    assert "[IBAN]" in out and "[SSN]" in out
    assert "3704" not in out and "6789" not in out


def test_nested_json_structures_are_walked():
    r = Redactor(ALL)
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "I am bob@x.io"}]}], "n": 2}
    out = r(body)
    assert out["messages"][0]["content"][0]["text"] == "I am [EMAIL]"
    assert out["n"] == 2
    assert body["messages"][0]["content"][0]["text"] == "I am bob@x.io", "the original is not modified"


def test_extra_patterns_are_applied():
    r = Redactor([], ["CUST-\\d{6}"])
    assert r.text("customer CUST-123456 asked") == "customer [REDACTED] asked"


def test_unicode_text_survives_redaction():
    r = Redactor(ALL)
    assert r.text("naïve café 日本語 🙂") == "naïve café 日本語 🙂"


# --- misses of the old patterns (issue 12) --------------------------------------------------------


@pytest.mark.parametrize(
    "text, secret, placeholder",
    [
        ("call me on 4155550199 tonight", "4155550199", "[PHONE]"),
        ("my number is +14155550177.", "4155550177", "[PHONE]"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY0123456789", "wJalrXUtnFEMI", "[SECRET]"),
        ('{"SecretAccessKey": "Zx9+Qw8/Er7Ty6Ui5Op4As3Df2Gh1Jk0LzXcVbNm"}', "Zx9+Qw8", "[SECRET]"),
        ("temporary key ASIAZ7QW3ERT5YUI9OPA from STS", "ASIAZ7QW", "[SECRET]"),
        ("long-term key AKIAZ7QW3ERT5YUI9OPA", "AKIAZ7QW", "[SECRET]"),
        ("token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF ok", "github_pat_", "[SECRET]"),
        ("gho_abcdefghijklmnopqrstuvwxyz0123456789", "gho_", "[SECRET]"),
        ("ghs_abcdefghijklmnopqrstuvwxyz0123456789", "ghs_", "[SECRET]"),
    ],
)
def test_numbers_and_tokens_the_old_patterns_missed_are_masked(text, secret, placeholder):
    out = Redactor(ALL).text(text)
    assert secret not in out and placeholder in out


def test_email_addresses_used_as_object_keys_are_masked():
    body = {"scores": {"jane.doe@corp.io": 3, "nested": [{"bob@x.org": {"carol@y.net": "hi"}}]}}
    out = Redactor(ALL)(body)
    assert "@" not in orjson.dumps(out).decode()
    assert out["scores"]["[EMAIL]"] == 3


def test_header_metadata_and_client_request_id_are_masked_in_stored_samples():
    sample = Sample(
        id="llmw-0001",
        client_request_id="req-jane.doe@corp.io-1",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        model="m",
        status=200,
        latency_ms=1.0,
        request={"messages": [{"role": "user", "content": "hi"}]},
        response=None,
        metadata={"conversation_id": "conv-for-+14155550177", "category": "billing jane@corp.io"},
    )
    out = Redactor.from_config(RedactionSection()).sample(sample)
    stored = out.to_json().decode()
    assert "jane.doe" not in stored and "4155550177" not in stored and "jane@corp.io" not in stored
    assert out.metadata == {"conversation_id": "conv-for-[PHONE]", "category": "billing [EMAIL]"}
    assert out.client_request_id == "[EMAIL]-1" and out.id == "llmw-0001" and out.redacted


def test_one_detector_serves_masking_and_the_pii_leak_check():
    text = "Reach maria.lopez@gmail.com or +14155550177; key ASIAZ7QW3ERT5YUI9OPA."
    masked = Redactor(pii.KINDS).text(text)
    assert masked == "Reach [EMAIL] or [PHONE]; key [SECRET]."
    check = build_rule_check("pii_leak")
    outcome = check(chat_sample(text))
    assert outcome.details["counts"] == {"email": 1, "phone": 1, "api_key": 1}
    # The same names on both sides: the check's kinds are the detector's kinds.
    assert set(outcome.details["kinds"]) <= set(pii.PLACEHOLDERS)


def test_old_pattern_names_are_still_accepted():
    assert Redactor(["card", "key"]).kinds == ("api_key", "credit_card")
    assert RedactionSection(patterns=["card", "key"]).patterns == ["credit_card", "api_key"]


# --- policy per field and scores_only mode ------------------------------------------------------------


def _sample(**fields):
    base = dict(
        id="llmw-1",
        client_request_id="req-1",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        model="m",
        status=200,
        latency_ms=1.0,
        request={
            "user": "jane@corp.io",
            "messages": [{"role": "user", "content": "I am jane@corp.io", "name": "Jane"}],
        },
        response={"choices": [{"message": {"role": "assistant", "content": "Hi Jane, card 4111 1111 1111 1111"}}]},
        metadata={"conversation_id": "c-42", "category": "billing"},
    )
    return Sample(**{**base, **fields})


def test_fields_can_be_dropped_masked_or_hashed():
    section = RedactionSection(
        fields={
            "request.messages.*.name": "drop",
            "metadata.conversation_id": "hash",
            "response.choices.0.message.content": "mask",
        },
        hash_salt="pepper",
    )
    redactor = Redactor.from_config(section)
    out = redactor.sample(_sample())
    message = out.request["messages"][0]
    assert "name" not in message and message["content"] == "I am [EMAIL]"
    assert out.response["choices"][0]["message"]["content"] == "Hi Jane, card [CARD]"
    # hash: equal values still group, the value itself is gone.
    assert out.metadata["conversation_id"].startswith("sha256:") and "42" not in out.metadata["conversation_id"]
    again = redactor.sample(_sample(metadata={"conversation_id": "c-42"}))
    other = redactor.sample(_sample(metadata={"conversation_id": "c-43"}))
    assert again.metadata["conversation_id"] == out.metadata["conversation_id"] != other.metadata["conversation_id"]
    # The default for the OpenAI `user` field is hash, for metadata mask.
    assert out.request["user"].startswith("sha256:") and out.metadata["category"] == "billing"


def test_hashes_depend_on_the_salt():
    one = Redactor(fields={"client_request_id": "hash"}, hash_salt=b"a").sample(_sample())
    two = Redactor(fields={"client_request_id": "hash"}, hash_salt=b"b").sample(_sample())
    assert one.client_request_id != two.client_request_id and one.client_request_id.startswith("sha256:")
    assert one.id == two.id == "llmw-1", "llmwatch's own sample id is what scores refer to: never rewritten"


def test_scores_only_mode_keeps_every_body_text_on_the_host():
    redactor = Redactor.from_config(RedactionSection(mode="scores_only"))
    raw = _sample()
    out = redactor.sample(raw)
    assert out.request is None and out.response is None and out.redacted
    assert out.model == "m" and out.status == 200 and out.latency_ms == 1.0
    assert redactor(raw.request) is None, "the plain callable (OTel span content) carries no text either"
    # Scores are computed on the raw sample in memory: the original is untouched.
    assert raw.answer_text().endswith("1111")
    assert build_rule_check("pii_leak")(raw).details["kinds"] == ["credit_card"]


def test_redaction_is_on_by_default_and_bad_field_names_are_refused():
    assert Redactor.from_config(RedactionSection()) is not None
    assert Redactor.from_config(RedactionSection(enabled=False)) is None
    with pytest.raises(
        ValueError,
        match="field 'body.user': expected client_request_id, metadata.<key>, request.<path> or response.<path>",
    ):
        RedactionSection(fields={"body.user": "hash"})
    with pytest.raises(ValueError, match="drop"):
        RedactionSection(fields={"client_request_id": "encrypt"})
