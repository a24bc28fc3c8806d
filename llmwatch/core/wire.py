"""The OpenAI wire format, read tolerantly: texts, finish reasons, operations, token estimates.

Chat Completions, legacy Completions and the Responses API each put the prompt, the answer and
the stop reason in a different place, and exporters from other tools add their own variants.
Every collector and scorer reads them through these helpers, so a sample means the same thing
whether it came from the proxy, an OTLP span or a user's file.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

# The route of a captured call -> the operation name used in metrics, samples and drift.
OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "text_completion",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "generate_content",
}

# Largest count of tokens taken from the wire (as llmwatch.core.records.MAX_TOKENS).
_MAX_COUNT = 2**53 - 1


def token_count(value: Any) -> int | None:
    """A token count an upstream or a span reported, or None when it is not one.

    Counts come from outside (usage blocks, span attributes): only a whole number in 0..2**53-1 is
    taken; a bool, a negative, fractional or non-finite number, 1e300 or a 400-digit string is not
    a count and is dropped here, at the boundary, rather than stored where the readers refuse it.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= _MAX_COUNT else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and 0 <= value <= _MAX_COUNT else None
    if isinstance(value, str) and 0 < len(value) <= 16 and value.isascii() and value.isdigit():
        number = int(value)
        return number if number <= _MAX_COUNT else None
    return None


class UsageDetails(NamedTuple):
    """The token kinds a usage block reports besides plain input and output."""

    cached_input: int | None  # prompt tokens read from the provider's cache
    cache_write: int | None  # prompt tokens written to it (Anthropic's cache_creation_input_tokens)
    reasoning: int | None  # output tokens spent reasoning (part of the output count)
    # Cache tokens the usage reports beside its input count rather than inside it (Anthropic's
    # own API): the capture adds them, so that input always counts every prompt token.
    uncounted_input: int


def _detail(usage: dict[str, Any], block: str, key: str) -> int | None:
    inner = usage.get(block)
    return token_count(inner.get(key)) if isinstance(inner, dict) else None


def usage_details(usage: Any) -> UsageDetails:
    """Cached, cache-write and reasoning tokens of a Chat Completions, Responses or Anthropic usage block.

    Chat Completions (and gateways that add Anthropic's keys to it, such as LiteLLM) count cache
    tokens inside `prompt_tokens`, the Responses API inside `input_tokens`; Anthropic's Messages
    API reports `cache_read_input_tokens` and `cache_creation_input_tokens` beside `input_tokens`.
    """
    if not isinstance(usage, dict):
        return UsageDetails(None, None, None, 0)
    read = token_count(usage.get("cache_read_input_tokens"))
    written = token_count(usage.get("cache_creation_input_tokens"))
    cached = _detail(usage, "prompt_tokens_details", "cached_tokens")
    if cached is None:
        cached = _detail(usage, "input_tokens_details", "cached_tokens")
    reasoning = _detail(usage, "completion_tokens_details", "reasoning_tokens")
    if reasoning is None:
        reasoning = _detail(usage, "output_tokens_details", "reasoning_tokens")
    beside = "prompt_tokens" not in usage and "input_tokens_details" not in usage and "input_tokens" in usage
    uncounted = (read or 0) + (written or 0) if beside else 0
    return UsageDetails(cached if cached is not None else read, written, reasoning, uncounted)


# Kana, CJK ideographs and Hangul: scripts written without spaces between words.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")


def approx_tokens(text: str) -> int:
    """A tokenizer-free token count, used only where the upstream reported no usage.

    BPE tokenizers give roughly one token per common word or punctuation mark (about 4
    characters of English), so words and punctuation marks are counted. CJK scripts have
    no spaces, so a whole run of them would count as one "word"; each of their characters
    is about one token instead, and is counted as one. One rule for the proxy, OTLP ingest
    and the length check, so an estimated count means the same wherever it was made.
    """
    return len(_TOKEN_RE.findall(text))


def content_to_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Multi-part content: [{"type": "text", "text": ...}, {"type": "image_url", ...}]
        texts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return ""


def extract_prompt_text(request: Any) -> str:
    """The user's side of a request: the last user message, or the prompt/input."""
    if not isinstance(request, dict):
        return request if isinstance(request, str) else ""
    messages = request.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return content_to_text(message.get("content"))
        return ""
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    inp = request.get("input")
    if isinstance(inp, str):
        return inp
    if isinstance(inp, list):
        for item in reversed(inp):
            if isinstance(item, dict) and item.get("role", "user") == "user":
                return content_to_text(item.get("content"))
            if isinstance(item, str):
                return item
    return ""


def extract_answer_text(response: Any) -> str:
    """The model's answer: first choice's message/text, or the Responses API output text."""
    if not isinstance(response, dict):
        return response if isinstance(response, str) else ""
    choices = response.get("choices")
    if isinstance(choices, list) and choices:
        first = choices[0] if isinstance(choices[0], dict) else {}
        message = first.get("message")
        if isinstance(message, dict):
            return content_to_text(message.get("content"))
        text = first.get("text")
        if isinstance(text, str):
            return text
        return ""
    if isinstance(response.get("output_text"), str):
        return response["output_text"]
    output = response.get("output")
    if isinstance(output, list):
        texts = []
        for item in output:
            if isinstance(item, dict) and item.get("type") == "message":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        texts.append(part["text"])
        return "".join(texts)
    return ""


def response_finish_reason(response: Any) -> str | None:
    """Why the model stopped: the first choice's finish_reason, or the Responses API status."""
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    status = response.get("status")
    if status == "incomplete":
        # Responses API: truncation is reported as incomplete_details.reason instead.
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return "length" if reason == "max_output_tokens" else (reason or "incomplete")
    if status == "completed":
        return "stop"
    return None
