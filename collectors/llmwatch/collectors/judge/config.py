"""The live judge as a component: the `judge` section and its metrics (the factory is in factory.py)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from llmwatch.core.config import CpuAffinity, SecretText, Section, normalize_upstream
from llmwatch.core.metrics import MetricGroup, counter, gauge
from llmwatch.core.urls import check_http_url
from llmwatch.scorers.evaluation.judge import DEFAULT_RUBRICS, JudgeRubric, ResponseFormat

SKIP_REASONS = (
    "queue_full",
    "rate_cap",
    "spend_cap",
    "not_priced",
    "input_tokens_cap",
    "no_text",
    "no_rubric",
    "judge_down",
    "shutdown",
)
FAILURE_REASONS = ("timeout", "unreachable", "http_4xx", "http_5xx", "unparseable", "transport", "shutdown")


class JudgeSection(Section):
    """A model judge rating a sample of live answers on rubrics; off by default."""

    enabled: bool = False
    # Any OpenAI-compatible server (its base URL, with or without /v1) and the model to ask.
    upstream: str | None = None
    model: str | None = None
    # `env:NAME` only: the key is read from the environment at start-up, never stored or logged.
    api_key: SecretText = None
    # Share of sampled calls judged, decided on the sample id's hash; per task category in `rates`.
    rate: float = Field(0.05, ge=0.0, le=1.0)
    rates: dict[str, float] = Field(default_factory=dict)
    # Each category is judged at least this many times per hour, whatever its rate (rare
    # categories would otherwise never be judged).
    min_per_category: int = Field(0, ge=0, le=100_000)
    # First match wins (by matrix category and route); a sample no rubric matches is not judged.
    rubrics: list[JudgeRubric] = Field(
        default_factory=lambda: [JudgeRubric.model_validate(r) for r in DEFAULT_RUBRICS], min_length=1
    )
    # Caps, held in the judge's own process whatever the concurrency. USD: each call reserves its
    # worst case (the prompt's bytes as tokens, max_output_tokens) before it is sent and settles on
    # the usage it reports; unpriced judge models are refused while a USD cap is set.
    max_usd_per_hour: float | None = Field(None, ge=0)
    max_calls_per_minute: int | None = Field(60, ge=0)
    max_inflight: int = Field(4, ge=1, le=256)
    max_input_tokens: int = Field(4000, ge=64)
    max_output_tokens: int = Field(200, ge=8, le=100_000)
    # How the reply's shape is asked for besides the prompt: none, json_object (JSON mode),
    # json_schema (OpenAI structured outputs), json_object_with_schema (llama.cpp, vLLM).
    response_format: ResponseFormat = "none"
    timeout_s: float = Field(60.0, gt=0)
    # Evaluations waiting for a free slot; beyond it a sample is skipped (queue_full).
    max_queue: int = Field(1000, ge=1)
    # Share of judged samples written to <data_dir>/judge/spot-check-*.jsonl for people to rate
    # blind (`llmwatch review export --judge-spot-check`).
    spot_check_rate: float = Field(0.0, ge=0.0, le=1.0)
    # The file `llmwatch judge calibrate --out` wrote; re-read when it changes.
    calibration: Path | None = None
    # A judge whose kappa interval's lower bound is below this, or with fewer labels, is
    # uncalibrated: its verdicts are stored and shown but drive no alert and no drift verdict.
    min_agreement: float = Field(0.6, ge=-1.0, le=1.0)
    min_labels: int = Field(50, ge=1)
    # The judge child's CPUs and priority, as the scorer's (scoring.cpu_affinity, scoring.nice).
    cpu_affinity: CpuAffinity = "auto"
    nice: int = Field(10, ge=0, le=19)

    @field_validator("upstream")
    @classmethod
    def _valid_upstream(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return normalize_upstream(check_http_url(value, "http://127.0.0.1:8002"))

    @field_validator("rates")
    @classmethod
    def _rates_in_range(cls, rates: dict[str, float]) -> dict[str, float]:
        for name, value in rates.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"rates.{name}: {value} is not a share between 0 and 1")
        return rates

    @model_validator(mode="after")
    def _complete_when_enabled(self) -> "JudgeSection":
        if self.api_key is not None and not re.match(r"^env:[A-Za-z_][A-Za-z0-9_]*$", self.api_key.get_secret_value()):
            raise ValueError("api_key: give the key as env:NAME (an environment variable), never the key itself")
        if self.enabled and (self.upstream is None or not self.model):
            raise ValueError("enabled: true needs upstream (the judge server's URL) and model (the judge model)")
        names: dict[str, str] = {}
        for rubric in self.rubrics:
            for c in rubric.criteria:
                if names.setdefault(c.name, c.scale) != c.scale:
                    raise ValueError(
                        f"criterion {c.name!r} has scale {names[c.name]} in one rubric and {c.scale} in another; "
                        "a criterion (the check judge:<name>) keeps one scale"
                    )
        return self


class JudgeMetrics(MetricGroup):
    """The live judge: verdicts, pass rates raw and corrected for its error, calibration, spend, skips."""

    judge_verdicts = counter(
        "llmwatch_judge_verdicts",
        "Judge verdicts by criterion, judged model version and result (pass|fail|error); calibrated=false: stored, not alerted on.",
        ["criterion", "judge_model", "model_version", "result", "calibrated"],
    )
    judge_skipped = counter(
        "llmwatch_judge_skipped",
        "Evaluations picked for the judge but not sent, by reason (queue_full, rate_cap, spend_cap, not_priced, input_tokens_cap, no_text, no_rubric, judge_down, shutdown).",
        ["reason"],
    )
    judge_failures = counter(
        "llmwatch_judge_failures",
        "Judge calls that gave no verdict, by reason (timeout, unreachable, http_4xx, http_5xx, unparseable, transport, shutdown).",
        ["reason"],
    )
    judge_spend = counter("llmwatch_judge_spend_usd", "Estimated USD spent on judge calls (price table).")
    judge_inflight = gauge("llmwatch_judge_inflight", "Judge calls in flight.")
    judge_pass_rate = gauge(
        "llmwatch_judge_pass_rate",
        "Share of the last judge verdicts (up to 500) per criterion and judged model version that passed, as the judge gave them.",
        ["criterion", "judge_model", "model_version"],
    )
    judge_pass_rate_corrected = gauge(
        "llmwatch_judge_pass_rate_corrected",
        "The same pass rate corrected for the judge's measured error (Rogan-Gladen), with its 95% interval (bound=estimate|lower|upper).",
        ["criterion", "judge_model", "model_version", "bound"],
    )
    judge_calibrated = gauge(
        "llmwatch_judge_calibrated",
        "1 when the judge agrees with people enough (judge.min_agreement, judge.min_labels) for its verdicts to drive alerts.",
        ["criterion", "judge_model"],
    )
    judge_kappa = gauge(
        "llmwatch_judge_kappa",
        "The judge's agreement with people (Cohen's kappa) from the calibration file, with its interval (bound=estimate|lower|upper).",
        ["criterion", "judge_model", "bound"],
    )
