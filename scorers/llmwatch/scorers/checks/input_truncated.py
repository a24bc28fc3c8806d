"""The `input_truncated` check: did the server read the whole prompt?

Some servers cut a prompt longer than their context window without an error: llama.cpp and
Ollama keep the last `num_ctx` tokens, vLLM's `truncate_prompt_tokens` and many gateways' "middle
out" trimming drop the rest. The answer then looks fine and is about the wrong (or half the)
question. The one trace left is the usage block: the input tokens the server reports fall well
below what the prompt holds. The check compares them with a tokenizer-free estimate of the whole
prompt (every message's text, the instructions, the tools' JSON; `llmwatch.core.wire.approx_tokens`,
about one token per word or punctuation mark) and fails when the server counted less than
`min_ratio` of it. BPE tokenizers count more tokens than words for prose, so a real count below
half the estimate is far outside their spread; dense code (where punctuation merges) is the case
to watch, hence the ratio is a parameter. Prompts shorter than `min_estimate_tokens` are skipped:
there the fixed overhead of chat templates dominates.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import Field

from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome
from llmwatch.core.wire import approx_tokens, content_to_text
from llmwatch.scorers.checks.base import CheckParams, skipped, upstream_failed

__all__ = ["InputTruncatedParams", "check_input_truncated", "whole_prompt_text"]


class InputTruncatedParams(CheckParams):
    # Fail when the server's input tokens are below this share of the local estimate.
    min_ratio: float = Field(default=0.5, gt=0, le=1)
    # Below this estimate the comparison says nothing (templates, system tokens): skipped.
    min_estimate_tokens: int = Field(default=256, ge=1)


def _message_texts(items: Any, out: list[str]) -> None:
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            out.append(content_to_text(item.get("content")))
            for call in item.get("tool_calls") or []:
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    out.append(str(call["function"].get("arguments") or ""))


def whole_prompt_text(request: Any) -> str:
    """Everything of a request the model reads as input: messages, instructions, prompt, tools."""
    if not isinstance(request, dict):
        return ""
    out: list[str] = []
    _message_texts(request.get("messages"), out)
    _message_texts(request.get("input") if isinstance(request.get("input"), list) else None, out)
    for key in ("instructions", "input", "prompt", "system"):
        value = request.get(key)
        if isinstance(value, str):
            out.append(value)
        elif key in ("prompt", "system") and isinstance(value, list):
            out.extend(v if isinstance(v, str) else content_to_text([v]) for v in value)
    tools = request.get("tools")
    if isinstance(tools, list) and tools:
        out.append(orjson.dumps(tools).decode())
    return "\n".join(t for t in out if t)


def check_input_truncated(sample: Sample, params: InputTruncatedParams) -> CheckOutcome:
    if upstream_failed(sample):
        return skipped("upstream_error", status=sample.status, error_type=sample.error_type)
    reported = sample.usage.input_tokens
    if reported is None or sample.usage.estimated:
        return skipped("no_reported_usage")  # an estimate compared with an estimate proves nothing
    estimate = approx_tokens(whole_prompt_text(sample.request))
    if estimate < params.min_estimate_tokens:
        return skipped("prompt_too_short", estimate=estimate)
    ratio = reported / estimate
    details = {"reported_input_tokens": reported, "estimated_input_tokens": estimate, "ratio": round(ratio, 4)}
    return CheckOutcome("fail" if ratio < params.min_ratio else "pass", min(1.0, ratio), details)
