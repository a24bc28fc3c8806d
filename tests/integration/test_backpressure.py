"""The hot path never waits on what comes after it: a full queue drops and counts, traffic flows."""

from __future__ import annotations

import asyncio
import threading

from helpers.agents import metric, proxy_url, read_samples, scrape, wait_until
from helpers.chat import CHAT, client


class BlockedSink:
    """A sink stuck as a slow disk or a dead scorer would be, until released."""

    name = "blocked"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.written = 0

    def write(self, samples) -> None:
        self.release.wait(timeout=30)
        self.written += len(samples)

    def close(self) -> None:
        self.release.set()


class BrokenSink:
    name = "broken"

    def write(self, samples) -> None:
        raise OSError("disk full")

    def close(self) -> None:
        pass


async def test_burst_overflowing_the_queue_still_succeeds_and_drops_equal_losses(sim, make_agent):
    sink = BlockedSink()
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, queue={"max_size": 5}, extra_sinks=[sink])
    c = client(proxy_url(agent))
    n = 60
    results = await asyncio.gather(*[c.chat.completions.create(**{**CHAT, "seed": i}) for i in range(n)])
    assert all(r.choices[0].message.content for r in results), "every request succeeded while the sink was stuck"
    samples = await scrape(agent)
    dropped = metric(samples, "llmwatch_samples_dropped_total", reason="queue_full")
    assert metric(samples, "llmwatch_samples_total") == n
    assert dropped > 0
    sink.release.set()
    await wait_until(lambda: agent.proxy.waiting == 0 and agent.queue.depth() == 0 and sink.written == n - dropped)
    await asyncio.sleep(0.3)  # nothing more arrives later
    assert sink.written == n - dropped
    assert len(read_samples(agent)) == n - dropped, "the file sink got exactly what was not dropped"


async def test_a_failing_sink_loses_only_its_own_batch_and_is_counted(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, extra_sinks=[BrokenSink()])
    c = client(proxy_url(agent))
    for i in range(5):
        await c.chat.completions.create(**{**CHAT, "seed": i})
    await wait_until(lambda: agent.pipeline.processed >= 5)
    samples = await scrape(agent)
    assert metric(samples, "llmwatch_samples_dropped_total", reason="sink_error") == 5
    assert metric(samples, "llmwatch_samples_written_total", sink="files") == 5
    assert len(read_samples(agent)) == 5
