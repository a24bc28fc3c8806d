"""The pair record of shadow evaluation: one live request answered by the primary and by a candidate.

Written as JSON Lines under `<data_dir>/pairs/` (schema `llmwatch.pair/v1`) by the mirror child (llmwatch.collectors.shadow.child)
and read by `llmwatch shadow report` (scorers/llmwatch/scorers/evaluation/paired.py). Both sides are full `Sample`s, redacted
like samples, so every reader of samples understands them; the scores of both sides come from the
same check suite, so the comparison is paired on the prompt and on the checks.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmwatch.core.records import Sample, UtcDatetime

PAIR_SCHEMA = "llmwatch.pair/v1"


class PairScore(BaseModel):
    """One check's verdict on one side of a pair (the `Score` fields a comparison needs)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    check: str
    kind: str = ""
    result: str  # pass | fail | error | skip
    value: float | None = Field(default=None, ge=0.0, le=1.0)


class Pair(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)

    schema_: str = Field(default=PAIR_SCHEMA, alias="schema")
    id: str
    candidate: str
    timestamp: UtcDatetime
    route: str
    # The category of the request (evaluation matrix's `metadata.category`, e.g. from a header), if any.
    category: str | None = None
    primary: Sample
    shadow: Sample
    primary_scores: list[PairScore] = Field(default_factory=list)
    shadow_scores: list[PairScore] = Field(default_factory=list)
    # Where the scores came from, e.g. "rules" (the rule checks of scoring.checks, in the shadow writer).
    scored_by: str = "rules"

    @field_validator("schema_")
    @classmethod
    def _known_schema(cls, value: str) -> str:
        if value != PAIR_SCHEMA:
            raise ValueError(
                f"unsupported schema {value!r}; this llmwatch reads {PAIR_SCHEMA!r} (omit the field or convert the file)"
            )
        return value

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json", by_alias=True))

    @classmethod
    def from_json(cls, line: bytes | str) -> "Pair":
        return cls.model_validate(orjson.loads(line))

    def summary(self) -> dict[str, Any]:
        """Latencies, TTFT, tokens and costs of both sides, flat (what reports and gauges read)."""
        p, s = self.primary, self.shadow
        return {
            "primary_latency_ms": p.latency_ms,
            "shadow_latency_ms": s.latency_ms,
            "primary_ttft_ms": p.ttft_ms,
            "shadow_ttft_ms": s.ttft_ms,
            "primary_output_tokens": p.usage.output_tokens,
            "shadow_output_tokens": s.usage.output_tokens,
            "primary_cost_usd": p.cost_usd,
            "shadow_cost_usd": s.cost_usd,
        }
