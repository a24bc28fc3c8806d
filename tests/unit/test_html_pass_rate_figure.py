"""The drift report's pass-rate figure draws rates as dots with intervals on its zoomed axis.

Its axis starts near the lowest rate (0.60 for a refusal rate of 0.96 against 0.72) so that the
intervals can be read; bars drawn from that cut axis made B's rate look a third of A's.
"""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from matplotlib.patches import Rectangle  # noqa: E402

from llmwatch.scorers.drift.features import CheckStats, RouteStats  # noqa: E402
from llmwatch.scorers.drift.model import Signal  # noqa: E402
from llmwatch.scorers.reports.html import _pass_rate_figure, _pyplot  # noqa: E402


def test_rates_are_dots_with_intervals_on_a_zoomed_axis_never_bars():
    plt = _pyplot()
    base = RouteStats(n=131, checks={"refusal": CheckStats(n_pass=126, n_fail=5)})
    cur = RouteStats(n=132, checks={"refusal": CheckStats(n_pass=95, n_fail=37)})
    sig = Signal("pass_rate:refusal", "*", "cmh", 23.7, 1e-6, -0.22, 131, 132, 1e-5, "drift", family="behaviour")
    fig = _pass_rate_figure(plt, sig, base, cur, "A", "B")
    try:
        ax = fig.axes[0]
        assert ax.get_xlim()[0] > 0.5  # zoomed: the reason bars would mislead
        assert not [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() > 0]
        dots = [line.get_xdata()[0] for line in ax.lines if line.get_marker() == "o"]
        assert dots == pytest.approx([126 / 131, 95 / 132])
        # Baseline on top, as the labels say.
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels[0].startswith("baseline A") and labels[1].startswith("current B")
        assert ax.get_ylim()[0] > ax.get_ylim()[1]
    finally:
        plt.close(fig)
