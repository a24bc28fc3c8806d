"""An OTLP/HTTP trace receiver: LLM spans from instrumented apps become samples.

Apps that already emit OpenTelemetry traces can feed llmwatch without routing traffic through
the proxy. `POST /v1/traces` takes an ExportTraceServiceRequest as protobuf or JSON (optionally
gzipped), per the OTLP/HTTP spec. Each LLM span is turned into a `Sample`, passes the same
sampling decision as proxied calls, and is queued to the agent's pipeline, which redacts it and
writes it to the same sinks (files, Kafka, scorer). Spans that describe no LLM call (HTTP, DB,
agent or tool spans) are accepted and ignored.

Three instrumentation styles are understood:

* GenAI semantic conventions: `gen_ai.*` attributes, content in `gen_ai.input.messages` /
  `gen_ai.output.messages` (attributes or the `gen_ai.client.inference.operation.details`
  event) or the older per-message events (`gen_ai.user.message`, `gen_ai.choice`, ...);
* OpenLLMetry / Traceloop: `gen_ai.prompt.{i}.*`, `gen_ai.completion.{i}.*`, `llm.usage.*`,
  `llm.request.type`;
* OpenInference (Arize Phoenix): `openinference.span.kind`, `llm.model_name`,
  `llm.input_messages.{i}.message.*`, `input.value` / `output.value`, `llm.token_count.*`.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import math
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any

import orjson
import structlog
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from llmwatch.collectors.intake import Intake
from llmwatch.collectors.otel.config import OtelMetrics
from llmwatch.core.errors import LlmwatchError
from llmwatch.core.metrics import Metrics
from llmwatch.core.records import Sample, Usage
from llmwatch.core.wire import (
    approx_tokens,
    content_to_text,
    extract_answer_text,
    extract_prompt_text,
    token_count,
)
from llmwatch.scorers.pipeline.conversations import declared_conversation, user_count

log = structlog.get_logger(__name__)

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_ROUTES = {
    "chat": "/v1/chat/completions",
    "text_completion": "/v1/completions",
    "embeddings": "/v1/embeddings",
    "generate_content": "/v1/responses",
}
_LLM_OPERATIONS = frozenset(_ROUTES)
# OpenLLMetry's llm.request.type and OpenInference's span kinds, as GenAI operation names.
_REQUEST_TYPES = {"chat": "chat", "completion": "text_completion", "embedding": "embeddings"}
_OPENINFERENCE_KINDS = {"LLM": "chat", "EMBEDDING": "embeddings"}
_INDEXED = re.compile(r"^(\d+)\.(.+)$")
_INVALID_ARGUMENT = 3  # google.rpc.Code
_UNAVAILABLE = 14
_MAX_MS = 1e12  # ~31 years: beyond it a duration is not one
# Requests decoding at once (in the receiver's own threads) and waiting for one: beyond them a
# sender is told 503 with Retry-After, which OTLP exporters retry with backoff.
_DECODE_THREADS = 2
_MAX_PENDING = 8


class SpanRejected(LlmwatchError, ValueError):
    """An LLM span that cannot become a sample (reported in partial_success)."""


class BadBody(ValueError):
    """A body that is no export request: the message (for the sender) may quote the body; the
    summary (for the agent's log) never does, since span attributes carry prompts and keys."""

    def __init__(self, message: str, summary: str) -> None:
        super().__init__(message)
        self.summary = summary


# --- decoding ----------------------------------------------------------------------------------


def _hex_ids_to_base64(node: Any) -> None:
    # OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping expects base64.
    if isinstance(node, dict):
        for key, value in node.items():
            if (
                key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
                and isinstance(value, str)
                and value
            ):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise BadBody(f"{key} {value[:40]!r} is not hex", f"{key} is not hex") from None
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)


def decode_request(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """Parse an export request; ValueError with a readable reason when the body is not one."""
    message = ExportTraceServiceRequest()
    if content_type == _PROTOBUF:
        try:
            message.ParseFromString(body)
        except DecodeError as exc:
            what = "body is not a protobuf ExportTraceServiceRequest"
            raise BadBody(f"{what}: {exc}", what) from None
        return message
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadBody(f"body is not valid JSON: {exc}", "body is not valid JSON") from None
    if not isinstance(data, dict):
        what = f"body must be a JSON object (an ExportTraceServiceRequest), got {type(data).__name__}"
        raise BadBody(what, what)
    try:
        _hex_ids_to_base64(data)
        # The spec makes receivers ignore unknown fields, so that newer senders still work.
        json_format.ParseDict(data, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        what = "body is not an OTLP/JSON ExportTraceServiceRequest"
        raise BadBody(f"{what}: {exc}", what) from None
    except RecursionError:
        # A body nested hundreds of levels deep is no export request; refused, not a 500.
        what = "body nests too deeply to be an OTLP/JSON ExportTraceServiceRequest"
        raise BadBody(what, what) from None
    return message


class TooManySpans(ValueError):
    """An export request with more spans than `otel.ingest_max_spans`."""


class BodyTooLarge(ValueError):
    """A compressed body that inflates beyond `otel.ingest_max_body_bytes`."""


def inflate(body: bytes, coding: str, limit: int) -> bytes:
    """A gzip or deflate body inflated, up to `limit` bytes: a small gzip bomb must not become
    gigabytes in memory. BodyTooLarge beyond it; BadBody for data that is not `coding`."""
    wbits = 16 + zlib.MAX_WBITS if coding != "deflate" else zlib.MAX_WBITS
    out, rest = bytearray(), body
    try:
        # A gzip body may be several members one after another (RFC 1952; `cat a.gz b.gz`): each
        # is inflated in turn, where one decompressobj stops at the end of the first.
        while rest and len(out) <= limit:
            inflater = zlib.decompressobj(wbits)
            out += inflater.decompress(rest, limit + 1 - len(out))
            if not inflater.eof:
                if inflater.unconsumed_tail or len(out) > limit:
                    break  # stopped at the limit, not at the end: too large
                raise BadBody(
                    f"body is not valid {coding} data: it ends mid-stream", f"body is not valid {coding} data"
                )
            # Zero bytes after a member are padding (as Python's gzip module reads them).
            rest = inflater.unused_data.lstrip(b"\0") if coding != "deflate" else b""
    except zlib.error as exc:
        raise BadBody(f"body is not valid {coding} data: {exc}", f"body is not valid {coding} data") from None
    if len(out) > limit or rest and len(out) >= limit:
        raise BodyTooLarge(f"decompressed body is over the {limit}-byte limit")
    return bytes(out)


def _any(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _any(kv.value) for kv in kvs}


# --- span -> sample ----------------------------------------------------------------------------


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _num(attrs: dict[str, Any], *keys: str, notes: list[str] | None = None) -> int | None:
    """The first of `keys` that holds a count (`token_count`: a whole number in 0..2**53-1).

    A key present with something else (1e300, -3, "12abc") is skipped and, with `notes`, noted
    once as `number_out_of_range`: the span is kept, the nonsense number is not."""
    for key in keys:
        if key not in attrs:
            continue
        value = token_count(attrs[key])
        if value is not None:
            return value
        if notes is not None and "number_out_of_range" not in notes:
            notes.append("number_out_of_range")
    return None


def _str(attrs: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """`prefix.0.role`, `prefix.0.content`, `prefix.1.tool_calls.0.name` -> [{role, content, tool_calls...}, ...]."""
    items: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        match = _INDEXED.match(key[len(prefix) :])
        if match:
            items.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [items[i] for i in sorted(items)]


def _operation(attrs: dict[str, Any]) -> str | None:
    """The GenAI operation of an LLM span, or None for any other span."""
    op = attrs.get("gen_ai.operation.name")
    if isinstance(op, str):
        # execute_tool, invoke_agent, create_agent: GenAI spans, but no model call of their own.
        return op if op in _LLM_OPERATIONS else None
    kind = attrs.get("openinference.span.kind")
    if isinstance(kind, str):
        return _OPENINFERENCE_KINDS.get(kind.upper())
    request_type = attrs.get("llm.request.type")
    if isinstance(request_type, str):
        return _REQUEST_TYPES.get(request_type)
    if any(k.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for k in attrs) or "gen_ai.request.model" in attrs:
        return "chat"
    return None


def _parts_to_message(role: Any, parts: Any) -> dict[str, Any]:
    """A GenAI-conventions message (role + typed parts) as an OpenAI chat message."""
    if isinstance(parts, str):
        return {"role": role or "user", "content": parts}
    texts, calls, tool_reply = [], [], None
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("content", "")))
        elif kind == "tool_call":
            args = part.get("arguments")
            calls.append(
                {
                    "id": part.get("id"),
                    "type": "function",
                    "function": {
                        "name": part.get("name"),
                        "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
                    },
                }
            )
        elif kind == "tool_call_response":
            response = part.get("response")
            tool_reply = (part.get("id"), response if isinstance(response, str) else orjson.dumps(response).decode())
    message: dict[str, Any] = {"role": role or "user", "content": "\n".join(texts)}
    if calls:
        message["tool_calls"] = calls
    if tool_reply is not None:
        message.update(role="tool", tool_call_id=tool_reply[0], content=tool_reply[1])
    return message


def _openai_message(raw: Any, default_role: str) -> dict[str, Any] | None:
    """Any of the message shapes instrumentations write, as an OpenAI chat message."""
    if isinstance(raw, str):
        parsed = _json(raw)
        if not isinstance(parsed, dict):
            return {"role": default_role, "content": _text(raw)}
        raw = parsed
    if not isinstance(raw, dict):
        return None
    if "parts" in raw:
        return _parts_to_message(raw.get("role") or default_role, raw["parts"])
    if isinstance(raw.get("message"), dict):
        return _openai_message(raw["message"], default_role)
    message: dict[str, Any] = {"role": raw.get("role") or default_role, "content": _text(raw.get("content"))}
    calls = raw.get("tool_calls")
    if isinstance(calls, list) and calls:
        message["tool_calls"] = calls
    return message


@dataclass(slots=True)
class _Content:
    messages: list[dict[str, Any]]
    choices: list[dict[str, Any]]  # {"message": {...}, "finish_reason": ...}
    request: dict[str, Any] | None = None  # a whole OpenAI request body, when the span carried one
    response: dict[str, Any] | None = None


def _genai_content(attrs: dict[str, Any], events: list[tuple[str, dict[str, Any]]]) -> _Content:  # noqa: C901
    messages: list[dict[str, Any]] = []
    choices: list[dict[str, Any]] = []
    # Content as span attributes or, the same keys, on the operation-details event.
    sources = [attrs] + [a for name, a in events if name == "gen_ai.client.inference.operation.details"]
    system = next((v for v in (_json(src.get("gen_ai.system_instructions")) for src in sources) if v), None)
    inputs = next((v for v in (_json(src.get("gen_ai.input.messages")) for src in sources) if isinstance(v, list)), [])
    outputs = next(
        (v for v in (_json(src.get("gen_ai.output.messages")) for src in sources) if isinstance(v, list)), []
    )
    if system:
        messages.append(_parts_to_message("system", system))
    messages.extend(m for m in (_openai_message(x, "user") for x in inputs) if m)
    for out in outputs:
        message = _openai_message(out, "assistant")
        if message:
            choices.append(
                {"message": message, "finish_reason": out.get("finish_reason") if isinstance(out, dict) else None}
            )
    if messages or choices:
        return _Content(messages, choices)
    # The earlier conventions: one event per message, the body in attributes.
    for name, a in events:
        body = _json(a.get("gen_ai.event.content")) if "gen_ai.event.content" in a else a
        if not isinstance(body, dict):
            continue
        if name in ("gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message", "gen_ai.tool.message"):
            role = body.get("role") or name.split(".")[1]
            if body.get("message.content") is not None or body.get("content") is not None:
                message = _openai_message(
                    {
                        "role": role,
                        "content": body.get("content", body.get("message.content")),
                        "tool_calls": _json(body.get("tool_calls")),
                    },
                    role,
                )
                if message:
                    messages.append(message)
        elif name == "gen_ai.choice":
            raw = body.get("message")
            if raw is None:
                raw = {
                    "role": body.get("message.role", "assistant"),
                    "content": body.get("message.content", body.get("content")),
                }
            message = _openai_message(raw, "assistant")
            if message:
                choices.append({"message": message, "finish_reason": body.get("finish_reason")})
        elif name == "gen_ai.content.prompt":
            prompt = _json(a.get("gen_ai.prompt"))
            for item in prompt if isinstance(prompt, list) else [prompt]:
                message = _openai_message(item, "user")
                if message:
                    messages.append(message)
        elif name == "gen_ai.content.completion":
            completion = _json(a.get("gen_ai.completion"))
            for item in completion if isinstance(completion, list) else [completion]:
                message = _openai_message(item, "assistant")
                if message:
                    choices.append(
                        {
                            "message": message,
                            "finish_reason": item.get("finish_reason") if isinstance(item, dict) else None,
                        }
                    )
    return _Content(messages, choices)


def _text(value: Any) -> str:
    """Message content as text: plain, or a JSON list of parts (how multimodal content is flattened)."""
    if isinstance(value, str):
        if value[:1] in ("[", "{"):
            text = content_to_text(_json(value))
            return text or value
        return value
    return content_to_text(value) if value is not None else ""


def _traceloop_content(attrs: dict[str, Any]) -> _Content:
    messages = [
        {"role": item.get("role", "user"), "content": _text(item.get("content"))}
        for item in _indexed(attrs, "gen_ai.prompt.")
    ]
    choices = []
    for item in _indexed(attrs, "gen_ai.completion."):
        message: dict[str, Any] = {"role": item.get("role", "assistant"), "content": _text(item.get("content"))}
        calls = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": call.get("name"), "arguments": call.get("arguments", "")},
            }
            for call in _indexed({k: v for k, v in item.items() if k.startswith("tool_calls.")}, "tool_calls.")
        ]
        if calls:
            message["tool_calls"] = calls
        choices.append({"message": message, "finish_reason": item.get("finish_reason")})
    return _Content(messages, choices)


def _openinference_content(attrs: dict[str, Any]) -> _Content:
    def messages_of(prefix: str, default_role: str) -> list[dict[str, Any]]:
        out = []
        for item in _indexed(attrs, prefix):
            content = item.get("message.content")
            if content is None:
                texts = [
                    v
                    for k, v in sorted(item.items())
                    if k.startswith("message.contents.") and k.endswith("message_content.text")
                ]
                content = "\n".join(str(t) for t in texts)
            out.append(
                {
                    "role": item.get("message.role", default_role),
                    "content": content if isinstance(content, str) else str(content),
                }
            )
        return out

    content = _Content(
        messages_of("llm.input_messages.", "user"),
        [{"message": m, "finish_reason": None} for m in messages_of("llm.output_messages.", "assistant")],
    )
    if not content.messages and "input.value" in attrs:
        value = _json(attrs["input.value"]) if attrs.get("input.mime_type", _JSON) == _JSON else attrs["input.value"]
        if isinstance(value, dict) and ("messages" in value or "prompt" in value or "input" in value):
            content.request = value
        elif isinstance(value, (str, int, float)):
            content.messages = [{"role": "user", "content": str(value)}]
    if not content.choices and "output.value" in attrs:
        value = _json(attrs["output.value"]) if attrs.get("output.mime_type", _JSON) == _JSON else attrs["output.value"]
        if isinstance(value, dict) and ("choices" in value or "output" in value):
            content.response = value
        elif isinstance(value, (str, int, float)):
            content.choices = [{"message": {"role": "assistant", "content": str(value)}, "finish_reason": None}]
    return content


def _content(attrs: dict[str, Any], events: list[tuple[str, dict[str, Any]]]) -> _Content:
    for extract in (
        lambda: _genai_content(attrs, events),
        lambda: _traceloop_content(attrs),
        lambda: _openinference_content(attrs),
    ):
        found = extract()
        if found.messages or found.choices or found.request or found.response:
            return found
    return _Content([], [])


def _error(span: Span, attrs: dict[str, Any], status: int | None) -> str | None:
    error = _str(attrs, "error.type")
    if error:
        return error
    if status is not None and status >= 400:
        return str(status)
    if span.status.code == Status.STATUS_CODE_ERROR:
        for event in span.events:
            if event.name == "exception":
                kind = _str(_attrs(event.attributes), "exception.type")
                if kind:
                    return kind
        return "error"
    return None


def span_to_sample(span: Span, resource: dict[str, Any]) -> Sample | None:  # noqa: C901
    """The sample an LLM span describes; None for a span that is no LLM call."""
    attrs = _attrs(span.attributes)
    operation = _operation(attrs)
    if operation is None:
        return None
    if len(span.trace_id) != 16 or len(span.span_id) != 8:
        raise SpanRejected("an LLM span without a valid trace_id/span_id")
    if not span.start_time_unix_nano or span.end_time_unix_nano < span.start_time_unix_nano:
        raise SpanRejected(f"span {span.span_id.hex()}: start/end times missing or reversed")
    events = [(e.name, _attrs(e.attributes)) for e in span.events]
    content = _content(attrs, events)
    notes: list[str] = []
    model = _str(attrs, "gen_ai.request.model", "llm.model_name", "llm.request.model", "gen_ai.response.model")
    response_model = _str(attrs, "gen_ai.response.model", "llm.response.model")

    request: dict[str, Any] = dict(content.request) if content.request else {}
    request.setdefault("model", model)
    if not content.request:
        if operation == "text_completion":
            request["prompt"] = "\n".join(m["content"] for m in content.messages if isinstance(m.get("content"), str))
        elif operation == "embeddings":
            request["input"] = [m["content"] for m in content.messages]
        else:
            request["messages"] = content.messages
    params = _json(attrs.get("llm.invocation_parameters"))
    for key in ("max_tokens", "temperature", "top_p"):
        value = attrs.get(f"gen_ai.request.{key}", params.get(key) if isinstance(params, dict) else None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            request.setdefault(key, value)
    stream = bool(attrs.get("gen_ai.request.stream") or attrs.get("llm.is_streaming") or request.get("stream"))
    if stream:
        request.setdefault("stream", True)

    input_tokens = _num(
        attrs,
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.prompt_tokens",
        "llm.usage.prompt_tokens",
        "llm.token_count.prompt",
        notes=notes,
    )
    output_tokens = _num(
        attrs,
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
        "llm.usage.completion_tokens",
        "llm.token_count.completion",
        notes=notes,
    )
    reasons = attrs.get("gen_ai.response.finish_reasons")
    finish_reason = reasons[0] if isinstance(reasons, list) and reasons and isinstance(reasons[0], str) else None
    if content.response is not None:
        response: Any = content.response
    elif operation == "embeddings":
        response = None
    else:
        choices = []
        for i, choice in enumerate(content.choices):
            reason = choice.get("finish_reason") or (
                reasons[i] if isinstance(reasons, list) and i < len(reasons) else None
            )
            if operation == "text_completion":
                choices.append({"index": i, "text": choice["message"].get("content", ""), "finish_reason": reason})
            else:
                choices.append({"index": i, "message": choice["message"], "finish_reason": reason})
        response = {
            "object": "text_completion" if operation == "text_completion" else "chat.completion",
            "id": _str(attrs, "gen_ai.response.id"),
            "model": response_model or model,
            "choices": choices,
        }
        if input_tokens is not None or output_tokens is not None:
            response["usage"] = {"prompt_tokens": input_tokens, "completion_tokens": output_tokens}
        # Where the span tells it (OpenAI instrumentations): the served-version sentinel reads it.
        fingerprint = _str(attrs, "openai.response.system_fingerprint", "gen_ai.openai.response.system_fingerprint")
        if fingerprint:
            response["system_fingerprint"] = fingerprint
    if finish_reason is None and isinstance(response, dict):
        first = (response.get("choices") or [{}])[0]
        finish_reason = first.get("finish_reason") if isinstance(first, dict) else None
    if not (content.messages or content.choices or content.request or content.response):
        notes.append("content_not_captured")

    estimated = False
    if input_tokens is None and (prompt := extract_prompt_text(request)):
        input_tokens, estimated = approx_tokens(prompt), True
    if output_tokens is None and (answer := extract_answer_text(response)):
        output_tokens, estimated = approx_tokens(answer), True

    status = _num(attrs, "http.response.status_code", "http.status_code", notes=notes)
    if status is not None and not 100 <= status <= 999:
        status = None
        if "number_out_of_range" not in notes:
            notes.append("number_out_of_range")
    error_type = _error(span, attrs, status)
    if status is None:
        status = (
            int(error_type)
            if error_type and error_type.isascii() and error_type.isdigit() and 100 <= int(error_type) <= 999
            else (500 if error_type else 200)
        )
    ttft = attrs.get("llmwatch.ttft_ms")
    if not isinstance(ttft, (int, float)) and isinstance(attrs.get("gen_ai.server.time_to_first_token"), (int, float)):
        ttft = attrs["gen_ai.server.time_to_first_token"] * 1000.0
    if isinstance(ttft, (int, float)) and not (math.isfinite(ttft) and 0 <= ttft <= _MAX_MS):
        ttft = None  # inf, NaN, 1e300 s: no time to first token, rather than a record nobody reads
    metadata: dict[str, Any] = {"source": "otlp", "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex()}
    if isinstance(resource.get("service.name"), str):
        metadata["service_name"] = resource["service.name"]
    # The span's own conversation id, hashed like the proxy's header (the id may be a session
    # token); a span without one is linked by its history offline (`llmwatch report`).
    declared = _str(attrs, "gen_ai.conversation.id")
    messages = request.get("messages") if isinstance(request, dict) else None
    return Sample(
        id=f"{span.trace_id.hex()}-{span.span_id.hex()}",
        timestamp=datetime.fromtimestamp(span.start_time_unix_nano / 1e9, tz=timezone.utc),
        route=_ROUTES[operation],
        operation=operation,
        model=model,
        response_model=response_model,
        # Only the version the span declares; the intake falls back as for proxied calls.
        model_version=_str(attrs, "llmwatch.model_version"),
        status=status,
        error_type=error_type,
        latency_ms=round((span.end_time_unix_nano - span.start_time_unix_nano) / 1e6, 3),
        ttft_ms=round(float(ttft), 3) if isinstance(ttft, (int, float)) and not isinstance(ttft, bool) else None,
        stream=stream,
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens, estimated=estimated),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        cost_usd=None,
        request=request,
        response=response,
        sample_reason="rate",
        capture_notes=notes,
        metadata=metadata,
        conversation_id=declared_conversation(declared) if declared else None,
        turn=max(1, user_count(messages)) if isinstance(messages, list) and messages else None,
    )


# --- the HTTP receiver -------------------------------------------------------------------------


def _selected(sample: Sample, reason: str, max_body_bytes: int | None = None) -> Sample:
    sample.sample_reason = reason
    if max_body_bytes is not None:
        # As for proxied calls (capture.max_body_bytes): a body over the limit is not stored, and
        # the note says so; a span could otherwise put a 16 MiB prompt into files, Kafka and checks.
        # Measured here, for selected spans only, as the JSON a sink would write.
        for side in ("request", "response"):
            body = getattr(sample, side)
            if body is not None and len(orjson.dumps(body)) > max_body_bytes:
                setattr(sample, side, None)
                sample.capture_notes.append(f"{side}_too_large")
    return sample


class OtlpReceiver:
    def __init__(
        self,
        intake: Intake,
        metrics: Metrics,
        *,
        max_body_bytes: int,
        max_spans: int = 10_000,
        token: str | None = None,
        max_capture_bytes: int | None = None,
    ) -> None:
        self.intake = intake
        self.max_capture_bytes = max_capture_bytes
        # Its own threads, not the loop's default executor: that one also resolves the proxy's
        # upstream names (getaddrinfo), which must not queue behind a flood of 16 MiB batches.
        self._executor = ThreadPoolExecutor(_DECODE_THREADS, thread_name_prefix="llmwatch-otlp")
        self._pending = 0
        self.metrics = metrics.group(OtelMetrics)
        self.max_body_bytes = max_body_bytes
        self.max_spans = max_spans
        # Compared in constant time; never logged.
        self._expected_auth = f"Bearer {token}".encode() if token else None
        # Unauthenticated spans are stored, sampled and scored like any, but never drive the
        # served-version sentinel (metrics, alert, webhook, command): see `ingest`.
        self.watch_versions = bool(token)

    def announce(self) -> None:
        """Said once at start, when every component is made: whether spans move the sentinel."""
        if not self.watch_versions and self.intake.sentinel is not None:
            log.info(
                "otlp_versions_not_watched",
                why="the OTLP receiver has no bearer token: spans do not move the served-version sentinel",
                fix="set otel.ingest_token_env to watch the versions that spans report",
            )

    def app(self) -> web.Application:
        # The body limit is checked here and again after our own bounded gunzip (aiohttp's would
        # inflate without a bound), and both refusals are answered per OTLP.
        app = web.Application(client_max_size=self.max_body_bytes, handler_args={"auto_decompress": False})
        app.router.add_post("/v1/traces", self._traces)
        return app

    def ingest(self, message: ExportTraceServiceRequest) -> tuple[int, list[str]]:
        """Queue the samples of a decoded request; (rejected span count, first few reasons)."""
        count = self.metrics.otlp_ingest_spans
        rejected, reasons = 0, list[str]()
        for resource_spans in message.resource_spans:
            resource = _attrs(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    try:
                        sample = span_to_sample(span, resource)
                    except Exception as exc:
                        rejected += 1
                        count.labels(outcome="rejected").inc()
                        if len(reasons) < 3:
                            reasons.append(
                                str(exc)
                                if isinstance(exc, SpanRejected)
                                else f"span {span.span_id.hex()}: {type(exc).__name__}"
                            )
                        continue
                    if sample is None:
                        count.labels(outcome="not_llm").inc()
                        continue
                    # Resolved as for proxied calls: a declared `llmwatch.model_version` first, then `model_version.default`.
                    sample.model_version = self.intake.model_version(
                        sample.model_version, sample.response_model, sample.model
                    )
                    # Only spans from senders who proved who they are (otel.ingest_token_env) may move
                    # the served-version sentinel: its alert, webhook and command act on what it sees,
                    # and anyone who can reach an open receiver could make up fingerprints.
                    if self.watch_versions and sample.response_model is not None and sample.status < 400:
                        fingerprint = (
                            sample.response.get("system_fingerprint") if isinstance(sample.response, dict) else None
                        )
                        self.intake.served(
                            sample.model,
                            sample.model_version,
                            sample.response_model,
                            fingerprint if isinstance(fingerprint, str) else None,
                        )
                    admission = self.intake.admit(
                        sample.id,
                        sample.route,
                        sample.model,
                        error=sample.error_type is not None,
                        latency_ms=sample.latency_ms,
                        build=partial(_selected, sample, max_body_bytes=self.max_capture_bytes),
                    )
                    if admission.reason is None:
                        count.labels(outcome="unsampled").inc()
                    elif admission.queued:
                        count.labels(outcome="sampled").inc()
                    else:
                        rejected += 1
                        count.labels(outcome="rejected").inc()
                        if "sample queue full" not in reasons:
                            reasons.append("sample queue full")
        return rejected, reasons

    def _answer(self, encoding: str, message: Any, status: int = 200) -> web.Response:
        if encoding == _PROTOBUF:
            return web.Response(status=status, body=message.SerializeToString(), content_type=_PROTOBUF)
        return web.Response(
            status=status, body=json_format.MessageToJson(message, indent=None).encode(), content_type=_JSON
        )

    def _fail(
        self, encoding: str, status: int, message: str, logged: str | None = None, code: int = _INVALID_ARGUMENT
    ) -> web.Response:
        log.info("otlp_request_refused", status=status, reason=logged or message)
        return self._answer(encoding, status_pb2.Status(code=code, message=message), status)

    async def _traces(self, request: web.Request) -> web.Response:
        encoding = request.content_type
        if self._expected_auth is not None:
            given = request.headers.get("Authorization", "").encode("latin-1", "replace")
            if not hmac.compare_digest(given, self._expected_auth):
                return self._fail(
                    encoding if encoding in (_PROTOBUF, _JSON) else _JSON,
                    401,
                    "missing or wrong bearer token (Authorization: Bearer ...)",
                )
        if encoding not in (_PROTOBUF, _JSON):
            return self._fail(_JSON, 415, f"unsupported content type {encoding!r}; send {_PROTOBUF} or {_JSON}")
        coding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if coding not in ("identity", "gzip", "x-gzip", "deflate"):
            return self._fail(encoding, 415, f"unsupported content encoding {coding!r}; send gzip or none")
        limit = self.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._fail(encoding, 413, f"body of {request.content_length} bytes is over the {limit}-byte limit")
        if self._pending >= _MAX_PENDING:
            # Refused before its body is read: a flood costs neither memory nor decoding.
            busy = self._fail(
                encoding, 503, f"{self._pending} export requests are being decoded; retry later", code=_UNAVAILABLE
            )
            busy.headers["Retry-After"] = "1"
            return busy
        self._pending += 1
        try:
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                return self._fail(encoding, 413, f"body is over the {limit}-byte limit")
            # Inflating, decoding and converting a large batch would stall the proxy sharing this
            # event loop (16 KB of gzip inflate to 16 MiB in ~50 ms): all of it in a worker thread.
            loop = asyncio.get_running_loop()
            call = partial(self._decode_and_ingest, body, encoding, coding)
            rejected, reasons = await loop.run_in_executor(self._executor, call)
        except (TooManySpans, BodyTooLarge) as exc:
            return self._fail(encoding, 413, str(exc))
        except ValueError as exc:
            # The sender gets the whole reason; the log a summary without the body's words.
            summary = exc.summary if isinstance(exc, BadBody) else "body does not decode"
            return self._fail(encoding, 400, str(exc), logged=summary)
        finally:
            self._pending -= 1
        response = ExportTraceServiceResponse()
        if rejected:
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = "; ".join(reasons)
        return self._answer(encoding, response)

    def close(self) -> None:
        """The decode threads ended once the requests in them are answered (at stop)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _decode_and_ingest(self, body: bytes, encoding: str, coding: str = "identity") -> tuple[int, list[str]]:
        if coding != "identity":
            body = inflate(body, coding, self.max_body_bytes)
        message = decode_request(body, encoding)
        # Counted before any span is converted: an oversized batch costs its parse only.
        spans = sum(len(scope.spans) for rs in message.resource_spans for scope in rs.scope_spans)
        if spans > self.max_spans:
            raise TooManySpans(
                f"{spans} spans in one request is over the limit of {self.max_spans} (otel.ingest_max_spans); send smaller batches"
            )
        return self.ingest(message)
