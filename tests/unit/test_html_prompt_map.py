"""The drift report's prompt map draws both sides in one vector space, or says why it cannot.

A baseline frozen by the sidecar's scorer holds hashed-words prompt vectors; `llmwatch drift` with
embeddings on gives the window MiniLM ones. The map drew the few rows both shared: on the demo,
145 baseline prompts against 5 of the window's 144, a picture of inputs that had collapsed while
the report said they were stable.
"""

from __future__ import annotations

import numpy as np

from llmwatch.scorers.drift.rows import HASHED_WORDS, MINILM, Row, pack_vector
from llmwatch.scorers.reports.html import prompt_map, prompt_map_gap


def rows(n: int, space: str, seed: int) -> list[Row]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        v = rng.normal(size=16)
        out.append(Row(prompt_vec=pack_vector(v / np.linalg.norm(v)), prompt_space=space))
    return out


def test_a_window_whose_prompts_are_mostly_of_another_space_is_not_drawn_and_the_report_says_why():
    base = rows(145, HASHED_WORDS, 1)
    cur = rows(139, MINILM, 2) + rows(5, HASHED_WORDS, 3)
    assert prompt_map(base, cur) is None
    gap = prompt_map_gap(base, cur)
    assert gap is not None
    assert "145 hashed words" in gap and "139 MiniLM embeddings, 5 hashed words" in gap
    assert "llmwatch baseline freeze" in gap


def test_two_sides_in_one_space_are_drawn_whole():
    base, cur = rows(60, HASHED_WORDS, 1), rows(50, HASHED_WORDS, 2) + rows(3, MINILM, 3)
    b, c, _ = prompt_map(base, cur)
    assert (len(b), len(c)) == (60, 50)
    assert prompt_map_gap(base, cur) is None
