"""The judge's pass-rate gauges are per judged model version, within the version label's cap."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from prometheus_client import generate_latest

from llmwatch.collectors.exporters.scores import ScoreRecorder
from llmwatch.collectors.judge.calibration import CalibrationWatch
from llmwatch.collectors.judge.config import JudgeMetrics, JudgeSection
from llmwatch.collectors.judge.messages import JudgeReport
from llmwatch.collectors.judge.parent import JudgeRecorder
from llmwatch.core.metrics import Metrics
from llmwatch.core.scores import Score

WHEN = datetime(2026, 12, 4, tzinfo=timezone.utc)


def recorder(metrics: Metrics, **timing: Any) -> JudgeRecorder:
    """The recorder for judge "sim-judge"; `timing`: the retire_after_s and clock a test sets."""
    section = JudgeSection(model="sim-judge")
    calibration = CalibrationWatch(None, section.min_agreement, section.min_labels)
    return JudgeRecorder(
        section, metrics.group(JudgeMetrics), ScoreRecorder(metrics, None), None, calibration, **timing
    )


def verdict(i: int, version: str, passed: bool) -> bytes:
    return Score(
        sample_id=f"s{i}",
        check="judge:helpfulness",
        kind="judge",
        result="pass" if passed else "fail",
        model="m",
        model_version=version,
        sample_timestamp=WHEN,
    ).to_json()


def gauge(text: str, name: str, version: str) -> float | None:
    head = f'{name}{{criterion="helpfulness",judge_model="sim-judge",model_version="{version}"}} '
    line = next((ln for ln in text.splitlines() if ln.startswith(head)), None)
    return float(line[len(head) :]) if line is not None else None


def test_two_versions_judged_in_one_rollout_keep_their_own_pass_rates():
    metrics = Metrics()
    rec = recorder(metrics)
    # v1 passes 3 of 4; the canary v2 fails all 4: a blend would read 3 of 8.
    scores = [verdict(i, "v1", i != 0) for i in range(4)] + [verdict(10 + i, "v2", False) for i in range(4)]
    rec.apply(JudgeReport(scores=scores))
    text = generate_latest(metrics.registry).decode()
    assert gauge(text, "llmwatch_judge_pass_rate", "v1") == 0.75
    assert gauge(text, "llmwatch_judge_pass_rate", "v2") == 0.0
    assert (
        'llmwatch_judge_verdicts_total{calibrated="false",criterion="helpfulness",judge_model="sim-judge",model_version="v2",result="fail"} 4.0'
        in text
    )


def test_versions_past_the_label_cap_share_one_window_and_one_series():
    metrics = Metrics(max_versions=2)
    rec = recorder(metrics)
    rec.apply(JudgeReport(scores=[verdict(i, f"v{i}", i % 2 == 0) for i in range(50)]))
    text = generate_latest(metrics.registry).decode()
    series = [ln for ln in text.splitlines() if ln.startswith("llmwatch_judge_pass_rate{")]
    assert len(series) == 3  # v0, v1 and "other"
    assert len(rec._window) == 3
    assert gauge(text, "llmwatch_judge_pass_rate", "other") == 0.5


def test_a_version_without_a_verdict_for_the_retention_stops_being_exported_and_comes_back_fresh():
    # v1 was rolled out to v2: v1's last pass rate must not stay on the dashboards (and in the
    # alerts) for ever. The retention is the served versions' (drift.version_change.remember_s).
    metrics = Metrics()
    now = [1000.0]
    rec = recorder(metrics, retire_after_s=3600.0, clock=lambda: now[0])
    rec.apply(JudgeReport(scores=[verdict(i, "v1", False) for i in range(4)]))
    now[0] += 1800.0
    rec.apply(JudgeReport(scores=[verdict(10 + i, "v2", True) for i in range(4)]))
    now[0] += 1800.0  # v1's last verdict exactly the retention ago: still kept
    rec.refresh()
    text = generate_latest(metrics.registry).decode()
    assert gauge(text, "llmwatch_judge_pass_rate", "v1") == 0.0
    now[0] += 1.0  # past it: v1 goes (the result thread's idle refresh), v2 stays
    rec.refresh()
    text = generate_latest(metrics.registry).decode()
    assert gauge(text, "llmwatch_judge_pass_rate", "v1") is None
    assert gauge(text, "llmwatch_judge_pass_rate", "v2") == 1.0
    assert set(rec._window) == {("helpfulness", "v2")}
    # Counters stay: a counter series that vanished would read as a reset.
    assert 'model_version="v1",result="fail"} 4.0' in text
    # v1 served again: its pass rate starts from its new verdicts only.
    rec.apply(JudgeReport(scores=[verdict(20, "v1", True)]))
    assert gauge(generate_latest(metrics.registry).decode(), "llmwatch_judge_pass_rate", "v1") == 1.0


def test_a_retention_of_zero_keeps_every_version():
    metrics = Metrics()
    now = [0.0]
    rec = recorder(metrics, retire_after_s=0.0, clock=lambda: now[0])
    rec.apply(JudgeReport(scores=[verdict(0, "v1", True)]))
    now[0] += 1e9
    rec.refresh()
    assert gauge(generate_latest(metrics.registry).decode(), "llmwatch_judge_pass_rate", "v1") == 1.0
