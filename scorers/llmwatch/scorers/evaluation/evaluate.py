"""`llmwatch report`: the evaluation matrix, stability, cost/latency and decision score per version.

Everything is computed from samples and their scores by the modules it shows (matrix,
stability, decision); this module assembles, prints, compares and exports. A report in JSON
(`--format json`) can be compared with a later one (`--compare`): the comparison is refused when
the two were made with different decision weights, unless asked for explicitly, because a
change of weights moves every decision score without anything having changed in the models.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from llmwatch.core.errors import LlmwatchError
from llmwatch.core.metrics import EvaluationReading, Metrics
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.errors import mostly_errors, mostly_errors_message
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.consistency import ConsistencyRow, consistency_text
from llmwatch.scorers.evaluation.decision import (
    CostLatency,
    DecisionRow,
    choose_best,
    cost_latency,
    decision_intervals,
    decision_scores,
    quality_gaps,
)
from llmwatch.scorers.evaluation.matrix import (
    Category,
    CategoryCell,
    build_categories,
    overall_quality,
    quality_matrix,
    score_samples,
)
from llmwatch.scorers.evaluation.metrics import EvaluationMetrics
from llmwatch.scorers.evaluation.sensitivity import Embed, PromptSensitivity, prompt_sensitivity, sensitivity_text
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
from llmwatch.scorers.stats.format import interval_text

__all__ = [
    "REPORT_SCHEMA",
    "EvaluationReport",
    "WeightsMismatch",
    "build_report",
    "compare_reports",
    "decision_verdict",
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
    alpha: float = 0.05  # the level of the quality guard and of the decision score's interval
    warnings: list[str] = field(default_factory=list)  # e.g. scores that are mostly `error`
    # {version: {check: {"n", "passed", "pass_rate"}}}: each check's verdicts (pass or fail; skips
    # and errors left out) per version; the tool_call check's is the tool-call conformance rate.
    checks: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # Quality by turn within conversations and its decay slope, per version (evaluation/turns.py).
    turn_decay: list[TurnDecay] = field(default_factory=list)
    # Resampling consistency per version, from the consistency probe's pairs (evaluation/consistency.py).
    consistency: list[ConsistencyRow] = field(default_factory=list)
    # Prompt sensitivity per version, over live rephrasings of one request (evaluation/sensitivity.py).
    prompt_sensitivity: list[PromptSensitivity] = field(default_factory=list)
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["schema"] = REPORT_SCHEMA
        best = choose_best(self.decision)
        out["decision"] = {
            "weights": self.weights,
            "weights_version": self.weights_version,
            "alpha": self.alpha,
            # Only a version worse than no other on any check can be best; null when none qualifies.
            "best": best.model_version if best is not None else None,
            "versions": [{**asdict(r), "verdict": r.verdict(self.decision)} for r in self.decision],
        }
        del out["alpha"]
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
    scores_source: tuple[str, str | None] = ("SAMPLES", "SCORES"),
    sensitivity_embed: Embed | None = None,
) -> EvaluationReport:
    """`scores_source`: (samples path, scores path or None if scored now), for the warnings' fix;
    `sensitivity_embed`: the embedding function that clusters rephrasings (None: lexically)."""
    score_list = list(scores)
    shares = mostly_errors(score_list)
    warnings = [mostly_errors_message(shares, samples=scores_source[0], scores=scores_source[1])] if shares else []
    categories = build_categories(cfg, known_checks)
    # Files written before samples carried their conversation are linked by their histories here.
    if any(s.conversation_id is None and s.operation == "chat" for s in samples):
        samples = link_samples(samples)
    rows = score_samples(samples, score_list, categories, cfg.default_category)
    cells = quality_matrix(rows, categories)
    quality = overall_quality(cells)
    _, sampling = sampling_stability(rows)
    stability = sampling + turn_stability(rows)
    if baseline is not None:
        stability += version_stability(samples, score_list, baseline, alpha=drift_alpha, min_samples=drift_min_samples)
    return assemble_report(
        n_samples=len(samples),
        versions=sorted({r.version for r in rows}),
        categories=categories,
        cells=cells,
        quality=quality,
        stability=stability,
        baseline=baseline,
        costs=cost_latency(samples),
        gaps=quality_gaps(score_list, drift_alpha),
        intervals_of=lambda combined: decision_intervals(
            rows, {c.name: c.weight for c in categories}, combined, cfg.decision, drift_alpha
        ),
        cfg=cfg,
        alpha=drift_alpha,
        warnings=warnings,
        checks=check_pass_rates(score_list),
        turn_decay=turn_decay(rows, check_values(score_list)),
        prompt_sensitivity=prompt_sensitivity(rows, check_values(score_list), embed=sensitivity_embed),
    )


def assemble_report(
    *,
    n_samples: int,
    versions: list[str],
    categories: Sequence[Category],
    cells: list[CategoryCell],
    quality: dict[str, float | None],
    stability: list[StabilityCell],
    baseline: Any,
    costs: dict[str, CostLatency],
    gaps: Mapping[str, Sequence[Any]],
    intervals_of: Callable[[dict[str, float | None]], Mapping[str, tuple[float, float]]],
    cfg: MatrixSection,
    alpha: float,
    warnings: list[str],
    checks: dict[str, dict[str, dict[str, Any]]],
    turn_decay: list[TurnDecay],
    prompt_sensitivity: list[PromptSensitivity],
) -> EvaluationReport:
    """The report from its figures: the one place the in-memory `build_report` and the streamed
    `report_stream.build_report_streamed` agree on how the decision, its interval and the
    category list are put together (the streamed path computes the same figures in columns)."""
    combined = combined_stability(stability)
    for v in versions:
        combined.setdefault(v, None)
        quality.setdefault(v, None)
    intervals = intervals_of(combined)
    decision = [
        replace(
            r,
            decision_low=intervals[r.model_version][0]
            if r.decision_score is not None and r.model_version in intervals
            else None,
            decision_high=intervals[r.model_version][1]
            if r.decision_score is not None and r.model_version in intervals
            else None,
            worse_on=[asdict(g) for g in gaps.get(r.model_version, [])],
        )
        for r in decision_scores(quality, combined, costs, cfg.decision)
    ]
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
    baseline_info = None
    if baseline is not None:
        baseline_info = {
            "model_version": baseline.model_version,
            "checksum": baseline.checksum,
            "sample_count": baseline.sample_count,
        }
    return EvaluationReport(
        n_samples=n_samples,
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
        alpha=alpha,
        warnings=warnings,
        checks=checks,
        turn_decay=turn_decay,
        prompt_sensitivity=prompt_sensitivity,
    )


def check_pass_rates(scores: Iterable[Score]) -> dict[str, dict[str, dict[str, Any]]]:
    """{version: {check: {"n", "passed", "pass_rate"}}} over the pass and fail verdicts."""
    counts: dict[tuple[str, str], list[int]] = {}
    # The fields check's per-field hits: {(version, check): {field: [n, hits]}}.
    field_hits: dict[tuple[str, str], dict[str, list[int]]] = {}
    for score in scores:
        if score.result in ("pass", "fail"):
            key = (score.model_version or "unknown", score.check)
            entry = counts.setdefault(key, [0, 0])
            entry[0] += 1
            entry[1] += score.result == "pass"
            if score.kind == "fields" and isinstance(score.details.get("fields"), dict):
                per = field_hits.setdefault(key, {})
                for name, hit in score.details["fields"].items():
                    cell = per.setdefault(str(name), [0, 0])
                    cell[0] += 1
                    cell[1] += bool(hit)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (version, check), (n, ok) in sorted(counts.items()):
        out.setdefault(version, {})[check] = {"n": n, "passed": ok, "pass_rate": ok / n}
        if (version, check) in field_hits:
            out[version][check]["field_hit_rates"] = {
                name: hits / total for name, (total, hits) in sorted(field_hits[(version, check)].items())
            }
    return out


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
    for p in report.prompt_sensitivity:
        if p.sensitivity is not None:
            readings.append(EvaluationReading("prompt_sensitivity", "", "", p.model_version, p.sensitivity))
    readings += [
        EvaluationReading("decision", "", "", r.model_version, r.decision_score)
        for r in report.decision
        if r.decision_score is not None
    ]
    return readings


def export_metrics(metrics: Metrics, report: EvaluationReport) -> None:
    """Set `llmwatch_category_quality`, `llmwatch_stability`, `llmwatch_decision_score` on an agent's Metrics."""
    metrics.group(EvaluationMetrics).set_evaluation(evaluation_readings(report))


# --- the verdict, shared by the text and HTML reports ----------------------------------------


def _interval(r: DecisionRow) -> str:
    if r.decision_low is None or r.decision_high is None:
        return ""
    return f" [{r.decision_low:.3f}-{r.decision_high:.3f}]"


def _leveled(r: DecisionRow, alpha: float) -> str:
    """The interval with its level, for the verdict's sentences (the table's header names it there)."""
    if r.decision_low is None or r.decision_high is None:
        return ""
    return " " + interval_text(r.decision_low, r.decision_high, 1 - alpha)


def decision_verdict(report: EvaluationReport) -> tuple[str, str, list[str]]:
    """(level ok|info|warn, headline, points): which version is best, and why the others are not.

    A version worse than another on any check (the quality guard, `decision.quality_gaps`) is
    never best, whatever its score; a version is named best only if one qualifies.
    """
    w = report.weights
    level_of_confidence = f"{1 - report.alpha:.0%}"
    scored = [r for r in report.decision if r.decision_score is not None]
    formula = (
        f"decision score = ({w['quality']:g} * quality + {w['stability']:g} * stability) / normalized cost, "
        f"weights_version {report.weights_version}; [interval] = {level_of_confidence} bootstrap; a version "
        f"worse than another on a check's pass rate (one-sided test, Holm, alpha {report.alpha:g}) cannot be best"
    )
    warnings = [f"WARNING: {w}" for w in report.warnings]
    if not scored:
        return (
            "warn",
            "No decision score: no version has quality, stability and a price",
            warnings + [f"version {r.model_version}: {r.note}" for r in report.decision],
        )
    best = choose_best(report.decision)
    points: list[str] = []
    if best is not None:
        points.append(
            f"version {best.model_version}: decision score {_f(best.decision_score)}{_leveled(best, report.alpha)} "
            f"(quality {_f(best.quality)}, stability {_f(best.stability)}, USD/1k requests {_f(best.cost_per_1k, '.4f')})"
        )
    for r in sorted(scored, key=lambda r: -(r.decision_score or 0.0)):
        if r is best:
            continue
        line = f"version {r.model_version}: decision score {_f(r.decision_score)}{_leveled(r, report.alpha)}"
        if r.worse_on:
            # Wilson intervals at 1 - alpha (decision.gaps_of_counts), named like every other interval.
            level = 1 - report.alpha
            line += f", {r.verdict(report.decision)}, so not eligible: " + "; ".join(
                f"{g['check']} {g['pass_rate']:.1%} {interval_text(g['ci_low'], g['ci_high'], level, '.0%')} of {g['n']} vs "
                f"{g['than_pass_rate']:.1%} {interval_text(g['than_ci_low'], g['than_ci_high'], level, '.0%')} of {g['than_n']} "
                f"for version {g['than']} (Holm p {g['p_adjusted']:.1e})"
                for g in r.worse_on
            )
        elif (
            best is not None
            and r.decision_low is not None
            and best.decision_low is not None
            and r.decision_high is not None
            and r.decision_high >= best.decision_low
        ):
            line += f" (its interval overlaps version {best.model_version}'s: the score does not separate them)"
        points.append(line)
    points += [f"version {r.model_version}: no decision score ({r.note})" for r in report.decision if r not in scored]
    points.append(formula)
    if best is None:
        return (
            "warn",
            "No version qualifies as best: each one with a score is worse than another on quality",
            warnings + points,
        )
    if warnings:  # the best is named, but on scores that are mostly errors for some check
        return ("warn", f"Best: version {best.model_version}", points[:1] + warnings + points[1:])
    return ("ok" if len(scored) > 1 else "info", f"Best: version {best.model_version}", points)


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
        prompts = "1 prompt" if cell.n_groups == 1 else f"{cell.n_groups} prompts"
        caveat = f"; {cell.caveat}" if cell.caveat else ""
        return f"{cell.value:.3f} (var {cell.detail['mean_variance']:.4f}, {prompts}, {cell.n_samples} samples{caveat})"
    if cell.kind == "turn":
        return f"{cell.value:.3f} (slope {cell.detail['slope']:+.4f} ± {cell.detail['stderr']:.4f}/turn, turns {cell.n_groups}, n {cell.n_samples})"
    d = cell.detail
    return f"{cell.value:.3f} ({d['signals_drifting']} of {d['signals_tested']} signals drift vs {d['baseline_version']}, min p_adj {_f(d['min_p_adjusted'], '.2g')})"


def _checks_text(report: EvaluationReport) -> list[str]:
    """The Checks table: each check's pass rate and n per version, and a fields check's hit rate per field."""
    if not report.checks:
        return []
    versions = report.versions
    lines = ["", "Checks (pass rate | n per version; tool_call: tool-call conformance; .field: hit rate)"]
    names = sorted({c for per in report.checks.values() for c in per})
    fields = {
        name: sorted({f for per in report.checks.values() for f in per.get(name, {}).get("field_hit_rates", {})})[:50]
        for name in names
    }
    cw = max([len(n) for n in names] + [len(f) + 3 for fs in fields.values() for f in fs])
    cw = min(cw, 48)
    # A column as wide as its version's name: cut to 20 characters, gpt-3.5-turbo-0301 and -0613
    # both read "version gpt-3.5-turb", run together.
    vw = max([20] + [len(f"version {v}") + 2 for v in versions])
    lines.append(f"  {'check':<{cw}}  " + "".join(f"{'version ' + v:<{vw}}" for v in versions))
    for name in names:
        row = []
        for v in versions:
            got = report.checks.get(v, {}).get(name)
            shown = "{:6.1%} | {}".format(got["pass_rate"], got["n"]) if got else "-"
            row.append(f"{shown:<{vw}}")
        lines.append(f"  {name[:cw]:<{cw}}  " + "".join(row))
        for field_name in fields[name]:
            row = []
            for v in versions:
                rate = report.checks.get(v, {}).get(name, {}).get("field_hit_rates", {}).get(field_name)
                row.append(f"{('-' if rate is None else f'{rate:6.1%}'):<{vw}}")
            lines.append(f"    {('.' + field_name)[: cw - 2]:<{cw - 2}}  " + "".join(row))
    return lines


def format_text(report: EvaluationReport) -> str:
    versions = report.versions
    w = report.weights
    lines = [
        f"llmwatch report: {report.n_samples} samples, {len(versions)} version(s) ({', '.join(versions) or '-'}), {len(report.categories)} categories",
        f"decision weights {report.weights_version}: quality {w['quality']:g}, stability {w['stability']:g}",
        *(f"WARNING: {warning}" for warning in report.warnings),
        "",
        "Quality matrix (mean score | pass rate [Wilson 95% CI] | n)",
    ]
    width = max([len("overall (weighted)")] + [len(c["name"]) for c in report.categories])
    colw = max([32] + [len(f"version {v}") + 2 for v in versions])
    lines.append(f"  {'category':<{width}} {'weight':>6}  " + "".join(f"{'version ' + v:<{colw}}" for v in versions))
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
    lines += _checks_text(report)
    # The cost and decision tables' version column, as wide as the longest name (past 12 characters
    # a name pushed its row's figures out from under their headings).
    nw = max([12] + [len(v) for v in (*report.costs, *(r.model_version for r in report.decision))])
    lines += ["", *turn_decay_text(report.turn_decay)]
    if report.consistency:
        lines += ["", *consistency_text(report.consistency)]
    lines += ["", *sensitivity_text(report.prompt_sensitivity)]
    lines += [
        "",
        "Cost and latency",
        f"  {'version':<{nw}} {'requests':>8} {'priced':>7} {'USD/request':>12} {'USD/1k req':>11} {'USD/1M tok':>11}  {'latency p50/p90/p95/p99 ms':<28} TTFT p50/p90/p95/p99 ms",
    ]
    for v, c in report.costs.items():
        lat = "/".join(f"{c.latency_ms[k]:.0f}" for k in ("p50", "p90", "p95", "p99")) if c.latency_ms else "-"
        ttft = "/".join(f"{c.ttft_ms[k]:.0f}" for k in ("p50", "p90", "p95", "p99")) if c.ttft_ms else "-"
        lines.append(
            f"  {v:<{nw}} {c.requests:>8} {c.priced:>7} {_f(c.cost_per_request, '.6f'):>12} {_f(c.cost_per_1k, '.4f'):>11} {_f(c.cost_per_1m_tokens, '.4f'):>11}  {lat:<28} {ttft}"
        )
    rows = sorted({row for c in report.costs.values() for row in c.price_rows})
    if rows:
        lines.append(
            "  price rows used: "
            + "; ".join(
                f"{v}: " + ", ".join(f"{r} ({n})" for r, n in c.price_rows.items())
                for v, c in report.costs.items()
                if c.price_rows
            )
        )
    lines += [
        "",
        f"Decision score = ({w['quality']:g} * quality + {w['stability']:g} * stability) / normalized_cost   [weights_version {report.weights_version}]",
        f"  [interval]: {1 - report.alpha:.0%} bootstrap; only a version worse than no other on any check's pass rate (one-sided, Holm, alpha {report.alpha:g}) can be best",
        f"  {'version':<{nw}} {'quality':>8} {'stability':>10} {'USD/1k req':>11} {'norm. cost':>11} {'decision':>9} {'[interval]':<15}",
    ]
    for r in report.decision:
        note = "; ".join(x for x in (r.verdict(report.decision), r.note) if x)
        lines.append(
            f"  {r.model_version:<{nw}} {_f(r.quality):>8} {_f(r.stability):>10} {_f(r.cost_per_1k, '.4f'):>11} {_f(r.normalized_cost, '.3f'):>11} {_f(r.decision_score):>9} {_interval(r).strip() or '-':<15}  {note}"
        )
    if any(r.decision_score is not None for r in report.decision):
        level, headline, points = decision_verdict(report)
        best = choose_best(report.decision)
        lines.append(f"  best: version {best.model_version}" if best is not None else f"  best: none. {headline}")
        lines += [f"    {p}" for p in points[1 if best is not None else 0 : -1] if not p.startswith("WARNING: ")]
    elif report.decision:
        # No version has a score: say so rather than end the table without a verdict.
        lines.append(f"  best: none. {decision_verdict(report)[1]}")
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
