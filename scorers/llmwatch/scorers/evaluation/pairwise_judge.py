"""Pairwise model-as-judge for shadow evaluation: which of two answers to one prompt is better.

The judge sees both answers blind (labelled 1 and 2, never primary/candidate) and is asked twice,
the second time with the order swapped. A win counts only when it survives the swap; a judge that
prefers a position (says "1" both times) gives a position-inconsistent verdict, which counts as
a tie and is reported as a rate, so that position bias never reads as a quality difference.
Calls go through an `openai.AsyncOpenAI` client; every failure is an `error` verdict, kept apart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from llmwatch.core.errors import LlmwatchError
from llmwatch.scorers.stats.agreement import cohen_kappa, cohen_kappa_interval
from llmwatch.scorers.stats.paired import mcnemar_two_sided_p

DEFAULT_RUBRIC = "correctness first, then completeness and following the user's instructions; length is not a merit"
_SYSTEM = (
    "You compare two AI assistant answers to the same user request. Judge with the rubric. "
    'Reply with only a JSON object: {"winner": "1" | "2" | "tie", "reason": "<one sentence>"}.'
)
_WINNER = re.compile(r"(?i)\"?winner\"?\s*[:=]\s*\"?\s*(1|2|tie)\b")
_BARE = re.compile(r"(?i)^\s*(?:answer\s*)?(1|2|tie)\s*\.?\s*$")


class PairwiseReplyError(LlmwatchError, ValueError):
    """A judge reply that names no winner."""


def pairwise_messages(question: str, first: str, second: str, *, rubric: str | None = None) -> list[dict[str, str]]:
    user = (
        f"Rubric: {rubric or DEFAULT_RUBRIC}\n\nUser request:\n{question}\n\nAnswer 1:\n{first}\n\nAnswer 2:\n{second}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def parse_pairwise_reply(text: str) -> str:
    """ "1", "2" or "tie" from a judge reply (JSON, fenced JSON, `winner: 2`, or a bare `2`)."""
    for candidate in re.findall(r"\{.*?\}", text, re.DOTALL):
        try:
            doc = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(doc, dict) and str(doc.get("winner", "")).strip().lower() in ("1", "2", "tie"):
            return str(doc["winner"]).strip().lower()
    m = _WINNER.search(text) or _BARE.match(text)
    if m:
        return m.group(1).lower()
    raise PairwiseReplyError(f"judge reply names no winner (1, 2 or tie): {text[:120]!r}")


def combine(first_order: str, swapped: str) -> tuple[str, bool]:
    """Verdict for (primary, candidate) from the two orders: asked (primary, candidate), then (candidate, primary).

    Returns (winner, consistent) with winner in primary | candidate | tie.
    """
    if first_order == "tie" and swapped == "tie":
        return "tie", True
    if first_order == "1" and swapped == "2":
        return "primary", True
    if first_order == "2" and swapped == "1":
        return "candidate", True
    return "tie", False


@dataclass
class PairVerdict:
    pair_id: str
    candidate: str
    winner: str  # primary | candidate | tie | error
    consistent: bool
    replies: tuple[str, str] = ("", "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "pair_id": self.pair_id,
            "candidate": self.candidate,
            "winner": self.winner,
            "consistent": self.consistent,
            "replies": list(self.replies),
        }


async def judge_pair(client: Any, model: str, pair: Any, *, rubric: str | None = None) -> PairVerdict:
    """Ask twice, order swapped; a failed call or an unusable reply is an `error` verdict."""
    import openai

    question = pair.primary.prompt_text()
    a, b = pair.primary.answer_text(), pair.shadow.answer_text()
    replies = []
    for first, second in ((a, b), (b, a)):
        try:
            completion = await client.chat.completions.create(
                model=model, messages=pairwise_messages(question, first, second, rubric=rubric), temperature=0
            )
            text = (completion.choices[0].message.content or "") if completion.choices else ""
            replies.append(parse_pairwise_reply(text))
        except (openai.APIError, PairwiseReplyError) as exc:
            return PairVerdict(pair.id, pair.candidate, "error", False, (type(exc).__name__, ""))
    winner, consistent = combine(replies[0], replies[1])
    return PairVerdict(pair.id, pair.candidate, winner, consistent, (replies[0], replies[1]))


def summarize(verdicts: Sequence[PairVerdict]) -> dict[str, Any]:
    """Wins, ties, losses of the candidate, the position-inconsistency rate, and a two-sided sign test."""
    judged = [v for v in verdicts if v.winner != "error"]
    wins = sum(1 for v in judged if v.winner == "candidate")
    losses = sum(1 for v in judged if v.winner == "primary")
    ties = len(judged) - wins - losses
    inconsistent = sum(1 for v in judged if not v.consistent)
    # The sign test on the decided pairs is McNemar's exact test on the disagreements.
    p = mcnemar_two_sided_p(wins, losses)
    return {
        "pairs": len(verdicts),
        "judged": len(judged),
        "errors": len(verdicts) - len(judged),
        "candidate_wins": wins,
        "ties": ties,
        "candidate_losses": losses,
        "position_inconsistent": inconsistent,
        "position_inconsistent_rate": inconsistent / len(judged) if judged else None,
        "sign_test_p": p,
    }


# --- agreement with human verdicts ---------------------------------------------------------------

# The candidate's outcome in one pair, from the judge or from people: the rows and columns of the confusion table.
OUTCOMES = ("win", "tie", "loss")
_FROM_WINNER = {"candidate": "win", "tie": "tie", "primary": "loss"}


def human_verdicts(
    tasks_path: str, reviews_path: str, key_path: str | None = None
) -> tuple[dict[str, str], dict[str, dict[str, str]], str]:
    """People's verdicts on exported pairs (`review export --pairs`), keyed by the candidate's sample id.

    Returns (verdict per pair: win | tie | loss of the candidate, each reviewer's own verdicts, the
    candidate's name). A reviewer's verdict is `preferred`, else the answer with the higher mean
    score (as `review import`); several reviewers of one pair are summed (+1 win, -1 loss): a split
    is a tie. The key says which label was the candidate; the tasks never did.
    """
    from llmwatch.scorers.evaluation.review import (
        ReviewError,
        load_reviews,
        load_tasks_and_key,
        preference,
    )

    tasks, key, key_file = load_tasks_and_key(tasks_path, key_path)
    if len(key.versions) != 2 or key.versions[0] != "primary":
        raise ReviewError(
            f"key file {key_file} is not from `llmwatch review export --pairs` (versions {key.versions}, expected primary and a candidate)"
        )
    candidate = key.versions[1]
    reviews = load_reviews(reviews_path, tasks)
    per_reviewer: dict[str, dict[str, str]] = {}
    summed: dict[str, int] = {}
    for review in reviews:
        sides = key.tasks.get(review.task_id)
        if sides is None:
            raise ReviewError(f"{reviews_path}: task {review.task_id} is not in the key {key_file}")
        pair_id = next(e.sample_id for e in sides.values() if e.model_version != "primary")
        label = preference(review, tasks[review.task_id].criteria)
        outcome = "tie" if label == "tie" else ("loss" if sides[label].model_version == "primary" else "win")
        per_reviewer.setdefault(review.judge, {})[pair_id] = outcome
        summed[pair_id] = summed.get(pair_id, 0) + {"win": 1, "tie": 0, "loss": -1}[outcome]
    merged = {pid: "win" if s > 0 else "loss" if s < 0 else "tie" for pid, s in summed.items()}
    return merged, per_reviewer, candidate


def agreement(
    judge: dict[str, str], human: dict[str, str], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Judge versus people on the pairs both gave a verdict for (outcomes win | tie | loss of the candidate).

    Raw agreement, Cohen's kappa with a percentile bootstrap interval over pairs, and the confusion
    table (rows: the judge, columns: people).
    """
    import math

    ids = sorted(set(judge) & set(human))
    a = [judge[i] for i in ids]
    b = [human[i] for i in ids]
    confusion = {r: {c: sum(1 for x, y in zip(a, b) if x == r and y == c) for c in OUTCOMES} for r in OUTCOMES}
    kappa = cohen_kappa(a, b, OUTCOMES)
    lo, hi = cohen_kappa_interval(a, b, OUTCOMES, confidence=confidence, resamples=resamples, seed=seed)

    def clean(x: float) -> float | None:
        return None if not math.isfinite(x) else round(float(x), 4)

    return {
        "pairs": len(ids),
        "agreement": None if not ids else round(sum(1 for x, y in zip(a, b) if x == y) / len(ids), 4),
        "kappa": clean(kappa),
        "kappa_ci": [clean(lo), clean(hi)],
        "confidence": confidence,
        "confusion": confusion,
    }


def judge_outcomes(verdicts: Sequence[PairVerdict]) -> dict[str, str]:
    """The judge's verdicts as outcomes of the candidate, errors left out."""
    return {v.pair_id: _FROM_WINNER[v.winner] for v in verdicts if v.winner in _FROM_WINNER}
