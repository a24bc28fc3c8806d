"""The detector's cheap gates change no finding: gated `find` equals the patterns run ungated.

`llmwatch.scorers.pipeline.pii` rules kinds out before running their patterns (a text shorter than the
kind's shortest finding, no run of 8 digits, no "d.d.d.d" shape, no literal prefix of a secret)
and starts the e-mail scan at the address around the first "@",
because the proxy redacts every sampled call in its own process (issue 13). Each gate must be a
superset of what its patterns can find. These tests compare the gated detector with the
ungated one (`pii._scan(..., gated=False)`, the same code with the gates off) on every string
of the redaction tests and corpus, and on a few thousand random strings made of the pieces the
patterns care about; and they check the gates' own premises on the patterns themselves.
"""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path

import orjson
import pytest

from llmwatch.scorers.pipeline import pii
from llmwatch.scorers.pipeline.redaction import DEFAULT_KINDS, Redactor

try:  # the regex parser: re._parser from Python 3.11, sre_parse before
    import re._parser as sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse  # type: ignore[no-redef]

TESTS = Path(__file__).resolve().parents[1]
CORPUS = TESTS / "data" / "redaction_corpus.jsonl"
KIND_SETS = [pii.KINDS, DEFAULT_KINDS, *((k,) for k in pii.KINDS)]
IGNORED = ("example.com", "*.test")


def ungated(text: str, kinds, *, ignored: tuple[str, ...] = (), skip_placeholders: bool = False) -> list[pii.Finding]:
    return pii._scan(text, pii._plan(kinds), ignored, skip_placeholders, gated=False)


def differences(texts: list[str]) -> list[tuple[str, tuple, bool, list, list]]:
    out = []
    for text in texts:
        for kinds in KIND_SETS:
            for skip in (False, True):
                ignored = IGNORED if skip else ()
                got = pii.find(text, kinds, ignore_email_domains=ignored, skip_placeholders=skip)
                want = ungated(text, kinds, ignored=ignored, skip_placeholders=skip)
                if got != want:
                    out.append((text, kinds, skip, got, want))
    return out


def corpus_texts() -> list[str]:
    """Every labelled corpus line, and every string literal of the redaction tests."""
    rows = [orjson.loads(line) for line in CORPUS.read_bytes().splitlines() if line.strip()]
    texts = [r["text"] for r in rows if "text" in r]
    for path in sorted(TESTS.glob("*/test_redaction*.py")) + [TESTS / "unit" / "test_rules.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    return texts


# Pieces the patterns react to: digits (ASCII and other Unicode digits), the separators of phone
# numbers, capitals for IBANs and AWS ids, "@" and domains, secret prefixes and context words,
# and whole findings from the corpus so that every kind is present, next to each other.
PIECES = [
    *"0123456789",
    *"0123456789",
    " ",
    ".",
    "-",
    "(",
    ")",
    "+",
    "/",
    "_",
    ":",
    "=",
    "#",
    "$",
    ",",
    "a",
    "Z",
    "x",
    "AB",
    "DE",
    "NO",
    "GB",
    "e",
    "\u0663",
    "\u0966",
    "\u00e9",
    "\u2014",
    "\n",
    "@",
    "@b.co",
    "a@",
    ".com",
    "00",
    "+1 ",
    "(415) ",
    "555-",
    "2671",
    *pii._SECRET_PREFIXES,
    "ghp_",
    "xoxb-",
    "eyJ",
    "Bearer ",
    "rk_live_",
    "password=",
    "api_key: ",
    "AKIA",
    "AIza",
    "abcdefghijklmnopqrstuvwxyz0123456789",
    "ABCDEFGHIJKLMNOP",
    "-----BEGIN PRIVATE KEY-----",
]


def random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    secrets = [r["secret"] for r in map(orjson.loads, CORPUS.read_bytes().splitlines()[1:]) if r.get("secret")]
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 30)):
            roll = rng.random()
            if roll < 0.05:
                parts.append(rng.choice(secrets))
            elif roll < 0.25:
                # A run of digits with separators: phone-, card- and ssn-like shapes and near misses.
                parts.append("".join(rng.choice("0123456789" * 3 + " .-()") for _ in range(rng.randint(1, 20))))
            else:
                parts.append(rng.choice(PIECES))
        texts.append("".join(parts))
    return texts


def test_gated_find_equals_ungated_on_every_redaction_test_string_and_the_corpus():
    texts = corpus_texts()
    assert len(texts) >= 500
    assert differences(texts) == []


def test_gated_find_equals_ungated_on_random_strings_of_the_pieces_patterns_react_to():
    texts = random_texts(3000, seed=20261203)
    # The comparison only means something if the strings hold findings of every kind.
    found: dict[str, int] = {}
    for text in texts:
        for f in ungated(text, pii.KINDS):
            found[f.kind] = found.get(f.kind, 0) + 1
    assert all(found.get(k, 0) >= 20 for k in pii.KINDS), found
    diffs = differences(texts)
    assert diffs == [], diffs[:5]


def test_near_misses_on_each_side_of_a_gate_agree():
    # Digit runs of 7 and 8 digits with 3 and 4 separators, dotted shapes with 1-4 digits,
    # strings one character either side of each kind's shortest finding.
    texts = [
        "0012345",
        "00123456",
        "001234567",
        "+1 2 3 4 5 6 7",
        "+1 (2) 3 4 5 6 7 8",
        "+1 (234) (5678)",
        "+1 (234)  (5678)",
        "(415)  555-2671",
        "(415) 555-2671",
        "415-555-2671",
        "415 - 555 - 2671",
        "4155550199",
        "020 7946 0958",
        "06 12 34 56 78",
        "4111-1111-1111-1111",
        "4111 1111 1111 111",
        "123-45-6789",
        "123--45-6789",
        "1.2.3.4",
        "1.2.3",
        "1.2.3.4.5",
        "10.0.0.255",
        "1.1234.1.1",
        "a@b.cd",
        "a@b.c",
        "@b.cd",
        "ab_c@d.ef",
        "\u00e9a@b.co",
        "a@b.co-x@y.com",
        "x@y a.b@c.de",
        ".a@b.co",
        "@@a@b.co",
        "NO9386011117947",
        "NO938601111794",
        "xoxb-1234567890",
        "xoxb-123456789",
        "passwd=12345678",
        "passwd=1234567",
        "\u0664\u0661\u0665-\u0665\u0665\u0665-\u0662\u0666\u0667\u0661 0123456",
        "\u0664\u0661\u0665\u0665\u0665\u0665\u0660\u0661\u0669\u0669 1234567",
        "DE\u0668\u0669 3704 0044 0532 0130 00",
        # Other Unicode digits match \d, but the number kinds need 7 ASCII digits in the text.
        "\u0662\u0661\u0663-\u0664\u0665-\u0666\u0667\u0668\u0669",
        "\u0662\u0661\u0663-\u0664\u0665-\u0666\u0667\u0668\u0669 1234567",
        "+\u0664\u0664 \u0662\u0660 \u0667\u0669\u0664\u0666 \u0660\u0669\u0665\u0668",
        "+\u0664\u0664 \u0662\u0660 \u0667\u0669\u0664\u0666 \u0660\u0669\u0665\u0668 / 123456",
        "\uff14\uff11\uff15-\uff15\uff15\uff15-\uff12\uff16\uff17\uff11 and 1234567",
        "NO\uff19\uff13 8601 1117 947 1234567",
        # An IBAN of letters: found only where the text has 7 ASCII digits in all.
        "x NO16ABCDEFGHIJKL and 1234",
        "x NO16ABCDEFGHIJKL and 12345",
        "\ud800 call 415-555-2671 \udfff",
        "caf\u00e9 220 \u00b0C \u2014 500 g, 20 min \u2026 4111 1111 1111 1111",
    ]
    # The premises hold: these are found where the rules allow it, so the comparison has teeth.
    assert [f.kind for f in pii.find("+1 (234) (5678)", ("phone",))] == ["phone"]
    assert [f.kind for f in pii.find("\u0662\u0661\u0663-\u0664\u0665-\u0666\u0667\u0668\u0669 1234567", ("ssn",))] == [
        "ssn"
    ]
    assert pii.find("\u0662\u0661\u0663-\u0664\u0665-\u0666\u0667\u0668\u0669", ("ssn",)) == []
    assert [f.kind for f in pii.find("x NO16ABCDEFGHIJKL and 12345", ("iban",))] == ["iban"]
    assert pii.find("x NO16ABCDEFGHIJKL and 1234", ("iban",)) == []
    assert differences(texts) == []


@pytest.mark.parametrize(
    "kind, example",
    [
        ("email", "a@b.cd"),
        ("ipv4", "1.2.3.4"),
        ("phone", "00123456"),
        ("ssn", "123-45-6789"),
        ("credit_card", "4222222222222"),
        ("iban", "NO9386011117947"),
        ("api_key", "xoxb-1234567890"),
        ("api_key", "passwd=12345678"),
    ],
)
def test_the_shortest_finding_of_each_kind_is_as_long_as_the_gate_says(kind, example):
    assert len(example) == pii.shortest((kind,))
    assert [f.kind for f in ungated(example, (kind,))] == [kind]
    assert [f.kind for f in pii.find(example, (kind,))] == [kind]
    assert pii.find(example[:-1], (kind,)) == ungated(example[:-1], (kind,)) == []


def test_a_redactor_masks_short_strings_only_with_its_extra_patterns():
    redactor = Redactor(DEFAULT_KINDS, extra_patterns=[r"ab"])
    assert redactor.text("a@b.cd") == "[EMAIL]"
    assert redactor.text("xab") == "x[REDACTED]"
    assert Redactor(DEFAULT_KINDS).text("role") == "role"


def _literal_prefixes(items: list) -> list[str]:
    """Every literal start of a parsed pattern: literals, branches and small classes expanded."""
    out = [""]
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out = [p + chr(arg) for p in out]
        elif name == "BRANCH":
            out = [p + q for p in out for branch in arg[1] for q in _literal_prefixes(list(branch))]
            return out
        elif name == "IN" and all(str(o) == "LITERAL" for o, _ in arg) and len(arg) <= 8:
            out = [p + chr(c) for p in out for _, c in arg]
        else:
            return out
    return out


def test_every_alternative_of_the_secret_pattern_starts_with_a_gate_prefix():
    parsed = list(sre_parse.parse(pii._SECRET_RE.pattern))
    starts = _literal_prefixes(parsed)
    assert len(starts) >= 14 and all(starts), starts
    for start in starts:
        prefix = next((p for p in pii._SECRET_PREFIXES if start.startswith(p)), None)
        assert prefix is not None, f"{start!r} starts with none of {pii._SECRET_PREFIXES}"
        # The first group is only searched when "-" or "_" occurs: its matches must hold one.
        if prefix in pii._SECRET_PREFIXES_SEP:
            assert "-" in start or "_" in start, start
        else:
            assert prefix.isascii() and prefix in pii._SECRET_PREFIXES_CAPS


def test_unknown_kinds_are_refused_every_time_and_any_iterable_of_kinds_is_accepted():
    for _ in range(2):
        with pytest.raises(ValueError, match="unknown PII kind 'cards'"):
            pii.find("x", ("cards",))
    text = "mail a@b.co, card 4111 1111 1111 1111"
    want = pii.find(text, ("email", "credit_card"))
    assert [f.kind for f in want] == ["email", "credit_card"]
    assert pii.find(text, ["card", "email"]) == pii.find(text, (k for k in ("email", "card"))) == want
    assert pii.find(text, frozenset({"email", "card"})) == want


def test_the_gated_detector_differs_from_a_broken_gate(monkeypatch):
    # The comparison above can fail: with the digit-run gate one digit too strict, phone numbers
    # of exactly 8 digits are lost and the gated result no longer equals the ungated one.
    monkeypatch.setattr(pii, "_DIGIT_RUN_RE", re.compile(r"\d(?:[ .()\-]{0,3}\d){8}"))
    assert differences(["00123456"]) != []


def test_object_keys_are_masked_the_same_on_every_call_and_only_clean_short_keys_are_remembered():
    redactor = Redactor(DEFAULT_KINDS, extra_patterns=[r"secretname"])
    body = {"role": "user", "jane@corp.io": 1, "my secretname": 2, "k" * 100: 3}
    for _ in range(3):
        assert redactor(body) == {"role": "user", "[EMAIL]": 1, "my [REDACTED]": 2, "k" * 100: 3}
        assert redactor.body(body, "request") == {"role": "user", "[EMAIL]": 1, "my [REDACTED]": 2, "k" * 100: 3}
    # What is remembered had nothing to mask, and it is bounded in length and number.
    assert redactor._clean_keys == {"role"}
    many = {f"field_{i}": i for i in range(5000)}
    assert redactor(many) == many
    assert len(redactor._clean_keys) == 4096
    assert redactor({"call +1 415 555 2671": 0, "field_4999": 1}) == {"call [PHONE]": 0, "field_4999": 1}


def test_short_values_are_masked_the_same_on_every_call_and_only_clean_ones_are_remembered():
    redactor = Redactor(DEFAULT_KINDS, extra_patterns=[r"secretname"])
    body = {"role": "assistant", "to": "jane@corp.io", "note": "my secretname", "long": "k" * 100, "n": ["stop", 7]}
    want = {"role": "assistant", "to": "[EMAIL]", "note": "my [REDACTED]", "long": "k" * 100, "n": ["stop", 7]}
    for _ in range(3):
        assert redactor(body) == want
        assert redactor.body(body, "response") == want
    # Only values that had nothing to mask, short ones, are remembered; apart from the keys.
    assert redactor._clean_values == {"assistant", "stop"}
    assert "jane@corp.io" not in redactor._clean_values and "my secretname" not in redactor._clean_values
    many = [f"value {i}" for i in range(5000)]
    assert redactor(many) == many
    assert len(redactor._clean_values) == 4096
    # Past the bound a value is still masked, and a remembered one still comes back as it was.
    assert redactor(["call +1 415 555 2671", "value 4999", "assistant"]) == ["call [PHONE]", "value 4999", "assistant"]
