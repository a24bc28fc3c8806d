"""A finished call's bookkeeping runs in batches: in order, bounded in size, never later than the linger."""

from __future__ import annotations

import asyncio
from typing import Any

from llmwatch.collectors.calls import CallEvents
from llmwatch.collectors.receivers.proxy.handler import Proxy


def proxy(batch: int, linger_s: float) -> tuple[Proxy, list[Any]]:
    # Only the batching state of a Proxy: `_finish` itself (metrics, sampling) is the relay
    # tests' business; here it records the order in which calls reach it.
    p = Proxy.__new__(Proxy)
    p._batch = batch if linger_s > 0 else 1
    p._linger = linger_s
    p._pending = []
    p._flush_timer = None
    done: list[Any] = []
    p._finish = done.append  # type: ignore[method-assign]
    p.relay = None
    p.finished = CallEvents()  # nobody follows each call
    return p, done


def test_calls_wait_for_their_batch_and_run_in_the_order_they_finished():
    async def run() -> list[Any]:
        p, done = proxy(batch=3, linger_s=60.0)
        p.finish("a")  # type: ignore[arg-type]
        p.finish("b")  # type: ignore[arg-type]
        assert done == []  # waiting: neither the size nor the linger is reached
        p.finish("c")  # type: ignore[arg-type]
        assert done == ["a", "b", "c"]  # a full batch runs at once, oldest first
        assert p._flush_timer is None  # and its timer is gone with it
        return done

    asyncio.run(run())


def test_a_batch_that_does_not_fill_runs_when_the_linger_is_over():
    async def run() -> None:
        p, done = proxy(batch=32, linger_s=0.01)
        p.finish("a")  # type: ignore[arg-type]
        assert done == []
        deadline = asyncio.get_running_loop().time() + 30.0
        while not done:
            assert asyncio.get_running_loop().time() < deadline, "the linger never flushed"
            await asyncio.sleep(0.01)
        assert done == ["a"]

    asyncio.run(run())


def test_closing_the_proxy_runs_what_waits_so_no_call_is_lost_at_shutdown():
    async def run() -> None:
        p, done = proxy(batch=32, linger_s=60.0)
        for name in "abc":
            p.finish(name)  # type: ignore[arg-type]
        await p.close()
        assert done == ["a", "b", "c"] and p._flush_timer is None

    asyncio.run(run())


def test_a_linger_of_zero_runs_each_call_at_once():
    p, done = proxy(batch=32, linger_s=0.0)
    p.finish("a")  # type: ignore[arg-type]
    assert done == ["a"]


def test_outside_an_event_loop_a_call_is_not_left_waiting():
    p, done = proxy(batch=32, linger_s=60.0)
    p.finish("a")  # type: ignore[arg-type]
    assert done == ["a"]


def test_while_a_component_follows_each_call_calls_are_not_batched():
    # A shadow mirror over its candidate's concurrency is skipped, not queued: a batch of 32
    # reaching it at once would mirror 4 of them. Followers get each call as it finishes.
    async def run() -> None:
        p, done = proxy(batch=32, linger_s=60.0)
        p.finish("a")  # type: ignore[arg-type]
        assert done == []
        p.finished.subscribe(lambda call: None)  # e.g. the shadow's factory
        p.finish("b")  # type: ignore[arg-type]
        assert done == ["a", "b"]  # the waiting one first: order is kept

    asyncio.run(run())
