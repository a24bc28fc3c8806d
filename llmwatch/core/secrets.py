"""Known secrets masked by exact value in what llmwatch stores of another service's answers.

Redaction patterns (llmwatch.scorers.pipeline.redaction) find keys of the shapes they know; a
service that quotes back the key it was sent ("Incorrect API key provided: <the key>") in an
error body of another shape keeps it in the record. The keys llmwatch itself sends are known
exactly: `SecretMask` replaces each, in the forms a service may quote it, with `***`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Iterable
from urllib.parse import unquote

import orjson

from llmwatch.core.urls import split_userinfo

MASK = "***"
# Shorter values are not masked: replacing every "abc" of every answer would mangle the records
# and hide nothing worth hiding (a 3-character credential is no secret).
MIN_SECRET_CHARS = 4


def header_forms(value: str) -> set[str]:
    """How a credential sent as a header value may be quoted back: the value, the token after its
    scheme ("Bearer sk-..." -> "sk-..."), and for Basic the decoded `user:password` and password."""
    forms = {value}
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if token:
        forms.add(token)
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(token, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                decoded = ""
            forms |= userinfo_forms(decoded) if decoded else set()
    return forms


def userinfo_forms(userinfo: str) -> set[str]:
    """The `user:password` of a URL as written and decoded, and its password alone, both ways."""
    forms = {userinfo, unquote(userinfo)}
    _, colon, password = userinfo.partition(":")
    if colon:
        forms |= {password, unquote(password)}
    return forms


class SecretMask:
    """Replaces known secret values in JSON lines, in the decoded strings (never the bytes, so
    the line stays valid JSON whatever the secret's characters)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first: "Bearer sk-x" goes whole before "sk-x" could leave "Bearer ***".
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=lambda s: (-len(s), s))
        # How each appears inside a JSON string as orjson writes it: the cheap test on every line.
        self._needles = [orjson.dumps(s)[1:-1] for s in self.secrets]

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self._walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        return value

    def value(self, value: Any) -> Any:
        """`value` (a str, or what JSON holds) with every known secret in its strings masked; the
        very object when none occurs (one serialisation and a substring search per secret)."""
        if not self.secrets or value is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        try:
            encoded = orjson.dumps(value)
        except TypeError:
            return self._walk(value)
        if not any(n in encoded for n in self._needles):
            return value
        return self._walk(value)

    def line(self, line: bytes) -> bytes:
        """`line` (one JSON document) with every known secret in its strings masked; the same
        bytes when none occurs (one substring search per secret: the usual case)."""
        if not any(n in line for n in self._needles):
            return line
        return orjson.dumps(self._walk(orjson.loads(line)))


def upstream_secrets(upstream: str | None) -> SecretMask:
    """The credentials llmwatch itself sends the primary upstream (its URL's `user:password`, sent
    as Basic auth), in every form the upstream may quote them back in an answer."""
    if not upstream:
        return SecretMask([])
    _, userinfo = split_userinfo(upstream)
    if userinfo is None:
        return SecretMask([])
    forms = userinfo_forms(userinfo)
    plain = unquote(userinfo)
    for encoding in ("latin-1", "utf-8"):  # aiohttp's BasicAuth encodes latin-1; utf-8 where it cannot
        try:
            forms |= header_forms("Basic " + base64.b64encode(plain.encode(encoding)).decode("ascii"))
        except UnicodeEncodeError:
            continue
    return SecretMask(forms)
