"""Model-as-judge: ask an OpenAI-compatible endpoint to grade an answer 1-5 against a rubric.

Judges do not reliably return clean JSON (fences, a sentence before the object, `"score": "4"`,
`Score: 4/5`), so the reply is parsed leniently but never guessed: a reply with no score in
1..5 is an `error` result with the raw reply in its details, as is a failed call. Errors are
kept apart from verdicts so that a flaky judge never reads as a worse model.

The 1-5 score maps to a check value (score - 1) / 4 in [0, 1]; the verdict is `pass` when the
score is at least `min_score` (4 by default).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import structlog

from llmwatch.core.errors import LlmwatchError
from llmwatch.core.scores import CheckOutcome
from llmwatch.scorers.checks.base import error_outcome

log = structlog.get_logger(__name__)

__all__ = ["DEFAULT_RUBRIC", "JudgeReplyError", "judge_messages", "parse_judge_reply", "judge_answer"]

DEFAULT_RUBRIC = (
    "5: fully correct, complete and follows every instruction; 4: correct with minor omissions; "
    "3: partly correct or partly off-task; 2: mostly wrong, evasive or a needless refusal; "
    "1: wrong, harmful, invented facts or empty."
)
_SYSTEM = (
    "You are a strict evaluator of AI assistant answers. Grade the answer to the user's request "
    'with the rubric. Reply with only a JSON object: {"score": <integer 1-5>, "reason": "<one sentence>"}.'
)
_SCORE_KEYS = ("score", "rating", "grade", "overall")
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.DOTALL)
_LABELLED = re.compile(r"(?i)\b(?:score|rating|grade)\b[\"']?\s*[:=]\s*[\"']?(\d+(?:\.\d+)?)\s*(?:/\s*(\d+))?")
_BARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*(\d+))?\s*\.?\s*$")


class JudgeReplyError(LlmwatchError, ValueError):
    """The judge answered, but not with a usable score."""


def judge_messages(
    question: str, answer: str, *, rubric: str | None = None, reference: str | None = None
) -> list[dict[str, str]]:
    parts = [f"Rubric:\n{rubric or DEFAULT_RUBRIC}", f"User request:\n{question}"]
    if reference:
        parts.append(f"Reference answer (what a good answer contains):\n{reference}")
    parts.append(f"Answer to grade:\n{answer}")
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _BARE.match(value)
        if m:
            return _scaled(m.group(1), m.group(2))
    return None


def _scaled(num: str, out_of: str | None) -> float:
    value = float(num)
    # "8/10" is a 1-5 score in another scale; "4/5" is already one.
    if out_of and float(out_of) not in (0.0, 5.0):
        value = 1.0 + (value / float(out_of)) * 4.0
    return value


def _from_object(doc: Any) -> tuple[float, str] | None:
    if not isinstance(doc, dict):
        return None
    lowered = {str(k).lower(): v for k, v in doc.items()}
    for key in _SCORE_KEYS:
        if key in lowered:
            value = _number(lowered[key])
            if value is not None:
                reason = lowered.get("reason") or lowered.get("explanation") or lowered.get("rationale") or ""
                return value, str(reason)[:500]
    return None


def _json_objects(text: str) -> list[Any]:
    """Every parseable {...} in the text, outermost first: judges like to wrap the object in prose."""
    out = []
    starts = [i for i, ch in enumerate(text) if ch == "{"][:50]
    ends = [i for i, ch in enumerate(text) if ch == "}"]
    for i in starts:
        for j in reversed(ends):
            if j <= i:
                break
            try:
                out.append(orjson.loads(text[i : j + 1]))
                break
            except orjson.JSONDecodeError:
                continue
    return out


def parse_judge_reply(text: str) -> tuple[float, str]:
    """(score in 1..5, reason) from a judge's reply; JudgeReplyError when there is no usable score."""
    if not text or not text.strip():
        raise JudgeReplyError("the judge's reply is empty")
    body = text.strip()[:20_000]
    candidates: list[Any] = []
    try:
        candidates.append(orjson.loads(body))
    except orjson.JSONDecodeError:
        pass
    for fenced in _FENCE.findall(body):
        try:
            candidates.append(orjson.loads(fenced.strip()))
        except orjson.JSONDecodeError:
            candidates.extend(_json_objects(fenced))
    candidates.extend(_json_objects(body))
    found: tuple[float, str] | None = None
    for doc in candidates:
        found = _from_object(doc)
        if found is not None:
            break
    if found is None:
        m = _LABELLED.search(body) or _BARE.match(body)
        if m:
            found = (_scaled(m.group(1), m.group(2)), "")
    if found is None:
        raise JudgeReplyError('no score in the judge\'s reply (expected JSON like {"score": 4, "reason": "..."})')
    score, reason = found
    if not 1.0 <= score <= 5.0:
        raise JudgeReplyError(f"the judge's score {score:g} is outside 1..5")
    return score, reason


async def judge_answer(
    client: Any,
    model: str,
    question: str,
    answer: str,
    *,
    rubric: str | None = None,
    reference: str | None = None,
    min_score: float = 4.0,
) -> CheckOutcome:
    """Grade one answer with an `openai.AsyncOpenAI` client; every failure is an `error` outcome."""
    import openai

    try:
        completion = await client.chat.completions.create(
            model=model, messages=judge_messages(question, answer, rubric=rubric, reference=reference), temperature=0
        )
        reply = (completion.choices[0].message.content or "") if completion.choices else ""
    except openai.APIError as exc:
        # The judge's words, without the key it may quote back ("Incorrect API key provided: ...").
        key = getattr(client, "api_key", None)
        message = str(exc).replace(key, "***") if isinstance(key, str) and key else str(exc)
        if isinstance(exc, openai.APIStatusError):
            return error_outcome(f"judge answered HTTP {exc.status_code}", message=message[:200], judge_model=model)
        return error_outcome(f"judge call failed: {type(exc).__name__}", message=message[:200], judge_model=model)
    try:
        score, reason = parse_judge_reply(reply)
    except JudgeReplyError as exc:
        log.debug("judge_reply_unusable", error=str(exc), reply=reply[:200])
        return error_outcome(str(exc), reply=reply[:300], judge_model=model)
    value = (score - 1.0) / 4.0
    details = {"score": score, "reason": reason, "judge_model": model, "min_score": min_score}
    return CheckOutcome("pass" if score >= min_score else "fail", value, details)
