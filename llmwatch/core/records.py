"""The records that cross module and process boundaries.

A `Sample` is one captured (or user-exported) request/response pair. It is the
JSON Lines format that the sidecar writes and that every other command
(`score`, `baseline freeze`, `drift`) reads, so users who export their own
traffic can feed llmwatch without running the proxy.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from llmwatch.core.errors import LlmwatchError
from llmwatch.core.wire import extract_answer_text, extract_prompt_text

SAMPLE_SCHEMA = "llmwatch.sample/v1"
MAX_EPOCH_S = 253402300799  # 9999-12-31T23:59:59Z, the last second datetime can hold
# The largest token count a record holds: 2**53 - 1, the largest integer every JSON reader (orjson,
# JavaScript) reads back exactly. Python ints have no bound and pydantic accepts a 301-digit one,
# which its own readers then refuse (orjson reads it as a float): a record llmwatch writes must
# always be one it reads, so the bound is in the model (tests/unit/test_records_json.py).
MAX_TOKENS = 2**53 - 1


def as_utc(value: datetime) -> datetime:
    # Naive datetimes would compare and serialise inconsistently with the UTC records.
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


class Usage(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    input_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    output_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    # True when the upstream sent no usage block and the counts were estimated
    # from the stream (one content chunk ~ one token) or from text length.
    estimated: bool = False
    # Of input_tokens: read from the provider's prompt cache, and written to it. Of output_tokens:
    # spent reasoning. None: not reported. (Added in issue 27; older records simply lack them.)
    cached_input_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    cache_write_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    reasoning_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)


class Sample(BaseModel):
    """One request/response pair, as stored in `samples-*.jsonl`.

    Required for user-supplied files: `request`, `response`, `model`, `status`,
    `latency_ms`, `timestamp`. Everything else has a sensible default.
    """

    # Non-finite numbers ("Infinity", "NaN") pass ge=0 but break every statistic downstream.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    schema_: str = Field(default=SAMPLE_SCHEMA, alias="schema")
    id: str = ""
    # The request id header the client sent (at most 128 characters); several samples can share
    # it when a client retries, unlike `id`.
    client_request_id: str | None = None
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
    # The price row cost_usd was computed by: "<builtin|file|config>:<model>[><tier threshold>]".
    price_row: str | None = None
    request: Any
    response: Any
    sample_reason: str = "import"
    redacted: bool = False
    capture_notes: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Added within llmwatch.sample/v1 (optional, so files written before read as None, and an older
    # reader ignores them): the conversation this call belongs to (`x-` + hash of the id the client
    # sent, or `h-` + hash when llmwatch followed the message history; see
    # llmwatch.scorers.pipeline.conversations) and its turn (number of user messages, 1 = first).
    conversation_id: str | None = Field(default=None, max_length=128)
    turn: int | None = Field(default=None, ge=1, le=1_000_000)

    @field_validator("schema_")
    @classmethod
    def _known_schema(cls, value: str) -> str:
        # A newer format may mean something else by the same field names: refuse, do not guess.
        if value != SAMPLE_SCHEMA:
            raise ValueError(
                f"unsupported schema {value!r}; this llmwatch reads {SAMPLE_SCHEMA!r} (omit the field or convert the file)"
            )
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
        # pydantic's own JSON writer: the same bytes as orjson over model_dump(mode="json")
        # (tests/unit/test_records_json.py), without building the dict first; a third less CPU per
        # stored sample in the proxy (issue 13). Unlike orjson it also writes integers beyond
        # 64 bits instead of raising (orjson.loads reads such numbers as floats anyway).
        return self.model_dump_json(by_alias=True).encode()

    @classmethod
    def from_json(cls, line: bytes | str) -> "Sample":
        return cls.model_validate(orjson.loads(line))

    # Convenience accessors used by the scorers; they tolerate any OpenAI shape.
    def prompt_text(self) -> str:
        return extract_prompt_text(self.request)

    def answer_text(self) -> str:
        return extract_answer_text(self.response)


class RecordError(LlmwatchError, ValueError):
    """A line of a JSON Lines file that is not a valid record; names file, line and field."""

    label = "bad input: "
