"""`drift.interval_draws`: the bootstrap draws of the effects' 95 % intervals, a validated config field.

`llmwatch drift` and `llmwatch canary` keep their 400 draws (their reports print the intervals);
the agent's periodic drift and canary comparisons draw none unless the field says so (nothing
there reads them, and they cost CPU on every comparison); the demo, whose drift line prints them,
asks for them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from synthetic import Behaviour, window  # noqa: E402

from llmwatch.agent.apps.demo import _drift_demo  # noqa: E402
from llmwatch.agent.components import load_config  # noqa: E402
from llmwatch.core.config import ConfigError  # noqa: E402
from llmwatch.scorers.drift.aggregate import WindowAggregator  # noqa: E402
from llmwatch.scorers.drift.baseline import freeze  # noqa: E402
from llmwatch.scorers.drift.compare import settings_from_config  # noqa: E402
from llmwatch.scorers.drift.config import DriftSection  # noqa: E402


def test_the_offline_commands_keep_400_draws_and_a_set_value_wins():
    assert settings_from_config(DriftSection()).interval_draws == 400
    assert settings_from_config(DriftSection(interval_draws=50)).interval_draws == 50
    assert settings_from_config(DriftSection(interval_draws=0)).interval_draws == 0


def test_the_online_loops_draw_none_unless_configured():
    assert WindowAggregator(None, DriftSection(), None).windows.settings.interval_draws == 0
    assert WindowAggregator(None, DriftSection(interval_draws=200), None).windows.settings.interval_draws == 200


def test_online_readings_carry_intervals_only_when_asked():
    rng = np.random.default_rng(4)
    base = freeze(*window(rng, 300, Behaviour(), version="A", prefix="a"), model_version="A")
    cur = window(rng, 300, Behaviour(latency_ms=1800.0), version="B", prefix="b")
    effects = {}
    for draws in (None, 100):
        agg = WindowAggregator(base, DriftSection(interval_draws=draws, interval_s=1.0), None)
        agg.windows.interval_s = 0
        agg.windows.add(*cur)
        readings = agg.windows.evaluate()
        effects[draws] = next(r.effect for r in readings if r.signal == "perf:latency_per_token_ms")
    assert effects[None].startswith("rel p50|p95 +") and "[" not in effects[None], effects
    assert effects[100].startswith(effects[None] + " [+"), effects


def test_the_demo_asks_for_the_intervals_its_drift_line_prints():
    assert _drift_demo(load_config(None, environ={})).interval_draws == 400
    assert _drift_demo(load_config(None, environ={}, overrides={"drift": {"interval_draws": 30}})).interval_draws == 30


@pytest.mark.parametrize(
    ("value", "bound"), [(-1, "greater than or equal to 0"), (20_000, "less than or equal to 10000")]
)
def test_a_bad_value_is_refused_naming_the_field(tmp_path: Path, value: int, bound: str):
    path = tmp_path / "llmwatch.yaml"
    path.write_text(f"drift: {{interval_draws: {value}}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert "drift.interval_draws" in str(err.value) and bound in str(err.value), str(err.value)
