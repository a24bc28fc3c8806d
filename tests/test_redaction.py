"""Redaction: PII and secrets are masked in stored text; ordinary numbers survive."""

from datetime import datetime, timezone

import orjson
import pytest

from llmwatch.core.config import RedactionSection
from llmwatch.core.records import Sample
from llmwatch.scorers import pii
from llmwatch.scorers.redaction import Redactor, luhn_valid
from llmwatch.scorers.rules import build_rule_check
from test_rules import chat_sample

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
        id="req-jane.doe@corp.io-1",
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
    assert out.id == "[EMAIL]-1" and out.redacted


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
