"""Agents on loopback and what tests read of them: URLs, /metrics scraped and summed, samples on disk, bounded waits."""

from __future__ import annotations

import asyncio
import glob
import threading
import time
from typing import Any, Callable

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmwatch.agent.runtime import Agent


def proxy_url(agent: Agent) -> str:
    return f"http://127.0.0.1:{agent.proxy_port}"


async def scrape(agent: Agent) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics over HTTP and index every sample by (name, sorted labels)."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{agent.metrics_port}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(samples: dict, name: str, **labels: str) -> float:
    """Sum of every series of `name` whose labels include `labels`."""
    return sum(
        v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == val for k, val in labels.items())
    )


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def wait_progressing(
    predicate: Callable[[], bool],
    progress: Callable[[], object],
    *,
    stall: float = 60.0,
    cap: float = 240.0,
    what: str = "condition",
) -> None:
    """Wait for `predicate` for as long as `progress()` keeps changing (a loaded machine is slow,
    not stuck): fail after `stall` seconds without a change, or `cap` seconds in all."""
    loop = asyncio.get_running_loop()
    start = last_change = loop.time()
    seen = progress()
    while not predicate():
        now = loop.time()
        current = progress()
        if current != seen:
            seen, last_change = current, now
        if now - last_change > stall:
            raise AssertionError(f"{what}: no progress for {stall:.0f} s (last seen {seen!r})")
        if now - start > cap:
            raise AssertionError(f"{what}: not met in {cap:.0f} s (progress {seen!r})")
        await asyncio.sleep(0.05)


def settled(agent: Agent) -> bool:
    """Nothing in flight: no call waiting in the proxy, no sample queued or being scored."""
    return agent.proxy.waiting == 0 and agent.scorer.pending == 0 and agent.queue.depth() == 0


def calls_observed(agent: Agent) -> float:
    """Proxied calls the agent has finished with: the proxy records the duration, then (in the
    same synchronous step) hands the call to sampling and the OTel exporter, so once this counts a
    call its sample is admitted and its span has ended."""
    return sum(
        s.value
        for family in agent.metrics.registry.collect()
        if family.name == "gen_ai_client_operation_duration_seconds"
        for s in family.samples
        if s.name.endswith("_count")
    )


def recorded_servers(monkeypatch: pytest.MonkeyPatch, module: Any) -> list:
    """Keep every metrics server `module` (kafka_scorer, kafka_aggregate) starts through
    `serve_in_thread`, so an in-thread worker configured with port 0 can tell the port it bound
    (the command logs it as metrics_port; in-process, the server object carries it)."""
    servers: list = []
    original = module.serve_in_thread

    def recording(*args: Any, **kwargs: Any):
        server = original(*args, **kwargs)
        servers.append(server)
        return server

    monkeypatch.setattr(module, "serve_in_thread", recording)
    return servers


def bound_port(servers: list, thread: threading.Thread, timeout: float = 30.0) -> int:
    """The port of the first server in `servers`, once the worker running in `thread` has bound it."""
    deadline = time.monotonic() + timeout
    while not servers:
        assert thread.is_alive() and time.monotonic() < deadline, "the worker never started its metrics server"
        time.sleep(0.01)  # poll interval of a bounded wait: the worker binds before it looks for a broker
    return servers[0].port


def read_samples(agent: Agent) -> list[dict]:
    lines = []
    for path in sorted(glob.glob(str(agent.cfg.data_dir / "samples" / "*.jsonl"))):
        with open(path, "rb") as fh:
            lines.extend(orjson.loads(line) for line in fh if line.strip())
    return lines


async def drained(agent: Agent, expected: int) -> list[dict]:
    await wait_until(lambda: agent.pipeline.processed >= expected)
    return read_samples(agent)
