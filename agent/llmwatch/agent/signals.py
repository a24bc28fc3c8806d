"""Waiting for SIGINT/SIGTERM, so that every long-running command shuts down cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Awaitable, Callable, Iterator, TypeVar

import structlog

log = structlog.get_logger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)

T = TypeVar("T")

# Whether a long-running command of this process has taken a stop signal: the process is on its way
# out. The CLI's SIGTERM handler, put back when the command's own handlers come off, reads it: a
# supervisor's later SIGTERM (GNU `timeout` signals the process and then its group) then ends
# nothing half way, where it raised inside asyncio's own shutdown (its executor's thread printed
# "RuntimeError: Event loop is closed" twice). Reset by the CLI when a command starts.
_stop_taken: list[bool] = []


def stop_taken() -> bool:
    """Whether a stop signal was taken since `forget_stop` (see `_stop_taken`)."""
    return bool(_stop_taken)


def forget_stop() -> None:
    _stop_taken.clear()


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
        _stop_taken.append(True)
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
    gives it up: the cleanup is cancelled where it awaits, then KeyboardInterrupt, which the CLI
    turns into exit 130 without a traceback.

    Cancelled, not interrupted: a KeyboardInterrupt raised wherever the main thread happens to be
    (`default_int_handler`, as before) ended the loop with the cleanup's tasks half way, and
    asyncio's shutdown then cancelled them all at once; aiohttp's server stop, cancelled together
    with its request handlers, raised InvalidStateError with a traceback (1 run in 3 of
    tests/integration/test_second_signal.py under load). The cleanup's waits are awaits (the
    agent's wait for the scorer runs in a thread, llmwatch.agent.runtime.Agent._close_pipeline),
    so a cancellation reaches them at once."""
    stop = asyncio.Event()
    with stop_signals((signal.SIGTERM,), stop):
        try:
            with stop_signals((signal.SIGINT,), stop):
                return await main(stop)
        finally:
            await _cancelled_by_ctrl_c(cleanup)


async def _cancelled_by_ctrl_c(cleanup: Callable[[], Awaitable[object]]) -> None:
    """`cleanup()`, a Ctrl-C cancelling it and raising KeyboardInterrupt once it has unwound."""
    task = asyncio.current_task()
    interrupted: list[bool] = []

    def on_ctrl_c() -> None:
        if task is not None and not interrupted:
            interrupted.append(True)
            log.info("stop_given_up", signal="SIGINT", note="a second Ctrl-C: the stop under way is cancelled")
            task.cancel()

    with _loop_handler(signal.SIGINT, on_ctrl_c):
        try:
            await cleanup()
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt from None
            raise


@contextlib.contextmanager
def _loop_handler(sig: signal.Signals, callback: Callable[[], None]) -> Iterator[None]:
    """`sig` calls `callback` on the loop inside; the handler from before is put back after."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(sig)
    try:
        loop.add_signal_handler(sig, callback)
    except (NotImplementedError, RuntimeError, ValueError):
        yield  # no signals here (another thread, another platform): the caller's own stop applies
        return
    try:
        yield
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(sig)
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(sig, previous)


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
