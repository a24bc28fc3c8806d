"""The scorer process: scoring runs here, never in the proxy's process.

Rule checks are cheap but embeddings are not, and both hold the GIL while they run; in the
proxy's process they would add their run time to proxied calls. So the sidecar starts one
child process (spawned, so that no event loop or lock is inherited) which loads the model
once and scores batches sent over a multiprocessing queue.

`ScorerProcess` is the parent's handle: `submit` never blocks (a full hand-off drops and
counts), and a watchdog restarts a child that dies or goes silent past `batch_timeout_s`,
recording its in-flight batches as `error` results so that nothing disappears unexplained.
"""

from __future__ import annotations

import itertools
import os
import multiprocessing as mp
import queue
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import orjson
import structlog

from llmwatch.core.records import Sample
from llmwatch.scorers.score import Score

log = structlog.get_logger(__name__)

ScoreHandler = Callable[[list[Score], list[float]], None]
DriftHandler = Callable[[list[tuple]], None]


def _child_main(scoring_payload: dict[str, Any], drift_payload: dict[str, Any], matrix_payload: dict[str, Any], inbox: Any, outbox: Any, log_level: str) -> None:
    from llmwatch.core.config import DriftSection, MatrixSection, ScoringSection
    from llmwatch.core.logs import configure_logging
    from llmwatch.scorers.baseline import load_baseline, write_baseline
    from llmwatch.scorers.drift import settings_from_config
    from llmwatch.scorers.online import DriftWindows
    from llmwatch.scorers.suite import build_suite

    configure_logging(log_level)
    # Below the proxy in CPU priority: where both share a core, traffic wins and scoring lags.
    try:
        os.nice(10)
    except OSError:
        pass
    drift_cfg = DriftSection.model_validate(drift_payload)
    try:
        baseline = load_baseline(drift_cfg.baseline) if drift_cfg.baseline else None
        suite = build_suite(ScoringSection.model_validate(scoring_payload), centroids=baseline.centroids() if baseline else None)
    except Exception as exc:
        outbox.put(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    windows = DriftWindows(baseline, window=drift_cfg.window, interval_s=drift_cfg.interval_s, settings=settings_from_config(drift_cfg))
    matrix_cfg = MatrixSection.model_validate(matrix_payload) if matrix_payload else None
    next_evaluation = time.monotonic() + drift_cfg.interval_s
    outbox.put(("ready", suite.check_names))
    while True:
        try:
            item = inbox.get(timeout=1.0)
        except queue.Empty:
            item = ()
        if item is None:
            return
        if item and item[0] == "baseline":
            try:
                windows.set_baseline(load_baseline(item[1]))
            except Exception as exc:
                log.error("baseline_load_failed", path=str(item[1]), error=str(exc))
            continue
        if item and item[0] == "freeze":
            _, version, path = item
            try:
                write_baseline(windows.freeze(version), path)
                outbox.put(("frozen", path, None))
            except Exception as exc:
                outbox.put(("frozen", path, f"{type(exc).__name__}: {exc}"))
            continue
        if item:
            batch_id, lines = item
            samples = [Sample.from_json(line) for line in lines]
            results = suite.score(samples)
            outbox.put(("scores", batch_id, [r.score.to_json() for r in results], [r.duration_s for r in results]))
            windows.add(samples, [r.score for r in results], _answer_vectors(suite, samples))
        if matrix_cfg is not None and time.monotonic() >= next_evaluation:
            next_evaluation = time.monotonic() + drift_cfg.interval_s
            _send_evaluation(outbox, windows, matrix_cfg, suite.check_names, drift_cfg)
        if windows.due():
            try:
                readings = windows.evaluate()
            except Exception as exc:
                log.exception("drift_evaluation_failed", error=str(exc))
                continue
            outbox.put(("drift", [(r.model_version, r.operation, r.signal, r.statistic, r.p_value, r.detected, r.n_current) for r in readings]))


def _send_evaluation(outbox: Any, windows: Any, matrix_cfg: Any, checks: Sequence[str], drift_cfg: Any) -> None:
    """The evaluation matrix, stability and decision score over the recent windows, as gauge readings."""
    from llmwatch.scorers.evaluation import build_report

    samples, scores = windows.contents()
    if not samples:
        return
    try:
        report = build_report(samples, scores, matrix_cfg, known_checks=checks, baseline=windows.baseline, drift_alpha=drift_cfg.alpha, drift_min_samples=drift_cfg.min_samples)
    except Exception as exc:
        log.exception("evaluation_failed", error=str(exc))
        return
    readings = [("category_quality", c.category, "", c.model_version, c.mean_score) for c in report.cells if c.mean_score is not None]
    readings += [("stability", c.category, c.kind, c.model_version, c.value) for c in report.stability if c.value is not None]
    readings += [("decision", "", "", r.model_version, r.decision_score) for r in report.decision if r.decision_score is not None]
    outbox.put(("evaluation", readings))


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
        on_evaluation: DriftHandler | None = None,
        log_level: str = "warning",
        on_drop: Callable[[str, int], None] | None = None,
    ) -> None:
        self._payload = scoring_payload
        self._drift_payload = drift_payload or {}
        self._on_drift = on_drift or (lambda readings: None)
        self._matrix_payload = matrix_payload or {}
        self._on_evaluation = on_evaluation or (lambda readings: None)
        self._on_scores = on_scores
        self._on_drop = on_drop or (lambda reason, n: None)
        self._max_pending = max_pending
        self._timeout = batch_timeout_s
        self._log_level = log_level
        self._ctx = mp.get_context("spawn")
        self._ids = itertools.count()
        self._inflight: dict[int, _Batch] = {}
        self._pending = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._proc: Any = None
        self._inbox: Any = None
        self._outbox: Any = None
        self.check_names: list[str] = []
        self.ready = threading.Event()
        self.fatal: str | None = None
        self.restarts = 0
        self._last_progress = time.monotonic()
        self._frozen: dict[str, str | None] = {}
        self._frozen_event = threading.Event()
        self._thread = threading.Thread(target=self._collect, name="llmwatch-scorer-results", daemon=True)

    # --- lifecycle --------------------------------------------------------------------------

    def _spawn(self) -> None:
        self._inbox = self._ctx.Queue()
        self._outbox = self._ctx.Queue()
        self._proc = self._ctx.Process(target=_child_main, args=(self._payload, self._drift_payload, self._matrix_payload, self._inbox, self._outbox, self._log_level), name="llmwatch-scorer", daemon=True)
        self._proc.start()

    def start(self) -> None:
        self._spawn()
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def close(self, timeout: float = 10.0) -> None:
        """Let queued batches finish (up to `timeout`), then stop the child."""
        deadline = time.monotonic() + timeout
        while self._inflight and time.monotonic() < deadline and self.alive:
            time.sleep(0.05)
        self._stop.set()
        if self._inbox is not None and self.alive:
            self._inbox.put(None)
            self._proc.join(timeout=max(deadline - time.monotonic(), 1.0))
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        if self._inbox is not None:
            # What is still buffered is for a child that is gone: without this the queue's feeder
            # thread blocks interpreter exit on a full pipe (seen under CPU load, when a slow
            # child had not drained its inbox before it was stopped).
            self._inbox.cancel_join_thread()
        self._thread.join(timeout=2.0)

    # --- hand-off ---------------------------------------------------------------------------

    def submit(self, samples: Sequence[Sample]) -> bool:
        """Queue samples for scoring; False (and counted) when the scorer is too far behind."""
        n = len(samples)
        with self._lock:
            if self.fatal is not None or self._pending + n > self._max_pending:
                reason = "scorer_failed" if self.fatal is not None else "scoring_queue_full"
                self._on_drop(reason, n)
                return False
            batch_id = next(self._ids)
            self._inflight[batch_id] = _Batch(list(samples), time.monotonic())
            self._pending += n
            inbox = self._inbox
        inbox.put((batch_id, [s.to_json() for s in samples]))
        return True

    def freeze_baseline(self, version: str, path: str, timeout: float = 120.0) -> None:
        """Freeze the scorer's recent window of `version` into a new baseline file (blocking).

        Raises RuntimeError with the scorer's reason when it could not (no samples, file exists).
        """
        path = str(path)
        self._frozen.pop(path, None)
        self._frozen_event.clear()
        self._inbox.put(("freeze", version, path))
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
            self._inbox.put(("baseline", str(path)))

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

    def _fail_inflight(self, reason: str) -> None:
        """Record every unanswered sample as an `error` score, so losses are visible per check."""
        with self._lock:
            batches = list(self._inflight.items())
            self._inflight.clear()
            self._pending = 0
        now = datetime.now(timezone.utc)
        for _, batch in batches:
            scores = [
                Score(sample_id=s.id, check=name, kind="scorer", result="error", details={"exception": reason}, model=s.model, model_version=s.model_version, route=s.route, sample_timestamp=s.timestamp, scored_at=now)
                for s in batch.samples
                for name in (self.check_names or ["scorer"])
            ]
            self._on_scores(scores, [0.0] * len(scores))

    def _restart(self, reason: str) -> None:
        log.error("scorer_restarted", reason=reason, inflight=len(self._inflight))
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=5)
        self._fail_inflight(reason)
        self.restarts += 1
        self.ready.clear()
        self._last_progress = time.monotonic()
        self._spawn()

    def _collect(self) -> None:
        while not self._stop.is_set():
            try:
                message = self._outbox.get(timeout=0.2)
            except queue.Empty:
                self._watchdog()
                continue
            except (EOFError, OSError):
                if self._stop.is_set():
                    return
                self._restart("scorer_crashed")
                continue
            self._last_progress = time.monotonic()
            kind = message[0]
            if kind == "ready":
                self.check_names = list(message[1])
                self.ready.set()
            elif kind == "fatal":
                self.fatal = message[1]
                log.error("scorer_failed_to_start", error=message[1])
                self._fail_inflight("scorer_failed")
                self.ready.set()
                return
            elif kind == "drift":
                self._on_drift(message[1])
            elif kind == "evaluation":
                self._on_evaluation(message[1])
            elif kind == "frozen":
                self._frozen[message[1]] = message[2]
                self._frozen_event.set()
            elif kind == "scores":
                _, batch_id, lines, durations = message
                if self._finish(batch_id) is not None:
                    self._on_scores([Score.from_json(line) for line in lines], durations)
            self._watchdog()

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

    def write(self, samples: Sequence[Sample]) -> None:
        for i in range(0, len(samples), self.batch_size):
            self.scorer.submit(samples[i : i + self.batch_size])

    def close(self) -> None:
        self.scorer.close()
