"""Drift report figures: every figure of a signal that moved has a red title, whatever its kind.

The histogram, pass-rate and failure-mode figures coloured only `drift` red, while the input-mix
figure coloured `shifted` and `changed` red too: a shifted input-length histogram read as calm.
"""

from __future__ import annotations

import pytest

matplotlib_colors = pytest.importorskip("matplotlib.colors")  # the reports extra; the fast lane has none

from llmwatch.scorers.drift.model import Signal  # noqa: E402
from llmwatch.scorers.reports.html import _distribution_figure, _pyplot  # noqa: E402

RED = matplotlib_colors.to_rgba("#c0392b")
INK = matplotlib_colors.to_rgba("#1c2833")


@pytest.mark.parametrize(
    "verdict,family,colour",
    [("drift", "behaviour", RED), ("shifted", "inputs", RED), ("changed", "context", RED), ("stable", "inputs", INK)],
)
def test_a_distribution_figure_title_is_red_when_its_signal_moved(verdict, family, colour):
    plt = _pyplot()
    sig = Signal("input:length_chars", "chat", "ks", 0.4, 0.001, 0.4, 50, 50, 0.002, verdict, family=family)
    fig = _distribution_figure(plt, sig, [1.0, 2.0, 3.0] * 20, [5.0, 6.0, 7.0] * 20, "v1", "v2")
    try:
        title = fig.axes[0]._left_title  # set_title(loc="left")
        assert verdict.upper() in title.get_text()
        assert matplotlib_colors.to_rgba(title.get_color()) == colour
    finally:
        plt.close(fig)
