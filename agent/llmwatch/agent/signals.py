"""Waiting for SIGINT/SIGTERM, so that every long-running command shuts down cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_signals() -> Iterator[asyncio.Event]:
    """Inside: SIGINT/SIGTERM set the event yielded. On the way out the handlers that were there
    before are put back: the loop's `remove_signal_handler` installs the defaults instead (SIG_DFL,
    `default_int_handler`), and uvloop's installs nothing once its loop has stopped, so a process
    that had handlers of its own (an in-process test under pytest, `asyncio.run`'s Ctrl-C handler,
    an application embedding the agent) lost them."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    installed: list[signal.Signals] = []
    for sig in SIGNALS:
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # no signals on this platform, or not the main thread: the caller's own stop applies
        installed.append(sig)
    try:
        yield stop
    finally:
        for sig in installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
            handler = previous[sig]
            if handler is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(sig, handler)


async def wait_for_signal(duration: float | None = None) -> None:
    """Sleep until SIGINT/SIGTERM (or `duration` seconds), so that shutdown is always clean."""
    with stop_signals() as stop:
        try:
            await asyncio.wait_for(stop.wait(), timeout=duration)
        except asyncio.TimeoutError:
            pass
