"""The mirror child: shadow evaluation's sending, timing, pairing and writing, off the proxy's process.

Spawned by `ShadowMirror.start` (llmwatch.collectors.shadow.parent) with `child_main` as its entry
point. Like the scorer child (llmwatch.agent.processes.scoring), it ignores Ctrl-C (the parent
decides when it stops), exits by itself when its parent is gone, and is pinned off the proxy's
core (`shadow.cpu_affinity`, `shadow.nice`). `ShadowWorker` is its work: its own event loop
sends, its writer thread pairs and writes (see llmwatch.collectors.shadow.parent for the design).

`headers` are the candidates' resolved header values (secrets among them): they arrive through the
spawn's pipe, live in this process's memory only, and are never logged.
"""

from __future__ import annotations

import asyncio
import functools
import os
import pickle
import re
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Callable, Sequence

import aiohttp
import numpy as np
import orjson
import structlog
from yarl import URL

from llmwatch.collectors.receivers.proxy.capture import CallFacts, Exchange, analyze, to_sample
from llmwatch.collectors.shadow.config import ShadowCandidate, ShadowConfig
from llmwatch.collectors.shadow.messages import (
    MirrorClosed,
    MirrorJob,
    MirrorReady,
    MirrorStats,
    PairLines,
    ScoreLines,
    StopMirror,
)
from llmwatch.collectors.shadow.spend import limit_request
from llmwatch.core.children import exit_when_orphaned, isolate
from llmwatch.core.jsonio import JsonlWriteError, JsonlWriter
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.pairs import Pair, PairScore
from llmwatch.core.queue import BoundedQueue
from llmwatch.core.records import Sample
from llmwatch.core.secrets import SecretMask, header_forms, userinfo_forms
from llmwatch.core.urls import mask_url, split_userinfo
from llmwatch.scorers.evaluation.consistency import CONSISTENCY_CANDIDATE, compare_answers, verdict_score
from llmwatch.scorers.pipeline.redaction import Redactor, redact_sample
from llmwatch.scorers.stats.paired import mcnemar_worse_p

log = structlog.get_logger(__name__)


# The gauge's p-value on the window's counts: one scipy call costs tens of µs, and the counts of a
# window that moves by one pair mostly repeat.
_worse_p = functools.lru_cache(maxsize=8192)(mcnemar_worse_p)


ERROR_TYPES = ("timeout", "unreachable", "transport", "http_4xx", "http_5xx")


# Pairs behind the gauges of each candidate.
WINDOW = 1000


# Usage numbers in an answer that could not be analysed (the last of each wins).
_USAGE_NUMBER = re.compile(rb'"(prompt_tokens|completion_tokens|input_tokens|output_tokens)"\s*:\s*(\d{1,15})\b')

_WANTED_HEADERS = ("content-type", "content-encoding")


# How often the child sends what changed (counters, gauges, ended mirrors) to the parent. Each
# message costs the proxy's process an unpickling and a few metric updates, but a mirror's
# concurrency slot is freed in the parent only when its end arrives: at 0.1 s, a one-at-a-time
# client on a 50 ms candidate already held 4 slots (the default max_concurrency) and mirrors were
# skipped. So: short.
STATS_EVERY_S = 0.02


def framed_sender(conn: Any) -> Callable[[object], None]:
    """The child's `send`: pickles a message onto the parent's pipe; several threads may call it."""
    lock = threading.Lock()

    def send(message: object) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with lock:
            conn.send_bytes(data)

    return send


@dataclass(slots=True)
class _Done:
    target: "_Target"
    job: MirrorJob
    facts: CallFacts  # the primary's
    shadow: Exchange
    settled: bool = False  # its reservation given back (exactly once, whatever happens to the pair)


def url_secrets(url: str) -> set[str]:
    """The credentials of an upstream URL's `user:password@`, as written, decoded, and as the
    Basic authorization llmwatch sends for them; none for a URL without."""
    userinfo = split_userinfo(url)[1]
    if userinfo is None:
        return set()
    auth = aiohttp.BasicAuth.from_url(URL(url))
    return userinfo_forms(userinfo) | (header_forms(auth.encode()) if auth is not None else set())


class _Target:
    """The child's view of one candidate: where and how to send, and its window of pairs."""

    def __init__(self, index: int, spec: ShadowCandidate, headers: dict[str, str]) -> None:
        self.index = index
        self.spec = spec
        self.name = spec.name
        bare, userinfo = split_userinfo(spec.upstream)
        self.prefix = bare.rstrip("/")
        self.shown = mask_url(spec.upstream)
        self.headers = {"Content-Type": "application/json", **headers}
        if userinfo is not None and not any(h.lower() == "authorization" for h in headers):
            auth = aiohttp.BasicAuth.from_url(URL(spec.upstream))
            if auth is not None:
                self.headers["Authorization"] = auth.encode()
        # Every credential this candidate is sent, in the forms it may quote back (SecretMask).
        self.secrets = {f for v in headers.values() for f in header_forms(v)} | url_secrets(spec.upstream)
        self.warn = RateLimitedLog()
        self.window = PairWindow(WINDOW)


class PairWindow:
    """The last `size` pairs of one candidate, with running sums behind its gauges.

    A pair costs a few additions and two percentiles. Recomputing everything from the window on
    every pair (its first version) was most of the mirror child's CPU per mirrored call once the
    window filled (py-spy, 50 streams/s, every call mirrored): CPU the child takes from whatever
    shares its core.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.rows: deque[tuple[int, int, int, float | None, float | None]] = deque()
        self.latency_primary: deque[float] = deque(maxlen=size)
        self.latency_shadow: deque[float] = deque(maxlen=size)
        self.wins = self.losses = self.ties = 0
        self.cost_primary = self.cost_shadow = 0.0
        self.priced = 0  # pairs with both costs known
        self._added = 0

    def __len__(self) -> int:
        return len(self.rows)

    def add(
        self,
        wins: int,
        losses: int,
        ties: int,
        latency_primary: float,
        latency_shadow: float,
        cost_primary: float | None,
        cost_shadow: float | None,
    ) -> None:
        if len(self.rows) == self.size:
            w, lo, t, cp, cs = self.rows.popleft()
            self.wins -= w
            self.losses -= lo
            self.ties -= t
            if cp is not None and cs is not None:
                self.cost_primary -= cp
                self.cost_shadow -= cs
                self.priced -= 1
        self.rows.append((wins, losses, ties, cost_primary, cost_shadow))
        self.wins += wins
        self.losses += losses
        self.ties += ties
        if cost_primary is not None and cost_shadow is not None:
            self.cost_primary += cost_primary
            self.cost_shadow += cost_shadow
            self.priced += 1
        self.latency_primary.append(latency_primary)
        self.latency_shadow.append(latency_shadow)
        self._added += 1
        if self._added % self.size == 0:
            # Sums of floats that are added and taken away drift: start them again from the rows.
            both = [(a, b) for *_, a, b in self.rows if a is not None and b is not None]
            self.cost_primary = sum(a for a, _ in both)
            self.cost_shadow = sum(b for _, b in both)

    @staticmethod
    def p95(which: deque[float]) -> float:
        """np.percentile(which, 95) with its linear interpolation, by a partial sort: percentile's
        general machinery cost more than the rest of a pair's gauges together."""
        n = len(which)
        if n == 0:
            return float("nan")
        values = np.fromiter(which, dtype=float, count=n)
        index = 0.95 * (n - 1)
        lo = int(index)
        hi = min(lo + 1, n - 1)
        part = np.partition(values, (lo, hi))
        a, b = float(part[lo]), float(part[hi])
        return a + (b - a) * (index - lo)


class _Stats:
    """What the child accumulates between two messages to the parent (several threads add)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current = MirrorStats()
        self._dirty = False

    def count(self, metric: str, delta: float = 1.0, **labels: str) -> None:
        key = (metric, tuple(sorted(labels.items())))
        with self._lock:
            self._current.counters[key] = self._current.counters.get(key, 0.0) + delta
            self._dirty = True

    def gauge(self, metric: str, candidate: str, value: float) -> None:
        with self._lock:
            self._current.gauges[(metric, candidate)] = value
            self._dirty = True

    def settle(self, index: int, reserved: float, actual: float) -> None:
        with self._lock:
            self._current.settles.append((index, reserved, actual))
            self._dirty = True

    def ended(self, index: int) -> None:
        with self._lock:
            self._current.ended[index] = self._current.ended.get(index, 0) + 1
            self._dirty = True

    def finished(self, n: int, written: int = 0) -> None:
        with self._lock:
            self._current.finished += n
            self._current.written += written
            self._dirty = True

    def take(self) -> MirrorStats | None:
        with self._lock:
            if not self._dirty:
                return None
            out, self._current, self._dirty = self._current, MirrorStats(), False
            return out


class ShadowWorker:
    """The mirror child's work: its own event loop sends, its writer thread pairs and writes."""

    def __init__(
        self,
        cfg: ShadowConfig,
        headers: Sequence[dict[str, str]],
        send: Callable[[object], None],
        *,
        pairs_to_parent: bool,
    ) -> None:
        from llmwatch.scorers.checks.registry import CHECK_KINDS
        from llmwatch.scorers.checks.suite import Suite, default_checks

        self.cfg = cfg
        self._send = send
        self._pairs_to_parent = pairs_to_parent
        # The consistency probe's verdicts of the current writer batch, as score lines for the
        # parent (online drift joins them to their samples: llmwatch.collectors.late_scores).
        self._verdicts: list[bytes] = []
        self._version_header = cfg.model_version.header.lower()
        self.targets = [_Target(i, c, h) for i, (c, h) in enumerate(zip(cfg.shadow.candidates, headers))]
        self.prices = cfg.metrics.price_table()
        self._redact = Redactor.from_config(cfg.redaction)
        # A candidate that quotes its key back (a 401 body "Incorrect API key provided: <key>")
        # would keep it in the pair unless a redaction pattern happens to match it (and with
        # redaction off, always): every candidate's configured credentials, and those of the
        # primary's upstream URL, are masked by exact value in every pair line, whatever the
        # redaction settings. Pairs name their candidate, so one candidate's key is masked in
        # another's pairs too (a shared gateway may quote any of them).
        primary = url_secrets(getattr(cfg, "upstream", None) or "")
        self._secrets = SecretMask([s for t in self.targets for s in t.secrets] + sorted(primary))
        specs = cfg.scoring.checks if cfg.scoring.checks is not None else default_checks(False)
        self.suite = Suite(
            [s for s in specs if CHECK_KINDS.get(s.kind) is not None and CHECK_KINDS[s.kind].family != "embedding"],
            check_timeout_s=cfg.scoring.check_timeout_s,
        )
        self.writer = (
            JsonlWriter(cfg.data_dir / "pairs", "pairs", max_file_bytes=cfg.files.max_file_bytes)
            if cfg.files.enabled
            else None
        )
        self.stats = _Stats()
        self._done: BoundedQueue[_Done] = BoundedQueue(max(cfg.shadow.max_queue, 64))
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._writer_stop = threading.Event()
        self._flush_stop = threading.Event()

    # --- main -------------------------------------------------------------------------------

    def run(self, inbox: Any) -> None:
        """Serve mirrors from `inbox` until a `StopMirror`; returns once every pair is written."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        stopped = loop.create_future()
        self._session = loop.run_until_complete(self._open())
        writer = threading.Thread(target=self._run_writer, name="llmwatch-shadow-writer", daemon=True)
        flusher = threading.Thread(target=self._run_flusher, name="llmwatch-shadow-flush", daemon=True)
        reader = threading.Thread(
            target=self._read, args=(inbox, loop, stopped), name="llmwatch-shadow-reader", daemon=True
        )
        writer.start()
        flusher.start()
        reader.start()
        self._send(MirrorReady())
        try:
            timeout = loop.run_until_complete(stopped)
            loop.run_until_complete(self._shutdown(timeout))
        finally:
            loop.close()
        # Only now: mirrors that were still in flight have handed their pairs over.
        self._writer_stop.set()
        writer.join(30.0)
        if self.writer is not None:
            self.writer.close()
        self._flush_stop.set()
        flusher.join(5.0)
        self._flush()
        self._send(MirrorClosed())

    def _read(self, inbox: Any, loop: asyncio.AbstractEventLoop, stopped: asyncio.Future) -> None:
        def stop(timeout: float) -> None:
            if not stopped.done():
                stopped.set_result(timeout)

        while True:
            try:
                batch = pickle.loads(inbox.recv_bytes())
            except (EOFError, OSError, ValueError):
                loop.call_soon_threadsafe(stop, 0.0)  # the parent's end of the pipe is gone
                return
            for message in batch:
                if isinstance(message, StopMirror):
                    loop.call_soon_threadsafe(stop, message.timeout)
                    return
                try:
                    # Here, not on the loop: parsing must not delay the timestamps of other mirrors.
                    facts = analyze(message.exchange)
                except Exception as exc:
                    target = self.targets[message.candidate]
                    target.warn(log.error, "shadow_pair_failed", candidate=target.name, error=type(exc).__name__)
                    self._drop(target, message, "build_error")
                    continue
                loop.call_soon_threadsafe(self._dispatch, message, facts)

    async def _open(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )

    def _run_flusher(self) -> None:
        while not self._flush_stop.wait(STATS_EVERY_S):
            self._flush()

    def _flush(self) -> None:
        stats = self.stats.take()
        if stats is not None:
            self._send(stats)

    # --- the mirror loop --------------------------------------------------------------------

    def _dispatch(self, job: MirrorJob, facts: CallFacts) -> None:
        target = self.targets[job.candidate]
        if self._stopping:
            self._drop(target, job, "shutdown")
            return
        task = asyncio.get_running_loop().create_task(self._mirror(target, job, facts))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _drop(self, target: _Target, job: MirrorJob, reason: str) -> None:
        self.stats.settle(target.index, job.reserved_usd, 0.0)
        self.stats.count("shadow_pairs_dropped", candidate=target.name, reason=reason)
        self.stats.ended(target.index)
        self.stats.finished(1)

    async def _mirror(self, target: _Target, job: MirrorJob, facts: CallFacts) -> None:
        primary = job.exchange
        request = dict(facts.request)
        spec = target.spec
        if spec.model:
            request["model"] = spec.model
        if spec.stream == "buffered" and request.get("stream"):
            request["stream"] = False
            request.pop("stream_options", None)
        if job.max_output_tokens is not None:
            limit_request(primary.route, request, job.max_output_tokens)
        body = orjson.dumps(request)
        sx = Exchange(
            request_id=primary.request_id,
            started_at=time.time(),
            t0=perf_counter(),
            method="POST",
            route=primary.route,
            request_body=body,
            max_body_bytes=primary.max_body_bytes,
            sample_id=f"{primary.sample_id}.{target.name}",
            metadata=dict(primary.metadata),
        )
        assert self._session is not None
        try:
            async with self._session.post(
                target.prefix + primary.route,
                data=body,
                headers=target.headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=spec.timeout_s),
            ) as up:
                sx.status = up.status
                sx.response_headers = {
                    k: up.headers[k] for k in (*_WANTED_HEADERS, self._version_header) if k in up.headers
                }
                size = 0
                async for chunk in up.content.iter_any():
                    if size <= sx.max_body_bytes:
                        size += len(chunk)
                        sx.response_chunks.append(chunk)
                        sx.chunk_ends.append(size)
                        sx.chunk_times.append(perf_counter())
                        if size > sx.max_body_bytes:
                            sx.response_truncated = True
                sx.captured_bytes = size
        except asyncio.TimeoutError:
            sx.error_type = "timeout"
        except aiohttp.ClientConnectorError:
            sx.error_type = "unreachable"
        except (aiohttp.ClientError, OSError):
            sx.error_type = "transport"
        except asyncio.CancelledError:
            # Stopped at shutdown: not the candidate's failure, and no pair to compare.
            sx.error_type = "shutdown"
        finally:
            sx.t_end = perf_counter()
        if sx.error_type == "shutdown":
            self._drop(target, job, "shutdown")
            return
        self.stats.ended(target.index)
        kind = sx.error_type or ("http_5xx" if sx.status >= 500 else "http_4xx" if sx.status >= 400 else None)
        if kind in ERROR_TYPES:
            self.stats.count("shadow_candidate_errors", candidate=target.name, error_type=kind)
            # Fixed fields only: never the candidate's headers or the body it sent back.
            target.warn(
                log.warning,
                "shadow_candidate_failed",
                candidate=target.name,
                upstream=target.shown,
                error_type=kind,
                status=sx.status or None,
            )
        if not self._done.offer(_Done(target, job, facts, sx)):
            # The candidate answered (and may have charged) but nobody reads its usage: the
            # reservation, the worst case, counts as spent.
            self.stats.settle(target.index, job.reserved_usd, job.reserved_usd)
            self.stats.count("shadow_pairs_dropped", candidate=target.name, reason="writer_full")
            self.stats.finished(1)

    async def _shutdown(self, timeout: float) -> None:
        self._stopping = True
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self._session is not None:
            await self._session.close()

    # --- the writer thread ------------------------------------------------------------------

    def _run_writer(self) -> None:
        while True:
            batch = self._done.get_batch(64, timeout=0.2)
            if not batch:
                if self._writer_stop.is_set():
                    return
                continue
            pairs: list[tuple[_Target, Pair]] = []
            for done in batch:
                try:
                    pairs.append((done.target, self._pair(done)))
                except Exception as exc:
                    if not done.settled:
                        # The answer could not be analysed, but it may have cost money: settle on
                        # what can still be read of it (never more than reserved), never hold it for good.
                        self.stats.settle(done.target.index, done.job.reserved_usd, self._fallback_cost(done))
                        done.settled = True
                    self.stats.count("shadow_pairs_dropped", candidate=done.target.name, reason="build_error")
                    done.target.warn(
                        log.error, "shadow_pair_failed", candidate=done.target.name, error=type(exc).__name__
                    )
                    self.stats.finished(1)
            if self._verdicts:
                # Before the pairs (and `finished`): whoever waits on the pairs finds the verdicts sent.
                self._send(ScoreLines(self._verdicts))
                self._verdicts = []
            self._write(pairs)

    def _fallback_cost(self, done: _Done) -> float:
        """What an answer that could not be analysed cost at most: its usage numbers if they can be
        found in its bytes, else its length in bytes as output tokens (a token is at least a byte);
        capped at the reservation, which was the worst case to begin with."""
        raw = b"".join(done.shadow.response_chunks)
        found = {k.decode(): int(v) for k, v in _USAGE_NUMBER.findall(raw[-65536:])}
        out = found.get("completion_tokens", found.get("output_tokens", len(raw)))
        inp = found.get(
            "prompt_tokens",
            found.get("input_tokens", done.facts.input_tokens or len(done.job.exchange.request_body or b"")),
        )
        model = done.target.spec.model or done.facts.model
        cost = self.prices.cost(model, inp, out)
        if cost is None:
            return done.job.reserved_usd
        return min(cost, done.job.reserved_usd) if done.job.reserved_usd else cost

    def _pair(self, done: _Done) -> Pair:
        target, job = done.target, done.job
        primary = to_sample(job.exchange, done.facts, model_version=job.version, cost_usd=job.cost, reason="shadow")
        facts = analyze(done.shadow)
        version = done.shadow.response_headers.get(self._version_header) or facts.response_model or facts.model
        cost = (
            self.prices.cost(facts.model, facts.input_tokens, facts.output_tokens)
            if facts.model and (facts.input_tokens or facts.output_tokens)
            else None
        )
        self.stats.settle(target.index, job.reserved_usd, cost or 0.0)
        done.settled = True
        if cost is not None and job.reserved_usd and cost > job.reserved_usd * (1 + 1e-9):
            target.warn(
                log.warning,
                "shadow_candidate_over_reservation",
                candidate=target.name,
                reserved_usd=round(job.reserved_usd, 6),
                cost_usd=round(cost, 6),
                why="the candidate reported more tokens than the limit it was sent (max_tokens ignored?)",
            )
        shadow = to_sample(done.shadow, facts, model_version=version, cost_usd=cost, reason="shadow")
        scored = self.suite.score([primary, shadow])
        p_scores = [
            PairScore(check=s.score.check, kind=s.score.kind, result=s.score.result, value=s.score.value)
            for s in scored
            if s.score.sample_id == primary.id
        ]
        s_scores = [
            PairScore(check=s.score.check, kind=s.score.kind, result=s.score.result, value=s.score.value)
            for s in scored
            if s.score.sample_id == shadow.id
        ]
        if target.name == CONSISTENCY_CANDIDATE:
            self._consistency(primary, shadow, p_scores)
        primary_r = redact_sample(self._redact, primary)
        shadow_r = redact_sample(self._redact, shadow)
        category = primary_r.metadata.get("category")
        self._observe(target, primary, shadow, p_scores, s_scores)
        return Pair.model_construct(
            schema_="llmwatch.pair/v1",
            id=shadow.id,
            candidate=target.name,
            timestamp=primary.timestamp,
            route=primary.route,
            category=category if isinstance(category, str) else None,
            primary=primary_r,
            shadow=shadow_r,
            primary_scores=p_scores,
            shadow_scores=s_scores,
            scored_by="rules",
        )

    def _consistency(self, primary: Sample, shadow: Sample, p_scores: list[PairScore]) -> None:
        """The consistency probe's verdict on one re-ask, counted by version (structured or lexical)."""
        verdict = compare_answers(primary, shadow, p_scores)
        version = primary.model_version or "unknown"
        result = "unanswered" if not verdict.compared else "agree" if verdict.agree else "disagree"
        self.stats.count("consistency_pairs", model_version=version, result=result)
        if verdict.confident_unstable:
            self.stats.count("consistency_confident_unstable", model_version=version)
        if verdict.compared:
            self._verdicts.append(verdict_score(primary, verdict).to_json())

    def _write(self, pairs: list[tuple[_Target, Pair]]) -> None:
        if not pairs:
            return
        lines = [p.to_json() for _, p in pairs]
        if self._secrets:
            lines = [self._secrets.line(line) for line in lines]
        written = len(pairs)
        if self.writer is not None:
            try:
                written = self.writer.write_lines(lines)
            except JsonlWriteError as exc:
                written = exc.written
                for target, _ in pairs[written:]:
                    self.stats.count("shadow_pairs_dropped", candidate=target.name, reason="write_error")
                log.error("shadow_pairs_write_failed", lost=len(pairs) - written, error=type(exc.__cause__).__name__)
        for target, _ in pairs[:written]:
            self.stats.count("shadow_pairs", candidate=target.name)
        if self._pairs_to_parent:
            # Before `finished` moves: whoever waits on it finds the pairs already at the sinks.
            self._send(PairLines([(t.index, p.id, line) for (t, p), line in zip(pairs, lines)]))
        self.stats.finished(len(pairs), written)

    def _observe(
        self, target: _Target, primary: Sample, shadow: Sample, p_scores: list[PairScore], s_scores: list[PairScore]
    ) -> None:
        """Add one pair to the candidate's window and move its gauges."""
        prim = {s.check: s.result for s in p_scores}
        wins = losses = ties = 0
        for s in s_scores:
            a = prim.get(s.check)
            if a not in ("pass", "fail") or s.result not in ("pass", "fail"):
                continue
            if a == "fail" and s.result == "pass":
                wins += 1
            elif a == "pass" and s.result == "fail":
                losses += 1
            else:
                ties += 1
        failed = shadow.error_type is not None or shadow.status >= 400
        if failed and primary.error_type is None:
            losses += 1  # a failed candidate call loses to an answer
        window = target.window
        window.add(wins, losses, ties, primary.latency_ms, shadow.latency_ms, primary.cost_usd, shadow.cost_usd)
        name = target.name
        gauge = self.stats.gauge
        total_w, total_l = window.wins, window.losses
        total = total_w + total_l + window.ties
        gauge("shadow_window_pairs", name, float(len(window)))
        if total > 0:
            gauge("shadow_win_rate", name, total_w / total)
            gauge("shadow_loss_rate", name, total_l / total)
            gauge("shadow_pass_rate_diff", name, (total_w - total_l) / total)
        gauge("shadow_worse_p_value", name, _worse_p(total_w, total_l))
        p95 = window.p95(window.latency_primary)
        if p95 > 0:
            gauge("shadow_latency_ratio", name, window.p95(window.latency_shadow) / p95)
        if window.priced and window.cost_primary > 0:
            gauge("shadow_cost_ratio", name, window.cost_shadow / window.cost_primary)


def child_main(
    cfg: ShadowConfig,
    headers: Sequence[dict[str, str]],
    inbox: Any,
    outbox: Any,
    pairs_to_parent: bool,
    parent_pid: int | None = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None:
        threading.Thread(
            target=exit_when_orphaned,
            args=(parent_pid, 0.5, "shadow_mirror"),
            name="llmwatch-shadow-orphan-check",
            daemon=True,
        ).start()
    from llmwatch.core.logs import configure_logging

    # As the parent's CLI does: JSON lines unless a format was configured or stderr is a terminal.
    configure_logging(cfg.logging.level, cfg.logging.chosen_format())
    isolate(cfg.shadow.cpu_affinity, cfg.shadow.nice, role="shadow_mirror")
    # The event loop takes the candidate's timestamps while the writer thread scores pairs: with
    # the default 5 ms switch interval a chunk could wait that long for the GIL and read as a
    # slower candidate (the proxy's process sets the same interval for the same reason).
    sys.setswitchinterval(0.0005)
    ShadowWorker(cfg, headers, framed_sender(outbox), pairs_to_parent=pairs_to_parent).run(inbox)
    # Done: every pair is written and closed, MirrorClosed is sent. A spawned child would now tear
    # its interpreter down module by module (aiohttp, numpy, the checks), which at nice 10 on a
    # busy host took 0.8-1.2 s after the last line of this function (measured on the demo at load
    # 12 on 2 cores), past the parent's bound, so every normal stop ended in `shadow_mirror_killed`.
    # Nothing in that teardown is ours to wait for; leave at once, after flushing the log streams.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)
