"""What the proxy captures of a call, and how it is read once the client has its response.

The hot path only appends bytes and timestamps to an `Exchange`. `analyze` runs after the
last byte went to the client: it parses the request and response (or the server-sent event
stream), finds the first content token's arrival for TTFT, assembles streamed answers into the
shape of a non-streamed response, and reads usage. It never raises on odd input: what it
cannot read becomes a note, because traffic it does not understand is still traffic.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import orjson

from llmwatch.core.records import Sample, Usage
from llmwatch.core.wire import (
    OPERATIONS,
    approx_tokens,
    extract_answer_text,
    extract_prompt_text,
    response_finish_reason,
    token_count,
    usage_details,
)


@dataclass(slots=True)
class Exchange:
    request_id: str
    started_at: float  # wall clock, epoch seconds
    t0: float  # perf_counter at request start
    method: str
    route: str
    request_body: bytes | None = None  # None: not captured (too large or streamed through)
    # capture.max_body_bytes: also bounds a compressed response once inflated.
    max_body_bytes: int = 1_048_576
    request_encoding: str | None = None  # the request's Content-Encoding: its body is kept as sent
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)  # only the few we read
    response_chunks: list[bytes] = field(default_factory=list)
    chunk_ends: list[int] = field(default_factory=list)  # cumulative byte offset after each chunk
    chunk_times: list[float] = field(default_factory=list)  # perf_counter when each chunk arrived
    captured_bytes: int = 0
    response_truncated: bool = False
    # The last bytes relayed past max_body_bytes: a long stream's end, for `stream_ended`.
    response_tail: bytes = b""
    t_end: float = 0.0
    error_type: str | None = None  # set by the proxy for transport-level failures
    notes: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)  # from `capture.metadata_headers` only
    # Unique per call: clients reuse their request id on retries, so it cannot name a sample.
    sample_id: str = ""
    client_request_id: str | None = None  # the client's request id header, stored on the sample
    # Set by the proxy's conversation tracker (llmwatch.scorers.pipeline.conversations).
    conversation_id: str | None = None
    turn: int | None = None
    # The proxy's request head (lower-case name -> first value, only the headers it reads), kept
    # as the relay found it: the request id, metadata and sample id are read from it with the
    # call's other bookkeeping (`Proxy._finish`, in batches), not between the relay's reads.
    request_headers: dict[str, str] | None = None


@dataclass(slots=True)
class CallFacts:
    """What `analyze` learned: everything metrics need, and the parsed bodies for a sample."""

    operation: str
    model: str | None
    response_model: str | None
    stream: bool
    status: int
    error_type: str | None
    duration_s: float
    ttft_s: float | None
    input_tokens: int | None
    output_tokens: int | None
    tokens_estimated: bool
    finish_reason: str | None
    request: Any
    response: Any
    notes: list[str]
    # False when `analyze(assemble=False)` took the metrics-only path: request and response are
    # then not the full bodies, and a sample must be built from a full analysis.
    assembled: bool = True
    # The response's `system_fingerprint` (chat/completions), read on both paths: the served-version
    # sentinel compares it on every call.
    system_fingerprint: str | None = None
    # From the usage block, on both paths (llmwatch.core.wire.usage_details): priced at their own rates.
    cached_input_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


# The end of an OpenAI-style stream: its `data: [DONE]` event and the blank line that dispatches it.
_DONE_TAIL = re.compile(rb"(?:\A|\n)data: ?\[DONE\][ \t]*\r?\n\r?\n(?:\r?\n)*\Z")


def stream_ended(ex: Exchange) -> bool:
    """The body relayed so far ends with the stream's `data: [DONE]` event: the client has the
    whole answer, whatever bytes of framing the upstream still owed (the end of its chunked body).

    The official `openai` client's synchronous stream closes its connection as soon as it reads
    `[DONE]`; servers such as llama.cpp's send the body's end in a later write, so the client's
    close arrives first. Only the last 64 bytes are looked at, also of a body longer than the
    capture cap.

    Called only when a client hangs up mid-answer, never on the relay's per-read path: so a
    compressed stream (`Content-Encoding: gzip` or `deflate`), whose `[DONE]` is not in its bytes,
    is inflated here, not as it is relayed. Bounded as the analysis is: at most
    `capture.max_body_bytes` in and out (`_decode_body`). Past the cap the stream's end cannot be
    read without its start (only its last raw bytes are kept), so a compressed stream longer than
    the cap is not seen to have ended."""
    if not ex.response_chunks:
        return False
    encoding = ex.response_headers.get("content-encoding")
    if encoding and encoding.strip().lower() != "identity":
        if ex.response_truncated:
            return False
        try:
            # A stream cut before its end (the gzip trailer still owed) inflates as far as it came.
            body = _decode_body(b"".join(ex.response_chunks), encoding, ex.max_body_bytes)
        except (_TooLarge, zlib.error, ValueError):
            return False
        return _DONE_TAIL.search(body[-64:]) is not None
    # Past the capture cap, the relay keeps the body's last bytes in `response_tail`.
    tail = (b"".join(ex.response_chunks[-3:]) + ex.response_tail)[-64:]
    return _DONE_TAIL.search(tail) is not None


class _TooLarge(Exception):
    pass


def _inflate(body: bytes, wbits: int, limit: int) -> bytes:
    # Never more than limit + 1 bytes out, whatever the ratio: 900 KB of gzip can inflate to
    # gigabytes, and this runs on the event loop.
    inflater = zlib.decompressobj(wbits)
    out = inflater.decompress(body, limit + 1)
    if len(out) > limit:
        raise _TooLarge
    return out


def _decode_body(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The identity bytes of a captured body, at most `limit` of them (else `_TooLarge`)."""
    # The proxy relays compressed bytes untouched; only the analysis looks inside them.
    if not encoding or encoding == "identity":
        return body
    encoding = encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        return _inflate(body, 16 + zlib.MAX_WBITS, limit)
    if encoding == "deflate":
        try:
            return _inflate(body, zlib.MAX_WBITS, limit)
        except zlib.error:
            return _inflate(body, -zlib.MAX_WBITS, limit)
    raise ValueError(f"content-encoding {encoding} not supported for capture")


def _parse_json(body: bytes | None, notes: list[str], what: str) -> Any:
    if not body:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        notes.append(f"{what}_not_json")
        return None


def _event_of(block: bytes) -> tuple[str | None, bytes | None]:
    """The (event name, data) of one SSE event's lines; data None when it has no data line."""
    event_name = None
    data_lines = []
    for line in block.splitlines():
        if line.startswith(b"data:"):
            data_lines.append(line[5:].lstrip(b" "))
        elif line.startswith(b"event:"):
            event_name = line[6:].strip().decode("utf-8", "replace")
    return event_name, (b"\n".join(data_lines) if data_lines else None)


def _iter_sse(buffer: bytes):
    """Yield (end_offset, event_name, data_bytes) for each complete event in an SSE buffer."""
    pos = 0
    size = len(buffer)
    # The next CRLF CRLF at or after `pos`, looked for again only once `pos` has passed it: most
    # streams have none, and a search per event read the rest of the stream once per event.
    crlf = buffer.find(b"\r\n\r\n") if b"\r" in buffer else -1
    while pos < size:
        end = buffer.find(b"\n\n", pos)
        sep = 2
        if crlf != -1 and crlf < pos:
            crlf = buffer.find(b"\r\n\r\n", pos)
        if crlf != -1 and (end == -1 or crlf < end):
            end, sep = crlf, 4
        if end == -1:
            return  # incomplete trailing event: the stream was cut
        event_name, data = _event_of(buffer[pos:end])
        pos = end + sep
        if data is not None:
            yield pos, event_name, data


def _slot_index(value: Any) -> int | None:
    """A choice's or tool call's `index` as sent, when it is one: a small non-negative integer."""
    if type(value) is int and 0 <= value < 4096:
        return value
    return None


def _text_of(content: Any) -> str | None:
    """A delta's content: a string, or a list of parts (strings or `{"type": "text", "text": ...}`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part if isinstance(part, str) else part.get("text") if isinstance(part, dict) else None for part in content
        ]
        return "".join(p for p in parts if isinstance(p, str))
    return None


class _StreamAssembler:
    """Folds chat/completions/responses stream events into one response-shaped object.

    Upstreams send what they like: an event of an unexpected shape (an `index` of null, content
    that is a number) is used as far as it makes sense and counted in `malformed`, never raised:
    the call stays in every metric and in sampling (note `stream_event_malformed`).
    """

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.meta: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.final_response: dict[str, Any] | None = None
        self.content_events = 0
        self.done = False
        self.text_parts: list[str] = []
        self.malformed = 0

    def feed(self, event_name: str | None, data: bytes) -> bool:
        """Consume one event; True when it carried the first kind of content we time TTFT by."""
        try:
            return self._feed(event_name, data)
        except Exception:  # an upstream's JSON of any shape must not cost the call its metrics
            self.malformed += 1
            return False

    def _feed(self, event_name: str | None, data: bytes) -> bool:  # noqa: C901
        if data == b"[DONE]":
            self.done = True
            return False
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict):
            return False
        kind = obj.get("type") or event_name
        if isinstance(kind, str) and kind.startswith("response."):
            return self._feed_responses(kind, obj)
        for key in ("id", "model", "created", "system_fingerprint"):
            if key in obj and key not in self.meta:
                self.meta[key] = obj[key]
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        has_content = False
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            self.malformed += 1
            choices = []
        for choice in choices:
            if not isinstance(choice, dict):
                self.malformed += 1
                continue
            index = _slot_index(choice.get("index", 0))
            if index is None:
                self.malformed += 1
                index = 0
            slot = self.choices.setdefault(index, {"content": [], "tool_calls": {}})
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                slot["finish_reason"] = finish
            delta = choice.get("delta")
            if isinstance(delta, dict):
                role = delta.get("role")
                if isinstance(role, str) and role:
                    slot["role"] = role
                content = delta.get("content")
                if content is not None:
                    text = _text_of(content)
                    if text is None:
                        self.malformed += 1
                    elif text:
                        slot["content"].append(text)
                        has_content = True
                calls = delta.get("tool_calls") or []
                if not isinstance(calls, list):
                    self.malformed += 1
                    calls = []
                for call in calls:
                    has_content = True
                    self._merge_tool_call(slot["tool_calls"], call)
                legacy = delta.get("function_call")  # Chat Completions' `functions` predates tool_calls
                if isinstance(legacy, dict):
                    has_content = True
                    self._merge_tool_call(slot.setdefault("function_call", {}), {"index": 0, "function": legacy})
            text = choice.get("text")
            if text:
                if isinstance(text, str):
                    slot["content"].append(text)
                    has_content = True
                else:
                    self.malformed += 1
        if has_content:
            self.content_events += 1
        return has_content

    def _merge_tool_call(self, calls: dict[int, dict[str, Any]], call: Any) -> None:
        if not isinstance(call, dict):
            self.malformed += 1
            return
        index = _slot_index(call.get("index", 0))
        if index is None:
            self.malformed += 1
            index = 0
        slot = calls.setdefault(index, {"type": "function", "function": {"name": "", "arguments": ""}})
        if isinstance(call.get("id"), str) and call["id"]:
            slot["id"] = call["id"]
        fn = call.get("function") or {}
        if not isinstance(fn, dict):
            self.malformed += 1
            return
        for key in ("name", "arguments"):
            piece = fn.get(key)
            if isinstance(piece, str):
                slot["function"][key] += piece
            elif piece is not None:
                self.malformed += 1

    def _feed_responses(self, kind: str, obj: dict[str, Any]) -> bool:
        if kind == "response.output_text.delta":
            delta = obj.get("delta")
            if delta and not isinstance(delta, str):
                self.malformed += 1
            elif delta:
                self.text_parts.append(delta)
                self.content_events += 1
                return True
            return False
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            response = obj.get("response")
            if isinstance(response, dict):
                self.final_response = response
                if isinstance(response.get("usage"), dict):
                    self.usage = response["usage"]
        elif kind == "response.created" and isinstance(obj.get("response"), dict):
            self.meta.setdefault("model", obj["response"].get("model"))
        return False

    def result(self) -> dict[str, Any]:
        if self.operation == "generate_content" or self.final_response is not None or self.text_parts:
            if self.final_response is not None:
                return self.final_response
            return {
                "object": "response",
                "model": self.meta.get("model"),
                "status": "incomplete",
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "".join(self.text_parts)}],
                    }
                ],
            }
        chat = self.operation == "chat"
        choices = []
        for index in sorted(self.choices):
            slot = self.choices[index]
            text = "".join(slot["content"])
            entry: dict[str, Any] = {"index": index, "finish_reason": slot.get("finish_reason")}
            if chat:
                message: dict[str, Any] = {"role": slot.get("role", "assistant"), "content": text}
                if slot["tool_calls"]:
                    message["tool_calls"] = [slot["tool_calls"][i] for i in sorted(slot["tool_calls"])]
                if slot.get("function_call"):
                    message["function_call"] = slot["function_call"][0]["function"]
                entry["message"] = message
            else:
                entry["text"] = text
            choices.append(entry)
        out: dict[str, Any] = {
            **self.meta,
            "object": "chat.completion" if chat else "text_completion",
            "choices": choices,
        }
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def _usage_numbers(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    inp = usage.get("prompt_tokens", usage.get("input_tokens"))
    out = usage.get("completion_tokens", usage.get("output_tokens"))
    # Bounded at the boundary (llmwatch.core.wire.token_count): an upstream's 1e300 is no count.
    return token_count(inp), token_count(out)


# How many events from a stream's end may precede `[DONE]` and still be looked at for usage: the
# usage event is the last or next-to-last before [DONE] in the streams OpenAI-compatible servers send.
_USAGE_TAIL_EVENTS = 4


def _sse_metrics_only(  # noqa: C901
    body: bytes, operation: str, ex: Exchange
) -> tuple[float | None, dict[str, Any], int | None, int] | None:
    """What metrics need of a chat/completions stream, without assembling the answer.

    Parses events from the start only up to the first content event (TTFT, response model) and
    from the end only down to the usage event: a few events instead of every one. Returns
    (ttft_s, a response carrying only the model, input tokens, output tokens), or None whenever
    that shortcut might read the stream differently from the full assembly (no usage near the
    end, no [DONE], CR line ends, a Responses-API stream, ...): the caller then assembles.
    """
    if operation not in ("chat", "text_completion") or not body.endswith(b"\n\n"):
        return None
    # Without CR and without three newlines in a row, the "\n\n" separators cannot overlap, so
    # splitting from the end finds the same events as `_iter_sse` does from the start. Three
    # newlines are looked for after the backward pass, only in the stretch it read: a lone "\n\n"
    # is a separator whichever way the stream is read, and a search of the whole body cost more
    # than the rest of this shortcut's reading together.
    if b"\r" in body:
        return None
    assembler = _StreamAssembler(operation)
    first_offset = None
    for end, event_name, data in _iter_sse(body):
        if assembler.feed(event_name, data):
            first_offset = end
            break
        if assembler.final_response is not None or assembler.text_parts:
            return None
    if first_offset is None or "model" not in assembler.meta or assembler.malformed:
        return None
    stop = len(body) - 2
    usage = None
    covered = False  # whether the backward pass met the forward one: every event was looked at
    for i in range(_USAGE_TAIL_EVENTS + 1):
        start = body.rfind(b"\n\n", 0, stop)
        event_name, data = _event_of(body[start + 2 if start != -1 else 0 : stop])
        if i == 0:
            if data != b"[DONE]":
                return None
        elif data is not None and data != b"[DONE]":
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                kind = obj.get("type") or event_name
                if isinstance(kind, str) and kind.startswith("response."):
                    return None
                if isinstance(obj.get("usage"), dict):
                    usage = obj["usage"]
                    break
        if start == -1 or start + 2 <= first_offset:
            covered = True  # reached the events the forward pass already fed to the assembler
            break
        stop = start
    if usage is None:
        if not covered:
            return None
        usage = assembler.usage
    # `start` is the separator before the earliest event read backwards (-1: none, the first event).
    if b"\n\n\n" in body[max(start - 1, 0) :]:
        return None
    input_tokens, output_tokens = _usage_numbers(usage)
    if output_tokens is None:
        return None  # the full assembly counts content events instead
    ttft_s = None
    for chunk_end, t in zip(ex.chunk_ends, ex.chunk_times):
        if chunk_end >= first_offset:
            ttft_s = t - ex.t0
            break
    # The first events already carried the fingerprint where the server sends one: no extra parsing.
    return (
        ttft_s,
        {
            "model": assembler.meta["model"],
            "system_fingerprint": assembler.meta.get("system_fingerprint"),
            "usage": usage,
        },
        input_tokens,
        output_tokens,
    )


def analyze(ex: Exchange, *, assemble: bool = True) -> CallFacts:  # noqa: C901
    """The facts of one call. With `assemble=False` (the proxy, for a call no consumer needs the
    bodies of) a stream's answer is not assembled: the facts carry the same metric figures, but
    `response` holds only the model and `finish_reason` is None, and `assembled` says so;
    `to_sample` analyses such a call again, fully, in the pipeline thread."""
    notes = list(ex.notes)
    operation = OPERATIONS.get(ex.route, "other")
    request_body = ex.request_body
    if request_body and ex.request_encoding:
        try:
            request_body = _decode_body(request_body, ex.request_encoding, ex.max_body_bytes)
        except _TooLarge:
            notes.append("request_decompressed_too_large")
            request_body = None
        except (zlib.error, ValueError):
            notes.append("request_undecodable")
            request_body = None
    request = _parse_json(request_body, notes, "request")
    model = request.get("model") if isinstance(request, dict) else None
    if model is not None and not isinstance(model, str):
        model = str(model)
    stream_requested = bool(request.get("stream")) if isinstance(request, dict) else False

    content_type = ex.response_headers.get("content-type", "")
    is_sse = content_type.startswith("text/event-stream")
    body = b"".join(ex.response_chunks)
    if ex.response_truncated:
        notes.append("response_truncated")
    try:
        body = _decode_body(body, ex.response_headers.get("content-encoding"), ex.max_body_bytes)
    except _TooLarge:
        notes.append("decompressed_too_large")
        body = b""
    except (zlib.error, ValueError):
        notes.append("response_undecodable")
        body = b""

    ttft_s: float | None = None
    tokens_estimated = False
    # The response as recorded: the parsed JSON object, an assembled stream, or a text prefix.
    response: Any
    input_tokens: int | None
    output_tokens: int | None
    light = None
    if is_sse and not assemble:
        light = _sse_metrics_only(body, operation, ex)
    if light is not None:
        ttft_s, response, input_tokens, output_tokens = light
    elif is_sse:
        assembler = _StreamAssembler(operation)
        first_offset = None
        for end, event_name, data in _iter_sse(body):
            if assembler.feed(event_name, data) and first_offset is None:
                first_offset = end
        if first_offset is not None and ex.chunk_ends:
            # The first content event became visible with the chunk that completed it.
            for chunk_end, t in zip(ex.chunk_ends, ex.chunk_times):
                if chunk_end >= first_offset:
                    ttft_s = t - ex.t0
                    break
        if not assembler.done and assembler.final_response is None and ex.status < 400:
            notes.append("stream_incomplete")
        if assembler.malformed:
            notes.append("stream_event_malformed")
        response = assembler.result()
        input_tokens, output_tokens = _usage_numbers(assembler.usage)
        if output_tokens is None and assembler.content_events:
            output_tokens = assembler.content_events
            tokens_estimated = True
    else:
        response = _parse_json(body, notes, "response") if body else None
        if response is None and body:
            response = body[:4096].decode("utf-8", "replace")
        input_tokens, output_tokens = _usage_numbers(response.get("usage") if isinstance(response, dict) else None)

    if input_tokens is None and isinstance(request, dict) and operation != "other" and ex.status < 400:
        prompt = extract_prompt_text(request)
        if prompt:
            input_tokens = approx_tokens(prompt)
            tokens_estimated = True
    if output_tokens is None and operation in ("chat", "text_completion", "generate_content") and ex.status < 400:
        answer = extract_answer_text(response)
        if answer:
            output_tokens = approx_tokens(answer)
            tokens_estimated = True

    details = usage_details(response.get("usage") if isinstance(response, dict) else None)
    if details.uncounted_input and input_tokens is not None and not tokens_estimated:
        input_tokens += details.uncounted_input  # Anthropic reports cache tokens beside input_tokens
    response_model = response.get("model") if isinstance(response, dict) else None
    fingerprint = response.get("system_fingerprint") if isinstance(response, dict) else None
    error_type = ex.error_type
    if error_type is None and ex.status >= 400:
        error_type = str(ex.status)
    return CallFacts(
        assembled=light is None,
        operation=operation,
        model=model,
        response_model=response_model if isinstance(response_model, str) else None,
        system_fingerprint=fingerprint if isinstance(fingerprint, str) else None,
        stream=is_sse or stream_requested,
        status=ex.status,
        error_type=error_type,
        duration_s=max(ex.t_end - ex.t0, 0.0),
        ttft_s=ttft_s,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        tokens_estimated=tokens_estimated,
        cached_input_tokens=details.cached_input,
        cache_write_tokens=details.cache_write,
        reasoning_tokens=details.reasoning,
        finish_reason=response_finish_reason(response),
        request=request if request is not None else _raw_preview(request_body),
        response=response,
        notes=notes,
    )


def _raw_preview(body: bytes | None) -> Any:
    # A body that is not JSON is kept as (a bounded piece of) text, so the sample still shows it.
    if not body:
        return None
    return body[:4096].decode("utf-8", "replace")


def to_sample(
    ex: Exchange,
    facts: CallFacts,
    *,
    model_version: str | None,
    cost_usd: float | None,
    reason: str,
    price_row: str | None = None,
) -> Sample:
    if not facts.assembled:
        facts = analyze(ex)  # in the pipeline thread: the proxy only read what metrics need
    return Sample.model_construct(
        schema_="llmwatch.sample/v1",
        id=ex.sample_id or ex.request_id,
        client_request_id=ex.client_request_id,
        timestamp=datetime.fromtimestamp(ex.started_at, tz=timezone.utc),
        route=ex.route,
        operation=facts.operation,
        model=facts.model,
        response_model=facts.response_model,
        model_version=model_version,
        status=facts.status,
        error_type=facts.error_type,
        latency_ms=round(facts.duration_s * 1000.0, 3),
        ttft_ms=None if facts.ttft_s is None else round(facts.ttft_s * 1000.0, 3),
        stream=facts.stream,
        usage=Usage(
            input_tokens=facts.input_tokens,
            output_tokens=facts.output_tokens,
            estimated=facts.tokens_estimated,
            cached_input_tokens=facts.cached_input_tokens,
            cache_write_tokens=facts.cache_write_tokens,
            reasoning_tokens=facts.reasoning_tokens,
        ),
        finish_reason=facts.finish_reason,
        cost_usd=cost_usd,
        price_row=price_row,
        request=facts.request,
        response=facts.response,
        sample_reason=reason,
        redacted=False,
        capture_notes=facts.notes,
        metadata=dict(ex.metadata),
        conversation_id=ex.conversation_id,
        turn=ex.turn,
    )
