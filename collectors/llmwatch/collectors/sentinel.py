"""The served-version sentinel: notice, within one call, that a model is served as another version.

Providers swap the model behind an alias (`gpt-4o` answered by another snapshot, a new
`system_fingerprint`, a new value of the version header) without telling anyone. `VersionSentinel`
keeps, per request model label, the version its last successful call was served as, and compares
each call with it: one dict lookup and one tuple comparison on the hot path, nothing more unless
the version changed. Which parts count is `drift.version_change.fields` (model_version,
response_model, system_fingerprint). A call that does not say one of them (no fingerprint in a
Responses-API answer, say) keeps the last known value of that part: saying nothing is no change.
A version served within the last `remember_s` is not new (a provider serving one version from
backends with different fingerprints alternates between them): see llmwatch/core/served.py.

On a change it sets the metrics (`llmwatch_model_version_info`, `..._changes_total`,
`..._last_change_timestamp_seconds{from_version, to_version}`), logs `served_version_changed`
and hands a `VersionChange` to `on_change`; `VersionActions` is the usual receiver, which POSTs a
webhook and runs a command, both on the event loop's side, never in the call's path. The drift
window of the new version starts afresh in the scorer (scorers/llmwatch/scorers/drift/online.py), which sees the same
parts on the samples.

What comes from the upstream is bounded before it goes anywhere (`bounded_text`: at most 128
printable characters per part, a hash keeping long ones distinct): a 200 KB fingerprint is not a
400 KB log line, a label, or an environment too large to exec the command.

Storms (llmwatch/core/served.py): more than `max_changes` new versions within `flap_window_s` make
the model *flapping*: `llmwatch_model_version_flapping` reads 1, `served_version_flapping` is
logged once and sent to the webhook once, and no change of it is counted, alerted on or acted on
until it has been calm for `flap_window_s`. Actions are also rate-limited per model
(`min_action_interval_s`): a change inside the interval is held, and at its end one run reports
where the version went, unless it came back or is still flapping.

Models past the model label cap (label `other`) are not watched: their calls share one label, and
each alternation between them would read as a change. State lives in memory: a change that
happens while llmwatch is down is not seen as one (the first call after a start sets the version).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, Sequence

import structlog
from prometheus_client import Counter

from llmwatch.collectors.intake import Intake
from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.config import MetricsSection
from llmwatch.core.metrics import OTHER, LabelCap, MetricGroup, Metrics, counter, gauge
from llmwatch.core.served import ServedVersion, bounded_text
from llmwatch.scorers.drift.config import VERSION_FIELDS, DriftSection, VersionChangeSection

log = structlog.get_logger(__name__)

# Changes waiting for their webhook/command; past it the newest are dropped (and counted): a
# provider flapping between versions must not queue unbounded work.
_MAX_PENDING = 32


# One info series per request model, the current one; the previous is removed, not set to 0, so
# series stay one per model however often a provider rotates versions, and `== 1` never matches a
# stale one. The last change's gauge is what the LLMWatchServedVersionChanged alert reads, so its
# annotations can name both versions.
class SentinelMetrics(MetricGroup):
    """The served-version sentinel (drift.version_change) and the actions a change triggers."""

    model_version_info = gauge(
        "llmwatch_model_version_info",
        "1 for the version each request model is served as now (model_version, response model, system_fingerprint of its last answer).",
        ["gen_ai_request_model", "model_version", "response_model", "system_fingerprint"],
    )
    model_version_changes = counter(
        "llmwatch_model_version_changes",
        "Times the served version of a request model changed (see llmwatch_model_version_info).",
        ["gen_ai_request_model"],
    )
    model_version_last_change = gauge(
        "llmwatch_model_version_last_change_timestamp_seconds",
        "Unix time of the last served-version change of each request model, labelled with the versions before and after.",
        ["gen_ai_request_model", "from_version", "to_version"],
    )
    model_version_actions = counter(
        "llmwatch_model_version_change_actions",
        "What drift.version_change triggered on a change, by action (webhook, command) and outcome (sent, retries, failed, dropped; ok, exit_nonzero, timeout, not_started; coalesced: a change folded into the next run by drift.version_change.min_action_interval_s).",
        ["action", "outcome"],
    )
    # 1 while a request model is flapping (more than drift.version_change.max_changes new
    # versions within flap_window_s): its changes are not counted or acted on one by one.
    model_version_flapping = gauge(
        "llmwatch_model_version_flapping",
        "1 while the served version of a request model is flapping (too many new versions too fast to be changes); 0 once calm for drift.version_change.flap_window_s.",
        ["gen_ai_request_model"],
    )

    @property
    def internal_errors(self) -> Counter:
        return self.hub.internal_errors


Identity = tuple[str | None, str | None, str | None]  # (model_version, response_model, system_fingerprint)


def _identity(parts: tuple[str | None, ...]) -> Identity:
    """A served version's parts as the sentinel tells them: always three."""
    version, response_model, fingerprint = parts
    return version, response_model, fingerprint


def _from_labels(labels: tuple[str, str, str]) -> Identity:
    """Metric labels back to parts: an empty label is a part not told."""
    return labels[0] or None, labels[1] or None, labels[2] or None


def describe(identity: Identity) -> str:
    """One short text for a served version: `version (response model, fingerprint)`, parts only once."""
    version, response_model, fingerprint = identity
    main = version or response_model or "unknown"
    extras = [p for p in ((response_model if response_model != main else None), fingerprint) if p]
    return f"{main} ({', '.join(extras)})" if extras else main


@dataclass(frozen=True)
class VersionChange:
    """One change of the version a request model is served as."""

    model: str  # the request model's metric label
    old: Identity
    new: Identity
    at: datetime
    coalesced: int = 0  # changes held by min_action_interval_s that this one stands for

    @property
    def old_text(self) -> str:
        return describe(self.old)

    @property
    def new_text(self) -> str:
        return describe(self.new)

    def payload(self) -> dict:
        """The webhook's JSON body: old and new as text, and each part of both."""
        parts = lambda ident: dict(zip(VERSION_FIELDS, ident))  # noqa: E731
        return {
            "event": "served_version_changed",
            "model": self.model,
            "old": self.old_text,
            "new": self.new_text,
            "old_parts": parts(self.old),
            "new_parts": parts(self.new),
            "at": self.at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            **({"coalesced_changes": self.coalesced} if self.coalesced else {}),
        }


@dataclass(frozen=True)
class VersionFlapping:
    """A request model started flapping: too many new versions too fast to call each a change."""

    model: str
    current: Identity
    versions: int  # distinct versions remembered for it now
    at: datetime

    def payload(self) -> dict:
        return {
            "event": "served_version_flapping",
            "model": self.model,
            "current": describe(self.current),
            "versions_seen": self.versions,
            "at": self.at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }


class VersionSentinel:
    def __init__(
        self,
        metrics: Metrics,
        *,
        fields: Sequence[str] = VERSION_FIELDS,
        remember_s: float = 3600.0,
        max_values: int = 20,
        max_changes: int = 3,
        flap_window_s: float = 600.0,
        on_change: Callable[[VersionChange], None] | None = None,
        on_flapping: Callable[[VersionFlapping], None] | None = None,
    ) -> None:
        self.metrics = metrics.group(SentinelMetrics)
        self._mask = tuple(f in fields for f in VERSION_FIELDS)
        self.remember_s = remember_s
        self.max_changes = max_changes
        self.flap_window_s = flap_window_s
        self.on_change = on_change
        self.on_flapping = on_flapping
        # Per request model label: its served version, and the label values of its info series.
        self._served: dict[str, ServedVersion] = {}
        self._info: dict[str, tuple[str, str, str]] = {}
        self._last_change: dict[str, tuple[str, str]] = {}
        # The version label is the one every other metric uses; the other two parts get caps of their own.
        self._response_label = LabelCap(max_values)
        self._fingerprint_label = LabelCap(max_values)

    def observe(
        self, model: str | None, version: str | None, response_model: str | None, fingerprint: str | None
    ) -> VersionChange | None:
        """Compare one successful call with the last of its request model; never raises."""
        try:
            told = (
                bounded_text(version) if self._mask[0] else None,
                bounded_text(response_model) if self._mask[1] else None,
                bounded_text(fingerprint) if self._mask[2] else None,
            )
            key = self.metrics.model_label(model)
            served = self._served.get(key)
            if served is not None and served.told == told:
                return None  # the hot path: the call told what the last one did
            return self._slow(key, served, told)
        except Exception:
            self.metrics.internal_errors.labels(stage="version_sentinel").inc()
            log.exception("version_sentinel_failed", model=model)
            return None

    def _slow(self, key: str, served: ServedVersion | None, told: Identity) -> VersionChange | None:
        if key == OTHER or not any(told):
            return None
        if served is None:
            served = self._served[key] = ServedVersion(
                self.remember_s, max_changes=self.max_changes, flap_window_s=self.flap_window_s
            )
            self.metrics.model_version_flapping.labels(key).set_function(
                lambda: float(served.is_flapping(time.monotonic()))
            )
        seen, previous = served.see(told, time.monotonic())
        if seen == "same":
            return None
        if served.current is None:  # see() has just set it; the check says so to the type checker
            return None
        ident = _identity(served.current)
        m = self.metrics
        labels = (
            m.version_label(ident[0]) if ident[0] else "",
            self._response_label(ident[1]) if ident[1] else "",
            self._fingerprint_label(ident[2]) if ident[2] else "",
        )
        # The info series follows the version of the last call, also between known ones.
        old_labels = self._info.get(key)
        if old_labels != labels:
            if old_labels is not None:
                try:
                    m.model_version_info.remove(key, *old_labels)
                except KeyError:
                    pass
            m.model_version_info.labels(key, *labels).set(1)
            self._info[key] = labels
        if seen == "flapping":
            self._flapping(key, served, ident)
            return None
        if seen != "new" or previous is None or old_labels is None:
            return None  # first sight, back to a version served moments ago, or still flapping: no change
        # The alert's labels come from capped parts, so the from/to pairs stay bounded too.
        old_text, new_text = describe(_from_labels(old_labels)), describe(_from_labels(labels))
        last_change = self._last_change.get(key)
        if last_change is not None:
            try:
                m.model_version_last_change.remove(key, *last_change)
            except KeyError:
                pass
        m.model_version_last_change.labels(key, old_text, new_text).set(time.time())
        self._last_change[key] = (old_text, new_text)
        m.model_version_changes.labels(key).inc()
        change = VersionChange(key, _identity(previous), ident, datetime.now(timezone.utc))
        log.warning(
            "served_version_changed",
            model=key,
            old=change.old_text,
            new=change.new_text,
            fix="run `llmwatch regress` against the new version; the drift window restarts",
        )
        if self.on_change is not None:
            self.on_change(change)
        return change

    def _flapping(self, key: str, served: ServedVersion, ident: Identity) -> None:
        event = VersionFlapping(key, ident, served.known_count(), datetime.now(timezone.utc))
        log.warning(
            "served_version_flapping",
            model=key,
            current=describe(ident),
            versions_seen=event.versions,
            max_changes=self.max_changes,
            flap_window_s=self.flap_window_s,
            fix="the upstream answers as a new version more often than one can be tested; changes are not acted on "
            "until it is calm. If its fingerprints rotate between backends, drop system_fingerprint from "
            "drift.version_change.fields",
        )
        if self.on_flapping is not None:
            self.on_flapping(event)

    def state(self, model: str) -> tuple[Identity | None, bool]:
        """(the version `model` is served as now, whether it is flapping): for held actions."""
        served = self._served.get(model)
        if served is None:
            return None, False
        return served.current, served.is_flapping(time.monotonic())  # type: ignore[return-value]


# What a version-change command inherits from llmwatch by default: enough to find programs, a
# home, the locale and the time zone. Not the rest: llmwatch's environment holds its secrets
# (LLMWATCH_*__API_KEY, Kafka passwords, cloud credentials) and the command need not see them.
_COMMAND_ENV = ("PATH", "HOME", "LANG", "TZ")


def command_environment(environ: Mapping[str, str], allow: Iterable[str] = ()) -> dict[str, str]:
    """The environment of a drift.version_change command: the minimal set above, LC_*, and the
    names in `allow` (drift.version_change.command_env), each only where llmwatch has it."""
    wanted = {*_COMMAND_ENV, *allow}
    return {k: v for k, v in environ.items() if k in wanted or k.startswith("LC_")}


class VersionActions:
    """What `drift.version_change` asks for on a change: a webhook POST and/or a command.

    `submit` may be called from any thread and only queues (bounded); one task on the event loop
    delivers, one change at a time, so at most one command runs at once. The webhook goes through
    the drift notifier's sender (retries with backoff, counted); the command is started with an
    argv list (never a shell), in its own process group, stdin closed, and killed with its group
    after `command_timeout_s`; its exit is logged and counted."""

    def __init__(self, cfg: VersionChangeSection, metrics: Metrics) -> None:
        self.cfg = cfg
        self.metrics = metrics.group(SentinelMetrics)
        self.notifier = None
        if cfg.webhook:
            from llmwatch.collectors.exporters.webhook import WebhookNotifier

            counter = self.metrics.model_version_actions
            self.notifier = WebhookNotifier(
                cfg.webhook, on_event=lambda name: counter.labels(action="webhook", outcome=name).inc()
            )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[VersionChange | VersionFlapping] | None = None
        self._task: asyncio.Task[None] | None = None
        self.running: asyncio.subprocess.Process | None = None
        # The rate limit, per model (on the event loop only): when its last run was queued, the new
        # version it named, and the changes held since (first old version, how many).
        self.state: Callable[[str], tuple[Identity | None, bool]] | None = None  # VersionSentinel.state
        self._last_run: dict[str, float] = {}
        self._last_new: dict[str, Identity] = {}
        self._held: dict[str, tuple[Identity, int]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    @property
    def enabled(self) -> bool:
        return self.notifier is not None or bool(self.cfg.command)

    def start(self) -> None:
        """On the event loop that will deliver."""
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue(maxsize=_MAX_PENDING)
        self._task = self._loop.create_task(self._run(), name="llmwatch-version-actions")

    def submit(self, change: VersionChange) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._offer, change)

    def flapping(self, event: VersionFlapping) -> None:
        """A model started flapping: the webhook is told once; the command does not run for it."""
        loop = self._loop
        if loop is None or loop.is_closed() or self.notifier is None:
            return
        loop.call_soon_threadsafe(self._queue_put, event)

    def _offer(self, change: VersionChange) -> None:
        assert self._loop is not None
        now = self._loop.time()
        last = self._last_run.get(change.model)
        interval = self.cfg.min_action_interval_s
        if last is None or now - last >= interval:
            self._run_for(change, now)
            return
        # Inside the interval: held, folded with any change held before it.
        first_old, count = self._held.get(change.model, (change.old, 0))
        self._held[change.model] = (first_old, count + 1)
        self._count("coalesced")
        if change.model not in self._timers:
            self._timers[change.model] = self._loop.call_at(last + interval, self._release, change.model)

    def _release(self, model: str) -> None:
        """The end of a model's interval: one run for what was held, if the version is still elsewhere."""
        assert self._loop is not None
        self._timers.pop(model, None)
        held = self._held.pop(model, None)
        if held is None:
            return
        current, flapping = self.state(model) if self.state is not None else (None, False)
        if flapping:
            # No run while it flaps; look again an interval later (it ends once calm).
            self._held[model] = held
            self._timers[model] = self._loop.call_later(max(self.cfg.min_action_interval_s, 1.0), self._release, model)
            return
        last_new = self._last_new.get(model)
        if current is None or current == last_new:
            return  # back where the last run left it: nothing to act on
        old = last_new if last_new is not None else held[0]
        self._run_for(
            VersionChange(model, old, current, datetime.now(timezone.utc), coalesced=held[1]), self._loop.time()
        )

    def _run_for(self, change: VersionChange, now: float) -> None:
        self._last_run[change.model] = now
        self._last_new[change.model] = change.new
        self._queue_put(change)

    def _count(self, outcome: str) -> None:
        for action in ("webhook" if self.notifier else None, "command" if self.cfg.command else None):
            if action:
                self.metrics.model_version_actions.labels(action=action, outcome=outcome).inc()

    def _queue_put(self, item: VersionChange | VersionFlapping) -> None:
        assert self._queue is not None
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self._count("dropped")
            log.warning("version_change_action_dropped", model=item.model, pending=_MAX_PENDING)

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            change = await self._queue.get()
            try:
                if self.notifier is not None:
                    self.notifier.post(change.payload())
                if self.cfg.command and isinstance(change, VersionChange):
                    await self._command(change)
            except Exception:
                log.exception("version_change_action_failed", model=change.model)
            finally:
                self._queue.task_done()

    async def _command(self, change: VersionChange) -> None:
        argv = list(self.cfg.command or ())
        env = {
            **command_environment(os.environ, self.cfg.command_env),
            "LLMWATCH_OLD_VERSION": change.old_text,
            "LLMWATCH_NEW_VERSION": change.new_text,
            "LLMWATCH_MODEL": change.model,
        }
        counter = self.metrics.model_version_actions
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            counter.labels(action="command", outcome="not_started").inc()
            log.error(
                "version_change_command_not_started",
                program=argv[0],
                error=str(exc),
                fix="drift.version_change.command: give an argv list whose first item is an executable on PATH",
            )
            return
        self.running = proc
        log.info(
            "version_change_command_started",
            program=argv[0],
            pid=proc.pid,
            model=change.model,
            old=change.old_text,
            new=change.new_text,
        )
        try:
            code = await asyncio.wait_for(proc.wait(), self.cfg.command_timeout_s)
        except asyncio.TimeoutError:
            self._kill_group(proc)
            await proc.wait()
            counter.labels(action="command", outcome="timeout").inc()
            log.error(
                "version_change_command_timeout",
                program=argv[0],
                pid=proc.pid,
                timeout_s=self.cfg.command_timeout_s,
                fix="raise drift.version_change.command_timeout_s or make the command faster",
            )
            return
        finally:
            self.running = None
        counter.labels(action="command", outcome="ok" if code == 0 else "exit_nonzero").inc()
        (log.info if code == 0 else log.error)(
            "version_change_command_exited",
            program=argv[0],
            pid=proc.pid,
            exit_code=code,
            seconds=round(time.monotonic() - started, 3),
        )

    @staticmethod
    def _kill_group(proc: asyncio.subprocess.Process) -> None:
        # Its own session: the group is the command and what it started, nothing of ours.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def close(self, timeout_s: float = 5.0) -> None:
        """Let a running command finish within `timeout_s` (else kill its group), send what is queued, stop."""
        for timer in self._timers.values():
            timer.cancel()  # held changes are not run at shutdown: the process is going away
        self._timers.clear()
        if self._task is not None:
            queue = self._queue
            if queue is not None:
                try:
                    await asyncio.wait_for(queue.join(), timeout_s)
                except asyncio.TimeoutError:
                    if self.running is not None:
                        self._kill_group(self.running)
                    log.warning("version_change_actions_close_timeout", pending=queue.qsize())
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self.notifier is not None:
            await self.notifier.close(timeout_s)


# --- the component ---------------------------------------------------------------------------


class SentinelComponent:
    """The sentinel (fed by the intake, on every call) and the actions a change triggers."""

    def __init__(self, sentinel: VersionSentinel, actions: VersionActions | None) -> None:
        self.sentinel = sentinel
        self.actions = actions

    async def start(self) -> None:
        if self.actions is not None:
            self.actions.start()

    async def stop(self) -> None:
        if self.actions is not None:
            await self.actions.close()


def _create(ctx: Context, drift: DriftSection) -> Component | None:
    watch = drift.version_change
    if not watch.enabled:
        return None
    actions = VersionActions(watch, ctx.metrics)
    sentinel = VersionSentinel(
        ctx.metrics,
        fields=watch.fields,
        remember_s=watch.remember_s,
        max_values=ctx.section(MetricsSection).max_versions,
        max_changes=watch.max_changes,
        flap_window_s=watch.flap_window_s,
        on_change=actions.submit if actions.enabled else None,
        on_flapping=actions.flapping if actions.enabled else None,
    )
    if actions.enabled:
        actions.state = sentinel.state
    # The intake tells it every successful call's served version, from whichever receiver.
    ctx.get(Intake).sentinel = sentinel
    return SentinelComponent(sentinel, actions if actions.enabled else None)


VERSION_SENTINEL = Factory("drift.version_change", "extension", DriftSection, _create, metrics=(SentinelMetrics,))
