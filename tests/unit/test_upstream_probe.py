"""The proxy's upstream probe stops when the agent stops, whatever the probe was doing then.

A proxy that did not exit within 20 s of SIGTERM (tests/integration/test_newcomer.py, once in a
full run) was waiting on this probe: its close cancelled the probe's task while the connect to a
dead upstream had just been refused, `asyncio.wait_for` (Python < 3.12) returned the connect's
outcome instead of the cancellation, and the probe went back to sleeping and probing forever.
"""

from __future__ import annotations

import asyncio

import pytest

from llmwatch.collectors.receivers.proxy import upstream_probe
from llmwatch.collectors.receivers.proxy.upstream_probe import UpstreamProbe


async def _done_within(awaitable: asyncio.Future | asyncio.Task, deadline_s: float) -> bool:
    done, _ = await asyncio.wait({awaitable}, timeout=deadline_s)
    return bool(done)


async def test_close_ends_the_probe_when_the_connect_fails_as_it_is_cancelled(monkeypatch: pytest.MonkeyPatch):
    loop = asyncio.get_running_loop()
    connect: asyncio.Future = loop.create_future()
    attempts: list[tuple[str, int]] = []

    def open_connection(host: str, port: int) -> asyncio.Future:
        attempts.append((host, port))
        return connect

    monkeypatch.setattr(upstream_probe.asyncio, "open_connection", open_connection)
    # An interval of an hour: a probe that goes back to its loop is plainly still running.
    probe = UpstreamProbe("http://127.0.0.1:9", interval_s=3600.0, timeout_s=3600.0)
    probe.start()
    while not attempts:  # the probe is now waiting on its first connect
        await asyncio.sleep(0)

    # The refusal and the stop in the same turn of the loop, as with a dead upstream and an early SIGTERM.
    connect.set_exception(ConnectionRefusedError(111, "Connection refused"))
    closing = asyncio.ensure_future(probe.close())

    assert await _done_within(closing, 10.0), "close() still waiting on the probe's task"
    assert probe._task is None
    assert attempts == [("127.0.0.1", 9)]


async def test_close_ends_the_probe_while_it_waits_for_its_next_round(monkeypatch: pytest.MonkeyPatch):
    loop = asyncio.get_running_loop()
    rounds: list[asyncio.Future] = []

    def open_connection(host: str, port: int) -> asyncio.Future:
        refused: asyncio.Future = loop.create_future()
        refused.set_exception(ConnectionRefusedError(111, "Connection refused"))
        rounds.append(refused)
        return refused

    monkeypatch.setattr(upstream_probe.asyncio, "open_connection", open_connection)
    probe = UpstreamProbe("http://127.0.0.1:9", interval_s=3600.0, timeout_s=3600.0)
    probe.start()
    while probe.reachable is None:
        await asyncio.sleep(0)

    assert await _done_within(asyncio.ensure_future(probe.close()), 10.0)
    assert probe.reachable is False
    assert len(rounds) == 1
