"""Masking of personal data and secrets in stored text, as a policy per field.

Prompts carry PII, so every sample is redacted before it reaches any sink (file, Kafka) unless
a user turns it off. What is PII is decided by the one detector, `llmwatch.scorers.pipeline.pii`, which
the `pii_leak` check uses too. Redaction walks the whole JSON structure, keys included (an
e-mail address can be an object key), and replaces every finding in a string with a typed
placeholder (`[EMAIL]`, `[CARD]`, ...), so that checks can still tell that something was there.

On top of that default ("mask" everything), `redaction.fields` names fields that get another
treatment:

- `drop`: the field is removed;
- `mask`: findings in it are replaced by placeholders (the default for every string);
- `hash`: the whole value becomes `sha256:<16 hex>` of a salted SHA-256, so equal values still
  group (per user, per conversation) without the value being stored.

A field is `request.<path>` or `response.<path>` (dotted keys into the JSON body, `*` for any
key or list index), `metadata.<key>` (values copied from request headers by
`capture.metadata_headers`, `*` for all), or `client_request_id` (the client's `x-request-id`;
the sample `id` is llmwatch's own and never rewritten). The most specific rule wins (fewest `*`).

`redaction.mode: scores_only` keeps all request and response text on the host: stored and
shipped samples carry neither body, while scores are still computed in memory on the raw text.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping

import orjson
from pydantic import Field, field_validator

from llmwatch.core.config import SecretText, Section
from llmwatch.scorers.pipeline.pii import KINDS, PLACEHOLDERS, canonical_kind, find, luhn_valid, shortest

if TYPE_CHECKING:
    from llmwatch.core.records import Sample

__all__ = ["Redactor", "RedactionSection", "luhn_valid", "DEFAULT_FIELDS"]


# --- the `redaction` section -----------------------------------------------------------------


# The kinds of llmwatch.scorers.pipeline.pii, the one detector (core cannot import it); `card` and `key`
# are the older names of credit_card and api_key and still accepted.
_PII_KIND_ALIASES = {"card": "credit_card", "key": "api_key"}


_FIELD_NAME_RE = re.compile(r"^(?:client_request_id|metadata\.[^.]+|(?:request|response)\.[^.]+(?:\.[^.]+)*)$")


PiiKind = Literal["email", "phone", "credit_card", "api_key", "ipv4", "iban", "ssn"]


def _default_pii_kinds() -> list[PiiKind]:
    return ["email", "phone", "credit_card", "api_key", "iban", "ssn"]


class RedactionSection(Section):
    enabled: bool = True
    patterns: list[PiiKind] = Field(default_factory=_default_pii_kinds)
    # Extra regexes, replaced by [REDACTED]; e.g. internal customer ids.
    extra_patterns: list[str] = Field(default_factory=list)
    # mask: stored/shipped samples carry redacted bodies. scores_only: they carry no request or
    # response text at all; scores are still computed in memory on the raw text.
    mode: Literal["mask", "scores_only"] = "mask"
    # Field -> drop | mask | hash, over the defaults {client_request_id: mask, metadata.*: mask, request.user: hash}.
    # Fields: client_request_id, metadata.<key>, request.<dotted.path>, response.<dotted.path>; `*` matches any key.
    fields: dict[str, Literal["drop", "mask", "hash"]] = Field(default_factory=dict)
    # Salt of `hash`; without one, hashes only group within one process run.
    hash_salt: SecretText = None

    @field_validator("patterns", mode="before")
    @classmethod
    def _old_kind_names(cls, patterns: Any) -> Any:
        if isinstance(patterns, list):
            return [_PII_KIND_ALIASES.get(p, p) if isinstance(p, str) else p for p in patterns]
        return patterns

    @field_validator("fields")
    @classmethod
    def _field_names(cls, fields: dict[str, str]) -> dict[str, str]:
        for name in fields:
            if not _FIELD_NAME_RE.match(name):
                raise ValueError(
                    f"field {name!r}: expected client_request_id, metadata.<key>, request.<path> or response.<path> "
                    "(dotted keys, * for any key), e.g. request.user or metadata.conversation_id"
                )
        return fields

    @field_validator("extra_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
        return patterns


# --- the redactor ----------------------------------------------------------------------------

Action = Literal["drop", "mask", "hash"]
_DROP = object()

# Header-derived metadata and the client's request id (`client_request_id`; the sample `id` is
# llmwatch's own) are free text chosen by clients: mask them like bodies. The OpenAI `user` field
# identifies an end user: hash it, so that per-user grouping still works without storing who.
DEFAULT_FIELDS: dict[str, Action] = {"client_request_id": "mask", "metadata.*": "mask", "request.user": "hash"}
DEFAULT_KINDS = ("email", "phone", "credit_card", "api_key", "iban", "ssn")
# Object keys are the same few names on every call ("role", "content", "finish_reason"): a key
# that came out of masking unchanged is remembered and not scanned again. Only unchanged keys are
# kept (no finding, so nothing to hide), and only a bounded number of short ones.
_CLEAN_KEYS_MAX = 4096
_CLEAN_KEY_MAX_LEN = 64
# Short values repeat as keys do ("user", "assistant", the model, "stop", "chat.completion"): the
# same memory for those, apart from the keys' (a body's values must not crowd keys out), same
# bounds. A sampled benchmark call scans 9 strings, 6 of them such values (about 8 µs of 43).
_CLEAN_VALUES_MAX = 4096


def _split(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


class _Rules:
    """Field rules of one area (request body, response body, metadata): path pattern -> action."""

    def __init__(self, rules: Mapping[tuple[str, ...], Action]) -> None:
        # Most specific first: fewer wildcards, then longer paths.
        self._rules = sorted(rules.items(), key=lambda kv: (sum(p == "*" for p in kv[0]), -len(kv[0])))
        self.prefixes = {pattern[:i] for pattern in rules for i in range(len(pattern))}

    def __bool__(self) -> bool:
        return bool(self._rules)

    def action(self, path: tuple[str, ...]) -> Action | None:
        for pattern, action in self._rules:
            if len(pattern) == len(path) and all(p == "*" or p == s for p, s in zip(pattern, path)):
                return action
        return None

    def may_match_below(self, path: tuple[str, ...]) -> bool:
        n = len(path)
        return any(
            len(prefix) == n and all(p == "*" or p == s for p, s in zip(prefix, path)) for prefix in self.prefixes
        )


class Redactor:
    def __init__(
        self,
        patterns: Iterable[str] = DEFAULT_KINDS,
        extra_patterns: Iterable[str] = (),
        *,
        fields: Mapping[str, Action] | None = None,
        mode: Literal["mask", "scores_only"] = "mask",
        hash_salt: bytes | None = None,
    ) -> None:
        self.kinds = tuple(k for k in KINDS if k in {canonical_kind(p) for p in patterns})
        # Most strings of a body are keys and short values ("role", "user", "gpt-4o-mini"): those
        # shorter than any finding of these kinds skip the detector.
        self._shortest = shortest(self.kinds)
        self._clean_keys: set[str] = set()
        self._clean_values: set[str] = set()
        self._extra = [re.compile(p) for p in extra_patterns]
        self.mode = mode
        # Without a configured salt, hashes group within this process only; a salt that is not
        # secret would let anyone confirm a guessed value by hashing it.
        self._salt = hash_salt if hash_salt is not None else secrets.token_bytes(16)
        rules = dict(DEFAULT_FIELDS if fields is None else fields)
        areas: dict[str, dict[tuple[str, ...], Action]] = {"request": {}, "response": {}, "metadata": {}}
        self._id_action: Action | None = None
        for name, action in rules.items():
            if action not in ("drop", "mask", "hash"):
                raise ValueError(f"redaction field {name!r}: action must be drop, mask or hash, got {action!r}")
            if name == "client_request_id":
                self._id_action = action
                continue
            area, _, rest = name.partition(".")
            if area not in areas or not rest:
                raise ValueError(
                    f"redaction field {name!r}: expected client_request_id, metadata.<key>, request.<path> or response.<path>"
                )
            areas[area][_split(rest)] = action
        self._request = _Rules(areas["request"])
        self._response = _Rules(areas["response"])
        self._metadata = _Rules(areas["metadata"])

    @classmethod
    def from_config(cls, section: "RedactionSection") -> "Redactor | None":
        """The redactor a `redaction:` config section asks for, or None when redaction is off."""
        if not section.enabled:
            return None
        salt = section.hash_salt.get_secret_value().encode() if section.hash_salt is not None else None
        return cls(
            section.patterns,
            section.extra_patterns,
            fields={**DEFAULT_FIELDS, **section.fields},
            mode=section.mode,
            hash_salt=salt,
        )

    # --- values ------------------------------------------------------------------------------

    def text(self, value: str) -> str:
        if self.kinds and len(value) >= self._shortest:
            findings = find(value, self.kinds)
            if findings:
                parts = []
                pos = 0
                for f in findings:
                    parts.append(value[pos : f.start])
                    parts.append(PLACEHOLDERS[f.kind])
                    pos = f.end
                parts.append(value[pos:])
                value = "".join(parts)
        for regex in self._extra:
            value = regex.sub("[REDACTED]", value)
        return value

    def _key(self, key: str) -> str:
        if key in self._clean_keys:
            return key
        masked = self.text(key)
        if masked == key and len(key) <= _CLEAN_KEY_MAX_LEN and len(self._clean_keys) < _CLEAN_KEYS_MAX:
            self._clean_keys.add(key)
        return masked

    def _value(self, value: str) -> str:
        if len(value) > _CLEAN_KEY_MAX_LEN:
            return self.text(value)
        clean = self._clean_values
        if value in clean:
            return value
        masked = self.text(value)
        if masked == value and len(clean) < _CLEAN_VALUES_MAX:
            clean.add(value)
        return masked

    def hash(self, value: Any) -> str:
        raw = (
            value.encode("utf-8", "surrogatepass")
            if isinstance(value, str)
            else orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        )
        return "sha256:" + hashlib.sha256(self._salt + raw).hexdigest()[:16]

    def _mask(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._value(value)
        if isinstance(value, dict):
            return {self._key(k) if isinstance(k, str) else k: self._mask(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._mask(v) for v in value]
        return value

    def _apply(self, value: Any, rules: _Rules, path: tuple[str, ...]) -> Any:
        action = rules.action(path) if path else None
        if action == "drop":
            return _DROP
        if action == "hash":
            return self.hash(value)
        if not rules.may_match_below(path):
            return self._mask(value)
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                new = self._apply(v, rules, path + (str(k),))
                if new is not _DROP:
                    out[self._key(k) if isinstance(k, str) else k] = new
            return out
        if isinstance(value, list):
            items = (self._apply(v, rules, path + (str(i),)) for i, v in enumerate(value))
            return [v for v in items if v is not _DROP]
        return self._mask(value)

    def __call__(self, value: Any) -> Any:
        """A redacted copy of any JSON-like value (dicts, lists, strings); other values as they are.

        Only the masking: field rules need to know which body a value is, see `sample()`. In
        `scores_only` mode no text is returned at all.
        """
        if self.mode == "scores_only":
            return None
        return self._mask(value)

    def body(self, value: Any, side: Literal["request", "response"]) -> Any:
        """A redacted copy of a request or response body, with that side's field rules."""
        if self.mode == "scores_only":
            return None
        result = self._apply(value, self._request if side == "request" else self._response, ())
        return None if result is _DROP else result

    def sample(self, sample: "Sample") -> "Sample":
        """A copy of `sample` fit to leave the host: bodies, metadata and the client's request id redacted."""
        metadata = {}
        for key, value in sample.metadata.items():
            action = self._metadata.action((key,)) or "mask"
            if action == "hash":
                metadata[key] = self.hash(value)
            elif action == "mask":
                metadata[key] = self._mask(value)
        client_id = sample.client_request_id
        if client_id and self._id_action == "hash":
            client_id = self.hash(client_id)
        elif client_id and self._id_action == "mask":
            client_id = self.text(client_id)
        elif self._id_action == "drop":
            client_id = None
        return sample.model_copy(
            update={
                "client_request_id": client_id,
                "request": self.body(sample.request, "request"),
                "response": self.body(sample.response, "response"),
                "metadata": metadata,
                "redacted": True,
            }
        )


def redact_sample(redact: Callable[[Any], Any] | None, sample: "Sample") -> "Sample":
    """What a sink that stores or ships samples must get: the whole-sample policy when `redact`
    is a `Redactor`, else the old behaviour (bodies through `redact`)."""
    if redact is None:
        return sample
    if isinstance(redact, Redactor):
        return redact.sample(sample)
    return sample.model_copy(
        update={"request": redact(sample.request), "response": redact(sample.response), "redacted": True}
    )
