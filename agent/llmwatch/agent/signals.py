"""Waiting for SIGINT/SIGTERM, so that every long-running command shuts down cleanly."""

from __future__ import annotations

import asyncio
import signal


async def wait_for_signal(duration: float | None = None) -> None:
    """Sleep until SIGINT/SIGTERM (or `duration` seconds), so that shutdown is always clean."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await asyncio.wait_for(stop.wait(), timeout=duration)
    except asyncio.TimeoutError:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                pass
