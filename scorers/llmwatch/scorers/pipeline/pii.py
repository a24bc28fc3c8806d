"""The one detector of personal data and secrets in text.

Both masking of stored samples (`llmwatch.scorers.pipeline.redaction`) and the `pii_leak` check
(`llmwatch.scorers.checks.rules`) ask this module where PII is, so that they agree on what counts and
call each kind by the same name. `find()` returns non-overlapping spans, each with its kind;
masking replaces them with the kind's placeholder, the check only counts them.

Kinds: email, phone, credit_card, iban, ssn, api_key, ipv4. The older redaction names `card`
and `key` are accepted as aliases of `credit_card` and `api_key`.

Patterns start with a literal or a character class rather than a lookbehind or \\b where they
can, so that the regex engine can skip ahead; left boundaries and checksums are checked in
Python on the few candidates instead. Texts without "@" skip the e-mail pattern and texts with
fewer than 7 digits skip the number patterns, because most answers contain neither.

The proxy redacts every sampled call in its own process, so the cost per text matters (issue 13).
Before the patterns run, cheap gates rule kinds out: a length below the kind's shortest finding,
no run of 8 digits for phone/card/ssn, no "d.d.d.d" shape for ipv4, none of the literal prefixes
of the secret pattern; the e-mail scan starts at the first "@"'s local part. Each gate is a
proven superset of what its patterns can find (the argument is next to it), so gated and
ungated results are identical; tests/unit/test_pii_gates.py compares them.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from typing import Iterable

__all__ = [
    "KINDS",
    "ALIASES",
    "PLACEHOLDERS",
    "Finding",
    "canonical_kind",
    "find",
    "shortest",
    "luhn_valid",
    "is_placeholder_secret",
]

# In priority order: where two kinds claim overlapping text, the earlier wins (a key can
# contain digit runs that would otherwise look like a card or a phone number).
KINDS: tuple[str, ...] = ("api_key", "email", "iban", "credit_card", "ssn", "phone", "ipv4")
ALIASES = {"card": "credit_card", "key": "api_key"}
PLACEHOLDERS = {
    "api_key": "[SECRET]",
    "email": "[EMAIL]",
    "iban": "[IBAN]",
    "credit_card": "[CARD]",
    "ssn": "[SSN]",
    "phone": "[PHONE]",
    "ipv4": "[IP]",
}


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    start: int
    end: int


def canonical_kind(name: str) -> str:
    kind = ALIASES.get(name, name)
    if kind not in PLACEHOLDERS:
        raise ValueError(f"unknown PII kind {name!r}; known kinds: {', '.join(KINDS)}")
    return kind


# --- secrets -----------------------------------------------------------------------------------

# Each alternative names the token it catches. Prefix-shaped tokens are matched whole.
_SECRET_RE = re.compile(
    r"sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{16,}"  # OpenAI / Anthropic keys
    r"|sk_(?:live|test)_[0-9A-Za-z]{20,}"  # Stripe secret keys
    r"|(?:AKIA|ASIA|AIDA|AROA|ANPA|AGPA)[0-9A-Z]{16}(?![0-9A-Za-z])"  # AWS access key ids (long-term AKIA, STS ASIA, ...)
    r"|github_pat_[A-Za-z0-9_]{22,}"  # GitHub fine-grained personal access tokens
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub classic PAT, OAuth, user-to-server, server, refresh tokens
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab personal access tokens
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z]+ )?PRIVATE KEY-----)?"  # PEM private keys
)
# Tokens whose first letter is common in prose ("e", "b", "r") would make the engine try the
# whole pattern at most positions: each is only tried when its marker occurs in the text.
_GATED_SECRET_RES = (
    ("eyJ", re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),  # JWTs (base64url '{"' header)
    ("earer", re.compile(r"[Bb]earer\s+[A-Za-z0-9._~+/-]{20,}=*")),  # Authorization: Bearer <token>
    ("rk_", re.compile(r"rk_(?:live|test)_[0-9A-Za-z]{20,}")),  # Stripe restricted keys
)
# Secrets without a recognisable prefix are only found by their context (and _NEAR_SECRET_RE below): the value after a
# name such as aws_secret_access_key / SecretAccessKey (AWS: 40 base64 characters), or after
# password= / api_key: / client_secret= ... (group 1 is the value that gets masked).
_CONTEXT_SECRET_RE = re.compile(
    r"(?i:aws_?secret_?access_?key|secret_?access_?key|aws_?secret_?key)[\"']?\s*[:=]\s*[\"']?"
    r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
    r"|(?i:password|passwd|api[_-]?key|client[_-]?secret|secret[_-]?key|access[_-]?token|auth[_-]?token)[\"']?\s*[:=]\s*[\"']?"
    r"([^\s\"',;]{8,})"
)
# Secrets named by the words before them but written without "=" or ":" ("my aws secret is
# wJalr...", "here is the token 9f8e..."): a high-entropy token (group 1) at most five short words
# after a secret word. Only candidates that look random are kept (`_looks_random`): prose, paths,
# ids made of words and hex digests do not.
_NEAR_SECRET_RE = re.compile(
    r"(?i:secret|passw(?:or)?d|credential|token|api[ _-]?key|access[ _-]?key|private[ _-]?key|signing[ _-]?key|key)"
    r"s?\b(?:[^\S\n]*(?:[:=]|->|\b[A-Za-z]{1,12}\b)){0,5}[^\S\n]*[\"'`(\[]?"
    r"([A-Za-z0-9+/_-]{20,256}={0,2})(?![A-Za-z0-9+/=_-])"
)
# Where an alternative of _CONTEXT_SECRET_RE can start (each begins with one of these, lower-cased).
_CONTEXT_START_RE = re.compile(r"aws|secret|passw|api|client|access|auth")
_NEAR_WORD_RE = re.compile(r"secret|passw|credential|token|key")  # on the lower-cased text
_CONTEXT_WORDS = ("secret", "passw", "key", "token", "credential")
# Every alternative of _SECRET_RE starts with one of these literals (tests/unit/test_pii_gates.py
# checks it on the parsed pattern), so a text holding none of them cannot match it; substring
# tests cost far less than running the alternation at every position. Those of the first group
# all contain "-" or "_", so a text with neither skips them with two one-character searches.
_SECRET_PREFIXES_SEP = ("sk-", "sk_", "github_pat_", "gh", "glpat-", "xox", "-----BEGIN")
_SECRET_PREFIXES_CAPS = ("AKIA", "ASIA", "AIDA", "AROA", "ANPA", "AGPA", "AIza")
_SECRET_PREFIXES = _SECRET_PREFIXES_SEP + _SECRET_PREFIXES_CAPS
# Documentation placeholders ("sk-xxxxxxxx...", AWS's "...EXAMPLE") are not leaks; the check
# ignores them, masking does not (it costs nothing to mask a placeholder).
_PLACEHOLDER_VALUE_RE = re.compile(r"(?i)example|x{6,}|\*{4,}|<[^>]*>|\$\{|your[_-]")

# --- e-mail ------------------------------------------------------------------------------------

_EMAIL_RE = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@((?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,})(?![A-Za-z0-9])")
_EMAIL_LOCAL_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-"

# --- numbers -----------------------------------------------------------------------------------

_PHONE_RES = (
    # International, E.164 with or without separators: +44 20 7946 0958, +14155550177, and with
    # the 00 international prefix: 0049 30 12345678.
    (re.compile(r"(?:\+|00(?=[1-9]))\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\w-])"), "+"),
    # North American with an area code in parentheses: (415) 555-2671, 1 (415) 555 2671.
    (re.compile(r"(?:1 ?)?\([2-9]\d{2}\) ?[2-9]\d{2}[-. ]?\d{4}(?![\w-])"), ""),
    # North American with separators: 415-555-2671, 1-800-555-0199, 415.555.2671, 415 555 2671.
    (re.compile(r"(?:1[-. ])?[2-9]\d{2}([-. ])[2-9]\d{2}\1\d{4}(?![\w-])"), ".-"),
    # North American bare 10 digits (4155550199): area and exchange codes never start with 0 or
    # 1, which rules out Unix timestamps (1...) and most order numbers; "#" and "$" before the
    # digits mark ids and amounts.
    (re.compile(r"[2-9]\d{2}[2-9]\d{6}(?![\w-])"), ".-#$/,"),
    # National numbers with a trunk prefix 0 and spaces: 020 7946 0958, 030 1234 5678.
    (re.compile(r"\(?0\d{1,4}\)? \d{3,4} ?\d{3,4}(?![\w-])"), ".-"),
    # French national numbers in pairs: 06 12 34 56 78.
    (re.compile(r"0[1-9](?:[ .]\d{2}){4}(?![\w.-])"), ".-"),
)
_CARD_RE = re.compile(r"\d(?:[ -]?\d){12,18}(?![\d-])")
_IBAN_RE = re.compile(r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])")
_SSN_RE = re.compile(r"\d{3}-\d{2}-\d{4}(?![\d-])")
_IPV4_RE = re.compile(r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.])")
_NON_DIGITS_RE = re.compile(r"\D")
_DIGIT_TABLE = str.maketrans("", "", "0123456789")

# --- gates -------------------------------------------------------------------------------------
# The shortest text in which each kind can be found; shorter texts (most JSON keys, roles, model
# names) skip the kind without running anything.
#   email: [..]+ "@" ([..]+ ".")+ [A-Za-z]{2,}  ->  "a@b.cd", 6.
#   ipv4: four octets of at least one digit and three dots  ->  "1.2.3.4", 7.
#   phone: only matches with 8 to 15 digits are kept  ->  8 ("00123456").
#   ssn: ddd-dd-dddd  ->  11.  credit_card: \d(?:[ -]?\d){12,18}  ->  13.
#   iban: _iban_ok keeps 15 to 34 characters without spaces  ->  15.
#   api_key: the shortest alternatives are xox[abposr]-[..]{10,} (15) and the context form
#     passwd/apikey + ":"/"=" + 8 characters (15); every other alternative is longer.
_MIN_LEN = {"email": 6, "ipv4": 7, "phone": 8, "ssn": 11, "credit_card": 13, "iban": 15, "api_key": 15}
# Every phone, card and ssn finding holds at least 8 digits, each pair of consecutive digits
# separated by at most 3 characters of " .-()":
#   phone: findings are filtered to 8-15 digits; pattern by pattern, what stands between two
#     digits is  +/00 form: "\)?[ .-]?\(?" between groups (<= 3; the "+" comes before the first
#     digit and "00" are digits themselves);  (415) 555-2671 form: "(", ") ", "-"/"."/" " (<= 2);
#     415-555-2671 form: one of "-. ";  bare 10 digits: nothing;  0xx national form: ") " or " "
#     (<= 2);  French pairs: " " or "." (1);
#   credit_card: 13-19 digits with at most one " " or "-" between two;  ssn: 9 digits, "-" (1).
# So a text without such a run has none of the three. \d here as there: any Unicode digit.
_DIGIT_RUN_RE = re.compile(r"\d(?:[ .()\-]{0,3}\d){7}")
# An ipv4 match is four groups of 1-3 digits joined by dots, so it contains ".d.d." with 1-3
# digits each; starting with a literal dot, this search skips ahead fast.
_IPV4_GATE_RE = re.compile(r"\.\d{1,3}\.\d{1,3}\.")
# Cheaper pre-checks run on the text's "shape": its UTF-8 bytes with ASCII digits, the separators
# " .-()" and every byte of a non-ASCII character (which may be another Unicode digit, \d) turned
# into "0", and capital letters into "A". A digit run as above is 8 characters of digits and
# separators, each one or more "0" bytes, so its shape holds b"00000000"; an IBAN starts with
# [A-Z]{2}\d{2}, shape b"AA00" (or more zeros). Without these substrings the regexes cannot
# match. bytes.translate costs far less than str.translate, which is slow on non-ASCII text.
_SHAPE_TABLE = bytes.maketrans(
    b"0123456789 .-()ABCDEFGHIJKLMNOPQRSTUVWXYZ" + bytes(range(128, 256)), b"0" * 15 + b"A" * 26 + b"0" * 128
)
_ASCII_DIGITS = b"0123456789"
# The capital-letter secret prefixes in that shape (b"AAAA", b"AAza"): two searches, not seven.
_SECRET_CAPS_SHAPES = tuple({p.encode("ascii").translate(_SHAPE_TABLE) for p in _SECRET_PREFIXES_CAPS})


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        d = ord(char) - 48
        if index % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _left_boundary(text: str, start: int, also: str = "") -> bool:
    """True when the match at `start` is not the tail of a longer word or number."""
    if start == 0:
        return True
    before = text[start - 1]
    return not (before.isalnum() or before == "_" or before in also)


def _card_ok(candidate: str) -> bool:
    digits = _NON_DIGITS_RE.sub("", candidate)
    if not 13 <= len(digits) <= 19:
        return False
    # Issuer prefixes (Amex/Diners/JCB 3, Visa 4, Mastercard 5 and 2221-2720, Discover/UnionPay 6)
    # cut the 1-in-10 Luhn false positives on arbitrary long numbers.
    if digits[0] not in "3456" and not 2221 <= int(digits[:4]) <= 2720:
        return False
    return luhn_valid(digits)


def _ssn_ok(candidate: str) -> bool:
    # Never issued: area 000, 666 and 900-999, group 00, serial 0000.
    area, group, serial = candidate.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _iban_ok(candidate: str) -> bool:
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rotated = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rotated)) % 97 == 1


def is_placeholder_secret(candidate: str) -> bool:
    """True for documentation placeholders: no digit at all, or an "EXAMPLE"/"xxxx"-style value."""
    if candidate.startswith("-----"):
        return False
    return not any(c.isdigit() for c in candidate) or _PLACEHOLDER_VALUE_RE.search(candidate) is not None


_SEPARATORS = re.compile(r"[/_.+-]")
_WORDISH = re.compile(r"^[a-z]+[0-9]*$|^[0-9]+$")


def _looks_random(value: str) -> bool:
    """A token that reads as random characters: letters and digits mixed, and a Shannon entropy per
    character near that of random base64 (random 40-character base64 is ~4.7 bits; prose words,
    paths such as /etc/ssl/private/server2024 and hex digests stay under 4.0)."""
    body = value.rstrip("=")
    if not (any(c.isdigit() for c in body) and any(c.isalpha() for c in body)):
        return False
    parts = _SEPARATORS.split(body)
    if len(parts) > 1 and all(_WORDISH.match(p) for p in parts if p):
        return False  # shared_drive/holidays2024/plans, order_id_2024: names joined, not random
    n = len(body)
    counts: dict[str, int] = {}
    for c in body:
        counts[c] = counts.get(c, 0) + 1
    entropy = -sum(k / n * math.log2(k / n) for k in counts.values())
    return entropy >= min(4.0, 0.85 * math.log2(n))


def _email_ignored(domain: str, ignored: tuple[str, ...]) -> bool:
    return any(domain == p or domain.endswith("." + p) or fnmatch.fnmatchcase(domain, p) for p in ignored)


def _candidates(  # noqa: C901
    text: str,
    kind: str,
    ignored_domains: tuple[str, ...],
    skip_placeholders: bool,
    gated: bool = True,
    secret_re: bool = True,
) -> Iterable[tuple[int, int]]:
    if kind == "api_key":
        # `secret_re` is False only when the prefix gate has ruled _SECRET_RE out.
        if secret_re:
            for m in _SECRET_RE.finditer(text):
                if _left_boundary(text, m.start(), "-") and not (skip_placeholders and is_placeholder_secret(m[0])):
                    yield m.span()
        for marker, rx in _GATED_SECRET_RES:
            if marker in text:
                for m in rx.finditer(text):
                    if _left_boundary(text, m.start(), "-") and not (skip_placeholders and is_placeholder_secret(m[0])):
                        yield m.span()
        # The context pattern cannot skip ahead on a literal; most texts name no secret at all.
        low = text.lower()
        if not any(word in low for word in _CONTEXT_WORDS):
            return
        # Both context patterns are tried only where one of their names can start (a plain search
        # of the lower-cased text skips ahead), not at every position of the text.
        for name in _CONTEXT_START_RE.finditer(low):
            found = _CONTEXT_SECRET_RE.match(text, name.start())
            if found is None:
                continue
            group = 1 if found.group(1) is not None else 2
            if not (skip_placeholders and is_placeholder_secret(found.group(group))):
                yield found.span(group)
        # Tried only where a secret word starts (a plain search skips ahead), not at every position.
        for word in _NEAR_WORD_RE.finditer(low):
            near = _NEAR_SECRET_RE.match(text, word.start())
            if near is None:
                continue
            value = near.group(1)
            if _looks_random(value) and not (skip_placeholders and is_placeholder_secret(value)):
                yield near.span(1)
    elif kind == "email":
        # A match holds one "@" and starts where the run of local-part characters before it
        # starts (inside a run the lookbehind fails), so none starts before the run that ends at
        # the first "@": the scan can begin there (the lookbehind still sees the character before).
        start = len(text[: text.find("@")].rstrip(_EMAIL_LOCAL_CHARS)) if gated and "@" in text else 0
        for m in _EMAIL_RE.finditer(text, start):
            if not _email_ignored(m.group(1).lower(), ignored_domains):
                yield m.span()
    elif kind == "credit_card":
        for m in _CARD_RE.finditer(text):
            if _left_boundary(text, m.start(), "-") and _card_ok(m.group(0)):
                yield m.span()
    elif kind == "ssn":
        for m in _SSN_RE.finditer(text):
            if _left_boundary(text, m.start(), "-") and _ssn_ok(m.group(0)):
                yield m.span()
    elif kind == "iban":
        for m in _IBAN_RE.finditer(text):
            if _left_boundary(text, m.start()) and _iban_ok(m.group(0)):
                yield m.span()
    elif kind == "phone":
        for rx, also in _PHONE_RES:
            for m in rx.finditer(text):
                start = m.start()
                # Not the tail of a longer run of digit groups (an IBAN, an order number in blocks).
                if start >= 2 and text[start - 1] in " .-" and text[start - 2].isdigit():
                    continue
                if _left_boundary(text, start, also) and 8 <= len(_NON_DIGITS_RE.sub("", m.group(0))) <= 15:
                    yield m.span()
    elif kind == "ipv4":
        for m in _IPV4_RE.finditer(text):
            if _left_boundary(text, m.start(), "."):
                yield m.span()


def _many_digits(text: str) -> bool:
    # Every number kind needs at least 7 digits; most answers have fewer, so skip them cheaply.
    return len(text) - len(text.translate(_DIGIT_TABLE)) >= 7


def _many_ascii_digits(data: bytes) -> bool:
    # `_many_digits` on the text's UTF-8 bytes (ASCII digits are the bytes 0x30-0x39 and occur in
    # no multi-byte character); str.translate takes ~50 us on 600 characters of non-ASCII text.
    return len(data) - len(data.translate(None, _ASCII_DIGITS)) >= 7


class _Plan:
    """What `find` needs to know about one set of wanted kinds, worked out once per set."""

    __slots__ = ("kinds", "shortest")

    def __init__(self, kinds: Iterable[str]) -> None:
        wanted = {canonical_kind(k) for k in kinds}
        self.kinds = tuple(k for k in KINDS if k in wanted)
        self.shortest = min((_MIN_LEN[k] for k in self.kinds), default=0)


# Callers pass the same few tuples (a Redactor's kinds, the check's frozenset) on every call;
# building the set anew cost a quarter of `find` on short strings. Only tuples and frozensets
# are cached (hashable by value); the size bound keeps odd callers from growing it.
_PLANS: dict[object, _Plan] = {}
_PLANS_MAX = 256


def _plan(kinds: Iterable[str]) -> _Plan:
    if type(kinds) is tuple or type(kinds) is frozenset:
        plan = _PLANS.get(kinds)
        if plan is None:
            plan = _Plan(kinds)
            if len(_PLANS) < _PLANS_MAX:
                _PLANS[kinds] = plan
        return plan
    return _Plan(kinds)


def shortest(kinds: Iterable[str] = KINDS) -> int:
    """No text shorter than this can hold a finding of `kinds`: `find` would return []."""
    return _plan(kinds).shortest


def _may_match_secret_re(text: str, shape: bytes) -> bool:
    # Plain loops: any() over a generator costs more than the searches on short texts.
    if "-" in text or "_" in text:
        for prefix in _SECRET_PREFIXES_SEP:
            if prefix in text:
                return True
    for marker in _SECRET_CAPS_SHAPES:
        if marker in shape:
            return True
    return False


def _possible(text: str, kinds: tuple[str, ...]) -> tuple[list[str], bool]:
    """The kinds of `kinds` the gates cannot rule out for `text` (see the gates above), and
    whether _SECRET_RE may match."""
    size = len(text)
    data = shape = b""
    shaped = False  # the shape is only worked out once a gate needs it (short texts never do)
    digit_run: bool | None = None
    secret_re = False
    out = []
    for kind in kinds:
        if size < _MIN_LEN[kind]:
            continue
        if not shaped and kind != "email":
            data = text.encode("utf-8", "surrogatepass")
            shape = data.translate(_SHAPE_TABLE)
            shaped = True
        if kind == "api_key":
            secret_re = _may_match_secret_re(text, shape)
        elif kind == "email":
            if "@" not in text:
                continue
        elif kind == "ipv4":
            if _IPV4_GATE_RE.search(text) is None:
                continue
        elif kind == "iban":
            if b"AA00" not in shape or not _many_ascii_digits(data):
                continue
        else:  # phone, credit_card, ssn
            if digit_run is None:
                # ASCII text with such a run has 8 ASCII digits, so the rule of 7 holds; in other
                # text the run may be of other Unicode digits, and the rule must be asked.
                digit_run = (
                    b"00000000" in shape
                    and _DIGIT_RUN_RE.search(text) is not None
                    and (len(data) == size or _many_ascii_digits(data))
                )
            if not digit_run:
                continue
        out.append(kind)
    return out, secret_re


def _scan(
    text: str, plan: _Plan, ignored: tuple[str, ...], skip_placeholders: bool, gated: bool = True
) -> list[Finding]:
    secret_re = True
    if gated:
        if len(text) < plan.shortest:
            return []
        kinds, secret_re = _possible(text, plan.kinds)
    else:
        # The rules without gates, kept reachable so that tests can prove the gates change nothing.
        has_at = "@" in text
        many_digits = _many_digits(text)
        kinds = [
            k
            for k in plan.kinds
            if not (k == "email" and not has_at)
            and not (k in ("iban", "credit_card", "ssn", "phone") and not many_digits)
        ]
    taken: list[Finding] = []
    for kind in kinds:
        for start, end in _candidates(text, kind, ignored, skip_placeholders, gated, secret_re):
            if taken and any(f.start < end and start < f.end for f in taken):
                continue
            taken.append(Finding(kind, start, end))
    if len(taken) > 1:
        taken.sort(key=lambda f: f.start)
    return taken


def find(
    text: str,
    kinds: Iterable[str] = KINDS,
    *,
    ignore_email_domains: Iterable[str] = (),
    skip_placeholders: bool = False,
) -> list[Finding]:
    """Non-overlapping findings of the wanted kinds in `text`, in text order.

    `ignore_email_domains` (exact, suffix or glob) and `skip_placeholders` are for the check,
    which must not fail an answer for `jane@example.com` or `sk-xxxx...`; masking keeps both off.
    """
    plan = _plan(kinds)
    ignored = tuple(d.lower() for d in ignore_email_domains) if ignore_email_domains else ()
    return _scan(text, plan, ignored, skip_placeholders)
