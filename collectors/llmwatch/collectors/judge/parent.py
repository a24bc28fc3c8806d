"""The live judge's parent side: which samples to judge, the hand-off, and what comes back.

- `JudgeSampler` decides on the pipeline thread, never on the proxy's event loop: the sample's
  task category (the evaluation matrix's), its rubric (by category and route), and the rate: a
  sample is judged when the hash of its id falls under its category's rate (`judge.rates`, else
  `judge.rate`), or while its category has had fewer than `judge.min_per_category` judged this
  hour, so rare categories are judged too (stratified, with a per-category minimum).
- `JudgeProcess` hands the chosen samples to the judge child (llmwatch.collectors.judge.child) on
  a multiprocessing queue: never blocks; more than `judge.max_queue` not yet taken by the child
  is a skip (`queue_full`). A result thread applies the child's reports: verdicts to the score
  files through the scorer's `ScoreRecorder` (counted in `llmwatch_check_total` only while the
  judge is calibrated), spot checks to `<data_dir>/judge/spot-check-*.jsonl`, and the
  `llmwatch_judge_*` series. A child that dies is said, counted and restarted.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import threading
import time
from collections import defaultdict, deque
from typing import Any, Callable, Sequence

import structlog

from llmwatch.collectors.exporters.scores import ScoreRecorder
from llmwatch.collectors.judge.calibration import CalibrationWatch
from llmwatch.collectors.judge.config import JudgeMetrics, JudgeSection
from llmwatch.collectors.judge.messages import JudgeFatal, JudgeJob, JudgeReady, JudgeReport
from llmwatch.core.jsonio import JsonlWriteError, JsonlWriter
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.evaluation.judge import JudgeRubric, rubric_for
from llmwatch.scorers.evaluation.judge_calibration import corrected_pass_rate, is_calibrated
from llmwatch.scorers.evaluation.matrix import Category, categorize
from llmwatch.scorers.pipeline.sampler import hash_fraction

log = structlog.get_logger(__name__)

WINDOW = 500  # verdicts per criterion and judged version behind the pass-rate gauges


class JudgeSampler:
    """Which samples the judge sees: stratified by category, with a per-category minimum per hour."""

    def __init__(
        self,
        section: JudgeSection,
        categories: Sequence[Category],
        default_category: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.section = section
        self.categories = list(categories)
        self.default_category = default_category
        self.clock = clock
        self._hour_started = clock()
        self._judged: dict[str, int] = defaultdict(int)

    def pick(self, sample: Sample) -> tuple[str, JudgeRubric | None] | None:
        """(category, rubric) for a sample to judge (rubric None: judged by none), or None: not picked."""
        now = self.clock()
        if now - self._hour_started >= 3600.0:
            self._hour_started = now
            self._judged.clear()
        category = categorize(sample, self.categories, self.default_category)
        rate = self.section.rates.get(category, self.section.rate)
        below_minimum = self._judged[category] < self.section.min_per_category
        if not below_minimum and hash_fraction("judge:" + sample.id) >= rate:
            return None
        self._judged[category] += 1
        return category, rubric_for(self.section.rubrics, category, sample.route)


class JudgeProcess:
    """The parent's handle on the judge child: `submit` never blocks; reports applied on a thread."""

    def __init__(
        self,
        section: JudgeSection,
        pricing: Any,
        api_key: str | None,
        on_report: Callable[[JudgeReport], None],
        *,
        child_main: Callable[..., None],
        log_level: str = "warning",
        log_format: str | None = None,
        on_idle: Callable[[], None] | None = None,
        on_lost: Callable[[int], None] | None = None,
    ) -> None:
        self.section = section
        # Called on the result thread when the child had nothing to say for half a second
        # (the gauges follow a calibration file that changed while no verdict came).
        self._on_idle = on_idle or (lambda: None)
        # Jobs handed to a child that died before reading them: counted (judge_down), never silent.
        self._on_lost = on_lost or (lambda n: None)
        self._pricing = pricing
        self._api_key = api_key
        self._on_report = on_report
        self._child_main = child_main
        self._log_level = log_level
        self._log_format = log_format  # None: the child's stderr decides, as the parent's did
        self._ctx = mp.get_context("spawn")
        self._lock = threading.Lock()
        self._sent = 0
        self._taken = 0
        self._proc: Any = None
        self._inbox: Any = None
        self._outbox: Any = None
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.fatal: str | None = None
        self.restarts = 0
        self._warn = RateLimitedLog()
        self._thread = threading.Thread(target=self._collect, name="llmwatch-judge-results", daemon=True)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _spawn(self) -> None:
        for old in (self._inbox, self._outbox):  # a dead child's queues: their pipes are closed here
            if old is not None:
                try:
                    old.cancel_join_thread()
                    old.close()
                except (OSError, ValueError):
                    pass
        self._inbox = self._ctx.Queue()
        self._outbox = self._ctx.Queue()
        self._inbox.cancel_join_thread()
        args = (
            # Without api_key (`env:NAME`, which would dump masked): the key itself travels apart.
            self.section.model_dump(mode="json", exclude={"api_key"}),
            self._pricing,
            self._api_key,
            self._inbox,
            self._outbox,
            self._log_level,
            os.getpid(),
            self._log_format,
        )
        self._proc = self._ctx.Process(target=self._child_main, args=args, name="llmwatch-judge", daemon=True)
        self._proc.start()
        with self._lock:
            self._sent = self._taken = 0

    def start(self) -> None:
        self._spawn()
        self._thread.start()

    @property
    def backlog(self) -> int:
        return self._sent - self._taken

    def submit(self, job: JudgeJob) -> bool:
        """Hand one job to the child; False when it is too far behind (or gone)."""
        with self._lock:
            if self._stop.is_set() or self.fatal is not None or self._sent - self._taken >= self.section.max_queue:
                return False
            self._sent += 1
            inbox = self._inbox
        try:
            inbox.put(job)
        except (OSError, ValueError):
            return False
        return True

    def _collect(self) -> None:
        last_restart = 0.0
        while not self._stop.is_set():
            outbox = self._outbox
            try:
                message = outbox.get(timeout=0.5)
            except queue.Empty:
                message = None
            except (EOFError, OSError, ValueError):
                message = None
            if message is not None:
                self._dispatch(message)
                continue
            try:
                self._on_idle()
            except Exception as exc:
                self._warn(log.error, "judge_idle_failed", error=repr(exc))
            if self._stop.is_set() or self.fatal is not None:
                continue
            proc = self._proc
            if proc is not None and not proc.is_alive():
                if time.monotonic() - last_restart < 5.0:
                    continue  # at most one restart per few seconds
                last_restart = time.monotonic()
                lost = self.backlog
                log.error("judge_child_died", exitcode=proc.exitcode, restarts=self.restarts, jobs_lost=lost)
                self.restarts += 1
                self.ready.clear()
                self._spawn()
                if lost:
                    self._on_lost(lost)

    def _dispatch(self, message: object) -> None:
        match message:
            case JudgeReady():
                self.ready.set()
                log.info("judge_ready", pid=self.pid, model=self.section.model)
            case JudgeFatal(error):
                self.fatal = error
                self.ready.set()
                log.error("judge_failed_to_start", error=error)
            case JudgeReport():
                with self._lock:
                    self._taken += message.taken
                try:
                    self._on_report(message)
                except Exception as exc:
                    self._warn(log.error, "judge_report_failed", error=repr(exc))

    def close(self, timeout: float = 5.0) -> None:
        """Stop the child (calls in flight get ~2 s), apply its last report, bounded by `timeout` + 1 s."""
        proc = self._proc
        if proc is not None and proc.is_alive():
            try:
                self._inbox.put(None)
            except (OSError, ValueError):
                pass
            proc.join(timeout)
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(1.0)
        # What the child said last (its final report) is applied here, after the thread stopped.
        while self._outbox is not None:
            try:
                message = self._outbox.get(timeout=0.2)
            except (queue.Empty, EOFError, OSError, ValueError):
                break
            self._dispatch(message)
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(1.0)
        for q in (self._inbox, self._outbox):
            if q is not None:
                try:
                    q.cancel_join_thread()
                    q.close()
                except (OSError, ValueError):
                    pass


class JudgeRecorder:
    """The child's reports into score files, spot-check files and the llmwatch_judge_* series."""

    def __init__(
        self,
        section: JudgeSection,
        metrics: JudgeMetrics,
        scores: ScoreRecorder,
        spot_writer: JsonlWriter | None,
        calibration: CalibrationWatch,
        *,
        retire_after_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.section = section
        self.model = section.model or ""
        self.metrics = metrics
        self.scores = scores
        self.spot_writer = spot_writer
        self.calibration = calibration
        # Per (criterion, judged version's label): the version is capped like every version label,
        # so the windows are bounded; a rollout's two versions get two pass rates, not one blend.
        self._window: dict[tuple[str, str], deque[bool]] = defaultdict(lambda: deque(maxlen=WINDOW))
        # A judged version without a verdict for `retire_after_s` is no longer served (or no longer
        # judged): its windows and pass-rate series go, or its last figures were exported for ever,
        # a rollout long done still on the dashboards and in the alerts. The rule of the served
        # versions (llmwatch/core/served.py, `drift.version_change.remember_s`): a version not seen
        # for that long is forgotten, and its return is a new start. 0: never retired.
        self.retire_after_s = retire_after_s
        self._clock = clock
        self._last_verdict: dict[str, float] = {}  # version label -> clock time of its last verdict
        self._lock = threading.Lock()
        self.verdicts = 0  # verdicts recorded (pass, fail or error): tests wait on it
        self.spot_checks = 0
        self._warn = RateLimitedLog()
        self.criteria = sorted({c.name for r in section.rubrics for c in r.criteria})

    def skipped(self, reason: str, n: int = 1) -> None:
        self.metrics.judge_skipped.labels(reason=reason).inc(n)

    def apply(self, report: JudgeReport) -> None:
        m = self.metrics
        with self._lock:
            for reason, n in report.skipped.items():
                m.judge_skipped.labels(reason=reason).inc(n)
            for reason, n in report.failures.items():
                m.judge_failures.labels(reason=reason).inc(n)
            if report.spend_usd > 0:
                m.judge_spend.inc(report.spend_usd)
            m.judge_inflight.set(report.inflight)
            scores = [Score.from_json(line) for line in report.scores]
            for s in scores:
                # Whether the judge was calibrated when its verdict came in: this process's view of
                # the calibration file, the same one the gauges show.
                s.details["calibrated"] = self.calibration.calibrated(self.model, s.check[len("judge:") :])
            counted = [s for s in scores if s.details.get("calibrated") is True]
            stored = [s for s in scores if s.details.get("calibrated") is not True]
            if counted:
                self.scores.record(counted, [0.0] * len(counted))
            if stored:
                self.scores.record(stored, [0.0] * len(stored), count=False)
            now = self._clock()
            for s in scores:
                criterion = s.check[len("judge:") :]
                version = m.version_label(s.model_version)
                self._last_verdict[version] = now
                m.judge_verdicts.labels(
                    criterion, self.model, version, s.result, "true" if s.details.get("calibrated") is True else "false"
                ).inc()
                if s.result in ("pass", "fail"):
                    self._window[(criterion, version)].append(s.result == "pass")
            if report.spot and self.spot_writer is not None:
                try:
                    self.spot_writer.write_lines(report.spot)
                    self.spot_checks += len(report.spot)
                except JsonlWriteError as exc:
                    self._warn(log.error, "judge_spot_check_write_failed", lost=exc.lost, error=str(exc))
            self._gauges()
            self.verdicts += len(scores)

    def refresh(self) -> None:
        """The gauges again, from the calibration file as it is now (the result thread calls it when idle)."""
        with self._lock:
            self._gauges()

    def _retire(self) -> None:
        """Forget the versions without a verdict for `retire_after_s`: windows and gauge series."""
        if self.retire_after_s <= 0:
            return
        now = self._clock()
        m = self.metrics
        for version, last in list(self._last_verdict.items()):
            if now - last <= self.retire_after_s:
                continue
            del self._last_verdict[version]
            for criterion, judged in [key for key in self._window if key[1] == version]:
                del self._window[(criterion, judged)]
                with contextlib.suppress(KeyError):  # a series never set (no pass or fail verdict)
                    m.judge_pass_rate.remove(criterion, self.model, version)
                for bound in ("estimate", "lower", "upper"):
                    with contextlib.suppress(KeyError):
                        m.judge_pass_rate_corrected.remove(criterion, self.model, version, bound)
            log.info("judge_version_retired", model_version=version, idle_s=round(now - last, 1))

    def _gauges(self) -> None:
        self._retire()
        m = self.metrics
        for criterion in self.criteria:
            entry = self.calibration.entry(self.model, criterion)
            ok, _ = is_calibrated(entry, self.section.min_agreement, self.section.min_labels)
            m.judge_calibrated.labels(criterion, self.model).set(1.0 if ok else 0.0)
            if entry is not None and entry.kappa is not None:
                for bound, value in (
                    ("estimate", entry.kappa),
                    ("lower", entry.kappa_low),
                    ("upper", entry.kappa_high),
                ):
                    if value is not None:
                        m.judge_kappa.labels(criterion, self.model, bound).set(value)
            for (judged, version), window in list(self._window.items()):
                if judged != criterion or not window:
                    continue
                passed = sum(window)
                m.judge_pass_rate.labels(criterion, self.model, version).set(passed / len(window))
                corrected = corrected_pass_rate(passed, len(window), entry) if entry is not None else None
                if corrected is not None:
                    for bound, value in zip(("estimate", "lower", "upper"), corrected):
                        m.judge_pass_rate_corrected.labels(criterion, self.model, version, bound).set(value)

    def close(self) -> None:
        if self.spot_writer is not None:
            with self._lock:
                self.spot_writer.close()


class JudgeSink:
    """The pipeline's hand-off to the judge (redacted samples, as stored: the judge is another service)."""

    name = "judge"
    raw = False

    def __init__(self, sampler: JudgeSampler, process: JudgeProcess, recorder: JudgeRecorder) -> None:
        self.sampler = sampler
        self.process = process
        self.recorder = recorder

    def write(self, samples: Sequence[Sample]) -> int:
        for sample in samples:
            picked = self.sampler.pick(sample)
            if picked is None:
                continue
            category, rubric = picked
            if rubric is None:
                self.recorder.skipped("no_rubric")
                continue
            criteria = [c.model_dump(mode="json") for c in rubric.criteria]
            if not self.process.submit(JudgeJob(sample.to_json(), category, criteria)):
                self.recorder.skipped("judge_down" if self.process.fatal else "queue_full", len(criteria))
        return 0  # a sample the judge skips is not lost: it is stored and scored as any other

    def close(self) -> None:
        self.process.close(5.0)
