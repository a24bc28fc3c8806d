"""The `matrix` section (task categories, the decision score's weights) and the shadow report's
non-inferiority margins (`shadow.margins`), which the evaluation code reads."""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, field_validator, model_validator

from llmwatch.core.config import Section


class CategoryMatch(Section):
    """How a sample is recognised as one task category; every condition set must hold (AND)."""

    routes: list[str] = Field(default_factory=list)  # globs on the path
    models: list[str] = Field(default_factory=list)  # globs on the request model
    # Globs on values in `sample.metadata` (e.g. {category: "extraction"}, from a request header or an export).
    metadata: dict[str, str] = Field(default_factory=dict)
    request_matches: str | None = None  # regex searched in the request's text (all messages, or the prompt)
    min_prompt_chars: int | None = Field(default=None, ge=0)
    has_tools: bool | None = None
    json_mode: bool | None = None
    min_turns: int | None = Field(default=None, ge=1)  # user messages in the request

    @field_validator("request_matches")
    @classmethod
    def _regex_compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
        return pattern


class CategorySpec(Section):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    # Business importance in the weighted overall quality (normalised over the categories present).
    weight: float = Field(1.0, ge=0)
    # Check names (scoring.checks) that score this category; empty: every check that scored the sample.
    checks: list[str] = Field(default_factory=list)
    match: CategoryMatch = Field(default_factory=CategoryMatch)


class DecisionWeights(Section):
    quality: float = Field(0.7, ge=0)
    stability: float = Field(0.3, ge=0)

    @model_validator(mode="after")
    def _not_all_zero(self) -> "DecisionWeights":
        if self.quality + self.stability <= 0:
            raise ValueError("at least one of quality, stability must be positive")
        return self


class DecisionSection(Section):
    weights: DecisionWeights = Field(default_factory=DecisionWeights)
    # Reports carry it; comparing reports made under different weights is refused unless forced.
    weights_version: str = Field("2026-12-01", min_length=1)


class MatrixSection(Section):
    # None: the built-in categories (scorers/llmwatch/scorers/evaluation/matrix.py); a list replaces them. First match wins.
    categories: list[CategorySpec] | None = None
    # Where samples that match no category go.
    default_category: str = Field("uncategorized", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    decision: DecisionSection = Field(default_factory=DecisionSection)

    @field_validator("categories")
    @classmethod
    def _unique_names(cls, categories: list[CategorySpec] | None) -> list[CategorySpec] | None:
        names = [c.name for c in categories or []]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"category name {name!r} is used twice; names must be unique")
        return categories


class ShadowMargins(Section):
    """Non-inferiority margins of `llmwatch shadow report`: how much worse still counts as not worse."""

    # `.inf` in the YAML (or `inf` in LLMWATCH_SHADOW__MARGINS__*) passed `ge=1.0` and read as no
    # margin at all: every candidate "not worse" on that signal. Merged with Section's config.
    model_config = ConfigDict(allow_inf_nan=False)

    # Pass rate of every check (and category): the candidate's may be at most this many points lower.
    pass_rate_points: float = Field(1.0, ge=0, le=100)
    # p95 latency and p95 TTFT: at most this ratio of the primary's (1.10 = 10 % higher).
    p95_latency_ratio: float = Field(1.10, ge=1.0)
    p95_ttft_ratio: float = Field(1.10, ge=1.0)
    # Mean cost per call: at most this ratio of the primary's.
    cost_ratio: float = Field(1.10, ge=0)
    # Candidate error rate: at most this many points above the primary's.
    error_rate_points: float = Field(1.0, ge=0, le=100)
