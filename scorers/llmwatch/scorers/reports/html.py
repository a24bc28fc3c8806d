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
import re
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from llmwatch.core.extras import require
from llmwatch.scorers.drift.compare import DriftReport, Signal, stable_headline, tests_phrase
from llmwatch.scorers.drift.features import CheckStats, Distribution, RouteStats
from llmwatch.scorers.drift.model import EFFECT_LEGEND, format_interval
from llmwatch.scorers.drift.rows import HASHED_WORDS, MINILM, Row, space_of, unpack_vectors
from llmwatch.scorers.evaluation.decision import DecisionRow, choose_best
from llmwatch.scorers.evaluation.evaluate import EvaluationReport, decision_verdict
from llmwatch.scorers.reports.stability_html import render_prompt_sensitivity, render_turn_decay
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


_BREAK_AFTER = re.compile(r"(?<=[A-Za-z0-9])([/:])(?=[A-Za-z])")


def _breakable(escaped: str) -> str:
    """Escaped cell text that may wrap after a path's or a signal name's separators: one route
    `/v1/chat/completions` in every row of the drift signal table, with names like
    `perf:ttft_ms_by_input_length`, pushed its last column out of a 1400 px window."""
    return _BREAK_AFTER.sub(r"\1<wbr>", escaped)


def _num(x: float | None, spec: str = ".3f") -> str:
    """`x` formatted for a page: a minus sign (U+2212), not a hyphen, so that no browser breaks a number at it."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec).replace("-", "\u2212")


def _interval(ci: list[float] | None) -> str:
    """A 95 % interval for a page, minus signs as `_num`'s; `-` where there is none."""
    return format_interval(ci).replace("-", "\u2212") if ci else "-"


def _p(x: float | None) -> str:
    """A p-value in as few characters as it needs: 0.034, 0.0012, 3.1e−07, 0 only when it is 0."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x == 0 or x >= 0.001:
        return _num(x, ".2g" if x < 0.01 else ".3f")
    return _num(x, ".1e")


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
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.num { white-space: nowrap; }
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
            cells = "".join(
                f"<td class=n>{_e(v)}</td>" if j in numeric else f"<td>{_breakable(_e(v))}</td>"
                for j, v in enumerate(row)
            )
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


def _ticks() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=5)


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
        f"{sig.name} on {_route_label(sig.route)}: {sig.verdict}",
        f"{sig.test} statistic {_num(sig.statistic, '.4g')}",
        f"p {_p(sig.p_value)}",
        f"p adjusted {_p(sig.p_adjusted)}",
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


# What a histogram's x axis counts, with its unit: the ticks alone (80, 160, 240; 1.0 x 1e-3)
# left the reader to guess tokens, milliseconds or dollars.
_AXIS_LABELS = {
    "output_tokens": "output tokens per answer",
    "input:prompt_tokens": "prompt tokens per call",
    "perf:latency_per_token_ms": "time per output token after the first (ms)",
    "perf:ttft_ms_by_input_length": "time to first token (ms; tested within input-length buckets)",
    "perf:cost_per_1k_tokens": "cost per 1,000 tokens, input and output (USD)",
    "perf:latency_ms": "latency per call (ms)",
    "perf:ttft_ms": "time to first token (ms)",
    "perf:cost_usd": "cost per call (USD)",
}


def _axis_label(sig: Signal) -> str:
    if sig.name.startswith("score:"):
        return f"{sig.name.split(':', 1)[1]} score per answer"
    return _AXIS_LABELS.get(sig.name, sig.name)


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
        f"{sig.name} [{_route_label(sig.route)}]  {sig.verdict.upper()}  ({'KS D' if sig.test == 'ks' else sig.test} {_num(sig.statistic, '.3f')}, p adj {_p(sig.p_adjusted)})",
        fontsize=8.5,
        loc="left",
        color=_verdict_colour(sig.verdict),
    )
    ax.set_ylabel("share of calls")
    ax.set_xlabel(_axis_label(sig))
    ax.yaxis.set_major_formatter(_percent())
    # Few ticks in short numbers: 0.00045 USD ticks every 0.00005 run into each other.
    ax.xaxis.set_major_locator(_ticks())
    ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 5))
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
    # Dots with their intervals, not bars: the axis is zoomed to the rates (0.60-1.00 for a
    # refusal rate of 0.96 against 0.72), and a bar's length from a cut axis drew B's rate a third
    # of A's.
    for yi, rate, lo, hi, colour in zip(y, rates, lows, highs, colours):
        ax.errorbar([rate], [yi], xerr=[[lo], [hi]], fmt="o", color=colour, ecolor=colour, capsize=4, markersize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlim(
        min(0.9, max(0.0, min(r - lo for r, lo in zip(rates, lows) if not math.isnan(r)) - 0.05))
        if any(not math.isnan(r) for r in rates)
        else 0.0,
        1.0,
    )
    ax.set_xlabel("pass rate (Wilson 95% CI)")
    _title(ax, f"{sig.name} [{_route_label(sig.route)}]", sig.verdict, fontsize=9)
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
    _title(ax, f"failure modes [{_route_label(sig.route)}]", sig.verdict, fontsize=9)
    return fig


def _route_label(route: str) -> str:
    return "all routes" if route == "*" else route


def _pooled(routes: Mapping[str, RouteStats], route: str) -> RouteStats | None:
    """The stats a signal of `route` was tested on: that route's, or all routes pooled for "*".

    With more than one route the families test across routes (route is a stratum, not a split),
    so a signal's route is "*" and its picture must pool the routes the same way.
    """
    if route in routes:
        return routes[route]
    if route != "*" or not routes:
        return None
    parts = list(routes.values())
    checks: dict[str, CheckStats] = {}
    for rs in parts:
        for name, cs in rs.checks.items():
            acc = checks.setdefault(name, CheckStats())
            acc.n_pass += cs.n_pass
            acc.n_fail += cs.n_fail
            acc.n_error += cs.n_error
            acc.n_skip += cs.n_skip
            if cs.values is not None:
                acc.values = _join(acc.values, cs.values)
    metrics: dict[str, Distribution] = {}
    for rs in parts:
        for name, dist in rs.metrics.items():
            metrics[name] = _join(metrics.get(name), dist)
    modes: dict[str, int] = {}
    for rs in parts:
        for mode, count in rs.failure_modes.items():
            modes[mode] = modes.get(mode, 0) + count
    return RouteStats(
        n=sum(rs.n for rs in parts),
        checks=checks,
        metrics=metrics,
        failure_modes=modes,
        rows=[row for rs in parts for row in rs.rows],
    )


def _join(a: Distribution | None, b: Distribution) -> Distribution:
    # Only the reservoir is drawn; the summary fields of the pooled distribution are not shown.
    if a is None:
        return b.model_copy()
    return a.model_copy(update={"n": a.n + b.n, "reservoir": a.reservoir + b.reservoir})


def _verdict_colour(verdict: str) -> str:
    """A figure title's colour: red for a signal that moved (drift; shifted inputs; changed context), else ink."""
    return "#c0392b" if verdict in ("drift", "shifted", "changed") else "#1c2833"


def _title(ax: Any, text: str, verdict: str, fontsize: float = 8.5) -> None:
    ax.set_title(f"{text}  {verdict.upper()}", fontsize=fontsize, loc="left", color=_verdict_colour(verdict))


def _mix_figure(plt: Any, sig: Signal) -> Any:
    shares: dict[str, list[float]] = sig.detail.get("shares_baseline_current") or {}
    # The largest moves first, at most 12 bars: a mix of 40 models is read by its movers.
    keys = sorted(shares, key=lambda k: -abs(shares[k][1] - shares[k][0]))[:12]
    y = np.arange(len(keys))
    fig, ax = plt.subplots(figsize=(4.6, 0.9 + 0.32 * len(keys)))
    # "baseline" and "current" only: the versions are in the page's subtitle, and a long name squeezes the bars.
    ax.barh(y - 0.2, [shares[k][0] for k in keys], height=0.4, color=BASELINE_COLOUR, label="baseline")
    ax.barh(y + 0.2, [shares[k][1] for k in keys], height=0.4, color=CURRENT_COLOUR, label="current")
    ax.set_yticks(y, [k if len(k) <= 28 else k[:27] + "…" for k in keys], fontsize=7)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(_percent())
    ax.set_xlabel(f"share of calls (total variation {_num(sig.effect_size, '.3f')})")
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside, not over, the bars
    _title(ax, f"{sig.name} [{_route_label(sig.route)}]", sig.verdict)
    return fig


# At most this many prompts a side in the map: enough to see a shift, small enough for an inline SVG.
MAP_POINTS = 400


def _prompt_vectors(rows: Sequence[Row], space: str) -> np.ndarray:
    have = [r for r in rows if space_of(r) == space][:MAP_POINTS]
    return unpack_vectors(have) if have else np.zeros((0, 0))


_SPACE_NAMES = {MINILM: "MiniLM embeddings", HASHED_WORDS: "hashed words"}


def _spaces(rows: Sequence[Row]) -> Counter[str]:
    return Counter(sp for r in rows if (sp := space_of(r)))


def _map_space(base_rows: Sequence[Row], cur_rows: Sequence[Row]) -> str | None:
    """The vector space both sides' prompts are drawn in: one that holds most of each side's vectors.

    A space that only a few rows of one side share (a baseline frozen by the scorer process holds
    hashed words, `llmwatch drift` embeds the window's prompts with MiniLM) would draw that side as
    a handful of prompts: the demo's map showed 145 baseline prompts against 5 of the window's 144.
    """
    b, c = _spaces(base_rows), _spaces(cur_rows)
    shared = [sp for sp in b if sp in c]
    if not shared:
        return None
    space = max(shared, key=lambda sp: b[sp] + c[sp])
    if 2 * b[space] < sum(b.values()) or 2 * c[space] < sum(c.values()):
        return None
    return space


def prompt_map_gap(base_rows: Sequence[Row], cur_rows: Sequence[Row]) -> str | None:
    """Why the prompt map is not drawn when both sides have prompt vectors, but of different spaces."""
    b, c = _spaces(base_rows), _spaces(cur_rows)
    if not b or not c or _map_space(base_rows, cur_rows) is not None:
        return None

    def named(counts: Counter[str]) -> str:
        return ", ".join(f"{n} {_SPACE_NAMES.get(sp, sp)}" for sp, n in counts.most_common())

    return (
        f"prompt space not drawn: the baseline's prompt vectors are {named(b)}, the current window's "
        f"{named(c)}; vectors of two spaces are not comparable. A baseline frozen by the sidecar's scorer "
        "holds hashed words; freeze it with `llmwatch baseline freeze` (embeddings on) to compare prompts by meaning"
    )


def prompt_map(base_rows: Sequence[Row], cur_rows: Sequence[Row]) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Baseline and current prompt vectors projected on the first two principal components of both together.

    The vectors are the ones the drift compared (MiniLM embeddings, or hashed words without them);
    rows are already a deterministic reservoir, so the first MAP_POINTS of each side are a uniform
    subset. Returns (baseline xy, current xy, share of variance the two axes show), or None when
    the two sides carry no vectors of one space or every prompt is the same.
    """
    space = _map_space(base_rows, cur_rows)
    if space is None:
        return None
    B, C = _prompt_vectors(base_rows, space), _prompt_vectors(cur_rows, space)
    if not len(B) or not len(C):
        return None
    X = np.vstack([B, C])
    X = X - X.mean(0)
    _, sv, vt = np.linalg.svd(X, full_matrices=False)
    total = float((sv**2).sum())
    if total <= 1e-12:
        return None
    xy = X @ vt[:2].T
    if xy.shape[1] < 2:
        xy = np.hstack([xy, np.zeros((len(xy), 1))])
    return xy[: len(B)], xy[len(B) :], float((sv[:2] ** 2).sum() / total)


def _prompt_map_figure(
    plt: Any,
    points: tuple[np.ndarray, np.ndarray, float],
    sig: Signal | None,
    baseline_label: str,
    current_label: str,
) -> Any:
    b, c, shown = points
    fig, ax = plt.subplots(figsize=(4.6, 3.6))
    ax.scatter(
        b[:, 0],
        b[:, 1],
        s=9,
        color=BASELINE_COLOUR,
        alpha=0.45,
        label=f"baseline {baseline_label} (n {len(b)})",
        linewidths=0,
    )
    ax.scatter(
        c[:, 0],
        c[:, 1],
        s=9,
        color=CURRENT_COLOUR,
        alpha=0.45,
        marker="^",
        label=f"current {current_label} (n {len(c)})",
        linewidths=0,
    )
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    ax.legend(fontsize=7, frameon=False, loc="best")
    _title(
        ax,
        f"prompt space (PCA, {shown:.0%} of variance)"
        + (f"  separation {_num(sig.effect_size, '.2f')}" if sig and not math.isnan(sig.effect_size) else ""),
        sig.verdict if sig is not None else "",
    )
    return fig


def _signal_figure(
    plt: Any, sig: Signal, base: RouteStats, cur: RouteStats, baseline_label: str, current_label: str
) -> Any | None:
    """The baseline-vs-current picture of one signal, None when it has none (the answer embedding)."""
    if sig.name.startswith("pass_rate:"):
        check = sig.name.split(":", 1)[1]
        if check in base.checks and check in cur.checks:
            return _pass_rate_figure(plt, sig, base, cur, baseline_label, current_label)
        return None
    if sig.name == "failure_modes":
        return _failure_modes_figure(plt, sig, base, cur, baseline_label, current_label)
    if sig.name.startswith("input:mix:"):
        return _mix_figure(plt, sig) if sig.detail.get("shares_baseline_current") else None
    values = _reservoirs(sig, base, cur)
    if values is not None and values[0] and values[1]:
        return _distribution_figure(plt, sig, values[0], values[1], baseline_label, current_label)
    return None


_ORDER = {"drift": 0, "shifted": 0, "changed": 1, "stable": 2, "insufficient": 3}


class CanaryVerdict(NamedTuple):
    """`llmwatch canary`'s decision, drawn on the drift page in place of the drift's own."""

    headline: str
    level: str  # bad | ok | warn
    exit_code: int
    families: Mapping[str, str]  # worse | not_worse | insufficient; inputs: shifted | stable


def _effect_phrase(s: Signal) -> str:
    """`difference -0.303 pass rate (0.01 = 1 point), 95% interval [-0.387, -0.185]`: the effect
    with its kind, unit and interval, so a point value is never read without what it measures."""
    ci = f", 95% interval {_interval(s.effect_ci)}" if s.effect_ci else ""
    what = f"{s.effect_kind} " if s.effect_kind else "effect "
    unit = f" {s.effect_unit}" if s.effect_unit else ""
    return f"{what}{_num(s.effect_size, '+.3f')}{unit}{ci}"


def render_drift(
    report: DriftReport,
    baseline_routes: Mapping[str, RouteStats],
    current_routes: Mapping[str, RouteStats],
    *,
    canary: CanaryVerdict | None = None,
) -> str:
    """The drift report: verdict, the signal table, then baseline-vs-current plots by family, drifted first.

    `canary` is `llmwatch canary`'s verdict: the canary's decision
    differs from the drift's (a canary that only got better drifts, yet passes; families left out
    of --fail-on), and its page showed "DRIFT" or "STABLE" and the drift's exit code instead."""
    plt = _pyplot()
    current_label = ", ".join(report.current_versions) or "-"
    title = "llmwatch canary report" if canary else "llmwatch drift report"
    doc = HtmlDocument(title, f"baseline {report.baseline_version} vs current {current_label}")
    drifting = [s for s in report.signals if s.verdict in ("drift", "shifted")]
    head, level = (
        (canary.headline, canary.level)
        if canary
        else {
            "drift": ("DRIFT: the current window behaves differently from the baseline", "bad"),
            "stable": (stable_headline(report), "ok"),
            "insufficient": (
                f"UNDECIDED: too few samples (each signal needs at least {report.settings.min_samples} on both sides), or inputs that barely overlap the baseline's",
                "warn",
            ),
        }[report.verdict]
    )
    # A signal without a direction (the answer embedding) is named by its verdict: "changed" is the
    # table's word for a context figure that moved without failing the run.
    points = [
        f"{s.name} on {_route_label(s.route)}: {s.direction or s.verdict} ({_effect_phrase(s)}, p adjusted {_p(s.p_adjusted)})"
        for s in drifting[:8]
    ]
    points += [
        f"{name}: {canary.families.get(name, info['verdict']) if canary else info['verdict']}{'' if name in report.settings.fail_on else ' (does not fail the run)'}{' - ' + info['reason'] if info.get('reason') else ''}"
        for name, info in report.families.items()
    ]
    points.append(
        f"baseline version {report.baseline_version}; current window {report.n_current} samples of version(s) {current_label}"
    )
    points.append(
        f"alpha {report.settings.alpha} with {report.settings.correction} correction over {tests_phrase(report)}; exit code {canary.exit_code if canary else report.exit_code}"
    )
    doc.verdict(level, head, points)

    doc.heading("Signals")
    legend = EFFECT_LEGEND.replace("current minus baseline", "canary minus stable") if canary else EFFECT_LEGEND
    doc.paragraph(legend.replace("effect: ", "Effect kinds: ", 1), "note")
    ordered = sorted(report.signals, key=lambda s: _ORDER.get(s.verdict, 4))  # stable sort: the report's ranking within
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
            "95% interval",
            "effect is",
            "n base/cur",
            "direction",
        ],
        [
            [
                s.verdict,
                _family(s),
                s.name,
                _route_label(s.route),
                s.test,
                _num(s.statistic, ".4g"),
                _p(s.p_value),
                _p(s.p_adjusted),
                _num(s.effect_size, "+.3f"),
                _interval(s.effect_ci),
                f"{s.effect_kind}, {s.effect_unit}" if s.effect_kind else "",
                f"{s.n_baseline}/{s.n_current}",
                s.direction,
            ]
            for s in ordered
        ],
        numeric=(5, 6, 7, 8, 9, 11),
        row_classes=["drift" if s.verdict in ("drift", "shifted") else "" for s in ordered],
    )
    with plt.rc_context(_style()):
        for family, title in (("inputs", "Inputs"), ("behaviour", "Behaviour"), ("performance", "Performance")):
            signals = [s for s in ordered if _family(s) == family]
            if not signals:
                continue
            doc.heading(f"{title}: baseline vs current")
            doc.open_figures()
            notes: list[str] = []
            mapped = False
            for sig in signals:
                base, cur = _pooled(baseline_routes, sig.route), _pooled(current_routes, sig.route)
                if base is None or cur is None:
                    notes.append(f"{sig.name} [{_route_label(sig.route)}]: no per-route data to draw")
                    continue
                if sig.name in ("input:prompt_embedding", "input:prompt_words"):
                    pts = prompt_map(base.rows, cur.rows)
                    if pts is not None:
                        mapped = True
                        doc.figure(
                            _prompt_map_figure(plt, pts, sig, report.baseline_version, current_label),
                            _signal_caption(sig)
                            + f"; each dot a prompt (a uniform subset of at most {MAP_POINTS} a side, the n in the legend), baseline and current projected on the same two axes",
                        )
                    continue
                if sig.name == "embedding":
                    notes.append(
                        f"{_signal_caption(sig)}; centroid cosine {sig.detail.get('centroid_cosine', '-')} (no 1-D picture of a 384-dimension distribution)"
                    )
                    continue
                fig = _signal_figure(plt, sig, base, cur, report.baseline_version, current_label)
                if fig is not None:
                    doc.figure(fig, _signal_caption(sig))
                elif not math.isnan(sig.p_value):
                    notes.append(f"{_signal_caption(sig)} (no values kept to draw)")
            if family == "inputs" and not mapped:
                # The map of what was asked even when no prompt-vector test ran (too few vectors a side).
                base, cur = _pooled(baseline_routes, "*"), _pooled(current_routes, "*")
                pts = prompt_map(base.rows, cur.rows) if base is not None and cur is not None else None
                if pts is not None:
                    doc.figure(
                        _prompt_map_figure(plt, pts, None, report.baseline_version, current_label),
                        f"prompt space: each dot a prompt (a uniform subset of at most {MAP_POINTS} a side, the n in the legend), baseline and current projected on the same two axes (not tested)",
                    )
                elif base is not None and cur is not None and (gap := prompt_map_gap(base.rows, cur.rows)):
                    notes.append(gap)
            doc.close_figures()
            for note in notes:
                doc.paragraph(note, "note")
    return doc.render()


# --- evaluation report ----------------------------------------------------------------------


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _decision_interval(r: DecisionRow) -> str:
    return (
        f" [{r.decision_low:.3f}-{r.decision_high:.3f}]"
        if r.decision_low is not None and r.decision_high is not None
        else ""
    )


def _decision_figure(plt: Any, report: EvaluationReport) -> Any:
    """Decision scores as bars with their bootstrap intervals; the best is named and an ineligible
    version hatched and labelled, so that a longer bar is never read as the better version when the
    quality guard ruled it out (the demo's cheaper B scores 0.84 against A's 0.49, and A is best)."""
    rows = report.decision
    best = choose_best(rows)
    fig, ax = plt.subplots(figsize=(4.6, 0.5 + 0.5 * len(rows)))
    y = np.arange(len(rows))
    values = [r.decision_score if r.decision_score is not None else 0.0 for r in rows]
    bars = ax.barh(
        y,
        values,
        color=[
            _colour(report.versions.index(r.model_version)) if r.model_version in report.versions else "#999"
            for r in rows
        ],
        height=0.6,
    )
    # Error bars only where there is an interval: a version without a score gets no cap at 0.
    ci = [
        (i, r.decision_score, r.decision_low, r.decision_high)
        for i, r in enumerate(rows)
        if r.decision_score is not None and r.decision_low is not None and r.decision_high is not None
    ]
    if ci:
        ax.errorbar(
            [v for _, v, _, _ in ci],
            [i for i, _, _, _ in ci],
            xerr=[[max(0.0, v - lo) for _, v, lo, _ in ci], [max(0.0, hi - v) for _, v, _, hi in ci]],
            fmt="none",
            ecolor="black",
            capsize=3,
        )
    labels = []
    for bar, r in zip(bars, rows):
        if r.decision_score is None:
            labels.append(f"{r.model_version}\n(no score)")
        elif not r.eligible:
            bar.set_hatch("//")
            bar.set_alpha(0.45)
            labels.append(f"{r.model_version}\n(not eligible)")
        else:
            labels.append(f"{r.model_version}\n(best)" if r is best else r.model_version)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"decision score ({1 - report.alpha:.0%} bootstrap interval)")
    return fig


def render_evaluation(report: EvaluationReport) -> str:  # noqa: C901
    """`llmwatch report`: the decision first, then pass rates, latency/TTFT, cost, the matrix, stability."""
    plt = _pyplot()
    versions = report.versions
    doc = HtmlDocument(
        "llmwatch evaluation report",
        f"{report.n_samples} samples, {len(versions)} version(s), {len(report.categories)} categories",
    )
    # Shared with the text report: only a version worse than no other on quality can be "Best".
    doc.verdict(*decision_verdict(report))

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
                    _num(r.decision_score) + _decision_interval(r),
                    "; ".join(x for x in (r.verdict(report.decision), r.note) if x),
                ]
                for r in report.decision
            ],
            numeric=(1, 2, 3, 4, 5),
        )
        doc.open_figures()
        if any(r.decision_score is not None for r in report.decision):
            doc.figure(
                _decision_figure(plt, report),
                f"Decision score per version with its {1 - report.alpha:.0%} bootstrap interval: higher is better "
                "among the eligible versions; a hatched bar is not eligible (worse than another version on a "
                "check's pass rate) and cannot be best, whatever its score; a version without a price has none",
            )
        else:
            # An empty axis with ticks around 0 said nothing; the rows' notes say what each lacks.
            doc.paragraph(
                "No decision score to draw: no version has quality, stability and a price (the table's note says what each lacks).",
                "note",
            )
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
                ["kind", "category", "version", "value", "groups", "samples", "note"],
                [
                    [c.kind, c.category, c.model_version, _num(c.value), c.n_groups, c.n_samples, c.caveat]
                    for c in report.stability
                ],
                numeric=(3, 4, 5),
            )
        else:
            doc.paragraph("none: no repeated prompt, no multi-turn conversation, no --baseline", "note")
        render_turn_decay(doc, report, PALETTE)
        render_prompt_sensitivity(doc, report, PALETTE)

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


# --- shadow report ---------------------------------------------------------------------------

_VERDICT_COLOUR = {"worse": "#c0392b", "not_worse": "#1e8449", "inconclusive": "#b9770e"}


def margins_text(margins: Mapping[str, Any]) -> str:
    """The non-inferiority margins as a reader says them (the `shadow.margins` section's keys)."""
    words = {
        "pass_rate_points": ("pass rate", "at most {:g} points lower"),
        "error_rate_points": ("error rate", "at most {:g} points higher"),
        "p95_latency_ratio": ("p95 latency", "at most x{:g}"),
        "p95_ttft_ratio": ("p95 TTFT", "at most x{:g}"),
        "cost_ratio": ("mean cost", "at most x{:g}"),
    }
    parts = [f"{words[k][0]} {words[k][1].format(v)}" for k, v in margins.items() if k in words and v is not None]
    return "margins: " + ", ".join(parts) if parts else ""


def _overall(rows: Sequence[Any]) -> list[Any]:
    return [r for r in rows if r.category == "*"]


def _interval_figure(plt: Any, rows: Sequence[Any], *, ratio: bool, confidence: float) -> Any:
    """Candidate against primary per signal: the paired effect and its interval, the margin, no change."""
    fig, ax = plt.subplots(figsize=(5.2, 0.9 + 0.42 * len(rows)))
    y = np.arange(len(rows))
    for i, r in enumerate(rows):
        colour = _VERDICT_COLOUR.get(r.verdict or "", "#566573")
        ax.errorbar(
            [r.effect],
            [i],
            xerr=[[r.effect - r.ci_low], [r.ci_high - r.effect]],
            fmt="o",
            color=colour,
            capsize=4,
            markersize=5,
        )
        if r.margin is not None:
            ax.plot([r.margin, r.margin], [i - 0.35, i + 0.35], color="#c0392b", linestyle="--", linewidth=1.2)
    ax.axvline(1.0 if ratio else 0.0, color="#1c2833", linewidth=0.8)
    ax.set_yticks(y, [r.signal if len(r.signal) <= 30 else r.signal[:29] + "…" for r in rows], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(
        f"candidate / primary ({confidence:.0%} CI)"
        if ratio
        else f"candidate minus primary, points ({confidence:.0%} CI)"
    )
    ax.set_title(
        "ratios: latency, TTFT, tokens, cost" if ratio else "paired differences: error and pass rates",
        fontsize=8.5,
        loc="left",
    )
    return fig


def _win_tie_loss_figure(plt: Any, rows: Sequence[Any]) -> Any:
    fig, ax = plt.subplots(figsize=(5.2, 0.9 + 0.36 * len(rows)))
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    for attr, colour, label in (("wins", "#1e8449", "win"), ("ties", "#bdc3c7", "tie"), ("losses", "#c0392b", "loss")):
        share = np.array([(getattr(r, attr) or 0) / max(1, r.n) for r in rows])
        ax.barh(y, share, left=left, color=colour, height=0.6, label=label)
        left += share
    ax.set_yticks(y, [r.signal if len(r.signal) <= 30 else r.signal[:29] + "…" for r in rows], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(_percent())
    ax.set_xlabel("share of pairs (win: the candidate passes where the primary fails, or is faster/cheaper)")
    ax.legend(fontsize=7, frameon=False, ncols=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return fig


def shadow_figures(doc: HtmlDocument, report: Any, alpha: float) -> int:
    """The pictures of one candidate's paired comparison (a `CandidateReport`): how many were drawn."""
    plt = _pyplot()
    confidence = 1.0 - 2.0 * alpha
    overall = _overall(report.rows)
    finite = [r for r in overall if r.effect is not None and r.ci_low is not None and r.ci_high is not None]
    rates = [r for r in finite if r.kind in ("rate", "rate_up")]
    ratios = [r for r in finite if r.kind == "ratio" or r.signal.endswith(("_p95", "_mean"))]
    counted = [r for r in overall if r.wins is not None and r.n]
    drawn = 0
    with plt.rc_context(_style()):
        doc.open_figures()
        if rates:
            doc.figure(
                _interval_figure(plt, rates, ratio=False, confidence=confidence),
                "Paired difference per signal with its interval; dashed red: the margin (worse beyond it); green not worse, amber undecided, red worse",
            )
            drawn += 1
        if ratios:
            doc.figure(
                _interval_figure(plt, ratios, ratio=True, confidence=confidence),
                "Candidate / primary ratio (p95 latency, p95 TTFT, mean tokens and cost) with its interval; dashed red: the margin",
            )
            drawn += 1
        if counted:
            doc.figure(_win_tie_loss_figure(plt, counted), "Wins, ties and losses of the candidate over the pairs")
            drawn += 1
        doc.close_figures()
    return drawn
