"""The evaluation report's stability sections (quality by turn, turn decay, prompt sensitivity), kept out of html.py.

`render_turn_decay(doc, report, palette)` adds a heading, one figure (mean score by turn per
version with its cluster-bootstrap interval as a band) and the slope table to the page being
built (html.py's `HtmlDocument`, passed in: this module does not import html.py, which calls
it); `render_prompt_sensitivity` adds the sensitivity per version with its interval, and its table.
"""

from __future__ import annotations

from typing import Any, Sequence

from llmwatch.core.extras import require
from llmwatch.scorers.evaluation.evaluate import EvaluationReport

__all__ = ["render_prompt_sensitivity", "render_turn_decay"]


def _pyplot() -> Any:
    require("reports", "--format html", "use --format text or json")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:+.4f}"


def render_turn_decay(doc: Any, report: EvaluationReport, palette: Sequence[str]) -> None:
    doc.heading("Quality by turn within conversations")
    items = [d for d in report.turn_decay if d.by_turn]
    if not items:
        doc.paragraph("none: no scored chat sample", "note")
        return
    # One axis for every version: a turn one version never reached keeps its place for the others.
    axis = sorted({t for d in items for t in d.by_turn}, key=lambda t: int(t.rstrip("+")))
    if len(axis) < 2:
        # One dot per version at turn 1 on a zoomed axis drew a difference, not a trend by turn.
        doc.paragraph(
            f"Nothing to draw by turn: every scored sample is turn {axis[0]} (no conversation with 2 or more turns).",
            "note",
        )
    else:
        _turn_figure(doc, items, axis, palette)
    doc.table(
        ["version", "slope per turn", "95% interval", "verdict", "conversations (2+ turns)", "samples"],
        [
            [
                d.model_version,
                _n(d.slope),
                f"[{_n(d.ci[0])}, {_n(d.ci[1])}]" if d.ci else "-",
                d.verdict,
                f"{d.conversations} of {d.conversations_total}",
                d.samples,
            ]
            for d in report.turn_decay
        ],
        numeric=(1, 5),
    )


def _turn_figure(doc: Any, items: Sequence[Any], axis: Sequence[str], palette: Sequence[str]) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.2))
    position = {t: i for i, t in enumerate(axis)}
    for i, d in enumerate(items):
        labels = list(d.by_turn)
        xs = [position[t] for t in labels]
        colour = palette[i % len(palette)]
        ax.plot(
            xs, [d.by_turn[t]["mean"] for t in labels], marker="o", color=colour, label=f"version {d.model_version}"
        )
        ax.fill_between(
            xs, [d.by_turn[t]["lo"] for t in labels], [d.by_turn[t]["hi"] for t in labels], color=colour, alpha=0.15
        )
    ax.set_xticks(range(len(axis)), axis)
    ax.set_xlabel("turn (user messages in the request)")
    ax.set_ylabel("mean sample score")
    ax.legend(fontsize=8)
    doc.open_figures()
    doc.figure(fig, "Mean score by turn; bands: 95% intervals, conversations resampled")
    doc.close_figures()


def _f3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def render_prompt_sensitivity(doc: Any, report: EvaluationReport, palette: Sequence[str]) -> None:
    """Prompt sensitivity per version: the figure with its interval, and the table behind it."""
    doc.heading("Prompt sensitivity: rephrasings of one request")
    items = [p for p in report.prompt_sensitivity if p.sensitivity is not None]
    if not report.prompt_sensitivity:
        doc.paragraph("none: no scored sample", "note")
        return
    if items:
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(6.2, 0.6 + 0.45 * len(items)))
        for i, p in enumerate(items):
            assert p.sensitivity is not None
            lo, hi = p.ci if p.ci else (p.sensitivity, p.sensitivity)
            ax.errorbar(
                [p.sensitivity],
                [i],
                xerr=[[p.sensitivity - lo], [hi - p.sensitivity]],
                fmt="o",
                color=palette[i % len(palette)],
                capsize=4,
            )
        ax.set_yticks(range(len(items)), [f"version {p.model_version}" for p in items])
        ax.set_xlim(0.0, 1.0)
        # What is plotted: the sensitivity, not the within-cluster variance share (text and JSON report that).
        ax.set_xlabel("mean score difference between two rephrasings of one request (0 robust)")
        doc.open_figures()
        doc.figure(fig, "Prompt sensitivity per version; bars: 95% intervals, clusters of rephrasings resampled")
        doc.close_figures()
    doc.table(
        ["version", "sensitivity", "95% interval", "verdict", "clusters", "phrasings", "samples"],
        [
            [
                p.model_version,
                _f3(p.sensitivity),
                f"[{_f3(p.ci[0])}, {_f3(p.ci[1])}]" if p.ci else "-",
                p.verdict,
                p.clusters,
                p.phrasings,
                p.samples,
            ]
            for p in report.prompt_sensitivity
        ],
        numeric=(1, 4, 5, 6),
    )
