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

Two guards keep the score from naming a worse version "best" (`choose_best`):

* **Quality guard** (`quality_gaps`): for each check, each version's pass rate is compared with
  every other version's, one-sided (is it lower?), with `compare_proportions` (z-test, or
  Fisher's exact test on small counts); the p-values of one version's family (checks x other
  versions) are Holm-adjusted, and a version with an adjusted p below the report's alpha is
  *worse on* that check. Only versions worse on nothing can be best: a cheap version whose
  answers got worse reads "cheaper, worse on answer_relevance", never "best". If every version
  with a score is worse than another on something, no version is best, and the report says so.
* **Interval** (`decision_intervals`): a percentile bootstrap of the decision score at 1 - alpha.
  Each replicate resamples every version's samples within their category (so quality and cost
  move together, sample by sample) and recomputes quality, cost and the cheapest cost; the
  stability term is held at its point value (it is itself a summary over repeated prompts, too
  few to resample). Two versions whose intervals overlap are not separated by the score.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.evaluation.config import DecisionSection
from llmwatch.scorers.stats.proportions import wilson_interval
from llmwatch.scorers.stats.twosample import adjust_pvalues, compare_proportions

__all__ = [
    "CostLatency",
    "DecisionRow",
    "QUANTILES",
    "quantiles",
    "QualityGap",
    "choose_best",
    "cost_latency",
    "decision_intervals",
    "decision_scores",
    "quality_gaps",
]

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


def quantiles(values: list[float]) -> dict[str, float]:
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
            latency_ms=quantiles([s.latency_ms for s in ok]),
            ttft_ms=quantiles([s.ttft_ms for s in ok if s.ttft_ms is not None]),
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
    # The score's bootstrap interval at 1 - alpha (None without a score or with too little data).
    decision_low: float | None = None
    decision_high: float | None = None
    # The checks this version is significantly worse on than another version (QualityGap as dicts).
    worse_on: list[dict[str, Any]] = field(default_factory=list)

    @property
    def eligible(self) -> bool:
        """May be called best: it has a score and is worse than no other version on any check."""
        return self.decision_score is not None and not self.worse_on

    def verdict(self, rows: Sequence[DecisionRow]) -> str:
        """A few words for people: "cheaper, worse on answer_relevance", or "" when nothing is wrong."""
        if not self.worse_on:
            return ""
        checks = sorted({g["check"] for g in self.worse_on})
        than = {g["than"] for g in self.worse_on}
        costs = {r.model_version: r.cost_per_1k for r in rows}
        own = self.cost_per_1k
        rivals = [costs.get(v) for v in than]
        cheaper = own is not None and all(c is not None and own < c for c in rivals)
        return f"{'cheaper, ' if cheaper else ''}worse on {', '.join(checks)}"


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
            # The report reads the cost the samples carry; it does not price them itself, so a model
            # that is in the table now may still have none (captured before, or by another tool).
            missing.append(
                "no cost (none of its samples carries cost_usd, as when its model is not in the price table:"
                " give it a row under metrics.pricing or in a prices_file before the traffic; samples are"
                " priced when captured)"
            )
        if missing or norm is None:  # `missing` names a None norm; the check says so to the type checker
            rows.append(DecisionRow(v, q, s, cost, norm, None, "; ".join(missing)))
            continue
        numerator = w.quality * (q or 0.0) + w.stability * (s or 0.0)
        rows.append(DecisionRow(v, q, s, cost, norm, numerator / norm))
    return rows


@dataclass(frozen=True)
class QualityGap:
    """Version `version` passes `check` less often than version `than`, at the report's alpha (Holm)."""

    version: str
    than: str
    check: str
    pass_rate: float
    ci_low: float
    ci_high: float
    n: int
    than_pass_rate: float
    than_ci_low: float
    than_ci_high: float
    than_n: int
    p_adjusted: float


_DRAWS_PER_CHUNK = 4_000_000


def _z(alpha: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(1.0 - alpha / 2.0))


def quality_gaps(scores: Iterable[Score], alpha: float) -> dict[str, list[QualityGap]]:
    """Per version, the checks on which it passes significantly less often than another version.

    One family per version: every (check, other version) pair with verdicts on both sides, tested
    one-sided ("lower") with `compare_proportions`, Holm-adjusted; a gap is an adjusted p < alpha.
    `error` and `skip` results are not verdicts and do not count.
    """
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])  # (check, version) -> [pass, n]
    for sc in scores:
        if sc.result not in ("pass", "fail"):
            continue
        cell = counts[(sc.check, sc.model_version or "unknown")]
        cell[0] += sc.result == "pass"
        cell[1] += 1
    return gaps_of_counts(counts, alpha)


def gaps_of_counts(counts: Mapping[tuple[str, str], list[int]], alpha: float) -> dict[str, list[QualityGap]]:
    """`quality_gaps` from the counts {(check, version): [passes, verdicts]}, tallied as scores stream."""
    versions = sorted({v for _, v in counts})
    checks = sorted({c for c, _ in counts})
    z = _z(alpha)
    out: dict[str, list[QualityGap]] = {v: [] for v in versions}
    for v in versions:
        tests: list[tuple[str, str, float]] = []
        for check in checks:
            k_v, n_v = counts.get((check, v), (0, 0))
            if n_v == 0:
                continue
            for w in versions:
                k_w, n_w = counts.get((check, w), (0, 0))
                if w == v or n_w == 0:
                    continue
                p = compare_proportions(k_w, n_w, k_v, n_v, alternative="less").p_value
                tests.append((check, w, p))
        adjusted = adjust_pvalues([p for _, _, p in tests], "holm")
        for (check, w, _), p_adj in zip(tests, adjusted):
            if p_adj >= alpha:
                continue
            k_v, n_v = counts[(check, v)]
            k_w, n_w = counts[(check, w)]
            lo, hi = wilson_interval(k_v, n_v, z)
            wlo, whi = wilson_interval(k_w, n_w, z)
            out[v].append(QualityGap(v, w, check, k_v / n_v, lo, hi, n_v, k_w / n_w, wlo, whi, n_w, p_adj))
    return out


def decision_intervals(
    rows: Sequence[Any],
    weights: Mapping[str, float],
    stability: Mapping[str, float | None],
    decision: DecisionSection,
    alpha: float,
    *,
    replicates: int = 1000,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """Percentile-bootstrap interval (1 - alpha) of each version's decision score.

    `rows`: the report's scored samples (`matrix.ScoredSample`: .version, .category, .score,
    .sample.cost_usd); `weights`: category -> business weight. Resampled within (version, category)
    so every replicate keeps each version's traffic mix; quality and cost come from the same drawn
    samples. The cheapest cost is recomputed per replicate. Stability is held at its point value.
    """
    by_cell: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_cell[r.version][r.category].append(r)
    arrays = {
        version: {
            category: (
                np.array([np.nan if r.score is None else r.score for r in items], dtype=float),
                np.array([np.nan if r.sample.cost_usd is None else r.sample.cost_usd for r in items], dtype=float),
            )
            for category, items in cats.items()
        }
        for version, cats in by_cell.items()
    }
    return intervals_of_cells(arrays, weights, stability, decision, alpha, replicates=replicates, seed=seed)


def intervals_of_cells(
    by_cell: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    weights: Mapping[str, float],
    stability: Mapping[str, float | None],
    decision: DecisionSection,
    alpha: float,
    *,
    replicates: int = 1000,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """`decision_intervals` over arrays: {version: {category: (sample scores, NaN = unscored;
    costs, NaN = unpriced)}}, versions and categories in the order of their first sample (the
    order of the draws), samples in file order. `llmwatch report` builds these without rows."""
    w = decision.weights
    rng = np.random.default_rng(seed)
    quality: dict[str, np.ndarray] = {}
    cost: dict[str, np.ndarray] = {}
    for version, cats in by_cell.items():
        num = np.zeros(replicates)
        den = np.zeros(replicates)
        cost_sum = np.zeros(replicates)
        cost_n = np.zeros(replicates)
        for category, (score, price) in cats.items():
            items = score
            weight = weights.get(category, min(weights.values(), default=1.0))
            # Replicates in chunks of at most ~4M draws: a report over 100k samples stays in tens of MB.
            step = max(1, _DRAWS_PER_CHUNK // len(items))
            for lo in range(0, replicates, step):
                hi = min(replicates, lo + step)
                idx = rng.integers(0, len(items), size=(hi - lo, len(items)))
                drawn, paid = score[idx], price[idx]
                scored = (~np.isnan(drawn)).sum(axis=1)
                with np.errstate(invalid="ignore"):
                    mean = np.where(scored > 0, np.nansum(drawn, axis=1) / np.maximum(scored, 1), np.nan)
                has = ~np.isnan(mean)
                num[lo:hi] += np.where(has, weight * np.nan_to_num(mean), 0.0)
                den[lo:hi] += np.where(has, weight, 0.0)
                cost_sum[lo:hi] += np.nansum(paid, axis=1)
                cost_n[lo:hi] += (~np.isnan(paid)).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            quality[version] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
            cost[version] = np.where(cost_n > 0, cost_sum / np.where(cost_n > 0, cost_n, 1.0), np.nan)
    if not cost:
        return {}
    stacked = np.vstack(list(cost.values()))
    positive = np.where(stacked > 0, stacked, np.inf)
    cheapest = positive.min(axis=0)
    out: dict[str, tuple[float, float]] = {}
    for version in by_cell:
        s = stability.get(version)
        if w.stability > 0 and s is None:
            continue
        c = cost[version]
        norm = np.where(c <= 0, 1.0, c / np.where(np.isfinite(cheapest), cheapest, 1.0))
        score = (w.quality * quality[version] + w.stability * (s or 0.0)) / norm
        score = score[np.isfinite(score)]
        if score.size < replicates * 0.9:  # too few replicates with every figure defined
            continue
        lo, hi = np.percentile(score, [100.0 * alpha / 2.0, 100.0 * (1.0 - alpha / 2.0)])
        out[version] = (float(lo), float(hi))
    return out


def choose_best(rows: Sequence[DecisionRow]) -> DecisionRow | None:
    """The highest decision score among the versions worse on nothing; None if none qualifies."""
    eligible = [r for r in rows if r.eligible]
    return max(eligible, key=lambda r: r.decision_score or 0.0) if eligible else None
