"""The pointwise model-as-judge: rubrics, the fixed judge prompt, reply parsing, verdicts as scores.

One evaluation is one call on one criterion of one sample: the judge reads the user's request,
the answer and, where the sample carries one, a reference answer, and replies with a JSON object,
`{"score": 1-5, "reason": "..."}` on a 1-5 criterion or `{"verdict": "pass" | "fail", "reason":
"..."}` on a pass/fail one. The prompt text is fixed and versioned (`PROMPT_VERSION`): every
verdict records the version it was asked with, so that verdicts asked differently are never
pooled by accident (a calibration holds for one prompt version).

A verdict becomes a `Score` of check `judge:<criterion>` (kind `judge`): value (score - 1) / 4 on
a 1-5 criterion, 1 or 0 on pass/fail; it passes at `pass_at` or above. Its details keep the raw
score, the reason (cut to 200 characters), the judge model, the prompt version, and whether the
judge was calibrated against people when it judged (`calibrated`; an uncalibrated judge's verdicts
are stored and shown but drive no alert and no drift verdict: `counts_for_verdicts`).

The live component (sampling, caps, the child process) is llmwatch.collectors.judge; calibration
against human labels is llmwatch.scorers.evaluation.judge_calibration.
"""

from __future__ import annotations

import json
import re
from fnmatch import fnmatchcase
from typing import Any, Literal, Sequence

from pydantic import Field, field_validator

from llmwatch.core.config import Section
from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome, Score
from llmwatch.core.wire import approx_tokens

__all__ = [
    "PROMPT_VERSION",
    "JudgeCriterion",
    "JudgeRubric",
    "DEFAULT_RUBRICS",
    "JudgeReplyError",
    "judge_messages",
    "parse_reply",
    "outcome",
    "rubric_for",
    "reference_answer",
    "check_name",
    "counts_for_verdicts",
    "prompt_tokens",
]

# Changing the wording below changes what the judge measures: bump the version with it.
PROMPT_VERSION = "llmwatch-pointwise/1"

Scale = Literal["1-5", "pass_fail"]
NAME = r"^[A-Za-z0-9_.-]+$"


class JudgeCriterion(Section):
    """One thing the judge rates: a name (the check is `judge:<name>`), what it means, its scale."""

    name: str = Field(min_length=1, max_length=48, pattern=NAME)
    description: str = Field(min_length=1, max_length=2000)
    scale: Scale = "1-5"
    # On a 1-5 criterion, the lowest score that passes (also where people's 1-5 ratings are cut
    # into pass/fail for the judge's sensitivity and specificity).
    pass_at: int = Field(4, ge=2, le=5)


class JudgeRubric(Section):
    """The criteria for the samples it matches: by task category and/or route (globs; empty: any)."""

    categories: list[str] = Field(default_factory=list)
    routes: list[str] = Field(default_factory=list)
    criteria: list[JudgeCriterion] = Field(min_length=1, max_length=8)

    @field_validator("criteria")
    @classmethod
    def _unique(cls, criteria: list[JudgeCriterion]) -> list[JudgeCriterion]:
        names = [c.name for c in criteria]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"criterion name {name!r} is used twice in one rubric")
        return criteria


DEFAULT_RUBRICS: list[dict[str, Any]] = [
    {
        "criteria": [
            {
                "name": "helpfulness",
                "description": "The answer addresses the user's request correctly and completely, "
                "without inventing facts; length is not a merit.",
                "scale": "1-5",
            }
        ]
    }
]

_SYSTEM = (
    "You are an evaluator. You rate one AI assistant answer on one criterion. "
    "Judge only the criterion; do not reward length. "
)
_REPLY_SCALE = (
    'Reply with only a JSON object: {"score": <integer 1 to 5>, "reason": "<one short sentence>"}. '
    "1 is very poor, 5 is excellent."
)
_REPLY_BINARY = 'Reply with only a JSON object: {"verdict": "pass" or "fail", "reason": "<one short sentence>"}.'
# The marker the simulator's judge mode recognises a judge prompt by.
SYSTEM_MARKER = "You are an evaluator."


def check_name(criterion: str) -> str:
    return f"judge:{criterion}"


def reference_answer(sample: Sample) -> str | None:
    """A reference answer the sample carries (`metadata.reference`, as suites and exports set it)."""
    meta = sample.metadata if isinstance(sample.metadata, dict) else {}
    for key in ("reference", "reference_answer"):
        value = meta.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def judge_messages(
    question: str, answer: str, criterion: JudgeCriterion, reference: str | None
) -> list[dict[str, str]]:
    """The fixed judge prompt (PROMPT_VERSION) for one criterion of one answer."""
    system = _SYSTEM + (_REPLY_SCALE if criterion.scale == "1-5" else _REPLY_BINARY)
    parts = [f"Criterion ({criterion.name}): {criterion.description}", f"User request:\n{question}"]
    if reference is not None:
        parts.append(f"Reference answer (a correct answer, for comparison):\n{reference}")
    parts.append(f"Answer to rate:\n{answer}")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


ResponseFormat = Literal["none", "json_object", "json_schema", "json_object_with_schema"]


def verdict_schema(scale: Scale) -> dict[str, Any]:
    """The JSON schema of a reply on this scale (what a server can constrain its output to)."""
    field: dict[str, Any] = (
        {"score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}
        if scale == "1-5"
        else {"verdict": {"type": "string", "enum": ["pass", "fail"]}}
    )
    return {
        "type": "object",
        "properties": {**field, "reason": {"type": "string"}},
        "required": [*field, "reason"],
        "additionalProperties": False,
    }


def response_format(kind: ResponseFormat, scale: Scale) -> dict[str, Any] | None:
    """The request's `response_format` for the judge call, or None to send none.

    `json_object`: JSON mode (OpenAI and most servers); `json_schema`: OpenAI's structured outputs;
    `json_object_with_schema`: llama.cpp's and vLLM's JSON mode constrained to a schema, which makes
    even a small model's reply parseable.
    """
    if kind == "none":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    schema = verdict_schema(scale)
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema, "strict": True}}
    return {"type": "json_object", "schema": schema}


def prompt_tokens(messages: Sequence[dict[str, str]]) -> int:
    """The prompt's size in tokens, estimated without a tokenizer (what the input-token cap reads)."""
    return sum(approx_tokens(m["content"]) + 4 for m in messages)


class JudgeReplyError(ValueError):
    """A judge reply that carries no usable verdict."""


_SCORE = re.compile(r"(?i)\"?score\"?\s*[:=]\s*\"?\s*([1-5])\b")
_VERDICT = re.compile(r"(?i)\"?verdict\"?\s*[:=]\s*\"?\s*(pass|fail)\b")
_BARE_SCORE = re.compile(r"^\s*([1-5])\s*(?:/\s*5)?\s*\.?\s*$")
_BARE_VERDICT = re.compile(r"(?i)^\s*(pass|fail)\s*\.?\s*$")


def parse_reply(text: str, scale: Scale) -> tuple[int, str]:
    """(score on 1..5, reason) from a reply; pass/fail verdicts come back as 5 or 1.

    Reads a JSON object (also fenced or inside prose), then `score: 4` / `verdict: pass`, then a
    bare `4` or `pass`. Anything else raises JudgeReplyError: an unusable reply is a failure,
    never a guess.
    """
    for candidate in re.findall(r"\{.*?\}", text, re.DOTALL):
        try:
            doc = json.loads(candidate)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        reason = str(doc.get("reason", ""))[:200]
        if scale == "1-5":
            value = doc.get("score")
            # ASCII only: "²" passes str.isdigit() and then int() raises a bare ValueError.
            if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
                value = int(value.strip())
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5:
                return value, reason
        else:
            verdict = str(doc.get("verdict", "")).strip().lower()
            if verdict in ("pass", "fail"):
                return (5 if verdict == "pass" else 1), reason
    if scale == "1-5":
        m = _SCORE.search(text) or _BARE_SCORE.match(text)
        if m:
            return int(m.group(1)), ""
    else:
        m = _VERDICT.search(text) or _BARE_VERDICT.match(text)
        if m:
            return (5 if m.group(1).lower() == "pass" else 1), ""
    raise JudgeReplyError(f"judge reply holds no {'score 1-5' if scale == '1-5' else 'pass/fail verdict'}")


def passes(score: int, criterion: JudgeCriterion) -> bool:
    return score >= (criterion.pass_at if criterion.scale == "1-5" else 5)


def outcome(score: int, reason: str, criterion: JudgeCriterion, *, judge_model: str, calibrated: bool) -> CheckOutcome:
    """A verdict as a check outcome: value on 0..1, pass at `pass_at`, and what a reader needs to trust it."""
    ok = passes(score, criterion)
    value = (score - 1) / 4.0 if criterion.scale == "1-5" else (1.0 if ok else 0.0)
    return CheckOutcome(
        "pass" if ok else "fail",
        value,
        {
            "score": score,
            "scale": criterion.scale,
            "pass_at": criterion.pass_at if criterion.scale == "1-5" else 5,
            "reason": reason,
            "judge_model": judge_model,
            "prompt_version": PROMPT_VERSION,
            "calibrated": calibrated,
        },
    )


def rubric_for(rubrics: Sequence[JudgeRubric], category: str, route: str) -> JudgeRubric | None:
    """The first rubric whose category and route globs both hold (an empty list holds for anything)."""
    for rubric in rubrics:
        if rubric.categories and not any(fnmatchcase(category, g) for g in rubric.categories):
            continue
        if rubric.routes and not any(fnmatchcase(route, g) for g in rubric.routes):
            continue
        return rubric
    return None


def counts_for_verdicts(score: Score) -> bool:
    """False for the verdict of a judge that was not calibrated against people when it judged.

    Such verdicts are stored and shown, but no alert and no drift verdict may rest on them.
    """
    return not (score.kind == "judge" and isinstance(score.details, dict) and score.details.get("calibrated") is False)
