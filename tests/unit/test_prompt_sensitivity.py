"""Prompt sensitivity: the mean score difference between two rephrasings of one request."""

from __future__ import annotations

import hashlib
import math
import random
from datetime import datetime, timezone

import numpy as np
import pytest

from llmwatch.core.records import Sample
from llmwatch.scorers.evaluation.matrix import ScoredSample
from llmwatch.scorers.evaluation.sensitivity import (
    lexical_key,
    prompt_sensitivity,
    sensitivity_figure,
    sensitivity_text,
)

REQUESTS = [f"How do I look after plant number {i} in a small flat" for i in range(60)]


def rephrase(text: str, j: int) -> str:
    """Surface rewordings of one request: case, punctuation, word order."""
    words = text.split()
    return [
        text + "?",
        text.lower(),
        text.upper() + "!",
        " ".join(words[3:] + words[:3]) + ".",
    ][j]


_ids = iter(range(10**9))


def row(version: str, text: str, score: float, route: str = "/v1/chat/completions") -> ScoredSample:
    sample = Sample.model_construct(
        id=f"s{next(_ids)}",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        route=route,
        operation="chat",
        request={"messages": [{"role": "user", "content": text}]},
        response=None,
        conversation_id=None,
        turn=1,
    )
    return ScoredSample(sample, "general", version, score, score >= 0.5)


def traffic(version: str, phrasing_effect: float, rng: random.Random, phrasings: int = 3) -> list[ScoredSample]:
    """Each request has its own level; a sensitive version's score moves with the phrasing."""
    rows = []
    for text in REQUESTS:
        level = rng.uniform(0.2, 0.9)
        for j in range(phrasings):
            shift = rng.choice([-1.0, 1.0]) * phrasing_effect
            score = min(1.0, max(0.0, level + shift + rng.gauss(0, 0.01)))
            rows.append(row(version, rephrase(text, j), score))
    return rows


def by_version(rows: list[ScoredSample], **kw: object) -> dict:
    return {d.model_version: d for d in prompt_sensitivity(rows, **kw)}  # type: ignore[arg-type]


def test_a_robust_version_is_near_zero_and_a_phrasing_sensitive_one_is_high() -> None:
    rng = random.Random(3)
    result = by_version(traffic("A", 0.0, rng) + traffic("B", 0.3, rng))
    a, b = result["A"], result["B"]
    assert a.clusters == b.clusters == len(REQUESTS)  # case, punctuation, word order: one cluster per request
    assert a.phrasings == 3 * len(REQUESTS)
    assert a.sensitivity is not None and b.sensitivity is not None and a.ci and b.ci
    assert a.sensitivity < 0.05
    assert b.sensitivity > 0.2  # half the pairs of rephrasings differ by 0.6 (less where clipped at 0 or 1)
    assert a.ci[1] < b.ci[0]
    # Requests differ from each other in both; only B's rephrasings differ as much as requests do.
    assert a.between_spread is not None and a.between_spread > 0.15
    assert a.within_share is not None and b.within_share is not None and a.within_share < 0.05 < 0.5 < b.within_share
    assert a.verdict == b.verdict == "measured"


def test_re_asks_of_one_phrasing_are_collapsed_not_counted_as_rephrasings() -> None:
    # Each request asked in one phrasing only, many times, with scores all over the place: the
    # answers are unstable (the sampling figure's business), but nothing was rephrased.
    rng = random.Random(5)
    rows = [row("A", text + "?", rng.random()) for text in REQUESTS for _ in range(5)]
    (result,) = prompt_sensitivity(rows)
    assert result.clusters == 0 and result.sensitivity is None and result.verdict == "insufficient"
    # Re-asks average down inside their phrasing: noisy repeats of robust phrasings stay low.
    rows = []
    for text in REQUESTS:
        level = rng.uniform(0.1, 0.9)
        for j in range(2):
            rows += [row("A", rephrase(text, j), level + rng.choice([-0.05, 0.05])) for _ in range(20)]
    (result,) = prompt_sensitivity(rows)
    assert result.phrasings == 2 * len(REQUESTS) and result.samples == 40 * len(REQUESTS)
    assert result.sensitivity is not None and result.sensitivity < 0.05


def test_the_interval_covers_the_true_spread_in_most_seeded_simulations() -> None:
    # Phrasings of a request differ by N(0, 0.2^2) each: two differ by N(0, 2 * 0.04), whose mean
    # absolute value is sqrt(0.08) * sqrt(2 / pi).
    truth = math.sqrt(0.08) * math.sqrt(2 / math.pi)
    covered = 0
    for trial in range(40):
        rng = np.random.default_rng(trial)
        groups = [list(rng.normal(0.0, 0.2) + rng.normal(0.0, 0.2, size=3)) for _ in range(60)]
        figure, ci, _, _ = sensitivity_figure(groups, draws=400, seed=trial)
        assert figure is not None and ci is not None and ci[0] <= figure <= ci[1]
        covered += ci[0] <= truth <= ci[1]
    assert covered >= 34  # 95% nominal; at least 85% of 40 seeded trials


def test_the_figure_and_its_interval_are_deterministic() -> None:
    rows = traffic("B", 0.2, random.Random(9))
    first, second = prompt_sensitivity(rows), prompt_sensitivity(list(reversed(rows)))
    assert first == second


def test_identical_scores_everywhere_are_robust_not_undefined() -> None:
    rows = [row("A", rephrase(text, j), 1.0) for text in REQUESTS[:10] for j in range(3)]
    (result,) = prompt_sensitivity(rows)
    assert result.sensitivity == 0.0 and result.ci == (0.0, 0.0)


def test_too_few_clusters_are_insufficient_and_said_so() -> None:
    rows = [row("A", rephrase(text, j), 0.5 + 0.1 * j) for text in REQUESTS[:2] for j in range(2)]
    (result,) = prompt_sensitivity(rows)
    assert result.verdict == "insufficient" and result.sensitivity is None and result.clusters == 2
    text = "\n".join(sensitivity_text([result]))
    # The line says why, and what it would take: an operator reading "insufficient" needs both.
    assert "insufficient" in text and "too few to measure: 3 or more requests" in text


def test_the_lexical_key_ignores_case_punctuation_and_order_but_not_words() -> None:
    assert lexical_key("How long to roast a chicken?") == lexical_key("a chicken: HOW LONG to roast")
    assert lexical_key("How long to roast a chicken?") != lexical_key("How long to roast a duck?")


def test_with_embeddings_rephrasings_that_share_no_token_set_are_one_cluster() -> None:
    # A stand-in embedding: synonyms map to one vector, so "fix" and "repair" phrasings are close.
    def embed(texts: list[str]) -> np.ndarray:
        out = []
        for t in texts:
            base = t.lower().replace("repair", "fix").replace("?", "").replace("user: ", "")
            seed = int(hashlib.sha256(base.strip().encode()).hexdigest()[:8], 16)
            out.append(np.random.default_rng(seed).normal(size=16))
        return np.asarray(out)

    rows = []
    for i in range(5):
        rows += [row("A", f"fix bike {i}?", 0.9), row("A", f"repair bike {i}", 0.1)]
    (lexical,) = prompt_sensitivity(rows)
    assert lexical.clusters == 0  # different words: the token-set fallback cannot join them
    (semantic,) = prompt_sensitivity(rows, embed=embed)
    assert semantic.clusters == 5 and semantic.sensitivity is not None and abs(semantic.sensitivity - 0.8) < 1e-9


def test_the_same_text_on_another_route_is_another_request_not_a_re_ask() -> None:
    rows = []
    for text in REQUESTS[:10]:
        rows += [row("A", text + "?", 1.0), row("A", text.lower(), 1.0)]
        rows += [row("A", text + "?", 0.0, "/v1/completions"), row("A", text.lower(), 0.0, "/v1/completions")]
    (result,) = prompt_sensitivity(rows)
    # 20 clusters (10 per route), each robust: pooled across routes they would look maximally sensitive.
    assert result.clusters == 20 and result.samples == 40
    assert result.sensitivity == 0.0


def _row_by_row_leaders(X: np.ndarray, threshold: float) -> list[int]:
    """The leader clustering's definition, one row at a time: each row joins its most similar
    leader so far (the earlier one on a tie) when the cosine reaches the threshold, else leads."""
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    leaders: list[int] = []
    out = []
    for i in range(len(X)):
        if leaders:
            cos = X[leaders] @ X[i]
            best = int(cos.argmax())
            if cos[best] >= threshold:
                out.append(best)
                continue
        leaders.append(i)
        out.append(len(leaders) - 1)
    return out


def test_embedding_clusters_compare_a_block_of_phrasings_at_once_with_the_row_by_row_result(monkeypatch) -> None:
    from llmwatch.scorers.drift import prompt_space
    from llmwatch.scorers.evaluation import sensitivity

    # 300 requests, each asked in up to 4 phrasings (small noise around its direction), shuffled:
    # leaders are made in every block, and later blocks join earlier blocks' leaders.
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(300, 32))
    members = [c for c in range(300) for _ in range(int(rng.integers(1, 5)))]
    rng.shuffle(members)
    X = np.asarray([centres[c] + rng.normal(scale=0.08, size=32) for c in members])
    X[7] = X[3]  # an exact repeat joins its own leader
    products = []
    real = prompt_space.near_duplicates

    def counted(current, baseline, threshold, **kw):
        products.append(len(current))
        return real(current, baseline, threshold, **kw)

    monkeypatch.setattr(prompt_space, "near_duplicates", counted)
    got, unled = sensitivity._clusters([str(i) for i in range(len(X))], lambda texts: X[[int(t) for t in texts]], 0.9)

    assert got == _row_by_row_leaders(X, 0.9) and unled == 0
    assert len(set(got)) == 300, "each request's phrasings are one cluster"
    # Row by row this made one product per phrasing (len(X) - 1 = hundreds); in blocks of 256, a few.
    assert len(products) <= math.ceil(len(X) / 256) and len(X) > 700

    # Embedded 100 texts a call, the leaders held in chunks of 64: the same clusters.
    monkeypatch.setattr(sensitivity, "_LEADER_CHUNK", 64)
    in_blocks, _ = sensitivity._clusters(
        [str(i) for i in range(len(X))], lambda texts: X[[int(t) for t in texts]], 0.9, embed_block=100
    )
    assert in_blocks == got


def test_the_html_figure_names_the_measure_it_plots_the_mean_difference_not_the_variance_share() -> None:
    pytest.importorskip("matplotlib")
    from types import SimpleNamespace

    from llmwatch.scorers.evaluation.sensitivity import PromptSensitivity
    from llmwatch.scorers.reports.stability_html import render_prompt_sensitivity

    class Doc:
        def __init__(self) -> None:
            self.figures: list[tuple[str, list[float]]] = []

        def heading(self, *a, **k): ...
        def paragraph(self, *a, **k): ...
        def open_figures(self): ...
        def close_figures(self): ...
        def table(self, *a, **k): ...

        def figure(self, fig, caption=""):
            ax = fig.axes[0]
            xs = [float(line.get_xdata()[0]) for line in ax.get_lines() if len(line.get_xdata()) == 1]
            self.figures.append((ax.get_xlabel(), xs))

    figure = PromptSensitivity("A", "measured", 0.3, (0.2, 0.4), 5, 12, 40, within_share=0.9, between_spread=0.5)
    doc = Doc()
    render_prompt_sensitivity(doc, SimpleNamespace(prompt_sensitivity=[figure]), ["#000"])
    ((label, xs),) = doc.figures
    assert xs[0] == 0.3, "the figure plots the sensitivity (its marker; then the caps at the interval)"
    assert "mean score difference between two rephrasings" in label and "variance" not in label
