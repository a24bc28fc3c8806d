"""From samples and their scores to per-route behaviour summaries (the unit drift compares).

The same `summarize` builds a frozen baseline and the current window, so both sides of every
drift test are computed the same way. Continuous values keep a reservoir (a deterministic,
uniform subset chosen by the hash of the sample id) so that a baseline stays small while the
two-sample tests still get raw values; pass/fail and failure modes keep exact counts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, Field

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.rows import Row, category_of, make_row, prompt_digest, reservoir_rows
from llmwatch.scorers.pipeline.sampler import hash_fraction

QUANTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
CONTINUOUS = ("latency_ms", "ttft_ms", "output_tokens", "cost_usd")
FAILURE_MODES = ("ok", "error", "refusal", "invalid_json", "tool_calls", "truncated", "empty")


class Distribution(BaseModel):
    n: int
    mean: float
    std: float
    quantiles: dict[str, float]
    reservoir: list[float]


class CheckStats(BaseModel):
    n_pass: int = 0
    n_fail: int = 0
    n_error: int = 0
    n_skip: int = 0
    # Only for checks whose values are not just 0/1 (e.g. embedding similarities).
    values: Distribution | None = None


class EmbeddingStats(BaseModel):
    dim: int
    n: int
    centroid: list[float]
    reservoir: list[list[float]]
    # The category of each reservoir entry, so the families can compare answers on comparable prompts.
    strata: list[str] = Field(default_factory=list)
    # The normalised-prompt hash of each entry: answers to the same prompt are compared together.
    prompts: list[str] = Field(default_factory=list)


class RouteStats(BaseModel):
    n: int
    checks: dict[str, CheckStats] = Field(default_factory=dict)
    metrics: dict[str, Distribution] = Field(default_factory=dict)
    failure_modes: dict[str, int] = Field(default_factory=dict)
    embedding: EmbeddingStats | None = None
    # Per-sample rows (scorers/llmwatch/scorers/drift/rows.py) for the drift families: stratified and matched-prompt tests.
    rows: list[Row] = Field(default_factory=list)


def distribution(values: Sequence[float], fractions: Sequence[float], reservoir_size: int) -> Distribution:
    """`fractions` are the samples' id hashes in [0, 1): the reservoir keeps the lowest ones."""
    arr = np.asarray(values, dtype=float)
    order = np.argsort(np.asarray(fractions), kind="stable")[:reservoir_size]
    return Distribution(
        n=len(arr),
        mean=float(arr.mean()),
        std=float(arr.std()),
        quantiles={f"p{q}": float(v) for q, v in zip(QUANTILES, np.percentile(arr, QUANTILES))},
        reservoir=np.round(arr[order], 6).tolist(),
    )


def failure_mode(sample: Sample, scores: Mapping[str, Score]) -> str:
    """One label per call, first match wins: what an on-call engineer would call the failure."""
    if sample.status >= 400 or sample.error_type:
        return "error"
    by_kind = {s.kind: s for s in scores.values()}
    if (s := by_kind.get("refusal")) is not None and s.result == "fail":
        return "refusal"
    if (s := by_kind.get("json_valid")) is not None and s.result == "fail":
        return "invalid_json"
    if (s := by_kind.get("tool_call")) is not None and s.result == "fail":
        return "tool_calls"
    if sample.finish_reason == "length":
        return "truncated"
    if (s := by_kind.get("not_empty_or_truncated")) is not None and s.result == "fail":
        return "truncated" if s.details.get("truncated") or "length" in str(s.details) else "empty"
    # The consistency probe's verdict (scorers/evaluation/consistency.py): a sure, passing answer
    # the model did not give again when re-asked.
    if (s := by_kind.get("consistency")) is not None and s.result == "fail" and s.details.get("confident_unstable"):
        return "confident_unstable"
    return "ok"


def summarize(  # noqa: C901
    samples: Iterable[Sample],
    scores: Iterable[Score],
    embeddings: Mapping[str, np.ndarray] | None = None,
    *,
    reservoir_size: int = 5000,
    embedding_reservoir: int = 500,
    prompt_embeddings: Mapping[str, np.ndarray] | None = None,
) -> dict[str, RouteStats]:
    """Per-route stats of `samples`, joined with their `scores` (by sample id), answer embeddings
    and prompt embeddings (kept in the rows, for prompt matching, clusters and the inputs signal)."""
    prompt_embeddings = prompt_embeddings or {}
    by_sample: dict[str, dict[str, Score]] = defaultdict(dict)
    for score in scores:
        by_sample[score.sample_id][score.check] = score
    routes: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        routes[sample.route].append(sample)
    out: dict[str, RouteStats] = {}
    for route, items in routes.items():
        stats = RouteStats(n=len(items))
        fraction = {s.id: hash_fraction(s.id) for s in items}
        # Continuous call metrics.
        columns: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in CONTINUOUS}
        for s in items:
            for key, value in (
                ("latency_ms", s.latency_ms),
                ("ttft_ms", s.ttft_ms),
                ("output_tokens", s.usage.output_tokens),
                ("cost_usd", s.cost_usd),
            ):
                if value is not None and s.status < 400:
                    columns[key][0].append(float(value))
                    columns[key][1].append(fraction[s.id])
        for key, (values, fracs) in columns.items():
            if values:
                stats.metrics[key] = distribution(values, fracs, reservoir_size)
        # Checks.
        counts: dict[str, dict[str, int]] = defaultdict(lambda: {"pass": 0, "fail": 0, "error": 0, "skip": 0})
        check_values: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        modes = {m: 0 for m in FAILURE_MODES}
        row_items = []
        for s in items:
            scored = by_sample.get(s.id, {})
            for name, score in scored.items():
                counts[name][score.result] += 1
                if score.value is not None and score.result in ("pass", "fail"):
                    check_values[name][0].append(score.value)
                    check_values[name][1].append(fraction[s.id])
            mode = failure_mode(s, scored)
            modes[mode] = modes.get(mode, 0) + 1  # confident_unstable: only where the probe ran
            row_items.append((fraction[s.id], make_row(s, scored, mode, prompt_embeddings.get(s.id))))
        per_check = {
            name: CheckStats(n_pass=c["pass"], n_fail=c["fail"], n_error=c["error"], n_skip=c["skip"])
            for name, c in counts.items()
        }
        for name, (values, fracs) in check_values.items():
            if values and set(values) - {0.0, 1.0}:
                per_check[name].values = distribution(values, fracs, reservoir_size)
        stats.checks = per_check
        stats.failure_modes = modes
        stats.rows = reservoir_rows(row_items, reservoir_size)
        # Answer embeddings.
        if embeddings:
            vids = [s.id for s in items if s.id in embeddings]
            by_id = {s.id: s for s in items}
            if vids:
                # Summed in place rather than stacked: 100k x 384 floats is a 150 MB copy.
                total = np.zeros(len(embeddings[vids[0]]), dtype=np.float64)
                for i in vids:
                    total += embeddings[i]
                centroid = total / len(vids)
                norm = float(np.linalg.norm(centroid))
                order = np.argsort([fraction[i] for i in vids], kind="stable")[:embedding_reservoir]
                reservoir = np.stack([embeddings[vids[j]] for j in order]).astype(np.float32)
                stats.embedding = EmbeddingStats(
                    dim=reservoir.shape[1],
                    n=len(vids),
                    centroid=np.round(centroid / norm if norm else centroid, 6).tolist(),
                    reservoir=np.round(reservoir, 5).tolist(),
                    strata=[category_of(by_id[vids[j]]) for j in order],
                    prompts=[prompt_digest(by_id[vids[j]].prompt_text()) for j in order],
                )
        out[route] = stats
    return out
