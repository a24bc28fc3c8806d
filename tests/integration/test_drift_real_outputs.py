"""The offline drift families on real model outputs: five models' answers to the AlpacaEval prompts.

The outputs are read at test time from ../shared/real-outputs beside the repository (CI has it
there; never copied into the repository) with bench/drift_real.py's loader, on a small subset.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import drift_real  # noqa: E402

from llmwatch.scorers.drift.compare import DriftSettings  # noqa: E402

SHARED = drift_real.shared_dir()
pytestmark = pytest.mark.skipif(
    SHARED is None,
    reason="../shared/real-outputs (the AlpacaEval outputs, see shared/README.md) is not beside this checkout",
)
OLD, NEW = "gpt-3.5-turbo-0301", "gpt-3.5-turbo-0613"
PROMPTS = 400  # of the 805: seconds of rule checks on two cores


@pytest.fixture(scope="module")
def world() -> drift_real.World:
    assert SHARED is not None
    records = drift_real.load_alpaca_eval(SHARED / "real-outputs", {OLD, NEW})
    keep = set(sorted({r["prompt_id"] for r in records})[:PROMPTS])
    return drift_real.World([r for r in records if r["prompt_id"] in keep], embeddings=False)


def families(world: drift_real.World, base, cur) -> dict[str, str]:
    report = world.report(base, cur, DriftSettings())
    return {name: info["verdict"] for name, info in report.families.items()}


def test_the_shared_outputs_are_the_documented_ones(world):
    assert {m: len(v) for m, v in world.by_model.items()} == {OLD: PROMPTS, NEW: PROMPTS}


def test_a_random_split_of_one_model_is_stable(world):
    items = world.by_model[NEW]
    mask = np.random.default_rng(1).random(len(items)) < 0.5
    verdicts = families(world, [s for s, m in zip(items, mask) if m], [s for s, m in zip(items, mask) if not m])
    assert verdicts["behaviour"] == "stable" and verdicts["inputs"] == "stable", verdicts


def served_as(items, model: str) -> list:
    """The samples as a proxy would see a silent snapshot change: one request model, two versions."""
    return [s.model_copy(update={"model": model, "request": {**s.request, "model": model}}) for s in items]


def test_the_successor_model_on_the_same_prompts_reads_as_behaviour_drift(world):
    verdicts = families(
        world, served_as(world.by_model[OLD], "gpt-3.5-turbo"), served_as(world.by_model[NEW], "gpt-3.5-turbo")
    )
    assert verdicts["behaviour"] == "drift" and verdicts["inputs"] == "stable", verdicts


def test_one_model_on_another_prompt_mix_shifts_the_inputs_not_the_behaviour(world):
    by_source: dict[str, list] = {}
    for s in world.by_model[NEW]:
        by_source.setdefault(str(s.metadata.get("source")), []).append(s)
    g1, g2 = sorted(by_source.values(), key=len, reverse=True)[:2]
    n = min(len(g1), len(g2)) // 2
    base = g1[: int(n * 0.8)] + g2[: int(n * 0.2)]
    cur = g1[int(n * 0.8) : int(n * 0.8) + int(n * 0.2)] + g2[int(n * 0.2) : int(n * 0.2) + int(n * 0.8)]
    verdicts = families(world, base, cur)
    assert verdicts["inputs"] == "shifted" and verdicts["behaviour"] != "drift", verdicts
