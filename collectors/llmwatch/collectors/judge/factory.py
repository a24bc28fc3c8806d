"""The live judge as a component: made from the `judge` section, registered in llmwatch.agent.components."""

from __future__ import annotations

import os
from typing import Mapping

from llmwatch.collectors.exporters.scores import ScoreRecorder
from llmwatch.collectors.judge.config import JudgeMetrics, JudgeSection
from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.config import ConfigError, FilesSection, LoggingSection, MetricsSection
from llmwatch.core.pricing import PriceTable
from llmwatch.scorers.drift.config import DriftSection
from llmwatch.scorers.evaluation.config import MatrixSection


def resolve_key(section: JudgeSection, environ: Mapping[str, str]) -> str | None:
    """The API key from its `env:NAME` variable; errors name the variable, never a value."""
    if section.api_key is None:
        return None
    var = section.api_key.get_secret_value()[len("env:") :]
    if var not in environ:
        raise ConfigError(f"judge.api_key: environment variable {var} is not set; export it before starting llmwatch")
    return environ[var]


class JudgeComponent:
    def __init__(self, process: object, recorder: object, own_scores: ScoreRecorder | None) -> None:
        from llmwatch.collectors.judge.parent import JudgeProcess, JudgeRecorder

        assert isinstance(process, JudgeProcess) and isinstance(recorder, JudgeRecorder)
        self.process = process
        self.recorder = recorder
        self._own_scores = own_scores

    async def start(self) -> None:
        self.recorder.refresh()  # llmwatch_judge_calibrated reads 0 from the start, not absent
        self.process.start()

    async def stop(self) -> None:
        # The pipeline closed the judge's sink (which stopped the child and applied its last report).
        self.recorder.close()
        if self._own_scores is not None:
            self._own_scores.close()

    def readiness(self) -> dict[str, bool]:
        return {"judge_started": self.process.fatal is None}


def _create(ctx: Context, section: JudgeSection) -> Component | None:
    if not section.enabled:
        return None
    from llmwatch.collectors.judge.calibration import CalibrationWatch
    from llmwatch.collectors.judge.child import child_main
    from llmwatch.collectors.judge.parent import JudgeProcess, JudgeRecorder, JudgeSampler, JudgeSink
    from llmwatch.core.jsonio import JsonlWriter
    from llmwatch.scorers.evaluation.matrix import build_categories

    api_key = resolve_key(section, os.environ)
    prices = ctx.get(PriceTable)
    if section.max_usd_per_hour is not None and prices.cost(section.model, 1000, 1000) is None:
        raise ConfigError(
            f"judge.max_usd_per_hour: the judge model {section.model!r} has no price, so the cap cannot be held; "
            "add it under metrics.pricing, or drop max_usd_per_hour"
        )
    files = ctx.section(FilesSection)
    data_dir = ctx.setting("data_dir")
    scores = ctx.find(ScoreRecorder)
    own = None
    if scores is None:  # the scorer is off: the judge writes the score files itself
        own = scores = ScoreRecorder(
            ctx.metrics,
            JsonlWriter(data_dir / "scores", "scores", max_file_bytes=files.max_file_bytes) if files.enabled else None,
        )
    spot = (
        JsonlWriter(data_dir / "judge", "spot-check", max_file_bytes=files.max_file_bytes)
        if files.enabled and section.spot_check_rate > 0
        else None
    )
    calibration = CalibrationWatch(section.calibration, section.min_agreement, section.min_labels)
    # A judged version is forgotten as the served versions are (drift.version_change.remember_s).
    retire_after_s = ctx.section(DriftSection).version_change.remember_s
    recorder = JudgeRecorder(
        section, ctx.metrics.group(JudgeMetrics), scores, spot, calibration, retire_after_s=retire_after_s
    )
    process = JudgeProcess(
        section,
        dict(ctx.section(MetricsSection).pricing),
        api_key,
        recorder.apply,
        child_main=child_main,
        log_level=ctx.section(LoggingSection).level,
        log_format=ctx.section(LoggingSection).chosen_format(),
        on_idle=recorder.refresh,
        on_lost=lambda n: recorder.skipped("judge_down", n),
    )
    matrix = ctx.section(MatrixSection)
    sampler = JudgeSampler(section, build_categories(matrix), matrix.default_category)
    ctx.add_sink(JudgeSink(sampler, process, recorder))
    return JudgeComponent(process, recorder, own)


JUDGE = Factory("judge", "processor", JudgeSection, _create, metrics=(JudgeMetrics,))
