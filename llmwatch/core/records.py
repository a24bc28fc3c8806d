"""The records that cross module and process boundaries.

A `Sample` is one captured (or user-exported) request/response pair. It is the
JSON Lines format that the sidecar writes and that every other command
(`score`, `baseline freeze`, `drift`) reads, so users who export their own
traffic can feed llmwatch without running the proxy.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Iterator

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

SAMPLE_SCHEMA = "llmwatch.sample/v1"
MAX_EPOCH_S = 253402300799  # 9999-12-31T23:59:59Z, the last second datetime can hold


def as_utc(value: datetime) -> datetime:
    # Naive datetimes would compare and serialise inconsistently with the UTC records.
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


class Usage(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    # True when the upstream sent no usage block and the counts were estimated
    # from the stream (one content chunk ~ one token) or from text length.
    estimated: bool = False


class Sample(BaseModel):
    """One request/response pair, as stored in `samples-*.jsonl`.

    Required for user-supplied files: `request`, `response`, `model`, `status`,
    `latency_ms`, `timestamp`. Everything else has a sensible default.
    """

    # Non-finite numbers ("Infinity", "NaN") pass ge=0 but break every statistic downstream.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    schema_: str = Field(default=SAMPLE_SCHEMA, alias="schema")
    id: str = ""
    timestamp: UtcDatetime
    route: str = "/v1/chat/completions"
    operation: str = "chat"
    model: str | None
    response_model: str | None = None
    model_version: str | None = None
    status: int = Field(ge=0, le=999)
    error_type: str | None = None
    latency_ms: float = Field(ge=0)
    ttft_ms: float | None = Field(default=None, ge=0)
    stream: bool = False
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    cost_usd: float | None = Field(default=None, ge=0)
    request: Any
    response: Any
    sample_reason: str = "import"
    redacted: bool = False
    capture_notes: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("schema_")
    @classmethod
    def _known_schema(cls, value: str) -> str:
        # A newer format may mean something else by the same field names: refuse, do not guess.
        if value != SAMPLE_SCHEMA:
            raise ValueError(f"unsupported schema {value!r}; this llmwatch reads {SAMPLE_SCHEMA!r} (omit the field or convert the file)")
        return value

    @field_validator("timestamp", mode="before")
    @classmethod
    def _epoch_or_iso(cls, value: Any) -> Any:
        # Exports from other tools often carry epoch seconds (or ms) instead of ISO 8601.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # Seconds up to year 9999, or the same in ms; beyond that datetime overflows.
            if not 0 <= value <= MAX_EPOCH_S * 1000:
                raise ValueError(
                    f"epoch timestamp {value!r} is out of range; use seconds or milliseconds since 1970 "
                    "(0 to 253402300799 s) or an ISO 8601 string"
                )
            seconds = value / 1000.0 if value > 1e11 else value
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        return value

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json", by_alias=True))

    @classmethod
    def from_json(cls, line: bytes | str) -> "Sample":
        return cls.model_validate(orjson.loads(line))

    # Convenience accessors used by the scorers; they tolerate any OpenAI shape.
    def prompt_text(self) -> str:
        return extract_prompt_text(self.request)

    def answer_text(self) -> str:
        return extract_answer_text(self.response)


class RecordError(ValueError):
    """A line of a JSON Lines file that is not a valid record; names file, line and field."""


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(record)"
        parts.append(f"field '{loc}': {err['msg']}")
    return "; ".join(parts)


def iter_jsonl(path: str, model: type[BaseModel] = Sample) -> Iterator[BaseModel]:
    """Yield validated records of a JSON Lines file; raise `RecordError` naming the bad line.

    Blank lines are skipped. A final line without a newline that does not parse
    is treated as a torn write (the writer was killed mid-line) only if it is the
    last line; it is reported like any other bad line so that nothing is lost silently.
    """
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise RecordError(f"{path}:{lineno}: not valid JSON ({exc}); each line must be one JSON object") from None
            if not isinstance(data, dict):
                raise RecordError(f"{path}:{lineno}: expected a JSON object, got {type(data).__name__}")
            try:
                yield model.model_validate(data)
            except ValidationError as exc:
                raise RecordError(f"{path}:{lineno}: {describe_validation_error(exc)}") from None


# --- text extraction -------------------------------------------------------------------------


def _content_to_text(content: Any) -> str:
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
                return _content_to_text(message.get("content"))
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
                return _content_to_text(item.get("content"))
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
            return _content_to_text(message.get("content"))
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
