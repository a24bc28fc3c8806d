"""Secret detection on the documented key formats of providers, and its false positives on real text.

The corpus (tests/data/secrets_corpus.jsonl, CC0, built by tests/data/make_secrets_corpus.py from the
formats providers document) holds keys with their prefixes and bare high-entropy secrets after secret
words ("my aws secret is ..."); its `none` lines name secrets without holding one. The five models'
AlpacaEval answers in ../shared/real-outputs are ordinary text: every secret found there is a false
positive. bench/secret_recall.py prints the same table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from secret_recall import evaluate, table  # noqa: E402

from llmwatch.scorers.pipeline import pii  # noqa: E402

SHARED = Path(__file__).resolve().parents[3] / "shared"


@pytest.fixture(scope="module")
def result():
    return evaluate(SHARED if (SHARED / "real-outputs").is_dir() else None)


def test_every_documented_format_and_bare_secrets_after_secret_words_are_masked(result):
    assert sum(result.total.values()) >= 140
    assert result.recall() >= 0.97, table(result)
    assert all(result.recall(s) >= 0.9 for s in result.total if s != "none"), table(result)


def test_sentences_that_name_secrets_without_one_come_out_unchanged(result):
    assert result.false_masks == [], table(result)


def test_ordinary_answers_almost_never_hold_a_secret_finding(result):
    if not result.real_texts:
        pytest.skip("../shared/real-outputs is not here")
    # 4,025 real answers; the one flagged today is a docker-compose `MYSQL_PASSWORD: your-password`.
    assert len(result.real_flagged) <= 0.001 * result.real_texts, table(result)


@pytest.mark.parametrize(
    "text, secret",
    [
        ("aws secret wJalrXUtnFEMI/K7MDENG/bPxRfiCY9Xq2LmN8vT", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY9Xq2LmN8vT"),
        ("The client secret: Zr8uQ1xP0sLw2Vb6TnY4kHd9 (rotate it)", "Zr8uQ1xP0sLw2Vb6TnY4kHd9"),
    ],
)
def test_a_bare_secret_is_masked_and_the_words_around_it_are_kept(text, secret):
    [finding] = pii.find(text, ("api_key",))
    assert text[finding.start : finding.end] == secret


@pytest.mark.parametrize(
    "text",
    [
        "The key file lives at /etc/ssl/private/server2024.key",
        "commit key 3f786850e387550fdab836ed7e6dc881de23001b",
        "the secret to bread is a long proof at 4 degrees for 48 hours",
        "token_type_hint is optional (RFC 7009)",
    ],
)
def test_paths_hashes_and_prose_next_to_secret_words_are_not_secrets(text):
    assert pii.find(text, ("api_key",)) == []
