"""The scoring records: `CheckOutcome`, what a check returns, and `Score`, one check's verdict on
one sample as stored in `scores-*.jsonl`.

Scores carry the sample's model/route/timestamp so that dashboards and drift
jobs can aggregate them without joining back to the (possibly redacted or
expired) samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmwatch.core.records import Sample, UtcDatetime

SCORE_SCHEMA = "llmwatch.score/v1"

Result = Literal["pass", "fail", "error", "skip"]


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What any check (rule, embedding, judge) says about one sample, before it becomes a Score."""

    result: Result
    value: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Score(BaseModel):
    # Unknown fields are ignored so that older readers accept files from newer writers.
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    schema_: str = Field(default=SCORE_SCHEMA, alias="schema")
    sample_id: str
    check: str
    kind: str
    result: Result
    value: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    details: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    model_version: str | None = None
    route: str | None = None
    sample_timestamp: UtcDatetime
    scored_at: UtcDatetime = Field(default_factory=_utcnow)

    @field_validator("schema_")
    @classmethod
    def _known_schema(cls, value: str) -> str:
        if value != SCORE_SCHEMA:
            raise ValueError(
                f"unsupported schema {value!r}; this llmwatch reads {SCORE_SCHEMA!r} (omit the field or convert the file)"
            )
        return value

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json", by_alias=True))

    @classmethod
    def from_json(cls, line: bytes | str) -> "Score":
        return cls.model_validate(orjson.loads(line))

    @classmethod
    def from_outcome(
        cls,
        sample: Sample,
        outcome: CheckOutcome,
        *,
        check: str,
        kind: str,
        scored_at: datetime | None = None,
    ) -> "Score":
        value = outcome.value
        if value is not None and not (0.0 <= value <= 1.0):
            raise ValueError(f"check {check!r} returned value {value!r}; quality values must be within 0..1")
        # Built from our own checks' outcomes: validation would only re-check what the types
        # already guarantee, at a cost comparable to the cheap checks themselves.
        return cls.model_construct(
            schema_=SCORE_SCHEMA,
            sample_id=sample.id,
            check=check,
            kind=kind,
            result=outcome.result,
            value=value,
            details=dict(outcome.details),
            model=sample.model,
            model_version=sample.model_version,
            route=sample.route,
            sample_timestamp=sample.timestamp,
            scored_at=scored_at or _utcnow(),
        )
