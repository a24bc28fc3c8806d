"""The running judge's view of its calibration file: re-read when the file changes, never fatal."""

from __future__ import annotations

import os
import time
from pathlib import Path

import structlog

from llmwatch.scorers.evaluation.judge import PROMPT_VERSION
from llmwatch.scorers.evaluation.judge_calibration import (
    Calibration,
    CalibrationEntry,
    is_calibrated,
    load_calibration,
)

log = structlog.get_logger(__name__)


class CalibrationWatch:
    """`entry(model, criterion)` from the file `judge.calibration` names, checked at most every `every_s`."""

    def __init__(self, path: Path | None, min_agreement: float, min_labels: int, every_s: float = 5.0) -> None:
        self.path = path
        self.min_agreement = min_agreement
        self.min_labels = min_labels
        self.every_s = every_s
        self._checked = -1e18
        self._mtime: float | None = None
        self.calibration: Calibration | None = None

    def refresh(self) -> None:
        now = time.monotonic()
        if self.path is None or now - self._checked < self.every_s:
            return
        self._checked = now
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            if self.calibration is not None:
                log.warning("judge_calibration_gone", path=str(self.path))
            self.calibration, self._mtime = None, None
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            self.calibration = load_calibration(self.path)
            log.info("judge_calibration_loaded", path=str(self.path), entries=len(self.calibration.entries))
        except Exception as exc:
            # A bad file leaves the judge uncalibrated, said once per change of the file.
            self.calibration = None
            log.error("judge_calibration_unreadable", path=str(self.path), error=str(exc))

    def entry(self, model: str, criterion: str) -> CalibrationEntry | None:
        self.refresh()
        if self.calibration is None:
            return None
        return self.calibration.find(model, criterion, PROMPT_VERSION)

    def calibrated(self, model: str, criterion: str) -> bool:
        return is_calibrated(self.entry(model, criterion), self.min_agreement, self.min_labels)[0]
