"""The drift pager (scorers/llmwatch/scorers/drift/pager.py): evidence per signal, sample by sample, against a baseline."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from helpers.samples import NOW, chat_sample

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.baseline import freeze
from llmwatch.scorers.drift.compare import DriftSettings
from llmwatch.scorers.drift.online import DriftWindows
from llmwatch.scorers.drift.pager import Pager, PagerSettings


def traffic(
    rng: np.random.Generator, n: int, *, version: str, fail: float, start: int = 0, tpot_ms: float = 20.0
) -> list[tuple[Sample, list[Score]]]:
    out = []
    for i in range(start, start + n):
        tokens = int(rng.integers(80, 120))
        at = NOW + timedelta(seconds=10 * i)
        s = chat_sample(
            id=f"{version}-{i}",
            timestamp=at,
            model_version=version,
            latency_ms=tokens * tpot_ms * float(rng.uniform(0.9, 1.1)),
            usage={"input_tokens": 30, "output_tokens": tokens},
        )
        result = "fail" if rng.random() < fail else "pass"
        score = Score(sample_id=s.id, check="refusal", kind="refusal", result=result, sample_timestamp=at)
        out.append((s, [score]))
    return out


def baseline_of(rng: np.random.Generator):
    items = traffic(rng, 800, version="A", fail=0.05)
    return freeze([s for s, _ in items], [x for _, sc in items for x in sc], None, model_version="A")


def run(pager: Pager, items):
    return [t for s, sc in items for t in pager.observe(s, sc)]


def test_the_baseline_names_the_watched_signals_and_one_threshold_for_all():
    pager = Pager(baseline_of(np.random.default_rng(1)), PagerSettings())
    names = {s.name for s in pager.signals}
    assert names == {
        "pass_rate:refusal",
        "output_tokens:longer",
        "output_tokens:shorter",
        "perf:latency_per_token_ms:p50",
        "perf:latency_per_token_ms:p95",
    }
    # One false page per 30 days at 1 sample/s, over 5 signals.
    assert pager.threshold == pytest.approx(5 * 30 * 86_400)


def test_a_baseline_too_small_to_bound_its_p95_does_not_watch_it():
    """Before, 60 baseline rows held the p95 to their maximum, which lies below the true p95 in
    0.95^60 = 4.6 % of baselines (21 % at 30 rows), against the Phi(-3) = 0.135 % the bound
    promises: such a baseline pages a stable version for ever. 129 rows are the fewest whose
    maximum keeps that promise."""
    for rows, watched in ((60, False), (128, False), (129, True)):
        items = traffic(np.random.default_rng(2), rows, version="A", fail=0.05)
        baseline = freeze([s for s, _ in items], [x for _, sc in items for x in sc], None, model_version="A")
        names = {s.name for s in Pager(baseline, PagerSettings()).signals}
        assert ("perf:latency_per_token_ms:p95" in names) is watched, rows
        assert "perf:latency_per_token_ms:p50" in names


def test_a_stable_version_pages_nothing_and_a_version_that_refuses_more_pages_once_with_its_evidence():
    rng = np.random.default_rng(2)
    base = baseline_of(rng)
    pager = Pager(base, PagerSettings())
    assert run(pager, traffic(rng, 3000, version="A", fail=0.05)) == []
    worse = run(pager, traffic(rng, 3000, version="B", fail=0.15))
    assert [(t.state, t.signal, t.family, t.model_version) for t in worse] == [
        ("firing", "pass_rate:refusal", "behaviour", "B")
    ]
    assert worse[0].e_value >= worse[0].threshold and 10 < worse[0].samples_seen < 1500
    reading = next(r for r in pager.readings() if r.model_version == "B" and r.signal == "pass_rate:refusal")
    assert reading.firing and reading.decisive_at == worse[0].sample_time.timestamp()
    assert not any(r.firing for r in pager.readings() if r.model_version == "A")


def test_slower_tokens_page_as_performance():
    rng = np.random.default_rng(3)
    pager = Pager(baseline_of(rng), PagerSettings())
    fired = run(pager, traffic(rng, 2000, version="B", fail=0.05, tpot_ms=30.0))
    assert {(t.signal, t.family) for t in fired} >= {("perf:latency_per_token_ms:p50", "performance")}


def test_a_page_lasts_while_the_regression_does_and_resolves_after_it():
    rng = np.random.default_rng(4)
    pager = Pager(baseline_of(rng), PagerSettings())
    first = run(pager, traffic(rng, 6000, version="B", fail=0.2))
    assert [t.state for t in first] == ["firing"], first  # the detector alarms again and again: one page
    later = run(pager, traffic(rng, 4000, version="B", fail=0.05, start=6000))
    assert [t.state for t in later] == ["resolved"]


def test_a_restarted_window_resolves_the_version_and_starts_its_evidence_afresh():
    rng = np.random.default_rng(5)
    base = baseline_of(rng)
    windows = DriftWindows(base, window=100, interval_s=30, settings=DriftSettings(), pager=PagerSettings())
    items = traffic(rng, 1500, version="B", fail=0.3)
    fired = windows.add([s for s, _ in items], [x for _, sc in items for x in sc], {})
    assert [t.state for t in fired] == ["firing"]
    later = traffic(rng, 1, version="B", fail=0.0, start=5000)
    moved = later[0][0].model_copy(update={"response_model": "gpt-4o-mini-2024-09-01"})
    assert [t.state for t in windows.add([moved], later[0][1], {})] == ["resolved"]
    assert all(not r.firing for r in windows.pager_readings())
