"""Shadow evaluation: mirror sampled live requests to candidate versions and write pair records.

The proxy calls `ShadowMirror.offer` from `_finish`, after the client has its last byte and after
the sampling decision. `offer` only decides (the candidate's own rate, on the request id's hash,
so replays agree), checks the caps and hands the request to the mirror's own thread: a length
check and one `call_soon_threadsafe`. Everything else happens off the proxy's event loop:

- the **mirror thread** runs its own event loop and aiohttp session; it sends at most
  `max_concurrency` requests per candidate at once, each bounded by `timeout_s`. A mirror that
  would exceed the concurrency is skipped, not queued behind a slow candidate: a backlog of old
  requests would measure the candidate under a load the primary never had.
- the **writer thread** builds both `Sample`s, scores both with the same rule checks, redacts both
  like samples, writes the `llmwatch.pair/v1` record under `<data_dir>/pairs/`, and moves the
  `llmwatch_shadow_*` gauges. It is separate from the mirror loop so that parsing and scoring never
  delay the timestamps of chunks still arriving from other candidates.

Timing caveat (measured, docs/notes/shadow.md): the candidate's latency and TTFT are timestamps
taken by the mirror thread, which shares the GIL with the busy proxy; and a mirror always runs
while the client's next calls are being served. An identical candidate behind a proxy under load
reads slower at p95 than the primary (about 1.25x in the tests with a one-at-a-time client; it
was worse, 1.6x, with the mirror on the proxy's own loop, which was tried and dropped). Latency
margins must allow for it, or the comparison be made at low load; quality signals are unaffected.

Pairs are scored here, with the rule checks of `scoring.checks` only (embedding checks need the
scorer child's model; pairs are few, and both sides must be scored by the same checks). Every skip
is counted with its reason, every candidate failure is counted and logged at a bounded rate.

The candidate gets the request body (its `model` rewritten if configured, streaming switched off
in `buffered` mode) and the candidate's own configured headers; none of the client's headers: the
client's credentials are for the primary, not for another service.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Callable, Mapping, Sequence

import aiohttp
import numpy as np
import orjson
import structlog
from yarl import URL

from llmwatch.core.config import Config, ConfigError, ShadowCandidate
from llmwatch.core.jsonio import JsonlWriteError, JsonlWriter
from llmwatch.core.logs import RateLimitedLog
from llmwatch.core.metrics import Metrics
from llmwatch.core.pairs import Pair, PairScore
from llmwatch.core.pricing import PriceTable
from llmwatch.core.queue import BoundedQueue
from llmwatch.core.records import Sample
from llmwatch.core.urls import mask_url, split_userinfo
from llmwatch.collectors.proxy_capture import CallFacts, Exchange, analyze, to_sample
from llmwatch.scorers.paired import mcnemar_worse_p
from llmwatch.scorers.redaction import redact_sample
from llmwatch.scorers.sampler import hash_fraction

log = structlog.get_logger(__name__)

SKIP_REASONS = ("queue_full", "concurrency", "spend_cap", "rate_cap", "not_captured")
ERROR_TYPES = ("timeout", "unreachable", "transport", "http_4xx", "http_5xx")
# Pairs behind the gauges of each candidate.
WINDOW = 1000
_WANTED_HEADERS = ("content-type", "content-encoding")


def resolve_headers(spec: ShadowCandidate, index: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The candidate's headers with `env:NAME` values read now; errors name the variable, never a value."""
    out = {}
    for name, secret in spec.headers.items():
        value = secret.get_secret_value()
        if value.startswith("env:"):
            var = value[4:]
            if var not in environ:
                raise ConfigError(
                    f"shadow.candidates[{index}] ({spec.name}).headers.{name}: environment variable {var} is not set; "
                    f"export it before starting llmwatch, or give the value in the config"
                )
            value = environ[var]
        out[name] = value
    return out


@dataclass(slots=True)
class _Job:
    exchange: Exchange
    facts: CallFacts
    version: str | None
    cost: float | None
    reserved_usd: float
    body: bytes


@dataclass(slots=True)
class _Done:
    candidate: "_Candidate"
    job: _Job
    shadow: Exchange


class _Candidate:
    def __init__(self, spec: ShadowCandidate, headers: dict[str, str], metrics: Metrics) -> None:
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
        self.inflight = 0  # mirror thread only
        self.minute: deque[float] = deque()  # hot path only: send times of the last minute
        self._lock = threading.Lock()  # spend: hot path (reserve) and writer thread (settle)
        self.spent: deque[tuple[float, float]] = deque()
        self.spent_sum = 0.0
        self.reserved = 0.0
        self.warn = RateLimitedLog()
        self.window: deque[tuple[int, int, int, float, float, float | None, float | None]] = deque(maxlen=WINDOW)
        self.mirrored = metrics.shadow_mirrored.labels(candidate=spec.name)
        self.skipped = {r: metrics.shadow_skipped.labels(candidate=spec.name, reason=r) for r in SKIP_REASONS}
        self.errors = {e: metrics.shadow_candidate_errors.labels(candidate=spec.name, error_type=e) for e in ERROR_TYPES}
        self.pairs = metrics.shadow_pairs.labels(candidate=spec.name)
        self.spend = metrics.shadow_spend.labels(candidate=spec.name)

    def reserve(self, now: float, usd: float) -> bool:
        """Hold `usd` of the hourly budget for one mirror; False when the cap would be passed."""
        cap = self.spec.max_usd_per_hour
        with self._lock:
            spent = self.spent
            while spent and spent[0][0] < now - 3600.0:
                self.spent_sum -= spent.popleft()[1]
            if cap is not None and self.spent_sum + self.reserved + usd > cap:
                return False
            self.reserved += usd
            return True

    def settle(self, reserved: float, actual: float) -> None:
        with self._lock:
            self.reserved = max(0.0, self.reserved - reserved)
            if actual > 0:
                self.spent.append((time.monotonic(), actual))
                self.spent_sum += actual
        if actual > 0:
            self.spend.inc(actual)


class ShadowMirror:
    def __init__(
        self,
        cfg: Config,
        metrics: Metrics,
        prices: PriceTable,
        *,
        redact: Callable[[Any], Any] | None,
        environ: Mapping[str, str] | None = None,
        pair_sinks: Sequence[Any] = (),
    ) -> None:
        """`pair_sinks`: where pairs go besides the files, e.g. Kafka (`write(list)`, `close()`)."""
        from llmwatch.scorers.suite import Suite, default_checks
        from llmwatch.scorers.registry import CHECK_KINDS

        environ = os.environ if environ is None else environ
        section = cfg.shadow
        self.cfg = cfg
        self.metrics = metrics
        self.prices = prices
        self._redact = redact
        self._routes = frozenset(section.routes)
        self._max_queue = section.max_queue
        self._version_header = cfg.model_version.header.lower()
        self.candidates = [_Candidate(c, resolve_headers(c, i, environ), metrics) for i, c in enumerate(section.candidates)]
        specs = cfg.scoring.checks if cfg.scoring.checks is not None else default_checks(False)
        self.suite = Suite([s for s in specs if CHECK_KINDS.get(s.kind) is not None and CHECK_KINDS[s.kind].family != "embedding"], check_timeout_s=cfg.scoring.check_timeout_s)
        self.writer = JsonlWriter(cfg.data_dir / "pairs", "pairs", max_file_bytes=cfg.files.max_file_bytes) if cfg.files.enabled else None
        self.pair_sinks = list(pair_sinks)
        self._offered = 0  # hot path only
        self._taken = 0  # mirror thread only
        self._done: BoundedQueue[_Done] = BoundedQueue(max(self._max_queue, 64))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = threading.Event()
        self._writer_stop = threading.Event()
        self._mirror_thread = threading.Thread(target=self._run_loop, name="llmwatch-shadow-mirror", daemon=True)
        self._writer_thread = threading.Thread(target=self._run_writer, name="llmwatch-shadow-writer", daemon=True)
        self._ready = threading.Event()
        self._warned_unpriced: set[str] = set()
        self.written = 0
        # Mirrors that ended (pair written or not): tests wait on it. Moved by two threads.
        self.finished = 0
        self._finished_lock = threading.Lock()

    # --- the hot path -----------------------------------------------------------------------

    def offer(self, ex: Exchange, facts: CallFacts, version: str | None, cost: float | None) -> None:
        """Called by the proxy after the client has its answer; decides and hands off, never waits."""
        if ex.route not in self._routes:
            return
        body: bytes | None = None
        frac = hash_fraction(ex.request_id)
        for cand in self.candidates:
            spec = cand.spec
            if frac >= spec.rate:
                continue
            if body is None:
                request = facts.request
                if ex.request_body is None or not isinstance(request, dict):
                    cand.skipped["not_captured"].inc()
                    continue
                body = b""  # built per candidate below (model and stream differ)
            if self._offered - self._taken >= self._max_queue:
                cand.skipped["queue_full"].inc()
                continue
            now = time.monotonic()
            if spec.max_requests_per_minute is not None:
                minute = cand.minute
                while minute and minute[0] < now - 60.0:
                    minute.popleft()
                if len(minute) >= spec.max_requests_per_minute:
                    cand.skipped["rate_cap"].inc()
                    continue
            estimate = 0.0
            if spec.max_usd_per_hour is not None:
                model = spec.model or facts.model
                guess = self.prices.cost(model, facts.input_tokens, facts.output_tokens)
                if guess is None:
                    # Without a price the cap cannot be held: refuse rather than spend blind.
                    cand.skipped["spend_cap"].inc()
                    if model not in self._warned_unpriced and len(self._warned_unpriced) < 100:
                        self._warned_unpriced.add(str(model))
                        log.warning("shadow_model_not_priced", candidate=cand.name, model=model, fix="add it under metrics.pricing, or drop max_usd_per_hour")
                    continue
                estimate = guess
                if not cand.reserve(now, estimate):
                    cand.skipped["spend_cap"].inc()
                    continue
            if spec.max_requests_per_minute is not None:
                cand.minute.append(now)
            # The body is built in the mirror thread: serialising a large prompt is not the hot path's work.
            job = _Job(ex, facts, version, cost, estimate, b"")
            loop = self._loop
            if loop is None:
                cand.settle(estimate, 0.0)
                cand.skipped["queue_full"].inc()
                continue
            self._offered += 1
            loop.call_soon_threadsafe(self._dispatch, cand, job)

    # --- the mirror thread ------------------------------------------------------------------

    def start(self) -> None:
        """Start the mirror thread (its own event loop and session) and the writer thread."""
        self._mirror_thread.start()
        self._writer_thread.start()
        self._ready.wait(10.0)

    def _run_loop(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self._session = loop.run_until_complete(self._open())
            self._loop = loop
        finally:
            self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _open(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )

    def _dispatch(self, cand: _Candidate, job: _Job) -> None:
        self._taken += 1
        if cand.inflight >= cand.spec.max_concurrency or self._stop.is_set():
            cand.settle(job.reserved_usd, 0.0)
            cand.skipped["concurrency"].inc()
            return
        cand.inflight += 1
        cand.mirrored.inc()
        task = asyncio.get_running_loop().create_task(self._mirror(cand, job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _mirror(self, cand: _Candidate, job: _Job) -> None:
        primary = job.exchange
        request = dict(job.facts.request)
        spec = cand.spec
        if spec.model:
            request["model"] = spec.model
        if spec.stream == "buffered" and request.get("stream"):
            request["stream"] = False
            request.pop("stream_options", None)
        job.body = orjson.dumps(request)
        sx = Exchange(
            request_id=primary.request_id,
            started_at=time.time(),
            t0=perf_counter(),
            method="POST",
            route=primary.route,
            request_body=job.body,
            max_body_bytes=primary.max_body_bytes,
            sample_id=f"{primary.sample_id}.{cand.name}",
            metadata=dict(primary.metadata),
        )
        assert self._session is not None
        try:
            async with self._session.post(
                cand.prefix + primary.route,
                data=job.body,
                headers=cand.headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=cand.spec.timeout_s),
            ) as up:
                sx.status = up.status
                sx.response_headers = {k: up.headers[k] for k in (*_WANTED_HEADERS, self._version_header) if k in up.headers}
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
            cand.inflight -= 1
        if sx.error_type == "shutdown":
            cand.settle(job.reserved_usd, 0.0)
            self.metrics.shadow_pairs_dropped.labels(candidate=cand.name, reason="shutdown").inc()
            self._count_finished(1)
            return
        kind = sx.error_type or ("http_5xx" if sx.status >= 500 else "http_4xx" if sx.status >= 400 else None)
        if kind in cand.errors:
            cand.errors[kind].inc()
            # Fixed fields only: never the candidate's headers or the body it sent back.
            cand.warn(log.warning, "shadow_candidate_failed", candidate=cand.name, upstream=cand.shown, error_type=kind, status=sx.status or None)
        if not self._done.offer(_Done(cand, job, sx)):
            cand.settle(job.reserved_usd, 0.0)
            self.metrics.shadow_pairs_dropped.labels(candidate=cand.name, reason="writer_full").inc()
            self._count_finished(1)

    # --- the writer thread ------------------------------------------------------------------

    def _run_writer(self) -> None:
        while True:
            batch = self._done.get_batch(64, timeout=0.2)
            if not batch:
                if self._writer_stop.is_set():
                    return
                continue
            pairs: list[tuple[_Candidate, Pair]] = []
            for done in batch:
                try:
                    pairs.append((done.candidate, self._pair(done)))
                except Exception as exc:
                    self.metrics.shadow_pairs_dropped.labels(candidate=done.candidate.name, reason="build_error").inc()
                    done.candidate.warn(log.error, "shadow_pair_failed", candidate=done.candidate.name, error=type(exc).__name__)
                    self._count_finished(1)
            self._write(pairs)

    def _pair(self, done: _Done) -> Pair:
        cand, job = done.candidate, done.job
        primary = to_sample(job.exchange, job.facts, model_version=job.version, cost_usd=job.cost, reason="shadow")
        facts = analyze(done.shadow)
        version = done.shadow.response_headers.get(self._version_header) or facts.response_model or facts.model
        cost = self.prices.cost(facts.model, facts.input_tokens, facts.output_tokens) if facts.model and (facts.input_tokens or facts.output_tokens) else None
        cand.settle(job.reserved_usd, cost or 0.0)
        shadow = to_sample(done.shadow, facts, model_version=version, cost_usd=cost, reason="shadow")
        scored = self.suite.score([primary, shadow])
        p_scores = [PairScore(check=s.score.check, kind=s.score.kind, result=s.score.result, value=s.score.value) for s in scored if s.score.sample_id == primary.id]
        s_scores = [PairScore(check=s.score.check, kind=s.score.kind, result=s.score.result, value=s.score.value) for s in scored if s.score.sample_id == shadow.id]
        primary_r = redact_sample(self._redact, primary)
        shadow_r = redact_sample(self._redact, shadow)
        category = primary_r.metadata.get("category")
        self._observe(cand, primary, shadow, p_scores, s_scores)
        return Pair.model_construct(
            schema_="llmwatch.pair/v1",
            id=shadow.id,
            candidate=cand.name,
            timestamp=primary.timestamp,
            route=primary.route,
            category=category if isinstance(category, str) else None,
            primary=primary_r,
            shadow=shadow_r,
            primary_scores=p_scores,
            shadow_scores=s_scores,
            scored_by="rules",
        )

    def _write(self, pairs: list[tuple[_Candidate, Pair]]) -> None:
        if not pairs:
            return
        written = len(pairs)
        if self.writer is not None:
            try:
                written = self.writer.write_lines(p.to_json() for _, p in pairs)
            except JsonlWriteError as exc:
                written = exc.written
                for cand, _ in pairs[written:]:
                    self.metrics.shadow_pairs_dropped.labels(candidate=cand.name, reason="write_error").inc()
                log.error("shadow_pairs_write_failed", lost=len(pairs) - written, error=type(exc.__cause__).__name__)
        for cand, _ in pairs[:written]:
            cand.pairs.inc()
        for sink in self.pair_sinks:
            try:
                # The sink counts what it refuses itself (buffer full, broker away).
                sink.write([p for _, p in pairs])
            except Exception as exc:
                for cand, _ in pairs:
                    self.metrics.shadow_pairs_dropped.labels(candidate=cand.name, reason="sink_error").inc()
                log.error("shadow_pair_sink_failed", sink=getattr(sink, "name", "?"), error=type(exc).__name__)
        self.written += written
        self._count_finished(len(pairs))

    def _count_finished(self, n: int) -> None:
        with self._finished_lock:
            self.finished += n

    def _observe(self, cand: _Candidate, primary: Sample, shadow: Sample, p_scores: list[PairScore], s_scores: list[PairScore]) -> None:
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
        cand.window.append((wins, losses, ties, primary.latency_ms, shadow.latency_ms, primary.cost_usd, shadow.cost_usd))
        w = np.array([row[:5] for row in cand.window], dtype=float)
        name = cand.name
        m = self.metrics
        total_w, total_l, total = w[:, 0].sum(), w[:, 1].sum(), w[:, :3].sum()
        m.shadow_window_pairs.labels(candidate=name).set(len(w))
        if total > 0:
            m.shadow_win_rate.labels(candidate=name).set(total_w / total)
            m.shadow_loss_rate.labels(candidate=name).set(total_l / total)
            m.shadow_pass_rate_diff.labels(candidate=name).set((total_w - total_l) / total)
        m.shadow_worse_p_value.labels(candidate=name).set(mcnemar_worse_p(int(total_w), int(total_l)))
        p95 = np.percentile(w[:, 3], 95)
        if p95 > 0:
            m.shadow_latency_ratio.labels(candidate=name).set(float(np.percentile(w[:, 4], 95) / p95))
        costs = [(a, b) for *_, a, b in cand.window if a is not None and b is not None]
        if costs:
            base = sum(a for a, _ in costs)
            if base > 0:
                m.shadow_cost_ratio.labels(candidate=name).set(sum(b for _, b in costs) / base)

    # --- shutdown ---------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Let mirrors in flight finish (at most `timeout`), write their pairs, stop both threads."""
        self._stop.set()
        loop = self._loop
        if loop is not None and self._mirror_thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(timeout), loop)
            try:
                fut.result(timeout + 5.0)
            except Exception as exc:
                log.error("shadow_stop_failed", error=type(exc).__name__)
            loop.call_soon_threadsafe(loop.stop)
            self._mirror_thread.join(5.0)
        self._close_writer(timeout)

    def _close_writer(self, timeout: float) -> None:
        # Only now: mirrors that were still in flight have handed their pairs over.
        self._writer_stop.set()
        if self._writer_thread.is_alive():
            self._writer_thread.join(timeout + 5.0)
        if self.writer is not None:
            self.writer.close()
        for sink in self.pair_sinks:
            try:
                sink.close()
            except Exception as exc:
                log.error("shadow_pair_sink_close_failed", error=type(exc).__name__)

    async def _shutdown(self, timeout: float) -> None:
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self._session is not None:
            await self._session.close()
