"""Drift report histograms say what their x axis counts, with its unit.

The figures of output tokens, latency, TTFT and cost had no x-axis label: ticks of 80, 160, 240
or `1.0 x 1e-3` left the reader to guess tokens, milliseconds or dollars.
"""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from llmwatch.scorers.drift.model import Signal  # noqa: E402
from llmwatch.scorers.reports.html import _distribution_figure, _pyplot  # noqa: E402


@pytest.mark.parametrize(
    "name,label",
    [
        ("output_tokens", "output tokens per answer"),
        ("input:prompt_tokens", "prompt tokens per call"),
        ("perf:latency_ms", "latency per call (ms)"),
        ("perf:ttft_ms", "time to first token (ms)"),
        ("perf:ttft_ms_by_input_length", "time to first token (ms; tested within input-length buckets)"),
        ("perf:latency_per_token_ms", "time per output token after the first (ms)"),
        ("perf:cost_usd", "cost per call (USD)"),
        ("perf:cost_per_1k_tokens", "cost per 1,000 tokens, input and output (USD)"),
        ("score:answer_relevance", "answer_relevance score per answer"),
    ],
)
def test_a_distribution_figure_names_its_quantity_and_unit_on_the_x_axis(name, label):
    plt = _pyplot()
    sig = Signal(name, "*", "van_elteren", 2.0, 0.01, 0.2, 60, 60, 0.02, "stable", family="performance")
    fig = _distribution_figure(plt, sig, [1.0, 2.0, 3.0] * 20, [2.0, 3.0, 4.0] * 20, "A", "B")
    try:
        assert fig.axes[0].get_xlabel() == label
    finally:
        plt.close(fig)
