"""From samples and their scores to per-route behaviour summaries (the unit drift compares).

The same `summarize` builds a frozen baseline and the current window, so both sides of every
drift test are computed the same way. Continuous values keep a reservoir (a deterministic,
uniform subset chosen by the hash of the sample id) so that a baseline stays small while the
two-sample tests still get raw values; pass/fail and failure modes keep exact counts.
"""

from __future__ import annotations

import heapq
from array import array
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, Field

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.rows import Row, ScoreLike, category_of, make_row, prompt_digest
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


def failure_mode(sample: Sample, scores: Mapping[str, ScoreLike]) -> str:
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


def summarize(
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
    by_sample: dict[str, dict[str, Score]] = defaultdict(dict)
    for score in scores:
        by_sample[score.sample_id][score.check] = score
    acc = WindowSummary(
        embeddings,
        reservoir_size=reservoir_size,
        embedding_reservoir=embedding_reservoir,
        prompt_embeddings=prompt_embeddings,
    )
    for sample in samples:
        acc.add(sample, by_sample.get(sample.id, {}))
    return acc.finish()


class _Column:
    """Values of one continuous quantity in arrival order, with their id hashes: 16 bytes a value.

    Exact mean, std and quantiles need every value; a typed array holds them without a Python
    object each (a float in a list costs 32 bytes, a Sample tens of KB)."""

    __slots__ = ("values", "fractions")

    def __init__(self) -> None:
        self.values = array("d")
        self.fractions = array("d")

    def add(self, value: float, fraction: float) -> None:
        self.values.append(value)
        self.fractions.append(fraction)


class _Lowest:
    """The `size` items with the lowest (fraction, arrival) keys, kept in a bounded heap.

    The same items, in the same order, as a stable sort by fraction then taking the first `size`:
    ties keep arrival order. `admits` says before an item is built whether it would be kept."""

    __slots__ = ("size", "heap", "seq")

    def __init__(self, size: int) -> None:
        self.size = size
        self.heap: list[tuple[float, int, Any]] = []  # (-fraction, -seq, item): a max-heap on the key
        self.seq = 0

    def admits(self, fraction: float) -> bool:
        if len(self.heap) < self.size:
            return True
        if not self.heap:
            return False
        worst_fraction, worst_seq = -self.heap[0][0], -self.heap[0][1]
        return (fraction, self.seq) < (worst_fraction, worst_seq)

    def offer(self, fraction: float, item: Any) -> None:
        """Add an item that `admits` let in (or count one it did not)."""
        seq = self.seq
        self.seq += 1
        if len(self.heap) < self.size:
            heapq.heappush(self.heap, (-fraction, -seq, item))
        elif self.heap and (fraction, seq) < (-self.heap[0][0], -self.heap[0][1]):
            heapq.heapreplace(self.heap, (-fraction, -seq, item))

    def skip(self) -> None:
        self.seq += 1

    def items(self) -> list[Any]:
        return [item for _, _, item in sorted(self.heap, key=lambda t: (-t[0], -t[1]))]


class _RouteAccumulator:
    """One route's stats, built one sample at a time: counts, typed columns and bounded reservoirs."""

    def __init__(self, reservoir_size: int, embedding_reservoir: int) -> None:
        self.n = 0
        self.reservoir_size = reservoir_size
        self.columns: dict[str, _Column] = {k: _Column() for k in CONTINUOUS}
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: {"pass": 0, "fail": 0, "error": 0, "skip": 0})
        self.check_values: dict[str, _Column] = defaultdict(_Column)
        self.modes = {m: 0 for m in FAILURE_MODES}
        self.rows = _Lowest(reservoir_size)
        # Answer embeddings: a running sum for the centroid, a bounded reservoir of (vector, stratum, prompt).
        self.embedded = 0
        self.total: np.ndarray | None = None
        self.vectors = _Lowest(embedding_reservoir)

    def add(
        self,
        s: Sample,
        scored: Mapping[str, ScoreLike],
        fraction: float,
        answer_vector: np.ndarray | None,
        prompt_vector: np.ndarray | None,
    ) -> None:
        self.n += 1
        if s.status < 400:
            for key, value in (
                ("latency_ms", s.latency_ms),
                ("ttft_ms", s.ttft_ms),
                ("output_tokens", s.usage.output_tokens),
                ("cost_usd", s.cost_usd),
            ):
                if value is not None:
                    self.columns[key].add(float(value), fraction)
        for name, score in scored.items():
            self.counts[name][score.result] += 1
            if score.value is not None and score.result in ("pass", "fail"):
                self.check_values[name].add(score.value, fraction)
        mode = failure_mode(s, scored)
        self.modes[mode] = self.modes.get(mode, 0) + 1  # confident_unstable: only where the probe ran
        # A row is built only for a sample the reservoir keeps (for now): most are not, at scale.
        if self.rows.admits(fraction):
            self.rows.offer(fraction, make_row(s, scored, mode, prompt_vector))
        else:
            self.rows.skip()
        if answer_vector is not None:
            # Summed in place rather than stacked: 100k x 384 floats is a 150 MB copy.
            if self.total is None:
                self.total = np.zeros(len(answer_vector), dtype=np.float64)
            self.total += answer_vector
            self.embedded += 1
            if self.vectors.admits(fraction):
                self.vectors.offer(fraction, (answer_vector, category_of(s), prompt_digest(s.prompt_text())))
            else:
                self.vectors.skip()

    def finish(self) -> RouteStats:
        stats = RouteStats(n=self.n)
        for key, column in self.columns.items():
            if column.values:
                stats.metrics[key] = distribution(column.values, column.fractions, self.reservoir_size)
        per_check = {
            name: CheckStats(n_pass=c["pass"], n_fail=c["fail"], n_error=c["error"], n_skip=c["skip"])
            for name, c in self.counts.items()
        }
        for name, column in self.check_values.items():
            if column.values and set(column.values) - {0.0, 1.0}:
                per_check[name].values = distribution(column.values, column.fractions, self.reservoir_size)
        stats.checks = per_check
        stats.failure_modes = self.modes
        stats.rows = self.rows.items()
        if self.total is not None and self.embedded:
            centroid = self.total / self.embedded
            norm = float(np.linalg.norm(centroid))
            kept = self.vectors.items()
            reservoir = np.stack([v for v, _, _ in kept]).astype(np.float32)
            stats.embedding = EmbeddingStats(
                dim=reservoir.shape[1],
                n=self.embedded,
                centroid=np.round(centroid / norm if norm else centroid, 6).tolist(),
                reservoir=np.round(reservoir, 5).tolist(),
                strata=[c for _, c, _ in kept],
                prompts=[p for _, _, p in kept],
            )
        return stats


class WindowSummary:
    """`summarize`, one sample at a time: what `baseline freeze` and `drift` build while streaming a file.

    Holds per route only counts, typed columns of the continuous values and bounded reservoirs
    (rows and answer vectors with the lowest id hashes), never a Sample: memory does not grow
    with whole samples (issue 29). `add` takes a sample with its scores by check name."""

    def __init__(
        self,
        embeddings: Mapping[str, np.ndarray] | None = None,
        *,
        reservoir_size: int = 5000,
        embedding_reservoir: int = 500,
        prompt_embeddings: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.embeddings = embeddings or {}
        self.prompt_embeddings = prompt_embeddings or {}
        self.reservoir_size = reservoir_size
        self.embedding_reservoir = embedding_reservoir
        self.routes: dict[str, _RouteAccumulator] = {}

    def add(
        self,
        sample: Sample,
        scored: Mapping[str, ScoreLike],
        answer_vector: np.ndarray | None = None,
        prompt_vector: np.ndarray | None = None,
    ) -> None:
        """Vectors given here (a streamed window's, read batch by batch) take the place of the maps' by id."""
        route = self.routes.get(sample.route)
        if route is None:
            route = self.routes[sample.route] = _RouteAccumulator(self.reservoir_size, self.embedding_reservoir)
        route.add(
            sample,
            scored,
            hash_fraction(sample.id),
            answer_vector if answer_vector is not None else self.embeddings.get(sample.id),
            prompt_vector if prompt_vector is not None else self.prompt_embeddings.get(sample.id),
        )

    def finish(self) -> dict[str, RouteStats]:
        return {route: acc.finish() for route, acc in self.routes.items()}
