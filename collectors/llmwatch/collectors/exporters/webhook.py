"""Alertmanager-compatible webhook notifications, for setups without Prometheus/Alertmanager.

The caller hands over the full set of alerts firing right now; the notifier works out what
changed and POSTs Alertmanager webhook payloads (version "4") to one URL, so any receiver built
for Alertmanager (chat bridges, incident tools, a small script) works unchanged.

Each alert is delivered when it starts firing, when it resolves (with `endsAt`), and again every
`repeat_interval_s` while it lasts; nothing else is sent, so calling `update` often with an
unchanged set is free. Unlike Alertmanager, which re-sends a whole group whenever any member
changes, a payload carries only the alerts due, grouped by `alertname` (the `groupKey`).

Sending runs in one background task: `update` only computes the difference and queues payloads.
Failed POSTs (connection errors, timeouts, 5xx, 429) are retried with exponential backoff and
jitter; after `max_retries` the payload is given up and counted, and its firing alerts are due
again at the next `update`. Nothing here ever raises into the caller.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import aiohttp
import orjson
import structlog

from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.metrics import MetricGroup, counter
from llmwatch.scorers.drift.config import DriftSection

log = structlog.get_logger(__name__)


class WebhookMetrics(MetricGroup):
    """The drift webhook (drift.webhook): deliveries by outcome."""

    notifications = counter(
        "llmwatch_webhook_notifications",
        "Drift webhook deliveries by outcome (sent, retries, failed, dropped).",
        ["event"],
    )


__all__ = ["AlertSpec", "NotifierStats", "WebhookNotifier", "alert_key", "fingerprint"]

# What Alertmanager puts in `endsAt` of a firing alert that has no known end.
_ZERO_TIME = "0001-01-01T00:00:00Z"
_RETRY_STATUSES = frozenset({429, *range(500, 600)})

# 64-bit FNV-1a, as Alertmanager (prometheus/common model.LabelSet.Fingerprint) computes it,
# so that receivers see the same fingerprint from us and from Alertmanager for the same labels.
_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_MASK64 = (1 << 64) - 1
_SEPARATOR = 0xFF


@dataclass(frozen=True)
class AlertSpec:
    """One alert as the caller sees it: `labels` must include `alertname`."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    # When the condition began, if the caller knows; otherwise the first `update` that saw it.
    starts_at: datetime | None = None


def shown_url(url: str) -> str:
    """`scheme://host[:port]/…`: what of a webhook URL may be logged (no userinfo, path or query)."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://)(?:[^/?#@]*@)?([^/?#]*)(.*)$", url)
    if match is None:
        return "***"
    return match.group(1) + match.group(2) + ("/…" if match.group(3) not in ("", "/") else "")


def alert_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The stable key `update` expects: the label pairs, sorted."""
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def fingerprint(labels: Mapping[str, str]) -> str:
    h = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, str(labels[name])):
            for byte in part.encode():
                h = ((h ^ byte) * _FNV_PRIME) & _MASK64
            h = ((h ^ _SEPARATOR) * _FNV_PRIME) & _MASK64
    return f"{h:016x}"


@dataclass
class NotifierStats:
    """Counters the agent exports as metrics; they only ever grow."""

    sent: int = 0  # payloads the receiver accepted (2xx)
    retries: int = 0  # extra attempts after a failed one
    failed: int = 0  # payloads given up (retries exhausted or a non-retryable 4xx)
    dropped: int = 0  # payloads discarded unsent (queue overflow, close timeout)
    last_error: str | None = None


@dataclass
class _Tracked:
    spec: AlertSpec
    starts_at: datetime
    fingerprint: str
    delivered_at: float | None = None  # monotonic time of the last accepted delivery
    inflight: bool = False


@dataclass
class _Outgoing:
    payload: dict[str, Any]
    firing_keys: tuple[tuple, ...]


def _rfc3339(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _common(maps: list[Mapping[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


def _label_set(labels: Mapping[str, str]) -> str:
    # prometheus/common's LabelSet.String(): {a="x", b="y"}, as used in Alertmanager group keys.
    return "{" + ", ".join(f"{k}={orjson.dumps(labels[k]).decode()}" for k in sorted(labels)) + "}"


def _error_text(exc: BaseException) -> str:
    """What of a failed attempt may be logged. aiohttp's response errors (TooManyRedirects, a
    redirect to a bad place) and InvalidURL quote the whole URL, whose path or query may be the
    hook's secret: those say their type, status and message only."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"{type(exc).__name__}: {exc.status}, message={exc.message!r}"
    if isinstance(exc, aiohttp.InvalidURL):
        return type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


class WebhookNotifier:
    def __init__(
        self,
        url: str,
        *,
        repeat_interval_s: float = 3600.0,
        timeout_s: float = 5.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        generator_url: str | None = None,
        receiver: str = "llmwatch",
        external_url: str = "",
        max_backoff_s: float = 60.0,
        max_queue: int = 100,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        """`max_retries` counts the attempts after the first; the wait before retry n (from 0)
        is between half and all of `min(max_backoff_s, backoff_s * 2**n)`. `on_event` is called
        with the name of each `NotifierStats` counter as it grows ("sent", "retries", "failed",
        "dropped"), for mapping to Prometheus metrics; `stats` holds the same totals."""
        if repeat_interval_s <= 0 or timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or max_queue < 1:
            raise ValueError(
                "repeat_interval_s and timeout_s must be > 0, max_retries and backoff_s >= 0, max_queue >= 1"
            )
        self.url = url
        # Webhook URLs often carry their secret in the path or query (chat hooks): logs show the
        # scheme and host only.
        self.shown_url = shown_url(url)
        self.repeat_interval_s = float(repeat_interval_s)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.generator_url = generator_url or ""
        self.receiver = receiver
        self.external_url = external_url
        self.stats = NotifierStats()
        self._on_event = on_event
        self._tracked: dict[tuple, _Tracked] = {}
        self._queue: asyncio.Queue[_Outgoing] = asyncio.Queue(maxsize=max_queue)
        self._worker: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ caller side

    async def update(self, active: Mapping[tuple, AlertSpec]) -> None:
        """Take the complete set of alerts firing now and queue whatever is due. Never raises."""
        try:
            self._update(active)
        except Exception:
            log.exception("webhook_update_failed", url=self.shown_url)

    def _update(self, active: Mapping[tuple, AlertSpec]) -> None:
        if self._closed:
            return
        now_wall = datetime.now(timezone.utc)
        now = time.monotonic()
        firing: list[tuple[tuple, _Tracked]] = []
        resolved: list[_Tracked] = []
        for key, spec in active.items():
            if not spec.labels.get("alertname"):
                log.warning("webhook_alert_without_alertname", labels=dict(spec.labels))
                continue
            tracked = self._tracked.get(key)
            if tracked is None:
                tracked = _Tracked(spec, spec.starts_at or now_wall, fingerprint(spec.labels))
                self._tracked[key] = tracked
            else:
                # Later annotations (a newer p-value, say) ride along with the next delivery.
                tracked.spec = spec
            due = tracked.delivered_at is None or now - tracked.delivered_at >= self.repeat_interval_s
            if due and not tracked.inflight:
                firing.append((key, tracked))
        for key in [k for k in self._tracked if k not in active]:
            resolved.append(self._tracked.pop(key))

        groups: dict[str, tuple[list[tuple[tuple, _Tracked]], list[_Tracked]]] = {}
        for key, tracked in firing:
            groups.setdefault(tracked.spec.labels["alertname"], ([], []))[0].append((key, tracked))
        for tracked in resolved:
            groups.setdefault(tracked.spec.labels["alertname"], ([], []))[1].append(tracked)
        for name in sorted(groups):
            now_firing, now_resolved = groups[name]
            alerts = [self._alert(t, None) for _, t in now_firing] + [self._alert(t, now_wall) for t in now_resolved]
            outgoing = _Outgoing(self._payload(name, alerts), tuple(k for k, _ in now_firing))
            for _, tracked in now_firing:
                tracked.inflight = True
            self._enqueue(outgoing)

    def post(self, payload: Mapping[str, Any]) -> None:
        """Queue one JSON body of the caller's own shape (not an Alertmanager payload), sent once
        with the same retries, backoff and counting as alerts. Call it on the event loop."""
        if not self._closed:
            self._enqueue(_Outgoing(dict(payload), ()))

    def _alert(self, tracked: _Tracked, ends_at: datetime | None) -> dict[str, Any]:
        return {
            "status": "firing" if ends_at is None else "resolved",
            "labels": dict(tracked.spec.labels),
            "annotations": dict(tracked.spec.annotations),
            "startsAt": _rfc3339(tracked.starts_at),
            "endsAt": _ZERO_TIME if ends_at is None else _rfc3339(ends_at),
            "generatorURL": self.generator_url,
            "fingerprint": tracked.fingerprint,
        }

    def _payload(self, alertname: str, alerts: list[dict[str, Any]]) -> dict[str, Any]:
        group_labels = {"alertname": alertname}
        return {
            "version": "4",
            "groupKey": "{}:" + _label_set(group_labels),
            "truncatedAlerts": 0,
            "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
            "receiver": self.receiver,
            "groupLabels": group_labels,
            "commonLabels": _common([a["labels"] for a in alerts]),
            "commonAnnotations": _common([a["annotations"] for a in alerts]),
            "externalURL": self.external_url,
            "alerts": alerts,
        }

    def _enqueue(self, outgoing: _Outgoing) -> None:
        if self._queue.full():
            # The oldest news is the least useful: a receiver down for long gets the latest state.
            stale = self._queue.get_nowait()
            self._queue.task_done()
            self._release(stale, delivered=False)
            self._count("dropped")
        self._queue.put_nowait(outgoing)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="llmwatch-webhook")

    # ------------------------------------------------------------------ background side

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout, headers={"User-Agent": "llmwatch-notifier"}) as session:
            while True:
                outgoing = await self._queue.get()
                delivered = False
                try:
                    delivered = await self._deliver(session, outgoing.payload)
                except asyncio.CancelledError:
                    # close() ran out of time while this one was still being tried.
                    self._count("dropped")
                    raise
                except Exception as exc:
                    # Belt and braces: a bug here must not kill the worker for all later alerts.
                    log.exception("webhook_worker_error", url=self.shown_url)
                    self.stats.last_error = repr(exc)
                    self._count("failed")
                finally:
                    self._release(outgoing, delivered=delivered)
                    self._queue.task_done()

    async def _deliver(self, session: aiohttp.ClientSession, payload: dict[str, Any]) -> bool:
        body = orjson.dumps(payload)
        headers = {"Content-Type": "application/json"}
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._count("retries")
                await asyncio.sleep(self._backoff(attempt - 1))
            try:
                async with session.post(self.url, data=body, headers=headers) as resp:
                    await resp.read()
                    if 200 <= resp.status < 300:
                        self._count("sent")
                        return True
                    error = f"HTTP {resp.status}"
                    if resp.status not in _RETRY_STATUSES:
                        # A 4xx will not get better by asking again: the payload or URL is wrong.
                        self.stats.last_error = error
                        log.warning(
                            "webhook_rejected",
                            url=self.shown_url,
                            status=resp.status,
                            alerts=len(payload.get("alerts", ())),
                        )
                        self._count("failed")
                        return False
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                error = _error_text(exc)
            self.stats.last_error = error
            log.info("webhook_attempt_failed", url=self.shown_url, attempt=attempt + 1, error=error)
        log.warning(
            "webhook_gave_up",
            url=self.shown_url,
            attempts=self.max_retries + 1,
            error=self.stats.last_error,
            alerts=len(payload.get("alerts", ())),
        )
        self._count("failed")
        return False

    def _backoff(self, retry: int) -> float:
        # "Equal jitter": at least half the exponential step, so retries from several agents
        # spread out without any of them retrying almost immediately.
        step = min(self.max_backoff_s, self.backoff_s * (2**retry))
        return step / 2 + random.uniform(0, step / 2)

    def _release(self, outgoing: _Outgoing, *, delivered: bool) -> None:
        now = time.monotonic()
        for key in outgoing.firing_keys:
            tracked = self._tracked.get(key)
            if tracked is not None:
                tracked.inflight = False
                if delivered:
                    tracked.delivered_at = now

    def _count(self, name: str) -> None:
        setattr(self.stats, name, getattr(self.stats, name) + 1)
        if self._on_event is not None:
            try:
                self._on_event(name)
            except Exception:
                log.exception("webhook_event_callback_failed", event=name)

    # ------------------------------------------------------------------ shutdown

    async def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything queued so far was delivered or given up; False on timeout."""
        worker = self._worker
        if worker is None or worker.done():
            return self._queue.empty()
        try:
            await asyncio.wait_for(self._queue.join(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop taking updates, give queued payloads up to `timeout_s` to go out, then stop."""
        self._closed = True
        worker = self._worker
        if worker is not None and not worker.done():
            if not await self.flush(timeout_s):
                log.warning("webhook_close_timeout", url=self.shown_url, pending=self._queue.qsize())
            worker.cancel()
            try:
                await worker
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("webhook_worker_error", url=self.shown_url)
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            self._count("dropped")
        self._worker = None


# --- the component ---------------------------------------------------------------------------


class WebhookComponent:
    def __init__(self, notifier: WebhookNotifier) -> None:
        self.notifier = notifier

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        await self.notifier.close()


def _create(ctx: Context, drift: DriftSection) -> Component | None:
    hook = drift.webhook
    if not hook.url:
        return None
    events = ctx.metrics.group(WebhookMetrics).notifications
    return WebhookComponent(
        WebhookNotifier(
            hook.url,
            repeat_interval_s=hook.repeat_interval_s,
            max_retries=hook.max_retries,
            on_event=lambda name: events.labels(event=name).inc(),
        )
    )


# An extension, not an exporter, for its place in the order: it is told the scorer's last drift
# readings while the pipeline drains, so it stops after the processors.
DRIFT_WEBHOOK = Factory("drift.webhook", "extension", DriftSection, _create, metrics=(WebhookMetrics,))
