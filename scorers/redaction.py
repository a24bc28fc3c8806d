"""Masking of personal data and secrets in stored text.

Prompts carry PII, so every sample is redacted before it reaches any sink (file, Kafka) unless
a user turns it off. Redaction walks the whole JSON structure and replaces matches in string
values with a typed placeholder (`[EMAIL]`, `[CARD]`, ...), so that checks can still tell that
something was there. Card numbers are Luhn-checked to keep order numbers and timestamps intact.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

# Placeholders are what the stored text shows; `pii_leak` and friends look for the originals.
_PATTERNS: dict[str, tuple[str, re.Pattern[str]]] = {
    "key": (
        "[SECRET]",
        re.compile(
            r"(?:\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"
            r"|\bAKIA[0-9A-Z]{16}\b"
            r"|\bgh[pousr]_[A-Za-z0-9]{30,}"
            r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
            r"|\bAIza[0-9A-Za-z_-]{35}"
            r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
            r"|(?i:bearer)\s+[A-Za-z0-9._~+/-]{20,}=*)"
        ),
    ),
    "email": ("[EMAIL]", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")),
    "iban": ("[IBAN]", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){3,7}(?: ?[A-Z0-9]{1,3})?\b")),
    "card": ("[CARD]", re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")),
    "ssn": ("[SSN]", re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b")),
    "phone": (
        "[PHONE]",
        # Not inside a longer run of digit groups (order numbers, card-like ids).
        re.compile(r"(?<![\w+])(?<!\d[ .-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\d{2,4}[ .-])\d{3,4}[ .-]?\d{3,4}(?!\w)(?![ .-]\d)"),
    ),
    "ipv4": ("[IP]", re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b")),
}
# Secrets first: a key can contain digit runs that would otherwise look like a card or phone.
_ORDER = ("key", "email", "iban", "card", "ssn", "phone", "ipv4")


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card_sub(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    if 13 <= len(digits) <= 19 and luhn_valid(digits):
        return "[CARD]"
    return match.group(0)


class Redactor:
    def __init__(self, patterns: Iterable[str], extra_patterns: Iterable[str] = ()) -> None:
        wanted = set(patterns)
        self._steps: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = []
        for name in _ORDER:
            if name in wanted:
                placeholder, regex = _PATTERNS[name]
                self._steps.append((regex, _card_sub if name == "card" else placeholder))
        for extra in extra_patterns:
            self._steps.append((re.compile(extra), "[REDACTED]"))

    def text(self, value: str) -> str:
        for regex, replacement in self._steps:
            value = regex.sub(replacement, value)
        return value

    def __call__(self, value: Any) -> Any:
        """A redacted copy of any JSON-like value (dicts, lists, strings); other values as they are."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value
