"""Sample records built by hand for rule, redaction and scoring tests."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from llmwatch.core.records import Sample, Usage
from llmwatch.core.scores import Score

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
_UNSET: Any = object()


def chat_sample(
    answer: Any = "The capital of France is Paris.",
    *,
    prompt: str = "What is the capital of France? Please answer in one sentence.",
    finish_reason: str | None = "stop",
    response: Any = _UNSET,
    **fields: Any,
) -> Sample:
    """A sample shaped like what the sidecar captures for POST /v1/chat/completions."""
    request = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": prompt},
        ],
        "temperature": 0.2,
    }
    if response is _UNSET:
        response = {
            "id": "chatcmpl-9Qx1",
            "object": "chat.completion",
            "created": 1714564800,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40},
            "system_fingerprint": "fp_2f406b9113",
        }
    values: dict[str, Any] = {
        "id": "smp-0001",
        "timestamp": NOW,
        "model": "gpt-4o-mini",
        "model_version": "gpt-4o-mini-2024-07-18",
        "status": 200,
        "latency_ms": 840.0,
        "finish_reason": finish_reason,
        "usage": {"input_tokens": 31, "output_tokens": 9},
        "request": request,
        "response": response,
    }
    values.update(fields)
    return Sample(**values)


def refusal_scored(
    sid: str, at: datetime, prompt: str, output_tokens: int, version: str, passed: bool
) -> tuple[Sample, Score]:
    """A sample of model "m" that answered `prompt` in `output_tokens` tokens, and its refusal check's
    score (pass or fail): the least a drift summary reads of a call."""
    sample = Sample(
        id=sid,
        timestamp=at,
        model="m",
        model_version=version,
        status=200,
        latency_ms=0.0,
        usage=Usage(input_tokens=20, output_tokens=output_tokens),
        finish_reason="stop",
        request={"model": "m", "messages": [{"role": "user", "content": prompt}]},
        response={},
    )
    score = Score(
        sample_id=sid,
        check="refusal",
        kind="refusal",
        result="pass" if passed else "fail",
        value=float(passed),
        model="m",
        model_version=version,
        route=sample.route,
        sample_timestamp=sample.timestamp,
    )
    return sample, score


def rule_score(sample_id: str, **fields: Any) -> Score:
    """A passing rule check's score of model "m", version "A", as the Kafka workers read it off the
    scores topic; `fields` (check, details...) replace the defaults."""
    values: dict[str, Any] = {
        "sample_id": sample_id,
        "check": "min_length",
        "kind": "rule",
        "result": "pass",
        "value": 1.0,
        "model": "m",
        "model_version": "A",
        "sample_timestamp": datetime(2026, 1, 1, tzinfo=timezone.utc),
    }
    values.update(fields)
    return Score(**values)


def write_jsonl(path: Path, records: Iterable[Any]) -> Path:
    """Records (samples, scores, pairs) as a JSON Lines file, as llmwatch writes them; its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(r.to_json() + b"\n" for r in records))
    return path
