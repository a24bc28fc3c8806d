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

from scipy import stats as _sps

from llmwatch.core.errors import LlmwatchError

DEFAULT_RUBRIC = "correctness first, then completeness and following the user's instructions; length is not a merit"
_SYSTEM = (
    "You compare two AI assistant answers to the same user request. Judge with the rubric. "
    "Reply with only a JSON object: {\"winner\": \"1\" | \"2\" | \"tie\", \"reason\": \"<one sentence>\"}."
)
_WINNER = re.compile(r"(?i)\"?winner\"?\s*[:=]\s*\"?\s*(1|2|tie)\b")
_BARE = re.compile(r"(?i)^\s*(?:answer\s*)?(1|2|tie)\s*\.?\s*$")


class PairwiseReplyError(LlmwatchError, ValueError):
    """A judge reply that names no winner."""


def pairwise_messages(question: str, first: str, second: str, *, rubric: str | None = None) -> list[dict[str, str]]:
    user = f"Rubric: {rubric or DEFAULT_RUBRIC}\n\nUser request:\n{question}\n\nAnswer 1:\n{first}\n\nAnswer 2:\n{second}"
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def parse_pairwise_reply(text: str) -> str:
    """"1", "2" or "tie" from a judge reply (JSON, fenced JSON, `winner: 2`, or a bare `2`)."""
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
        return {"pair_id": self.pair_id, "candidate": self.candidate, "winner": self.winner, "consistent": self.consistent, "replies": list(self.replies)}


async def judge_pair(client: Any, model: str, pair: Any, *, rubric: str | None = None) -> PairVerdict:
    """Ask twice, order swapped; a failed call or an unusable reply is an `error` verdict."""
    import openai

    question = pair.primary.prompt_text()
    a, b = pair.primary.answer_text(), pair.shadow.answer_text()
    replies = []
    for first, second in ((a, b), (b, a)):
        try:
            completion = await client.chat.completions.create(model=model, messages=pairwise_messages(question, first, second, rubric=rubric), temperature=0)
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
    decided = wins + losses
    p = float(_sps.binomtest(wins, decided, 0.5).pvalue) if decided else 1.0
    return {
        "pairs": len(verdicts), "judged": len(judged), "errors": len(verdicts) - len(judged),
        "candidate_wins": wins, "ties": ties, "candidate_losses": losses,
        "position_inconsistent": inconsistent, "position_inconsistent_rate": inconsistent / len(judged) if judged else None,
        "sign_test_p": p,
    }
