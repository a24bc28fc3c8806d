"""The demo's drift lines say which way each drifted signal moved and by how much.

The summary read "version B  n=156  DRIFT in ..., pass_rate:refusal (p=4.0e-04), perf:latency_per_token_ms
(p=2.3e-28)": a p-value alone, which says neither worse nor better, nor by how much. The readings
now carry the direction and the effect (kind, value, 95 % interval) from the online comparison,
and the summary prints them with a legend and the command that shows the whole table.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from helpers.traffic import MIX, MODEL, traffic
from prometheus_client import CollectorRegistry

from llmwatch.agent.apps.demo import drift_summary
from llmwatch.agent.components import load_config
from llmwatch.agent.runtime import Agent
from llmwatch.scorers.drift.baseline import freeze
from llmwatch.scorers.drift.compare import DriftSettings
from llmwatch.scorers.drift.online import DriftWindows


def test_a_drifted_signal_in_the_demo_summary_has_its_direction_effect_and_interval(tmp_path: Path):
    rng = np.random.default_rng(8)
    a = traffic(rng, 600, MODEL, MIX, prefix="a", version="A")
    worse = replace(MODEL, ms_per_token=MODEL.ms_per_token * 1.8).with_kind("code", refusal=0.2)
    b = traffic(rng, 600, worse, MIX, prefix="b", version="B")
    settings = DriftSettings()
    windows = DriftWindows(
        freeze(a[0], a[1], a[2], model_version="A", minimums=settings.minimums()),
        window=1000,
        interval_s=0,
        settings=settings,
    )
    windows.add(b[0], b[1], b[2])
    readings = windows.evaluate()
    # The agent's own subscriber keeps them, as in the demo.
    agent = SimpleNamespace(
        drift_state={},
        drift_effects={},
        drift_served={},
        notifier=None,
        _loop=None,
        cfg=load_config(None).model_copy(update={"data_dir": tmp_path}),
        metrics=SimpleNamespace(registry=CollectorRegistry()),
    )
    Agent._on_drift(agent, readings)  # type: ignore[arg-type]
    text = drift_summary(agent)  # type: ignore[arg-type]
    line = next(x for x in text.splitlines() if x.strip().startswith("version B"))
    refusal = next(r for r in readings if r.signal == "pass_rate:refusal")
    latency = next(r for r in readings if r.signal == "perf:latency_per_token_ms")
    assert refusal.detected and latency.detected, readings
    assert refusal.direction == "worse" and refusal.effect.startswith("diff pass rate -")
    assert latency.direction == "higher" and latency.effect.startswith("rel p50|p95 +")
    assert f"pass_rate:refusal (worse, {refusal.effect}, p={refusal.p_value:.1e})" in line, line
    assert f"perf:latency_per_token_ms (higher, {latency.effect}, p={latency.p_value:.1e})" in line, line
    assert "[" in refusal.effect  # with its interval
    assert f"llmwatch drift --baseline {tmp_path}/baseline-A-*.json" in text
