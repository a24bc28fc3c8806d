"""Waiting for SIGINT/SIGTERM, so that every long-running command shuts down cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from typing import Awaitable, Callable, Iterator, TypeVar

import structlog

log = structlog.get_logger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)

T = TypeVar("T")


@contextlib.contextmanager
def stop_signals(
    signals: tuple[signal.Signals, ...] = SIGNALS, stop: asyncio.Event | None = None
) -> Iterator[asyncio.Event]:
    """Inside: `signals` (SIGINT/SIGTERM) set the event yielded (`stop`, or a new one). On the way
    out the handlers that were there before are put back: the loop's `remove_signal_handler`
    installs the defaults instead (SIG_DFL, `default_int_handler`), and uvloop's installs nothing
    once its loop has stopped, so a process that had handlers of its own (an in-process test under
    pytest, `asyncio.run`'s Ctrl-C handler, an application embedding the agent) lost them.

    Nested with one event, SIGTERM can be held longer than SIGINT (see `run_until_stopped`)."""
    loop = asyncio.get_running_loop()
    event = stop if stop is not None else asyncio.Event()
    previous = {sig: signal.getsignal(sig) for sig in signals}
    installed: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if event.is_set():
            # Said, so that a supervisor's repeated signal during a long stop is seen to be taken.
            log.info("stop_signal_again", signal=sig.name, note="the stop under way goes on")
        event.set()

    try:
        # Inside the try: an install that fails otherwise (an OSError from the loop) still puts
        # back the ones installed before it, not leaving Ctrl-C to set an event nobody waits on.
        for sig in signals:
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # no signals on this platform, or not the main thread: the caller's own stop applies
            installed.append(sig)
        yield event
    finally:
        for sig in installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
            handler = previous[sig]
            if handler is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(sig, handler)


@contextlib.contextmanager
def interrupt_raises() -> Iterator[None]:
    """Inside: Ctrl-C raises KeyboardInterrupt at once (`default_int_handler`), whatever SIGINT's
    handler was; put back on the way out. For a stop under way: asyncio's own handler (`asyncio.run`
    and uvloop's install it) only cancels the main task on a first Ctrl-C, which a blocking wait in
    the stop (the scorer's drain, up to scoring.shutdown_timeout_s) does not see until it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers are the main thread's to set
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGINT, previous)


async def run_until_stopped(
    main: Callable[[asyncio.Event], Awaitable[T]], cleanup: Callable[[], Awaitable[object]]
) -> T:
    """`main(stop)`, SIGINT/SIGTERM setting `stop`, then `cleanup()` (also when `main` fails):
    the one stop of every long-running command (proxy, ingest, ui, review serve, simulate, demo).

    The signals are taken from before `main` starts (a SIGTERM while a server comes up stops it
    once it is up, where the default action killed it half started) until `cleanup` is done: a
    second SIGTERM during the cleanup (a supervisor that signals the process and then its group, a
    wrapper forwarding SIGTERM after a Ctrl-C) is logged (`stop_signal_again`) and the cleanup goes
    on, where the default action killed it midway (exit 143, files and children left); the grace
    period's SIGKILL is what ends a stop that takes too long. A second Ctrl-C during the cleanup
    gives it up at once, even in a blocking wait: KeyboardInterrupt, which the CLI turns into exit
    130 without a traceback (`interrupt_raises`)."""
    stop = asyncio.Event()
    with stop_signals((signal.SIGTERM,), stop):
        try:
            with stop_signals((signal.SIGINT,), stop):
                return await main(stop)
        finally:
            with interrupt_raises():
                await cleanup()


async def until(stop: asyncio.Event, duration: float | None = None) -> None:
    """Until `stop` is set, or `duration` seconds: the `main` of a server run by `run_until_stopped`."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=duration)
    except asyncio.TimeoutError:
        pass


async def wait_for_signal(duration: float | None = None) -> None:
    """Sleep until SIGINT/SIGTERM (or `duration` seconds), so that shutdown is always clean."""
    with stop_signals() as stop:
        try:
            await asyncio.wait_for(stop.wait(), timeout=duration)
        except asyncio.TimeoutError:
            pass
