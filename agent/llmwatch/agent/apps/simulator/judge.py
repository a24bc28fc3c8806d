"""The simulator's judge mode: a model judge with a known bias and noise.

With `llmwatch simulate --judge-bias B --judge-noise N`, a chat request whose system message is
llmwatch's judge prompt (llmwatch.scorers.evaluation.judge) is answered as a judge would, with a
JSON verdict: the answer's true quality on 1-5 (`true_score`, a fixed rule a person could apply),
shifted by B, plus Gaussian noise of standard deviation N, rounded and kept in 1..5
(`judge_score`). A judge whose error is known is what the calibration statistics are tested
against: its sensitivity and specificity follow from B and N, and the pass rate corrected for
them must find the true one (tests/unit/test_judge_calibration.py).
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any, Sequence

from llmwatch.scorers.evaluation.judge import SYSTEM_MARKER

REFUSAL_RX = re.compile(r"(?i)\b(?:i'm sorry|i am sorry|i can't|i cannot|unable to help)\b")
_WORD = re.compile(r"[a-z]{4,}")


def true_score(question: str, answer: str) -> int:
    """The answer's quality as the simulator's "people" see it, 1-5: a rule, not a model.

    Empty or refusing answers are 1; an answer that shares no content word with the question is 2;
    otherwise 3 to 5 by how many of the question's content words it takes up, so that a terser or
    off-topic version scores lower.
    """
    if not answer.strip() or REFUSAL_RX.search(answer):
        return 1
    asked = set(_WORD.findall(question.lower()))
    said = set(_WORD.findall(answer.lower()))
    if not asked:
        return 4
    share = len(asked & said) / len(asked)
    if share == 0:
        return 2
    return 3 if share < 0.25 else 4 if share < 0.5 else 5


def judge_score(true: int, bias: float, noise: float, rng: random.Random) -> int:
    """What a judge with this bias and noise says of an answer of quality `true`."""
    return max(1, min(5, int(round(true + bias + (rng.gauss(0.0, noise) if noise > 0 else 0.0)))))


def simulate_labels(truths: Sequence[int], bias: float, noise: float, seed: int = 0) -> list[int]:
    """A judge's scores on answers of the given true qualities (for statistical tests)."""
    rng = random.Random(seed)
    return [judge_score(t, bias, noise, rng) for t in truths]


def is_judge_prompt(messages: Any) -> bool:
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
        return False
    content = messages[0].get("content")
    return messages[0].get("role") == "system" and isinstance(content, str) and content.startswith(SYSTEM_MARKER)


def judge_reply(messages: list[dict[str, Any]], bias: float, noise: float) -> str:
    """The verdict JSON for a judge prompt; the noise is drawn from the prompt's hash (replays agree)."""
    system = str(messages[0].get("content", ""))
    user = str(messages[-1].get("content", "")) if len(messages) > 1 else ""
    question = user.split("User request:\n", 1)[-1].split("\n\n", 1)[0]
    answer = user.split("Answer to rate:\n", 1)[-1]
    true = true_score(question, answer)
    rng = random.Random(hashlib.blake2b(user.encode(), digest_size=8).digest())
    score = judge_score(true, bias, noise, rng)
    if '"verdict"' in system:
        verdict = "pass" if score >= 4 else "fail"
        return f'{{"verdict": "{verdict}", "reason": "simulated judge (true {true})"}}'
    return f'{{"score": {score}, "reason": "simulated judge (true {true})"}}'
