"""Self-contained HTML reports with plots: `llmwatch drift` and `llmwatch report` with `--format html`.

One file that opens from disk with no network at view time: styles inline, every figure drawn by
matplotlib (Agg, no display) and inlined as SVG, or as a base64 PNG when its SVG would be big.
The verdict comes first, the plots after it. Every string that came from traffic or config
(model versions, category and check names, routes) is escaped with `html.escape` before it
reaches the document; matplotlib escapes the text it writes into its own SVG, and mathtext
parsing is off so that a `$` in a model name is drawn as a `$`.

`HtmlDocument` is the reusable part (verdict, sections, tables, figures); `render_drift` and
`render_evaluation` lay out the two reports, and a later report (e.g. `shadow report`) builds
its own layout on the same document.

matplotlib is the optional extra `reports` (`pip install 'llmwatch[reports]'`); without it
`--format html` is refused in one line (`require_matplotlib`).
"""

from __future__ import annotations

import base64
import html
import io
import math
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import numpy as np

from llmwatch.core.extras import require
from llmwatch.scorers.drift.compare import DriftReport, Signal
from llmwatch.scorers.drift.features import RouteStats
from llmwatch.scorers.evaluation.evaluate import EvaluationReport
from llmwatch.scorers.reports.stability_html import render_turn_decay
from llmwatch.scorers.stats.proportions import wilson_interval

__all__ = ["HtmlDocument", "require_matplotlib", "render_drift", "render_evaluation"]

# Above this an inline SVG (a dense scatter, many bins) is swapped for a PNG of the same figure.
SVG_LIMIT_BYTES = 150_000
BASELINE_COLOUR, CURRENT_COLOUR = "#7f8c8d", "#d35400"
PALETTE = ["#2e86c1", "#d35400", "#28b463", "#8e44ad", "#c0392b", "#16a085", "#b7950b", "#566573"]

# Drift signals by family: what the traffic asked (inputs), how the model answered (behaviour),
# what it cost to answer (performance). A family with no signal in a report is not shown.
PERFORMANCE = ("latency_ms", "ttft_ms", "cost_usd")


def require_matplotlib() -> None:
    require("reports", "--format html", "use --format text or json")


def _pyplot() -> Any:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(x: float | None, spec: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


_CSS = """
:root { color-scheme: light; }
body { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 0; color: #1c2833; background: #fbfcfc; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 60px; }
h1 { font-size: 1.5em; margin: 0 0 4px; }
h2 { font-size: 1.2em; margin: 32px 0 8px; border-bottom: 1px solid #d5d8dc; padding-bottom: 4px; }
h3 { font-size: 1.02em; margin: 20px 0 6px; }
.meta { color: #566573; font-size: 0.9em; }
.verdict { border-radius: 6px; padding: 14px 18px; margin: 16px 0 8px; border-left: 8px solid; }
.verdict .head { font-size: 1.25em; font-weight: 700; }
.verdict.bad { background: #fdedec; border-color: #c0392b; }
.verdict.ok { background: #e9f7ef; border-color: #1e8449; }
.verdict.warn { background: #fef5e7; border-color: #b9770e; }
.verdict.info { background: #ebf5fb; border-color: #2874a6; }
.verdict ul { margin: 6px 0 0; padding-left: 20px; }
.tablewrap { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.82em; margin: 8px 0; }
th, td { border: 1px solid #d5d8dc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f4f4; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.drift td { background: #fdedec; }
.figs { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 6px 0; background: #fff; border: 1px solid #e5e8e8; border-radius: 4px; padding: 6px; }
figure svg, figure img { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 0.82em; color: #424949; max-width: 520px; margin-top: 4px; }
.note { font-size: 0.85em; color: #566573; }
"""


class HtmlDocument:
    """A report as a list of HTML fragments; every method escapes what it is given."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self.parts: list[str] = []
        self._figures = 0

    def verdict(self, level: str, headline: str, points: Sequence[str] = ()) -> None:
        items = "".join(f"<li>{_e(p)}</li>" for p in points)
        self.parts.append(
            f'<section class="verdict {_e(level)}" id="verdict"><div class="head">{_e(headline)}</div>{f"<ul>{items}</ul>" if items else ""}</section>'
        )

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(f"<h{level}>{_e(text)}</h{level}>")

    def paragraph(self, text: str, cls: str = "") -> None:
        self.parts.append(f"<p{f' class={chr(34)}{_e(cls)}{chr(34)}' if cls else ''}>{_e(text)}</p>")

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        numeric: Sequence[int] = (),
        row_classes: Sequence[str] | None = None,
    ) -> None:
        head = "".join(f"<th>{_e(h)}</th>" for h in headers)
        body = []
        for i, row in enumerate(rows):
            cls = f' class="{_e(row_classes[i])}"' if row_classes and row_classes[i] else ""
            cells = "".join(f"<td{' class=n' if j in numeric else ''}>{_e(v)}</td>" for j, v in enumerate(row))
            body.append(f"<tr{cls}>{cells}</tr>")
        self.parts.append(
            f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
        )

    def open_figures(self) -> None:
        self.parts.append('<div class="figs">')

    def close_figures(self) -> None:
        self.parts.append("</div>")

    def figure(self, fig: Any, caption: str = "") -> None:
        """Inline `fig` (a matplotlib Figure) and close it."""
        plt = _pyplot()
        self._figures += 1
        buf = io.BytesIO()
        # A salt per figure keeps the clip-path ids of two inlined SVGs from colliding.
        with plt.rc_context({"svg.hashsalt": f"llmwatch-fig-{self._figures}"}):
            # No RDF block naming the tool and date in every figure: bytes for nothing.
            fig.savefig(
                buf,
                format="svg",
                bbox_inches="tight",
                metadata={"Creator": None, "Date": None, "Format": None, "Type": None},
            )
        svg = buf.getvalue().decode()
        if len(svg) <= SVG_LIMIT_BYTES:
            start = svg.find("<svg")
            body = svg[start:] if start >= 0 else svg
        else:
            png = io.BytesIO()
            fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
            body = f'<img alt="{_e(caption)}" src="data:image/png;base64,{base64.b64encode(png.getvalue()).decode()}">'
        plt.close(fig)
        cap = f"<figcaption>{_e(caption)}</figcaption>" if caption else ""
        self.parts.append(f"<figure>{body}{cap}</figure>")

    def render(self) -> str:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            # No favicon request from a page opened from disk.
            '<link rel="icon" href="data:,">'
            f"<title>{_e(self.title)}</title><style>{_CSS}</style></head><body><main>"
            f'<h1>{_e(self.title)}</h1><div class="meta">{_e(self.subtitle)}{" · " if self.subtitle else ""}generated {stamp} by llmwatch</div>'
            + "\n".join(self.parts)
            + "</main></body></html>\n"
        )


def _style() -> dict[str, Any]:
    return {
        "svg.fonttype": "none",  # text stays text: smaller files, selectable labels
        "font.family": ["DejaVu Sans", "sans-serif"],
        "font.size": 9,
        "text.parse_math": False,  # a "$" in a model name is a dollar sign, not TeX
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }


# --- drift ----------------------------------------------------------------------------------


def _percent() -> Any:
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0, decimals=0)


def _family(sig: Signal) -> str:
    if getattr(sig, "family", None):
        return sig.family  # the drift families (scorers/llmwatch/scorers/drift/families.py) say it themselves
    if sig.name in PERFORMANCE:
        return "performance"
    if sig.name.startswith(("input", "prompt", "request")):
        return "inputs"
    return "behaviour"


def _signal_caption(sig: Signal) -> str:
    parts = [
        f"{sig.name} on {sig.route}: {sig.verdict}",
        f"{sig.test} statistic {_num(sig.statistic, '.4g')}",
        f"p {_num(sig.p_value, '.2e')}",
        f"p adjusted {_num(sig.p_adjusted, '.2e')}",
        f"effect {_num(sig.effect_size, '+.3f')}",
        f"n {sig.n_baseline}/{sig.n_current}",
    ]
    if sig.detail.get("psi") is not None:
        parts.append(f"PSI {sig.detail['psi']} ({sig.detail.get('psi_band')})")
    if sig.direction:
        parts.append(sig.direction)
    return "; ".join(parts)


# Drift-family signals whose values are a field of the per-sample rows (scorers/llmwatch/scorers/drift/rows.py).
_ROW_FIELDS = {
    "output_tokens": "output_tokens",
    "input:prompt_tokens": "prompt_tokens",
    "perf:latency_per_token_ms": "ms_per_token",
    "perf:ttft_ms_by_input_length": "ttft_ms",
    "perf:cost_per_1k_tokens": "cost_per_1k",
    "perf:latency_ms": "latency_ms",
    "perf:ttft_ms": "ttft_ms",
    "perf:cost_usd": "cost_usd",
}


def _reservoirs(sig: Signal, base: RouteStats, cur: RouteStats) -> tuple[list[float], list[float]] | None:
    if sig.name.startswith("score:"):
        check = sig.name.split(":", 1)[1]
        b, c = base.checks.get(check), cur.checks.get(check)
        if b is not None and c is not None and b.values is not None and c.values is not None:
            return b.values.reservoir, c.values.reservoir
        return None
    if sig.name in _ROW_FIELDS and base.rows and cur.rows:
        field = _ROW_FIELDS[sig.name]
        b_v = [v for r in base.rows if (v := getattr(r, field)) is not None]
        c_v = [v for r in cur.rows if (v := getattr(r, field)) is not None]
        return (b_v, c_v) if b_v and c_v else None
    b_m, c_m = base.metrics.get(sig.name), cur.metrics.get(sig.name)
    if b_m is None or c_m is None:
        return None
    return b_m.reservoir, c_m.reservoir


def _distribution_figure(
    plt: Any, sig: Signal, base: Sequence[float], cur: Sequence[float], baseline_label: str, current_label: str
) -> Any:
    b, c = np.asarray(base, dtype=float), np.asarray(cur, dtype=float)
    both = np.concatenate([b, c])
    lo, hi = np.percentile(both, [0.5, 99.5]) if len(both) else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    bins = np.linspace(lo, hi, 41)
    fig, ax = plt.subplots(figsize=(4.6, 2.5))
    for values, colour, label in (
        (b, BASELINE_COLOUR, f"baseline {baseline_label} (n {len(b)})"),
        (c, CURRENT_COLOUR, f"current {current_label} (n {len(c)})"),
    ):
        counts, edges = np.histogram(np.clip(values, lo, hi), bins=bins)
        density = counts / max(1, counts.sum())
        ax.stairs(
            density,
            edges,
            color=colour,
            linewidth=1.4,
            label=label,
            fill=colour == BASELINE_COLOUR,
            alpha=0.35 if colour == BASELINE_COLOUR else 1.0,
        )
    ax.set_title(
        f"{sig.name} [{sig.route}]  {sig.verdict.upper()}  ({'KS D' if sig.test == 'ks' else sig.test} {_num(sig.statistic, '.3f')}, p adj {_num(sig.p_adjusted, '.2g')})",
        fontsize=8.5,
        loc="left",
        color="#c0392b" if sig.verdict == "drift" else "#1c2833",
    )
    ax.set_ylabel("share of calls")
    ax.yaxis.set_major_formatter(_percent())
    ax.legend(fontsize=7, frameon=False, loc="upper right")
    return fig


def _pass_rate_figure(
    plt: Any, sig: Signal, base: RouteStats, cur: RouteStats, baseline_label: str, current_label: str
) -> Any:
    check = sig.name.split(":", 1)[1]
    fig, ax = plt.subplots(figsize=(4.6, 2.1))
    labels, rates, lows, highs, colours = [], [], [], [], []
    for side, stats_, colour in (
        (f"baseline {baseline_label}", base, BASELINE_COLOUR),
        (f"current {current_label}", cur, CURRENT_COLOUR),
    ):
        cs = stats_.checks[check]
        n = cs.n_pass + cs.n_fail
        rate = cs.n_pass / n if n else math.nan
        lo, hi = wilson_interval(cs.n_pass, n)
        labels.append(f"{side}\n(n {n})")
        rates.append(rate)
        lows.append(rate - lo if n else 0)
        highs.append(hi - rate if n else 0)
        colours.append(colour)
    y = np.arange(len(labels))
    ax.barh(y, rates, xerr=[lows, highs], color=colours, capsize=4, height=0.55)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlim(
        min(0.9, max(0.0, min(r - lo for r, lo in zip(rates, lows) if not math.isnan(r)) - 0.05))
        if any(not math.isnan(r) for r in rates)
        else 0.0,
        1.0,
    )
    ax.set_xlabel("pass rate (Wilson 95% CI)")
    ax.invert_yaxis()
    ax.set_title(
        f"{sig.name} [{sig.route}]  {sig.verdict.upper()}",
        fontsize=9,
        loc="left",
        color="#c0392b" if sig.verdict == "drift" else "#1c2833",
    )
    return fig


def _failure_modes_figure(
    plt: Any, sig: Signal, base: RouteStats, cur: RouteStats, baseline_label: str, current_label: str
) -> Any:
    modes = [m for m in base.failure_modes if base.failure_modes.get(m, 0) or cur.failure_modes.get(m, 0)]
    nb, nc = max(1, sum(base.failure_modes.values())), max(1, sum(cur.failure_modes.values()))
    x = np.arange(len(modes))
    fig, ax = plt.subplots(figsize=(4.6, 2.4))
    ax.bar(
        x - 0.2,
        [base.failure_modes.get(m, 0) / nb for m in modes],
        width=0.4,
        color=BASELINE_COLOUR,
        label=f"baseline {baseline_label}",
    )
    ax.bar(
        x + 0.2,
        [cur.failure_modes.get(m, 0) / nc for m in modes],
        width=0.4,
        color=CURRENT_COLOUR,
        label=f"current {current_label}",
    )
    ax.set_xticks(x, modes, fontsize=7)
    ax.yaxis.set_major_formatter(_percent())
    ax.set_ylabel("share of calls")
    ax.legend(fontsize=7, frameon=False)
    ax.set_title(
        f"failure modes [{sig.route}]  {sig.verdict.upper()}",
        fontsize=9,
        loc="left",
        color="#c0392b" if sig.verdict == "drift" else "#1c2833",
    )
    return fig


def render_drift(
    report: DriftReport, baseline_routes: Mapping[str, RouteStats], current_routes: Mapping[str, RouteStats]
) -> str:
    """The drift report: verdict, the signal table, then baseline-vs-current plots by family."""
    plt = _pyplot()
    current_label = ", ".join(report.current_versions) or "-"
    doc = HtmlDocument("llmwatch drift report", f"baseline {report.baseline_version} vs current {current_label}")
    drifting = [s for s in report.signals if s.verdict == "drift"]
    tested = [s for s in report.signals if not math.isnan(s.p_value)]
    head, level = {
        "drift": ("DRIFT: the current window behaves differently from the baseline", "bad"),
        "stable": ("STABLE: no signal differs from the baseline beyond chance", "ok"),
        "insufficient": (
            f"UNDECIDED: too few samples (each signal needs at least {report.settings.min_samples} on both sides)",
            "warn",
        ),
    }[report.verdict]
    points = [
        f"{s.name} on {s.route}: {s.direction or 'changed'} (effect {_num(s.effect_size, '+.3f')}, p adjusted {_num(s.p_adjusted, '.2g')})"
        for s in drifting[:8]
    ]
    points.append(
        f"baseline version {report.baseline_version}; current window {report.n_current} samples of version(s) {current_label}"
    )
    points.append(
        f"alpha {report.settings.alpha} with {report.settings.correction} correction over {len(tested)} tests; exit code {report.exit_code}"
    )
    doc.verdict(level, head, points)

    doc.heading("Signals")
    doc.table(
        [
            "verdict",
            "family",
            "signal",
            "route",
            "test",
            "statistic",
            "p",
            "p adjusted",
            "effect",
            "n base/cur",
            "direction",
        ],
        [
            [
                s.verdict,
                _family(s),
                s.name,
                s.route,
                s.test,
                _num(s.statistic, ".4g"),
                _num(s.p_value, ".2e"),
                _num(s.p_adjusted, ".2e"),
                _num(s.effect_size, "+.3f"),
                f"{s.n_baseline}/{s.n_current}",
                s.direction,
            ]
            for s in report.signals
        ],
        numeric=(5, 6, 7, 8, 9),
        row_classes=["drift" if s.verdict == "drift" else "" for s in report.signals],
    )
    with plt.rc_context(_style()):
        for family, title in (("inputs", "Inputs"), ("behaviour", "Behaviour"), ("performance", "Performance")):
            signals = [s for s in report.signals if _family(s) == family]
            if not signals:
                continue
            doc.heading(f"{title}: baseline vs current")
            doc.open_figures()
            for sig in signals:
                base, cur = baseline_routes.get(sig.route), current_routes.get(sig.route)
                if base is None or cur is None:
                    continue
                fig = None
                if sig.name.startswith("pass_rate:"):
                    check = sig.name.split(":", 1)[1]
                    if check in base.checks and check in cur.checks:
                        fig = _pass_rate_figure(plt, sig, base, cur, report.baseline_version, current_label)
                elif sig.name == "failure_modes":
                    fig = _failure_modes_figure(plt, sig, base, cur, report.baseline_version, current_label)
                else:
                    values = _reservoirs(sig, base, cur)
                    if values is not None and values[0] and values[1]:
                        fig = _distribution_figure(
                            plt, sig, values[0], values[1], report.baseline_version, current_label
                        )
                if fig is not None:
                    doc.figure(fig, _signal_caption(sig))
            doc.close_figures()
            untested = [s for s in signals if s.name == "embedding"]
            for s in untested:
                doc.paragraph(
                    f"{s.name} [{s.route}]: {_signal_caption(s)}; centroid cosine {s.detail.get('centroid_cosine', '-')} (no 1-D picture of a 384-dimension distribution)",
                    "note",
                )
    return doc.render()


# --- evaluation report ----------------------------------------------------------------------


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def render_evaluation(report: EvaluationReport) -> str:  # noqa: C901
    """`llmwatch report`: the decision first, then pass rates, latency/TTFT, cost, the matrix, stability."""
    plt = _pyplot()
    versions = report.versions
    w = report.weights
    doc = HtmlDocument(
        "llmwatch evaluation report",
        f"{report.n_samples} samples, {len(versions)} version(s), {len(report.categories)} categories",
    )
    ranked = [(r.decision_score, r) for r in report.decision if r.decision_score is not None]
    if ranked:
        best = max(ranked, key=lambda sr: sr[0])[1]
        others = [r for _, r in sorted(((sc, r) for sc, r in ranked if r is not best), key=lambda sr: -sr[0])]
        points = [
            f"version {best.model_version}: decision score {_num(best.decision_score)} (quality {_num(best.quality)}, stability {_num(best.stability)}, USD/1k requests {_num(best.cost_per_1k, '.4f')})"
        ]
        points += [f"version {r.model_version}: decision score {_num(r.decision_score)}" for r in others]
        points += [
            f"version {r.model_version}: no decision score ({r.note})"
            for r in report.decision
            if r.decision_score is None
        ]
        points.append(
            f"decision score = ({w['quality']:g} * quality + {w['stability']:g} * stability) / normalized cost, weights_version {report.weights_version}"
        )
        doc.verdict("ok" if len(ranked) > 1 else "info", f"Best: version {best.model_version}", points)
    else:
        doc.verdict(
            "warn",
            "No decision score: no version has quality, stability and a price",
            [f"version {r.model_version}: {r.note}" for r in report.decision],
        )

    with plt.rc_context(_style()):
        doc.heading("Decision score")
        doc.table(
            ["version", "quality", "stability", "USD/1k req", "normalized cost", "decision", "note"],
            [
                [
                    r.model_version,
                    _num(r.quality),
                    _num(r.stability),
                    _num(r.cost_per_1k, ".4f"),
                    _num(r.normalized_cost),
                    _num(r.decision_score),
                    r.note,
                ]
                for r in report.decision
            ],
            numeric=(1, 2, 3, 4, 5),
        )
        doc.open_figures()
        if report.decision:
            fig, ax = plt.subplots(figsize=(4.6, 0.5 + 0.45 * len(report.decision)))
            names = [r.model_version for r in report.decision]
            values = [r.decision_score if r.decision_score is not None else 0.0 for r in report.decision]
            ax.barh(
                np.arange(len(names)),
                values,
                color=[_colour(versions.index(n)) if n in versions else "#999" for n in names],
                height=0.6,
            )
            ax.set_yticks(np.arange(len(names)), names)
            ax.invert_yaxis()
            ax.set_xlabel("decision score")
            doc.figure(fig, "Decision score per version (higher is better; a version without a price has none)")
        doc.close_figures()

        doc.heading("Pass rate by category and version")
        index = {(c.category, c.model_version): c for c in report.cells}
        cats = [c["name"] for c in report.categories]
        if cats and versions:
            fig, ax = plt.subplots(figsize=(7.2, 0.6 + 0.32 * len(cats) * len(versions) + 0.2 * len(cats)))
            height = 0.8 / len(versions)
            for j, v in enumerate(versions):
                ys, rates, lo, hi = [], [], [], []
                for i, cat in enumerate(cats):
                    cell = index.get((cat, v))
                    if cell is None or cell.pass_rate is None:
                        continue
                    ys.append(i + (j - (len(versions) - 1) / 2) * height)
                    rates.append(cell.pass_rate)
                    lo.append(max(0.0, cell.pass_rate - (cell.ci_low if cell.ci_low is not None else cell.pass_rate)))
                    hi.append(max(0.0, (cell.ci_high if cell.ci_high is not None else cell.pass_rate) - cell.pass_rate))
                ax.barh(
                    ys, rates, xerr=[lo, hi], height=height * 0.9, color=_colour(j), capsize=2, label=f"version {v}"
                )
            ax.set_yticks(np.arange(len(cats)), cats)
            ax.invert_yaxis()
            ax.set_xlim(0, 1.0)
            ax.set_xlabel("pass rate (Wilson 95% CI)")
            ax.legend(fontsize=7, frameon=False, loc="lower left", bbox_to_anchor=(1.0, 0.0))
            doc.figure(
                fig, "Share of calls that passed every check of their category, with the Wilson 95% confidence interval"
            )
        rows = []
        for cat in report.categories:
            row: list[Any] = [cat["name"], f"{cat['weight']:.2f}"]
            for v in versions:
                cell = index.get((cat["name"], v))
                row.append(
                    "-"
                    if cell is None or cell.n == 0
                    else f"{_num(cell.mean_score, '.2f')} | {_num(cell.pass_rate, '.1%')} [{_num(cell.ci_low, '.0%')}-{_num(cell.ci_high, '.0%')}] | {cell.n}"
                )
            rows.append(row)
        rows.append(["overall (weighted)", ""] + [_num(report.overall_quality.get(v)) for v in versions])
        doc.paragraph("Evaluation matrix: mean score | pass rate [Wilson 95% CI] | n", "note")
        doc.table(["category", "weight"] + [f"version {v}" for v in versions], rows)

        doc.heading("Latency and time to first token")
        doc.open_figures()
        quantiles = ("p50", "p90", "p95", "p99")
        for field, title in (("latency_ms", "latency (ms)"), ("ttft_ms", "time to first token (ms)")):
            have = [(v, getattr(c, field)) for v, c in report.costs.items() if getattr(c, field)]
            if not have:
                continue
            fig, ax = plt.subplots(figsize=(4.6, 2.5))
            x = np.arange(len(quantiles))
            width = 0.8 / len(have)
            for j, (v, q) in enumerate(have):
                ax.bar(
                    x + (j - (len(have) - 1) / 2) * width,
                    [q[k] for k in quantiles],
                    width=width * 0.95,
                    color=_colour(versions.index(v) if v in versions else j),
                    label=f"version {v}",
                )
            ax.set_xticks(x, quantiles)
            ax.set_ylabel(title)
            ax.legend(fontsize=7, frameon=False)
            doc.figure(fig, f"{title}: quantiles per version")
        doc.close_figures()
        doc.table(
            ["version", "requests", "latency p50/p90/p95/p99 ms", "TTFT p50/p90/p95/p99 ms"],
            [
                [
                    v,
                    c.requests,
                    "/".join(f"{c.latency_ms[k]:.0f}" for k in quantiles) if c.latency_ms else "-",
                    "/".join(f"{c.ttft_ms[k]:.0f}" for k in quantiles) if c.ttft_ms else "-",
                ]
                for v, c in report.costs.items()
            ],
            numeric=(1,),
        )

        doc.heading("Cost")
        priced = [(v, c) for v, c in report.costs.items() if c.cost_per_1k is not None]
        if priced:
            doc.open_figures()
            fig, ax = plt.subplots(figsize=(4.6, 0.5 + 0.45 * len(priced)))
            ax.barh(
                np.arange(len(priced)),
                [c.cost_per_1k for _, c in priced],
                color=[_colour(versions.index(v) if v in versions else i) for i, (v, _) in enumerate(priced)],
                height=0.6,
            )
            ax.set_yticks(np.arange(len(priced)), [v for v, _ in priced])
            ax.invert_yaxis()
            ax.set_xlabel("USD per 1000 requests")
            doc.figure(fig, "Cost per 1000 requests (priced requests only)")
            doc.close_figures()
        doc.table(
            ["version", "requests", "priced", "USD/request", "USD/1k req"],
            [
                [v, c.requests, c.priced, _num(c.cost_per_request, ".6f"), _num(c.cost_per_1k, ".4f")]
                for v, c in report.costs.items()
            ],
            numeric=(1, 2, 3, 4),
        )

        doc.heading("Stability (1 = stable)")
        if report.stability:
            doc.table(
                ["kind", "category", "version", "value", "groups", "samples"],
                [
                    [c.kind, c.category, c.model_version, _num(c.value), c.n_groups, c.n_samples]
                    for c in report.stability
                ],
                numeric=(3, 4, 5),
            )
        else:
            doc.paragraph("none: no repeated prompt, no multi-turn conversation, no --baseline", "note")
        render_turn_decay(doc, report, PALETTE)

        if report.comparison:
            cmp = report.comparison
            doc.heading(f"Compared with the report of {cmp.get('earlier_created_at')}")
            if cmp.get("weights_changed"):
                doc.paragraph(
                    f"WARNING: the decision weights changed ({cmp.get('earlier_weights_version')} -> {report.weights_version}); decision scores move for that reason alone"
                )
            doc.table(
                ["version", "decision earlier", "decision now", "change", "quality earlier", "quality now"],
                [
                    [
                        ch["model_version"],
                        _num(ch["decision_score"]["earlier"]),
                        _num(ch["decision_score"]["now"]),
                        _num(ch["decision_score"]["delta"], "+.3f"),
                        _num(ch["quality"]["earlier"]),
                        _num(ch["quality"]["now"]),
                    ]
                    for ch in cmp["versions"]
                ],
                numeric=(1, 2, 3, 4, 5),
            )
    return doc.render()
