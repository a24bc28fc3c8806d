"""The judge's pass-rate gauges are per judged model version, within the version label's cap."""

from __future__ import annotations

from datetime import datetime, timezone

from prometheus_client import generate_latest

from llmwatch.collectors.exporters.scores import ScoreRecorder
from llmwatch.collectors.judge.calibration import CalibrationWatch
from llmwatch.collectors.judge.config import JudgeMetrics, JudgeSection
from llmwatch.collectors.judge.messages import JudgeReport
from llmwatch.collectors.judge.parent import JudgeRecorder
from llmwatch.core.metrics import Metrics
from llmwatch.core.scores import Score

WHEN = datetime(2026, 12, 4, tzinfo=timezone.utc)


def recorder(metrics: Metrics) -> JudgeRecorder:
    section = JudgeSection(model="sim-judge")
    calibration = CalibrationWatch(None, section.min_agreement, section.min_labels)
    return JudgeRecorder(section, metrics.group(JudgeMetrics), ScoreRecorder(metrics, None), None, calibration)


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
