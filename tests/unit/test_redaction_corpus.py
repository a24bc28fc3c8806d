"""Redaction on a labelled corpus: every kind is found, ordinary numbers and ids are left alone.

The corpus (tests/data/redaction_corpus.jsonl, synthetic, CC0) has a few hundred strings, each
labelled with the kind that must be masked or `none`. bench/redaction.py prints the same table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from redaction import evaluate, format_table, load  # noqa: E402

from llmwatch.scorers.pipeline import pii  # noqa: E402

RECALL_FLOOR = 0.95
FALSE_MASK_CEILING = 0.05


@pytest.fixture(scope="module")
def table():
    return evaluate(load())


def test_the_corpus_has_a_few_hundred_strings_of_every_kind(table):
    assert sum(table.total.values()) >= 300
    assert set(table.total) == set(pii.KINDS) | {"none"}
    assert all(n >= 20 for n in table.total.values()), table.total


@pytest.mark.parametrize("kind", pii.KINDS)
def test_recall_per_kind_is_at_least_the_floor(table, kind):
    missed = [text for k, text, _ in table.misses if k == kind]
    assert table.recall(kind) >= RECALL_FLOOR, (
        f"{kind}: recall {table.recall(kind):.3f}; missed {missed}\n{format_table(table)}"
    )


def test_false_mask_rate_is_at_most_the_ceiling(table):
    masked = [(text, out) for k, text, out in table.misses if k == "none"]
    assert table.false_mask_rate <= FALSE_MASK_CEILING, f"falsely masked: {masked}"
