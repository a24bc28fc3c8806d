"""The judge child: every judge call, its caps and its verdicts, in a process of its own.

Spawned by `JudgeProcess` (llmwatch.collectors.judge.parent) with `child_main`. Like the scorer and
the shadow mirror it ignores Ctrl-C (the parent decides when it stops), exits when its parent is
gone, and keeps off the proxy's core (`judge.cpu_affinity`, `judge.nice`).

One event loop owns every cap, so they hold whatever the concurrency:

- in flight: exactly `max_inflight` worker tasks take evaluations from a bounded queue
  (`max_queue`; full: skipped as `queue_full`);
- calls per minute: a call past `max_calls_per_minute` in the last 60 s is skipped (`rate_cap`),
  not queued: a backlog would judge old traffic late;
- input tokens: a prompt estimated above `max_input_tokens` is skipped (`input_tokens_cap`);
- USD per hour: before a call its worst case (the prompt's bytes as tokens, `max_output_tokens`,
  which is sent as the call's `max_tokens`) is reserved on the shared `HourlySpend` of the shadow
  mirror; past the cap it is skipped (`spend_cap`); after the call it is settled on the usage the
  server reported (on the reservation when it reported none).

A failed call or an unusable reply is an `error` score with the reason in its details, and a
failure counted by reason. The API key arrives through the spawn's pipe, lives in this process's
memory only, and is never logged.
"""

from __future__ import annotations

import asyncio
import queue
import signal
import threading
import time
from collections import deque
from typing import Any

import aiohttp
import orjson
import structlog

from llmwatch.collectors.judge.config import JudgeSection
from llmwatch.collectors.judge.messages import JudgeFatal, JudgeJob, JudgeReady, JudgeReport
from llmwatch.collectors.shadow.spend import HourlySpend
from llmwatch.core.children import exit_when_orphaned, isolate
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.pricing import PriceTable
from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome, Score
from llmwatch.scorers.evaluation.judge import (
    PROMPT_VERSION,
    JudgeCriterion,
    JudgeReplyError,
    check_name,
    judge_messages,
    outcome,
    parse_reply,
    prompt_tokens,
    reference_answer,
    response_format,
)
from llmwatch.scorers.pipeline.sampler import hash_fraction

log = structlog.get_logger(__name__)

REPORT_S = 0.2  # how often the child reports what changed


class _Evaluation:
    __slots__ = ("sample", "criterion", "category")

    def __init__(self, sample: Sample, criterion: JudgeCriterion, category: str) -> None:
        self.sample = sample
        self.criterion = criterion
        self.category = category


class JudgeWorker:
    """The child's work: accept jobs, hold the caps, call the judge, report verdicts."""

    def __init__(self, section: JudgeSection, prices: PriceTable, api_key: str | None, outbox: Any) -> None:
        self.section = section
        self.model = section.model or ""
        self.url = f"{section.upstream}/v1/chat/completions"
        self.prices = prices
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.outbox = outbox
        self.budget = HourlySpend(section.max_usd_per_hour)
        self.minute: deque[float] = deque()
        self.report = JudgeReport()
        self.inflight = 0
        self._spot_written: dict[str, None] = {}
        self._warn = RateLimitedLog()
        self._queue: asyncio.Queue[_Evaluation] = asyncio.Queue(maxsize=section.max_queue)
        self._stopping = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None

    # --- counting ---------------------------------------------------------------------------

    def _skip(self, reason: str, n: int = 1) -> None:
        self.report.skipped[reason] = self.report.skipped.get(reason, 0) + n

    def _fail(self, reason: str) -> None:
        self.report.failures[reason] = self.report.failures.get(reason, 0) + 1

    def _send_report(self) -> None:
        r = self.report
        r.inflight = self.inflight
        if r.taken or r.scores or r.spot or r.skipped or r.failures or r.spend_usd:
            self.report = JudgeReport()
            self.outbox.put(r)

    # --- intake -----------------------------------------------------------------------------

    def accept(self, job: JudgeJob) -> None:
        """A job read from the parent: one evaluation per criterion, queued or skipped."""
        self.report.taken += 1
        criteria = [JudgeCriterion.model_validate(c) for c in job.criteria]
        try:
            sample = Sample.from_json(job.line)
        except Exception as exc:
            self._warn(log.error, "judge_bad_job", error=type(exc).__name__)
            self._skip("no_text", len(criteria))
            return
        if not sample.prompt_text().strip() or not sample.answer_text().strip():
            # Failed calls, tool-only answers, text removed by redaction.mode scores_only.
            self._skip("no_text", len(criteria))
            return
        for criterion in criteria:
            try:
                self._queue.put_nowait(_Evaluation(sample, criterion, job.category))
            except asyncio.QueueFull:
                self._skip("queue_full")

    # --- the calls --------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            ev = await self._queue.get()
            try:
                await self._evaluate(ev)
            except Exception as exc:  # never lose the worker to one evaluation
                self._warn(log.error, "judge_evaluation_failed", error=repr(exc))

    async def _evaluate(self, ev: _Evaluation) -> None:
        s, c = ev.sample, ev.criterion
        messages = judge_messages(s.prompt_text(), s.answer_text(), c, reference_answer(s))
        if prompt_tokens(messages) > self.section.max_input_tokens:
            self._skip("input_tokens_cap")
            return
        now = time.monotonic()
        cap = self.section.max_calls_per_minute
        if cap is not None:
            while self.minute and self.minute[0] < now - 60.0:
                self.minute.popleft()
            if len(self.minute) >= cap:
                self._skip("rate_cap")
                return
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.section.max_output_tokens,
        }
        shape = response_format(self.section.response_format, c.scale)
        if shape is not None:
            body["response_format"] = shape
        data = orjson.dumps(body)
        reserved = 0.0
        if self.section.max_usd_per_hour is not None:
            # A worst case: a byte-level BPE token is at least one byte, and the answer is bounded by max_tokens.
            guess = self.prices.cost(self.model, len(data), self.section.max_output_tokens)
            if guess is None:
                self._skip("not_priced")
                return
            if not self.budget.reserve(now, guess):
                self._skip("spend_cap")
                return
            reserved = guess
        if cap is not None:
            self.minute.append(now)
        self.inflight += 1
        actual = reserved
        started = time.monotonic()
        try:
            text, usage = await self._call(data)
            priced = self.prices.cost(self.model, usage[0], usage[1]) if usage is not None else None
            if priced is not None:
                actual = priced
            score, reason = parse_reply(text, c.scale)
            # Calibrated or not is the parent's to say when it records the verdict (it reads the
            # calibration file and moves the gauges): one view of it, never two that disagree.
            result = outcome(score, reason, c, judge_model=self.model, calibrated=False)
        except _CallFailed as exc:
            self._fail(exc.reason)
            result = self._error(c, exc.reason)
        except JudgeReplyError:
            self._fail("unparseable")
            result = self._error(c, "unparseable")
        except asyncio.CancelledError:
            self._fail("shutdown")  # stopped mid-call: counted, no verdict
            raise
        finally:
            self.inflight -= 1
            self.budget.settle(reserved, actual)
            self.report.spend_usd += actual
        duration = time.monotonic() - started
        details = {**result.details, "duration_s": round(duration, 3), "category": ev.category}
        sc = Score.from_outcome(
            s, CheckOutcome(result.result, result.value, details), check=check_name(c.name), kind="judge"
        )
        self.report.scores.append(sc.to_json())
        if result.result in ("pass", "fail"):
            self._spot_check(ev)

    def _error(self, c: JudgeCriterion, reason: str) -> CheckOutcome:
        return CheckOutcome(
            "error",
            None,
            {
                "exception": reason,
                "judge_model": self.model,
                "prompt_version": PROMPT_VERSION,
                "scale": c.scale,
                "calibrated": False,
            },
        )

    def _spot_check(self, ev: _Evaluation) -> None:
        rate = self.section.spot_check_rate
        s = ev.sample
        if rate <= 0 or s.id in self._spot_written or hash_fraction("spot:" + s.id) >= rate:
            return
        self._spot_written[s.id] = None
        if len(self._spot_written) > 100_000:
            self._spot_written.pop(next(iter(self._spot_written)))
        rubric = [c.model_dump(mode="json") for c in self._criteria_of(ev)]
        meta = {**s.metadata, "judge_criteria": rubric, "judge_category": ev.category}
        self.report.spot.append(s.model_copy(update={"metadata": meta}).to_json())

    def _criteria_of(self, ev: _Evaluation) -> list[JudgeCriterion]:
        from llmwatch.scorers.evaluation.judge import rubric_for

        rubric = rubric_for(self.section.rubrics, ev.category, ev.sample.route)
        return list(rubric.criteria) if rubric is not None else [ev.criterion]

    async def _call(self, data: bytes) -> tuple[str, tuple[int, int] | None]:
        session = self._session
        assert session is not None
        try:
            async with session.post(
                self.url,
                data=data,
                headers={**self._headers, "Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self.section.timeout_s),
            ) as resp:
                raw = await resp.read()
                if resp.status >= 500:
                    raise _CallFailed("http_5xx")
                if resp.status >= 400:
                    raise _CallFailed("http_4xx")
        except asyncio.TimeoutError:
            raise _CallFailed("timeout") from None
        except aiohttp.ClientConnectorError:
            raise _CallFailed("unreachable") from None
        except (aiohttp.ClientError, OSError):
            raise _CallFailed("transport") from None
        try:
            doc = orjson.loads(raw)
            text = doc["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeReplyError("not a chat completion") from None
        usage = doc.get("usage") if isinstance(doc, dict) else None
        counts = None
        if isinstance(usage, dict):
            pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(pt, int) and isinstance(ct, int):
                counts = (pt, ct)
        return str(text), counts

    # --- the loop ---------------------------------------------------------------------------

    async def run(self, inbox: Any) -> None:
        loop = asyncio.get_running_loop()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
        )

        def read() -> None:
            while True:
                try:
                    message = inbox.get()
                except (EOFError, OSError, ValueError):
                    message = None
                if message is None:
                    loop.call_soon_threadsafe(self._stopping.set)
                    return
                loop.call_soon_threadsafe(self.accept, message)

        threading.Thread(target=read, name="llmwatch-judge-inbox", daemon=True).start()
        workers = [loop.create_task(self._work()) for _ in range(self.section.max_inflight)]
        self.outbox.put(JudgeReady())
        try:
            while not self._stopping.is_set():
                try:
                    await asyncio.wait_for(self._stopping.wait(), REPORT_S)
                except asyncio.TimeoutError:
                    pass
                self._send_report()
            # Stopping: calls in flight get a moment, then are cut and counted.
            deadline = loop.time() + 2.0
            while self.inflight and loop.time() < deadline:
                await asyncio.sleep(0.05)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if self._queue.qsize():
                self._skip("shutdown", self._queue.qsize())  # queued, never sent
            self._send_report()
            await self._session.close()


class _CallFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def child_main(
    section_payload: dict[str, Any],
    pricing_payload: dict[str, Any],
    api_key: str | None,
    inbox: Any,
    outbox: Any,
    log_level: str,
    parent_pid: int,
    log_format: str | None = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(
        target=exit_when_orphaned, args=(parent_pid, 0.5, "judge"), name="llmwatch-judge-orphan-check", daemon=True
    ).start()
    from llmwatch.core.logs import configure_logging

    configure_logging(log_level, log_format)
    try:
        section = JudgeSection.model_validate(section_payload)
        isolate(section.cpu_affinity, section.nice, role="judge")
        prices = PriceTable(pricing_payload)
        worker = JudgeWorker(section, prices, api_key, outbox)
    except Exception as exc:
        outbox.put(JudgeFatal(f"{type(exc).__name__}: {exc}"))
        return
    try:
        import uvloop

        uvloop.run(worker.run(inbox))
    except ImportError:
        asyncio.run(worker.run(inbox))
    # Nothing more goes out: let the outbox's feeder flush, then leave.
    try:
        outbox.close()
        outbox.join_thread()
    except (OSError, ValueError, queue.Full):
        pass
