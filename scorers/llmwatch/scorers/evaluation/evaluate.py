"""`llmwatch report`: the evaluation matrix, stability, cost/latency and decision score per version.

Everything is computed from samples and their scores by the modules it shows (matrix,
stability, decision); this module assembles, prints, compares and exports. A report in JSON
(`--format json`) can be compared with a later one (`--compare`): the comparison is refused when
the two were made with different decision weights, unless asked for explicitly, because a
change of weights moves every decision score without anything having changed in the models.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

from llmwatch.core.errors import LlmwatchError
from llmwatch.core.metrics import EvaluationReading, Metrics
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.consistency import ConsistencyRow, consistency_text
from llmwatch.scorers.evaluation.decision import CostLatency, DecisionRow, cost_latency, decision_scores
from llmwatch.scorers.evaluation.matrix import (
    CategoryCell,
    build_categories,
    overall_quality,
    quality_matrix,
    score_samples,
)
from llmwatch.scorers.evaluation.metrics import EvaluationMetrics
from llmwatch.scorers.evaluation.stability import (
    ALL,
    StabilityCell,
    combined_stability,
    sampling_stability,
    turn_stability,
    version_stability,
)
from llmwatch.scorers.evaluation.turns import TurnDecay, check_values, turn_decay, turn_decay_text
from llmwatch.scorers.pipeline.conversations import link_samples

__all__ = [
    "REPORT_SCHEMA",
    "EvaluationReport",
    "WeightsMismatch",
    "build_report",
    "compare_reports",
    "evaluation_readings",
    "export_metrics",
    "format_text",
]

REPORT_SCHEMA = "llmwatch.report/v1"


class WeightsMismatch(LlmwatchError, ValueError):
    """Two reports made under different decision weights; the message says how to compare anyway."""


@dataclass
class EvaluationReport:
    n_samples: int
    versions: list[str]
    categories: list[dict[str, Any]]
    cells: list[CategoryCell]
    overall_quality: dict[str, float | None]
    stability: list[StabilityCell]
    stability_by_version: dict[str, float | None]
    costs: dict[str, CostLatency]
    decision: list[DecisionRow]
    weights: dict[str, float]
    weights_version: str
    baseline: dict[str, Any] | None = None
    comparison: dict[str, Any] | None = None
    # Quality by turn within conversations and its decay slope, per version (evaluation/turns.py).
    turn_decay: list[TurnDecay] = field(default_factory=list)
    # Resampling consistency per version, from the consistency probe's pairs (evaluation/consistency.py).
    consistency: list[ConsistencyRow] = field(default_factory=list)
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["schema"] = REPORT_SCHEMA
        out["decision"] = {
            "weights": self.weights,
            "weights_version": self.weights_version,
            "versions": [asdict(r) for r in self.decision],
        }
        del out["weights"], out["weights_version"]
        return out


def build_report(
    samples: Sequence[Sample],
    scores: Iterable[Score],
    cfg: MatrixSection,
    *,
    known_checks: Iterable[str] | None = None,
    baseline: Any = None,
    drift_alpha: float = 0.05,
    drift_min_samples: int = 30,
) -> EvaluationReport:
    score_list = list(scores)
    categories = build_categories(cfg, known_checks)
    # Files written before samples carried their conversation are linked by their histories here.
    if any(s.conversation_id is None and s.operation == "chat" for s in samples):
        samples = link_samples(samples)
    rows = score_samples(samples, score_list, categories, cfg.default_category)
    cells = quality_matrix(rows, categories)
    quality = overall_quality(cells)
    _, sampling = sampling_stability(rows)
    stability = sampling + turn_stability(rows)
    baseline_info = None
    if baseline is not None:
        stability += version_stability(samples, score_list, baseline, alpha=drift_alpha, min_samples=drift_min_samples)
        baseline_info = {
            "model_version": baseline.model_version,
            "checksum": baseline.checksum,
            "sample_count": baseline.sample_count,
        }
    combined = combined_stability(stability)
    costs = cost_latency(samples)
    versions = sorted({r.version for r in rows})
    for v in versions:
        combined.setdefault(v, None)
        quality.setdefault(v, None)
    decision = decision_scores(quality, combined, costs, cfg.decision)
    used = {c.category for c in cells}
    cats = [{"name": c.name, "weight": c.weight, "checks": list(c.checks)} for c in categories if c.name in used]
    if cfg.default_category in used and cfg.default_category not in {c["name"] for c in cats}:
        cats.append(
            {
                "name": cfg.default_category,
                "weight": next(c.weight for c in cells if c.category == cfg.default_category),
                "checks": [],
            }
        )
    return EvaluationReport(
        n_samples=len(samples),
        versions=versions,
        categories=cats,
        cells=cells,
        overall_quality=quality,
        stability=stability,
        stability_by_version=combined,
        costs=costs,
        decision=decision,
        weights=cfg.decision.weights.model_dump(),
        weights_version=cfg.decision.weights_version,
        baseline=baseline_info,
        turn_decay=turn_decay(rows, check_values(score_list)),
    )


def _check_earlier_shape(earlier: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first field of an earlier report that compare_reports cannot use."""

    def bad(field: str, expected: str, got: Any) -> ValueError:
        return ValueError(
            f"field '{field}': expected {expected}, got {type(got).__name__} {str(got)[:60]!r}; the file is damaged or not written by `llmwatch report --out`"
        )

    decision = earlier.get("decision")
    if decision is None:
        return
    if not isinstance(decision, Mapping):
        raise bad("decision", "an object", decision)
    if not isinstance(decision.get("versions", []), list):
        raise bad("decision.versions", "a list", decision.get("versions"))
    for i, row in enumerate(decision.get("versions", [])):
        if not isinstance(row, Mapping):
            raise bad(f"decision.versions.{i}", "an object", row)
        if not isinstance(row.get("model_version"), (str, type(None))):
            raise bad(f"decision.versions.{i}.model_version", "a string", row.get("model_version"))
        for key in ("decision_score", "quality", "stability", "cost_per_1k"):
            value = row.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            ):
                raise bad(f"decision.versions.{i}.{key}", "a finite number or null", value)


def compare_reports(
    current: Mapping[str, Any], earlier: Mapping[str, Any], *, allow_weights_change: bool = False
) -> dict[str, Any]:
    """Per-version changes from `earlier` to `current` (both `to_dict()` forms)."""
    if not isinstance(earlier, Mapping) or earlier.get("schema") != REPORT_SCHEMA:
        found = earlier.get("schema") if isinstance(earlier, Mapping) else type(earlier).__name__
        raise ValueError(
            f"the earlier report is not an llmwatch report (schema {found!r}, expected {REPORT_SCHEMA!r}); write one with `llmwatch report --format json`"
        )
    _check_earlier_shape(earlier)
    cur_d, old_d = current["decision"], earlier.get("decision") or {}
    same = cur_d["weights_version"] == old_d.get("weights_version") and cur_d["weights"] == old_d.get("weights")
    if not same and not allow_weights_change:
        raise WeightsMismatch(
            f"the earlier report used decision weights {old_d.get('weights')} (weights_version {old_d.get('weights_version')!r}), "
            f"this one {cur_d['weights']} (weights_version {cur_d['weights_version']!r}): decision scores are not comparable. "
            "Re-run the earlier report with the current config, or pass --allow-weights-change to compare anyway"
        )
    old_rows = {r["model_version"]: r for r in old_d.get("versions", [])}
    changes = []
    for row in cur_d["versions"]:
        old = old_rows.get(row["model_version"])
        if old is None:
            continue
        change = {"model_version": row["model_version"]}
        for key in ("decision_score", "quality", "stability", "cost_per_1k"):
            a, b = old.get(key), row.get(key)
            change[key] = {"earlier": a, "now": b, "delta": (b - a) if a is not None and b is not None else None}
        changes.append(change)
    return {
        "earlier_created_at": earlier.get("created_at"),
        "weights_changed": not same,
        "earlier_weights": old_d.get("weights"),
        "earlier_weights_version": old_d.get("weights_version"),
        "versions": changes,
    }


def evaluation_readings(report: EvaluationReport) -> list[EvaluationReading]:
    """The report's values as gauge readings (None values, for too little data, are left out)."""
    readings = [
        EvaluationReading("category_quality", c.category, "", c.model_version, c.mean_score)
        for c in report.cells
        if c.mean_score is not None
    ]
    readings += [
        EvaluationReading("stability", c.category, c.kind, c.model_version, c.value)
        for c in report.stability
        if c.value is not None
    ]
    for d in report.turn_decay:
        readings += [EvaluationReading("turn_quality", t, "", d.model_version, v["mean"]) for t, v in d.by_turn.items()]
        if d.slope is not None and d.ci is not None:
            readings += [
                EvaluationReading("turn_decay_slope", "", bound, d.model_version, value)
                for bound, value in (("estimate", d.slope), ("lower", d.ci[0]), ("upper", d.ci[1]))
            ]
        readings.append(EvaluationReading("turn_conversations", "", "", d.model_version, float(d.conversations)))
    readings += [
        EvaluationReading("decision", "", "", r.model_version, r.decision_score)
        for r in report.decision
        if r.decision_score is not None
    ]
    return readings


def export_metrics(metrics: Metrics, report: EvaluationReport) -> None:
    """Set `llmwatch_category_quality`, `llmwatch_stability`, `llmwatch_decision_score` on an agent's Metrics."""
    metrics.group(EvaluationMetrics).set_evaluation(evaluation_readings(report))


# --- text ------------------------------------------------------------------------------------


def _f(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _cell_text(cell: CategoryCell | None) -> str:
    if cell is None or cell.n == 0:
        return "-"
    return f"{cell.mean_score:.2f} | {cell.pass_rate:6.1%} [{cell.ci_low:.0%}-{cell.ci_high:.0%}] | {cell.n}"


def _stability_text(cell: StabilityCell) -> str:
    if cell.value is None:
        return f"- ({cell.detail.get('verdict', 'insufficient')})"
    if cell.kind == "sampling":
        return f"{cell.value:.3f} (var {cell.detail['mean_variance']:.4f}, {cell.n_groups} prompts, {cell.n_samples} samples)"
    if cell.kind == "turn":
        return f"{cell.value:.3f} (slope {cell.detail['slope']:+.4f} ± {cell.detail['stderr']:.4f}/turn, turns {cell.n_groups}, n {cell.n_samples})"
    d = cell.detail
    return f"{cell.value:.3f} ({d['signals_drifting']} of {d['signals_tested']} signals drift vs {d['baseline_version']}, min p_adj {_f(d['min_p_adjusted'], '.2g')})"


def format_text(report: EvaluationReport) -> str:
    versions = report.versions
    w = report.weights
    lines = [
        f"llmwatch report: {report.n_samples} samples, {len(versions)} version(s) ({', '.join(versions) or '-'}), {len(report.categories)} categories",
        f"decision weights {report.weights_version}: quality {w['quality']:g}, stability {w['stability']:g}",
        "",
        "Quality matrix (mean score | pass rate [Wilson 95% CI] | n)",
    ]
    width = max([len("overall (weighted)")] + [len(c["name"]) for c in report.categories])
    colw = 32
    lines.append(
        f"  {'category':<{width}} {'weight':>6}  " + "".join(f"{('version ' + v)[:colw]:<{colw}}" for v in versions)
    )
    index = {(c.category, c.model_version): c for c in report.cells}
    for cat in report.categories:
        cells = "".join(f"{_cell_text(index.get((cat['name'], v))):<{colw}}" for v in versions)
        lines.append(f"  {cat['name']:<{width}} {cat['weight']:>6.2f}  {cells}")
    lines.append(
        f"  {'overall (weighted)':<{width}} {'':>6}  "
        + "".join(f"{_f(report.overall_quality.get(v)):<{colw}}" for v in versions)
    )
    lines += ["", "Stability (1 = stable)"]
    if not report.stability:
        lines.append("  (none: no repeated prompt, no multi-turn conversation, no --baseline)")
    for cell in sorted(report.stability, key=lambda c: (c.kind, c.category != ALL, c.category, c.model_version)):
        lines.append(
            f"  {cell.kind:<9} {cell.category:<{width}} version {cell.model_version:<10} {_stability_text(cell)}"
        )
    lines += ["", *turn_decay_text(report.turn_decay)]
    if report.consistency:
        lines += ["", *consistency_text(report.consistency)]
    lines += [
        "",
        "Cost and latency",
        f"  {'version':<12} {'requests':>8} {'priced':>7} {'USD/request':>12} {'USD/1k req':>11}  {'latency p50/p90/p95/p99 ms':<28} TTFT p50/p90/p95/p99 ms",
    ]
    for v, c in report.costs.items():
        lat = "/".join(f"{c.latency_ms[k]:.0f}" for k in ("p50", "p90", "p95", "p99")) if c.latency_ms else "-"
        ttft = "/".join(f"{c.ttft_ms[k]:.0f}" for k in ("p50", "p90", "p95", "p99")) if c.ttft_ms else "-"
        lines.append(
            f"  {v:<12} {c.requests:>8} {c.priced:>7} {_f(c.cost_per_request, '.6f'):>12} {_f(c.cost_per_1k, '.4f'):>11}  {lat:<28} {ttft}"
        )
    lines += [
        "",
        f"Decision score = ({w['quality']:g} * quality + {w['stability']:g} * stability) / normalized_cost   [weights_version {report.weights_version}]",
        f"  {'version':<12} {'quality':>8} {'stability':>10} {'USD/1k req':>11} {'norm. cost':>11} {'decision':>9}",
    ]
    for r in report.decision:
        lines.append(
            f"  {r.model_version:<12} {_f(r.quality):>8} {_f(r.stability):>10} {_f(r.cost_per_1k, '.4f'):>11} {_f(r.normalized_cost, '.3f'):>11} {_f(r.decision_score):>9}  {r.note}"
        )
    ranked = [(r.decision_score, r) for r in report.decision if r.decision_score is not None]
    if ranked:
        best = max(ranked, key=lambda sr: sr[0])[1]
        lines.append(f"  best: version {best.model_version}")
    if report.comparison:
        cmp = report.comparison
        lines += ["", f"Compared with the report of {cmp.get('earlier_created_at')}"]
        if cmp["weights_changed"]:
            lines.append(
                f"  WARNING: the weights changed ({cmp['earlier_weights_version']} {cmp['earlier_weights']} -> {report.weights_version} {report.weights}); decision scores move for that reason alone"
            )
        for ch in cmp["versions"]:
            d = ch["decision_score"]
            lines.append(
                f"  version {ch['model_version']:<10} decision {_f(d['earlier'])} -> {_f(d['now'])} ({_f(d['delta'], '+.3f')}), quality {_f(ch['quality']['earlier'])} -> {_f(ch['quality']['now'])}"
            )
    return "\n".join(lines)
