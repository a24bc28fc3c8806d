"""Shared fixtures: a real simulator upstream, real agents on real sockets, real scrapes."""

from __future__ import annotations

import asyncio
import glob
import os
from pathlib import Path
from typing import Any, Callable

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmwatch.core.config import load_config
from llmwatch.agent.runtime import Agent
from llmwatch.agent.simulator import SimProfile, start_simulator

# The real Kafka broker (tansu) as a fixture for every test module that names it.
from kafka_broker import kafka_broker  # noqa: E402,F401

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
async def sim():
    # Small but non-zero delays: streams really are spread over time, tests stay fast.
    handle = await start_simulator("127.0.0.1", 0, SimProfile(latency_scale=0.02), seed=1)
    yield handle
    await handle.close()


@pytest.fixture
async def make_agent(tmp_path: Path):
    agents: list[Agent] = []

    async def factory(upstream: str, *, extra_sinks=(), **sections: Any) -> Agent:
        # Scoring (a child process with the embedding model) only where a test asks for it.
        sections.setdefault("scoring", {"enabled": False})
        overrides = {"upstream": upstream, "listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0", "data_dir": str(tmp_path / "data"), **sections}
        agent = Agent(load_config(None, overrides=overrides, environ={}), extra_sinks=extra_sinks)
        await agent.start()
        agents.append(agent)
        return agent

    yield factory
    for agent in agents:
        await agent.stop()


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
    return sum(v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == val for k, val in labels.items()))


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def read_samples(agent: Agent) -> list[dict]:
    lines = []
    for path in sorted(glob.glob(str(agent.cfg.data_dir / "samples" / "*.jsonl"))):
        with open(path, "rb") as fh:
            lines.extend(orjson.loads(line) for line in fh if line.strip())
    return lines


async def drained(agent: Agent, expected: int) -> list[dict]:
    await wait_until(lambda: agent.pipeline.processed >= expected)
    return read_samples(agent)
