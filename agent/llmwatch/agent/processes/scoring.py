"""The scorer process: scoring runs here, never in the proxy's process.

Rule checks are cheap but embeddings are not, and both hold the GIL while they run; in the
proxy's process they would add their run time to proxied calls. So the sidecar starts one
child process (spawned, so that no event loop or lock is inherited) which loads the model
once and scores batches sent over a multiprocessing queue.

`ScorerProcess` is the parent's handle: `submit` never blocks (a full hand-off drops and
counts), and a watchdog restarts a child that dies or goes silent past `batch_timeout_s`,
recording its in-flight batches as `error` results so that nothing disappears unexplained.

Parent and child talk in the small frozen dataclasses below, matched by type: `ScoreBatch`,
`JoinScores`, `LoadBaseline`, `FreezeBaseline` go to the child (None asks it to stop); `Ready`, `Fatal`,
`Scored`, `DriftUpdate`, `EvaluationUpdate`, `Frozen` come back. The child's windows, drift and
evaluation are the shared aggregate stage (scorers/llmwatch/scorers/drift/aggregate.py).

Lifecycle. Two parent threads: the collector reads results, the watchdog restarts the child; a
failing result handler (disk full) is caught and counted, never kills either thread, and
`healthy` (in /readyz) turns false if one dies anyway. `close` is bounded by
`scoring.shutdown_timeout_s`: a ready scorer gets that long to score what it holds (announced as
`scorer_draining`), one still loading its model gets nothing; then the child is stopped (killed
after a second) and every sample left unscored becomes one `error` score per check with
`details.exception = "shutdown"`, counted in `llmwatch_samples_unscored_total{reason}`. The
multiprocessing queues never hold up the exit (`cancel_join_thread`), and the child exits by
itself within a second when its parent is gone (even SIGKILLed), which also lets
multiprocessing's resource tracker exit.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import structlog

from llmwatch.collectors.exporters.scores import ScoringMetrics
from llmwatch.collectors.intake import PipelineMetrics
from llmwatch.collectors.late_scores import LateScores
from llmwatch.core.children import exit_when_orphaned, isolate
from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.config import ConfigError, FilesSection, LoggingSection
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.metrics import CanaryReading, DriftReading, EvaluationReading
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.drift.config import DriftSection
from llmwatch.scorers.drift.metrics import CanaryMetrics, DriftMetrics, DriftReadings
from llmwatch.scorers.drift.pager import PagerReading
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.evaluation.metrics import EvaluationMetrics

log = structlog.get_logger(__name__)

ScoreHandler = Callable[[list[Score], list[float]], None]
DriftHandler = Callable[[list[DriftReading]], None]
EvaluationHandler = Callable[[list[EvaluationReading]], None]
CanaryHandler = Callable[[list[CanaryReading]], None]
PagerHandler = Callable[[list[PagerReading]], None]


# --- messages, parent -> child (None: stop) -----------------------------------------------------


@dataclass(frozen=True)
class ScoreBatch:
    batch_id: int
    lines: list[bytes]  # Sample.to_json() of each sample


@dataclass(frozen=True)
class JoinScores:
    """Scores of samples already scored (the consistency probe's verdicts): for the drift windows only."""

    lines: list[bytes]  # Score.to_json() of each


@dataclass(frozen=True)
class LoadBaseline:
    path: str


@dataclass(frozen=True)
class FreezeBaseline:
    model_version: str
    path: str


# --- messages, child -> parent ------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    check_names: list[str]


@dataclass(frozen=True)
class Fatal:
    error: str


@dataclass(frozen=True)
class Scored:
    batch_id: int
    lines: list[bytes]  # Score.to_json() of each result
    durations: list[float]


@dataclass(frozen=True)
class DriftUpdate:
    readings: list[DriftReading]


@dataclass(frozen=True)
class PagerUpdate:
    readings: list[PagerReading]


@dataclass(frozen=True)
class CanaryUpdate:
    readings: list[CanaryReading]


@dataclass(frozen=True)
class EvaluationUpdate:
    readings: list[EvaluationReading]


@dataclass(frozen=True)
class Frozen:
    path: str
    error: str | None


def _child_main(
    scoring_payload: dict[str, Any],
    drift_payload: dict[str, Any],
    matrix_payload: dict[str, Any],
    inbox: Any,
    outbox: Any,
    log_level: str,
    parent_pid: int | None = None,
    log_format: str | None = None,
) -> None:
    # Ctrl-C reaches the whole process group: the parent decides when and how the scorer stops
    # (drain, then stop), so the child must not die mid-batch with a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None:
        threading.Thread(
            target=exit_when_orphaned, args=(parent_pid,), name="llmwatch-scorer-orphan-check", daemon=True
        ).start()
    from llmwatch.core.logs import configure_logging
    from llmwatch.scorers.checks.config import ScoringSection
    from llmwatch.scorers.checks.suite import build_suite
    from llmwatch.scorers.drift.aggregate import WindowAggregator
    from llmwatch.scorers.drift.baseline import load_baseline, write_baseline
    from llmwatch.scorers.drift.config import DriftSection
    from llmwatch.scorers.evaluation.config import MatrixSection

    configure_logging(log_level, log_format)
    scoring_cfg = ScoringSection.model_validate(scoring_payload)
    isolate(scoring_cfg.cpu_affinity, scoring_cfg.nice)
    drift_cfg = DriftSection.model_validate(drift_payload)
    try:
        baseline = load_baseline(drift_cfg.baseline) if drift_cfg.baseline else None
        suite = build_suite(scoring_cfg, centroids=baseline.centroids() if baseline else None)
    except Exception as exc:
        outbox.put(Fatal(f"{type(exc).__name__}: {exc}"))
        return
    matrix_cfg = MatrixSection.model_validate(matrix_payload) if matrix_payload else None
    stage = WindowAggregator(baseline, drift_cfg, matrix_cfg, known_checks=suite.check_names)
    outbox.put(Ready(list(suite.check_names)))
    while True:
        try:
            message = inbox.get(timeout=1.0)
        except queue.Empty:
            message = _IDLE
        match message:
            case None:
                return
            case LoadBaseline(path):
                try:
                    stage.set_baseline(load_baseline(path))
                except Exception as exc:
                    log.error("baseline_load_failed", path=str(path), error=str(exc))
                continue
            case FreezeBaseline(version, path):
                try:
                    write_baseline(stage.freeze(version), path)
                    outbox.put(Frozen(path, None))
                except Exception as exc:
                    outbox.put(Frozen(path, f"{type(exc).__name__}: {exc}"))
                continue
            case JoinScores(lines):
                stage.join([Score.from_json(line) for line in lines])
                continue
            case ScoreBatch(batch_id, lines):
                samples = [Sample.from_json(line) for line in lines]
                results = suite.score(samples)
                outbox.put(Scored(batch_id, [r.score.to_json() for r in results], [r.duration_s for r in results]))
                stage.add(samples, [r.score for r in results], _answer_vectors(suite, samples))
        if stage.due():
            _publish(stage.readings(), outbox)


def _publish(readings: Any, outbox: Any) -> None:
    """What a round of readings sends back to the parent (each part only when it ran)."""
    if readings.evaluation is not None:
        outbox.put(EvaluationUpdate(readings.evaluation))
    if readings.drift is not None:
        outbox.put(DriftUpdate(readings.drift))
    if readings.pager is not None:
        outbox.put(PagerUpdate(readings.pager))
    if readings.canary is not None:
        outbox.put(CanaryUpdate(readings.canary))


# What the child's loop sees when its inbox stayed empty for a second: no message, only the clock.
_IDLE = object()


def _answer_vectors(suite: Any, samples: Sequence[Sample]) -> dict[str, Any]:
    if suite.embedder is None:
        return {}
    import numpy as np

    # embed_answers already leaves failed, tool-only and empty answers as zero rows (and reuses
    # the vectors the relevance check just computed): keep the others.
    vectors = suite.embedder.embed_answers(samples)
    return {s.id: v for s, v in zip(samples, vectors) if np.any(v)}


@dataclass
class _Batch:
    samples: list[Sample]
    sent_at: float


class ScorerProcess:
    def __init__(
        self,
        scoring_payload: dict[str, Any],
        on_scores: ScoreHandler,
        *,
        max_pending: int,
        batch_timeout_s: float,
        drift_payload: dict[str, Any] | None = None,
        on_drift: DriftHandler | None = None,
        matrix_payload: dict[str, Any] | None = None,
        on_evaluation: EvaluationHandler | None = None,
        on_canary: CanaryHandler | None = None,
        on_pager: PagerHandler | None = None,
        log_level: str = "warning",
        log_format: str | None = None,
        on_drop: Callable[[str, int], None] | None = None,
        on_unscored: Callable[[str, int], None] | None = None,
        shutdown_timeout_s: float = 5.0,
    ) -> None:
        self._payload = scoring_payload
        self._drift_payload = drift_payload or {}
        self._on_drift = on_drift or (lambda readings: None)
        self._matrix_payload = matrix_payload or {}
        self._on_evaluation = on_evaluation or (lambda readings: None)
        self._on_canary = on_canary or (lambda readings: None)
        self._on_pager = on_pager or (lambda readings: None)
        self._on_scores = on_scores
        self._on_drop = on_drop or (lambda reason, n: None)
        self._on_unscored = on_unscored or (lambda reason, n: None)
        self._max_pending = max_pending
        self._timeout = batch_timeout_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self._log_level = log_level
        self._log_format = log_format  # None: the child's stderr decides, as the parent's did
        self._ctx = mp.get_context("spawn")
        self._ids = itertools.count()
        self._inflight: dict[int, _Batch] = {}
        self._pending = 0
        self._lock = threading.Lock()
        # A restart (watchdog thread) and close() never interleave: close would miss the new child.
        self._restart_lock = threading.Lock()
        self._stop = threading.Event()
        self._abandoned = threading.Event()  # the stop was given up (abandon)
        self._proc: Any = None
        self._inbox: Any = None
        self._outbox: Any = None
        self.check_names: list[str] = []
        self.ready = threading.Event()
        self.fatal: str | None = None
        self.restarts = 0
        self.late_scores_dropped = 0  # `join_scores` lines not handed off: the scorer was behind
        self._last_progress = time.monotonic()
        self._frozen: dict[str, str | None] = {}
        self._frozen_event = threading.Event()
        self._warn = RateLimitedLog()
        self._thread = threading.Thread(target=self._collect, name="llmwatch-scorer-results", daemon=True)
        # Not in the collector thread: whatever happens to result handling, restarts go on.
        self._watchdog_thread = threading.Thread(target=self._supervise, name="llmwatch-scorer-watchdog", daemon=True)

    # --- lifecycle --------------------------------------------------------------------------

    def _spawn(self) -> None:
        self._inbox = self._ctx.Queue()
        self._outbox = self._ctx.Queue()
        # A child that is stopped, killed or hung never reads its inbox again; the feeder thread
        # writing to that pipe would then block the interpreter's exit forever.
        self._inbox.cancel_join_thread()
        args = (
            self._payload,
            self._drift_payload,
            self._matrix_payload,
            self._inbox,
            self._outbox,
            self._log_level,
            os.getpid(),
            self._log_format,
        )
        self._proc = self._ctx.Process(target=_child_main, args=args, name="llmwatch-scorer", daemon=True)
        self._proc.start()

    def start(self) -> None:
        self._spawn()
        self._thread.start()
        self._watchdog_thread.start()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        """The scorer child's process id (None before it starts): to measure or pin it."""
        return None if self._proc is None else self._proc.pid

    @property
    def healthy(self) -> bool:
        """For /readyz: the scorer started, both its threads run, and the child can be (re)started.

        A child that is loading its model is healthy; one that failed to start is not.
        """
        if self.fatal is not None or self._stop.is_set():
            return False
        return self._thread.is_alive() and self._watchdog_thread.is_alive()

    def close(self, timeout: float | None = None) -> None:
        """Stop within `timeout` (default `shutdown_timeout_s`) plus about two seconds.

        A ready scorer first scores what it holds, up to `timeout`; one still loading its model
        is not waited for. Whatever is left unscored is recorded as `error` scores (`shutdown`).
        """
        timeout = self.shutdown_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        pending = self._pending
        if pending and self.ready.is_set() and self.fatal is None and self.alive:
            log.info("scorer_draining", samples=pending, timeout_s=timeout)
            try:
                while self._inflight and time.monotonic() < deadline and self.alive and not self._abandoned.is_set():
                    time.sleep(0.05)
            except BaseException:
                # A Ctrl-C that gives up the stop (KeyboardInterrupt here): the child is killed on
                # the way out. Left alive, multiprocessing's exit handler waited on it (for ever,
                # on a child that did not answer) and a stopped one outlived the proxy.
                self._stop.set()
                self._stop_child(self._proc, self._inbox, graceful=False)
                raise
        if self._abandoned.is_set():
            return  # given up (abandon killed the child): nothing more is recorded, as above
        log.info("scorer_stopping", unscored=self._pending, model_loaded=self.ready.is_set())
        self._stop.set()
        with self._restart_lock:  # a restart under way finishes first, so its new child is stopped too
            self._stop_child(self._proc, self._inbox, graceful=self.ready.is_set())
        for thread in (self._thread, self._watchdog_thread):
            if thread.is_alive():
                thread.join(timeout=1.0)
        unscored = self._fail_inflight("shutdown")
        if unscored:
            log.warning("scorer_unscored", samples=unscored, reason="shutdown")
        self._discard_queues(self._inbox, self._outbox)

    def abandon(self) -> None:
        """Give the stop up from another thread than the one in `close` (the agent waits for the
        pipeline's close in a thread; a second Ctrl-C lands on the event loop's): the child is
        killed now, and `close` returns without waiting or recording anything more."""
        self._abandoned.set()
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.is_alive():
            proc.kill()  # SIGKILL: a stopped (SIGSTOP) or stuck child ignores anything milder

    def _stop_child(self, proc: Any, inbox: Any, *, graceful: bool) -> None:
        """Ask the child to stop, then make sure: at most ~1.5 s, whatever state it is in."""
        if proc is None:
            return
        if graceful and proc.is_alive():
            try:
                inbox.put(None)
            except (OSError, ValueError):
                pass
            proc.join(timeout=1.0)
        if proc.is_alive():
            # SIGKILL: a child stopped (SIGSTOP) or stuck in native code ignores anything milder.
            proc.kill()
            proc.join(timeout=0.5)

    @staticmethod
    def _discard_queues(*queues: Any) -> None:
        for q in queues:
            if q is None:
                continue
            try:
                q.cancel_join_thread()
                q.close()
            except (OSError, ValueError):
                pass

    # --- hand-off ---------------------------------------------------------------------------

    def submit(self, samples: Sequence[Sample]) -> bool:
        """Queue samples for scoring; False (and counted) when the scorer is too far behind."""
        n = len(samples)
        with self._lock:
            if self.fatal is not None or self._stop.is_set() or self._pending + n > self._max_pending:
                reason = (
                    "scorer_failed"
                    if self.fatal is not None
                    else "scorer_stopped"
                    if self._stop.is_set()
                    else "scoring_queue_full"
                )
                self._on_drop(reason, n)
                return False
            batch_id = next(self._ids)
            self._inflight[batch_id] = _Batch(list(samples), time.monotonic())
            self._pending += n
            inbox = self._inbox
        inbox.put(ScoreBatch(batch_id, [s.to_json() for s in samples]))
        return True

    def join_scores(self, lines: list[bytes]) -> None:
        """Hand late scores (`Score.to_json()` lines) to the child's drift windows; never blocks.

        Called on the proxy's event loop (llmwatch.collectors.late_scores): a put on the child's
        queue only appends to its feeder thread's buffer. Lost, as in-flight batches are, when
        the child restarts. Dropped (`late_scores_dropped`, a rate-limited log line) while the
        scorer is at its bound of pending samples: the child is far behind, and the queue's
        buffer, which the bound keeps small for samples, would otherwise grow with each verdict.
        """
        inbox = self._inbox
        if inbox is None or self.fatal is not None or self._stop.is_set():
            return
        with self._lock:
            behind = self._pending >= self._max_pending
        if behind:
            self.late_scores_dropped += len(lines)
            self._warn(log.warning, "late_scores_dropped", why="scorer_behind", total=self.late_scores_dropped)
            return
        try:
            inbox.put(JoinScores(list(lines)))
        except (OSError, ValueError):
            pass  # the queue was closed by a restart or close under way

    def freeze_baseline(self, version: str, path: str, timeout: float = 120.0) -> None:
        """Freeze the scorer's recent window of `version` into a new baseline file (blocking).

        Raises RuntimeError with the scorer's reason when it could not (no samples, file exists).
        """
        path = str(path)
        self._frozen.pop(path, None)
        self._frozen_event.clear()
        self._inbox.put(FreezeBaseline(version, path))
        deadline = time.monotonic() + timeout
        while path not in self._frozen:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the scorer did not freeze a baseline within {timeout:g} s")
            self._frozen_event.wait(0.2)
            self._frozen_event.clear()
        error = self._frozen.pop(path)
        if error is not None:
            raise RuntimeError(error)

    def load_baseline(self, path: str) -> None:
        """Compare from now on against this baseline file (windows start empty)."""
        self._drift_payload = {**self._drift_payload, "baseline": str(path)}
        if self._inbox is not None:
            self._inbox.put(LoadBaseline(str(path)))

    @property
    def pending(self) -> int:
        return self._pending

    # --- results ----------------------------------------------------------------------------

    def _finish(self, batch_id: int) -> _Batch | None:
        with self._lock:
            batch = self._inflight.pop(batch_id, None)
            if batch is not None:
                self._pending -= len(batch.samples)
            return batch

    def _fail_inflight(self, reason: str) -> int:
        """Record every unanswered sample as an `error` score, so losses are visible per check.

        Returns (and counts under `on_unscored`) how many samples that was.
        """
        with self._lock:
            batches = list(self._inflight.items())
            self._inflight.clear()
            self._pending = 0
        now = datetime.now(timezone.utc)
        total = 0
        for _, batch in batches:
            total += len(batch.samples)
            scores = [
                Score(
                    sample_id=s.id,
                    check=name,
                    kind="scorer",
                    result="error",
                    details={"exception": reason},
                    model=s.model,
                    model_version=s.model_version,
                    route=s.route,
                    sample_timestamp=s.timestamp,
                    scored_at=now,
                )
                for s in batch.samples
                for name in (self.check_names or ["scorer"])
            ]
            self._handle("scores", self._on_scores, scores, [0.0] * len(scores))
        if total:
            self._on_unscored(reason, total)
        return total

    def _handle(self, what: str, handler: Callable[..., None], *args: Any) -> None:
        """Run a result handler; its failure (e.g. a full disk) is logged, never fatal to the thread."""
        try:
            handler(*args)
        except Exception as exc:
            self._warn(log.error, "scorer_result_handler_failed", result=what, error=repr(exc))

    def _restart(self, reason: str) -> None:
        with self._restart_lock:
            if self._stop.is_set():
                return
            log.error("scorer_restarted", reason=reason, inflight=len(self._inflight))
            old_proc, old_inbox, old_outbox = self._proc, self._inbox, self._outbox
            self._stop_child(old_proc, old_inbox, graceful=False)
            self.restarts += 1
            self.ready.clear()
            self._last_progress = time.monotonic()
            self._spawn()
            # After the new inbox is in place: a batch submitted meanwhile went to the old one and
            # is failed here, instead of waiting unanswered for the next timeout.
            self._fail_inflight(reason)
            self._discard_queues(old_inbox, old_outbox)

    def _collect(self) -> None:
        while not self._stop.is_set():
            outbox = self._outbox
            try:
                message = outbox.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError, ValueError):
                # The child died mid-message, or a restart closed this queue: the watchdog
                # restarts the child; this thread picks up the new queue.
                self._stop.wait(0.2)
                continue
            try:
                if not self._dispatch(message):
                    return
            except Exception as exc:
                self._warn(log.error, "scorer_message_failed", error=repr(exc))

    def _dispatch(self, message: object) -> bool:
        """Act on one message from the child; False when the scorer cannot run at all."""
        self._last_progress = time.monotonic()
        match message:
            case Ready(check_names):
                self.check_names = list(check_names)
                self.ready.set()
                log.info("scorer_ready", checks=self.check_names, restarts=self.restarts)
            case Fatal(error):
                self.fatal = error
                log.error("scorer_failed_to_start", error=error)
                self._fail_inflight("scorer_failed")
                self.ready.set()
                return False
            case DriftUpdate(readings):
                self._handle("drift", self._on_drift, readings)
            case EvaluationUpdate(readings):
                self._handle("evaluation", self._on_evaluation, readings)
            case CanaryUpdate(readings):
                self._handle("canary", self._on_canary, readings)
            case PagerUpdate(readings):
                self._handle("pager", self._on_pager, readings)
            case Frozen(path, error):
                self._frozen[path] = error
                self._frozen_event.set()
            case Scored(batch_id, lines, durations):
                if self._finish(batch_id) is not None:
                    self._handle("scores", self._on_scores, [Score.from_json(line) for line in lines], durations)
        return True

    def _supervise(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._watchdog()
            except Exception as exc:
                self._warn(log.error, "scorer_watchdog_failed", error=repr(exc))

    def _watchdog(self) -> None:
        if self._stop.is_set() or self.fatal is not None:
            return
        if not self.alive:
            self._restart("scorer_crashed")
            return
        with self._lock:
            oldest = min((b.sent_at for b in self._inflight.values()), default=None)
        # Stalled = work waiting and no answer for `timeout`; a long queue that moves is not stalled.
        if oldest is not None and time.monotonic() - max(oldest, self._last_progress) > self._timeout:
            self._restart("scorer_timeout")


class ScoringSink:
    """The pipeline's hand-off to the scorer process (original text: it never leaves this host)."""

    name = "scorer"
    raw = True

    def __init__(self, scorer: ScorerProcess, batch_size: int) -> None:
        self.scorer = scorer
        self.batch_size = batch_size

    def write(self, samples: Sequence[Sample]) -> int:
        """Hand samples to the scorer; how many it refused (counted by the scorer's `on_drop`)."""
        refused = 0
        for i in range(0, len(samples), self.batch_size):
            chunk = samples[i : i + self.batch_size]
            if not self.scorer.submit(chunk):
                refused += len(chunk)
        return refused

    def close(self) -> None:
        self.scorer.close()

    def abandon(self) -> None:
        self.scorer.abandon()


# --- the component ---------------------------------------------------------------------------


class ScoringComponent:
    """The scorer child, the sink that feeds it, and the recorder of its scores."""

    def __init__(self, scorer: ScorerProcess, recorder: Any) -> None:
        self.scorer = scorer
        self.recorder = recorder  # llmwatch.collectors.exporters.scores.ScoreRecorder

    async def start(self) -> None:
        self.scorer.start()

    async def stop(self) -> None:
        # The pipeline has drained into the scoring sink, which closed the scorer (waiting up to
        # scoring.shutdown_timeout_s for its last scores): what is left is to close the score files.
        self.recorder.close()

    def readiness(self) -> dict[str, bool]:
        # A scorer that failed to start, or lost a thread, scores nothing: not ready, so the
        # orchestrator sees it instead of frozen quality metrics.
        return {"scorer_alive": self.scorer.healthy}


def _create(ctx: Context, scoring: ScoringSection) -> Component | None:
    drift = ctx.section(DriftSection)
    if not scoring.enabled:
        if drift.baseline is not None:
            raise ConfigError(
                "drift.baseline: drift detection needs the scorer; set scoring.enabled: true or remove drift.baseline"
            )
        return None
    from llmwatch.collectors.exporters.scores import ScoreRecorder
    from llmwatch.core.jsonio import JsonlWriter
    from llmwatch.scorers.checks.suite import validate_scoring

    # Fail at start-up, in this process, on a bad check config or baseline; the model loads in the child.
    validate_scoring(scoring)
    if drift.baseline is not None:
        from llmwatch.scorers.drift.baseline import check_minimums, load_baseline
        from llmwatch.scorers.drift.compare import settings_from_config

        check_minimums(load_baseline(drift.baseline), settings_from_config(drift), f"baseline {drift.baseline}")
    files = ctx.section(FilesSection)
    recorder = ScoreRecorder(
        ctx.metrics,
        JsonlWriter(ctx.setting("data_dir") / "scores", "scores", max_file_bytes=files.max_file_bytes)
        if files.enabled
        else None,
    )
    # The live judge's verdicts go to the same score files, through this one writer.
    ctx.provide(recorder)
    dropped = ctx.metrics.group(PipelineMetrics).samples_dropped
    counts = ctx.metrics.group(ScoringMetrics)
    scorer = ScorerProcess(
        scoring.model_dump(mode="json"),
        recorder.record,
        max_pending=scoring.max_pending,
        batch_timeout_s=scoring.batch_timeout_s,
        drift_payload=drift.model_dump(mode="json"),
        on_drift=ctx.get(DriftReadings).publish,
        matrix_payload=ctx.section(MatrixSection).model_dump(mode="json"),
        on_evaluation=ctx.metrics.group(EvaluationMetrics).set_evaluation,
        on_canary=ctx.metrics.group(CanaryMetrics).set_canary,
        on_pager=ctx.metrics.group(DriftMetrics).set_pager,
        log_level=ctx.section(LoggingSection).level,
        log_format=ctx.section(LoggingSection).chosen_format(),
        on_drop=lambda reason, n: dropped.labels(reason=reason).inc(n),
        on_unscored=lambda reason, n: counts.samples_unscored.labels(reason=reason).inc(n),
        shutdown_timeout_s=scoring.shutdown_timeout_s,
    )
    counts.scoring_pending.set_function(lambda: scorer.pending)
    # The consistency probe's verdicts, joined to their samples in the child's drift windows.
    late = ctx.find(LateScores)
    if late is not None:
        late.subscribe(scorer.join_scores)
    ctx.add_sink(ScoringSink(scorer, scoring.batch_size))
    return ScoringComponent(scorer, recorder)


SCORING = Factory(
    "scoring",
    "processor",
    ScoringSection,
    _create,
    metrics=(ScoringMetrics, DriftMetrics, CanaryMetrics, EvaluationMetrics),
)
