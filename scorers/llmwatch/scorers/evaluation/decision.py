"""Cost, latency and the decision score of each model version.

    decision = (w_quality * quality + w_stability * stability) / normalized_cost

* quality: the weighted overall quality of the matrix (scorers/llmwatch/scorers/evaluation/matrix.py), in [0, 1];
* stability: the version's combined stability (scorers/llmwatch/scorers/evaluation/stability.py), in [0, 1];
* normalized_cost = cost per 1k requests of the version / the cheapest version's cost per 1k
  requests (cheapest among the versions in the same report with a positive cost), so the
  cheapest version has 1 and one twice as expensive has 2. A version whose calls all cost 0
  counts as the cheapest (1). A version with no priced call gets no decision score: a guess
  would rank it.
* cost per request = mean `cost_usd` over its samples that have a cost (errors included: they
  are billed too). Sampled traffic keeps every error and slow call, so on live samples this
  leans towards those; regression runs and unbiased exports do not have that lean.
* the weights come from `matrix.decision.weights` and are carried with their `weights_version`,
  so scores made under different weights are never compared by accident.

Latency and TTFT quantiles are over successful calls (status 1..399); TTFT over streamed ones.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from llmwatch.core.records import Sample
from llmwatch.scorers.evaluation.config import DecisionSection

__all__ = ["CostLatency", "DecisionRow", "QUANTILES", "cost_latency", "decision_scores"]

QUANTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class CostLatency:
    model_version: str
    requests: int
    priced: int
    cost_per_request: float | None
    cost_per_1k: float | None
    latency_ms: dict[str, float] = field(default_factory=dict)
    ttft_ms: dict[str, float] = field(default_factory=dict)
    # USD per million tokens (input and output) over the priced calls; the price rows they used.
    cost_per_1m_tokens: float | None = None
    price_rows: dict[str, int] = field(default_factory=dict)


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {f"p{q}": float(v) for q, v in zip(QUANTILES, np.percentile(np.asarray(values, dtype=float), QUANTILES))}


def cost_latency(samples: Iterable[Sample]) -> dict[str, CostLatency]:
    groups: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.model_version or "unknown"].append(s)
    out = {}
    for version, items in sorted(groups.items()):
        priced = [s for s in items if s.cost_usd is not None]
        costs = [s.cost_usd for s in priced if s.cost_usd is not None]
        ok = [s for s in items if 0 < s.status < 400]
        per_request = sum(costs) / len(costs) if costs else None
        tokens = sum((s.usage.input_tokens or 0) + (s.usage.output_tokens or 0) for s in priced)
        rows: dict[str, int] = {}
        for s in priced:
            rows[s.price_row or "unrecorded"] = rows.get(s.price_row or "unrecorded", 0) + 1
        out[version] = CostLatency(
            model_version=version,
            requests=len(items),
            priced=len(costs),
            cost_per_request=per_request,
            cost_per_1k=per_request * 1000.0 if per_request is not None else None,
            latency_ms=_quantiles([s.latency_ms for s in ok]),
            ttft_ms=_quantiles([s.ttft_ms for s in ok if s.ttft_ms is not None]),
            cost_per_1m_tokens=sum(costs) / tokens * 1e6 if costs and tokens else None,
            price_rows=dict(sorted(rows.items())),
        )
    return out


@dataclass(frozen=True)
class DecisionRow:
    model_version: str
    quality: float | None
    stability: float | None
    cost_per_1k: float | None
    normalized_cost: float | None
    decision_score: float | None
    note: str = ""


def decision_scores(
    quality: Mapping[str, float | None],
    stability: Mapping[str, float | None],
    costs: Mapping[str, CostLatency],
    decision: DecisionSection,
) -> list[DecisionRow]:
    w = decision.weights
    versions = sorted(set(quality) | set(costs))
    positive = [c.cost_per_1k for c in costs.values() if c.cost_per_1k is not None and c.cost_per_1k > 0]
    cheapest = min(positive) if positive else None
    rows = []
    for v in versions:
        q, s = quality.get(v), stability.get(v)
        cost = costs[v].cost_per_1k if v in costs else None
        if cost is None:
            norm = None
        elif cost <= 0 or cheapest is None:
            norm = 1.0
        else:
            norm = cost / cheapest
        missing = []
        if q is None and w.quality > 0:
            missing.append("no quality (no scored sample)")
        if s is None and w.stability > 0:
            missing.append("no stability figure (no repeated prompt, no multi-turn data, no baseline)")
        if norm is None:
            missing.append("no cost (model not in the price table)")
        if missing or norm is None:  # `missing` names a None norm; the check says so to the type checker
            rows.append(DecisionRow(v, q, s, cost, norm, None, "; ".join(missing)))
            continue
        numerator = w.quality * (q or 0.0) + w.stability * (s or 0.0)
        rows.append(DecisionRow(v, q, s, cost, norm, numerator / norm))
    return rows
