"""Redaction: PII and secrets are masked in stored text; ordinary numbers survive."""

from llmwatch.scorers.redaction import Redactor, luhn_valid

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
