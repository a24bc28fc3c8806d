"""The `consistency:` probe's section and metrics (its factory: consistency_factory.py).

Off by default. When on, it runs a mirror of its own (the shadow machinery: parent.py on the
proxy's loop, child.py in a child process, spend.py's reservations) with one candidate named
`consistency` whose upstream is the proxy's own upstream and whose model is the one the client
asked for: the same request, sent again. Its caps (rate, requests per minute, USD per hour,
concurrency, queue) are its own; a mirror that would exceed one is skipped and counted, never
waited for, so a slow or dead upstream changes nothing for clients (the proxy only appends to a
bounded queue). The pairs go to `<data_dir>/consistency/pairs/` (not `<data_dir>/pairs/`: they are
no shadow candidate's); the child compares each pair (llmwatch.scorers.evaluation.consistency,
structured or lexical: the child has no embedding model), counts the verdicts per version, and
sends each as a `consistency` score to the proxy's process, which hands it to the scorer's drift
windows (llmwatch.collectors.late_scores).
`llmwatch report --consistency <data_dir>/consistency/pairs` gives the rates with intervals.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from llmwatch.collectors.shadow.config import ShadowCandidate, ShadowSection
from llmwatch.core.config import CpuAffinity, Section, secret_header_values
from llmwatch.core.metrics import MetricGroup, counter
from llmwatch.scorers.evaluation.consistency import CONSISTENCY_CANDIDATE

__all__ = ["CONSISTENCY_COUNTERS", "ConsistencyMetrics", "ConsistencySection", "consistency_shadow_section"]


Route = Literal["/v1/chat/completions", "/v1/completions", "/v1/responses"]
_DEFAULT_ROUTES: tuple[Route, ...] = ("/v1/chat/completions", "/v1/completions")


class ConsistencySection(Section):
    enabled: bool = False
    # Share of captured calls re-asked, decided on the request id (independent of sampling.rate).
    rate: float = Field(0.02, ge=0.0, le=1.0)
    # Spend caps of the re-asks (each doubles the cost of the calls it picks).
    max_usd_per_hour: float | None = Field(None, ge=0)
    max_requests_per_minute: int | None = Field(60, ge=0)
    max_output_tokens: int = Field(4096, ge=1, le=1_000_000)
    max_concurrency: int = Field(2, ge=1, le=1024)
    max_queue: int = Field(200, ge=1)
    timeout_s: float = Field(60.0, gt=0)
    # The upstream's credentials for the re-asks (the client's are never reused): `env:NAME` reads
    # the environment at start-up; values are secrets, never stored, logged or echoed.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    routes: list[Route] = Field(default_factory=lambda: list(_DEFAULT_ROUTES))
    cpu_affinity: CpuAffinity = "auto"
    nice: int = Field(10, ge=0, le=19)

    @field_validator("headers", mode="before")
    @classmethod
    def _header_values_as_text(cls, value: Any) -> Any:
        return secret_header_values(value, "{authorization: 'env:UPSTREAM_KEY'}")


class ConsistencyMetrics(MetricGroup):
    """Re-asked calls compared with their first answer (mirrored, skipped, spend: llmwatch_shadow_*{candidate="consistency"})."""

    consistency_pairs = counter(
        "llmwatch_consistency_pairs",
        "Re-asked calls compared with their first answer, by result (agree, disagree, unanswered).",
        ["model_version", "result"],
    )
    consistency_confident_unstable = counter(
        "llmwatch_consistency_confident_unstable",
        "Re-asked calls whose first answer did not hedge, passed the rule checks and was not given again.",
        ["model_version"],
    )


# The counters the mirror child may move for the probe (by attribute of ConsistencyMetrics).
CONSISTENCY_COUNTERS = frozenset({"consistency_pairs", "consistency_confident_unstable"})


def consistency_shadow_section(section: ConsistencySection, upstream: str) -> ShadowSection:
    """The shadow section of the probe's own mirror: one candidate, the proxy's upstream."""
    return ShadowSection(
        enabled=True,
        candidates=[
            ShadowCandidate(
                name=CONSISTENCY_CANDIDATE,
                upstream=upstream,
                rate=section.rate,
                headers=section.headers,
                max_concurrency=section.max_concurrency,
                timeout_s=section.timeout_s,
                max_usd_per_hour=section.max_usd_per_hour,
                max_requests_per_minute=section.max_requests_per_minute,
                max_output_tokens=section.max_output_tokens,
                stream="buffered",
            )
        ],
        routes=list(section.routes),
        max_queue=section.max_queue,
        cpu_affinity=section.cpu_affinity,
        nice=section.nice,
    )
