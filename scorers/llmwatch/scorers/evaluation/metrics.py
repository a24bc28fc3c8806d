"""The business evaluation's gauges (evaluate.export_metrics, the scorer's matrix): set from a report, not per call."""

from __future__ import annotations

from typing import Iterable

from llmwatch.core.metrics import EvaluationReading, MetricGroup, gauge


class EvaluationMetrics(MetricGroup):
    """Quality per task category, stability and the decision score per model version."""

    category_quality = gauge(
        "llmwatch_category_quality",
        "Mean quality score (0..1) of a task category from the evaluation matrix.",
        ["category", "model_version"],
    )
    stability = gauge(
        "llmwatch_stability",
        "Stability (0..1, 1 = stable) by kind (sampling, turn, version) and task category.",
        ["kind", "category", "model_version"],
    )
    decision_score = gauge(
        "llmwatch_decision_score",
        "(w_quality * quality + w_stability * stability) / normalized_cost of a model version.",
        ["model_version"],
    )

    turn_quality = gauge(
        "llmwatch_turn_quality",
        "Mean quality score (0..1) of chat samples at a turn of their conversation (1..9, 10+), from the evaluation report.",
        ["turn", "model_version"],
    )
    turn_decay_slope = gauge(
        "llmwatch_turn_decay_slope",
        "Within-conversation change of quality score per extra turn (negative: decays), with its 95% cluster-bootstrap interval (bound: estimate, lower, upper).",
        ["bound", "model_version"],
    )
    turn_conversations = gauge(
        "llmwatch_turn_conversations",
        "Conversations with two turns or more behind llmwatch_turn_decay_slope.",
        ["model_version"],
    )

    prompt_sensitivity = gauge(
        "llmwatch_prompt_sensitivity",
        "Within-cluster share (0..1; 0 robust) of quality score variance over live rephrasings of one request, from the evaluation report (its interval is in the report).",
        ["model_version"],
    )

    def set_evaluation(self, readings: Iterable[EvaluationReading]) -> None:
        """Evaluation readings become the category quality, stability and decision score gauges."""
        for r in readings:
            v = self.version_label(r.model_version)
            if r.kind == "category_quality":
                self.category_quality.labels(r.category, v).set(r.value)
            elif r.kind == "stability":
                self.stability.labels(r.stability_kind, r.category, v).set(r.value)
            elif r.kind == "decision":
                self.decision_score.labels(v).set(r.value)
            elif r.kind == "turn_quality":
                self.turn_quality.labels(r.category, v).set(r.value)
            elif r.kind == "turn_decay_slope":
                self.turn_decay_slope.labels(r.stability_kind, v).set(r.value)
            elif r.kind == "turn_conversations":
                self.turn_conversations.labels(v).set(r.value)
            elif r.kind == "prompt_sensitivity":
                self.prompt_sensitivity.labels(v).set(r.value)
