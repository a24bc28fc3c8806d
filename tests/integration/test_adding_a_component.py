"""Adding a component touches its own module and one registry line (docs/design/0040-component-model.md).

The worked example: an exporter that counts the samples it is handed, written as a maintainer
would write a new one. "Its module" is the block below (section, metrics, the sink, the factory);
"the registry line" is the one field of `WithCounting`, the stand-in here for the line a
maintainer adds to llmwatch.agent.components.Config. Nothing else of llmwatch changes, and the
component gets what every built-in one gets: its config key and environment variable, validation
with the usual errors, its metric family on the agent's /metrics, samples from the pipeline,
a start in its kind's turn and a stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Sequence

import pytest
from helpers.agents import metric, proxy_url, scrape, wait_until
from pydantic import Field

from llmwatch.agent.components import Config, factories, metric_groups
from llmwatch.agent.runtime import Agent
from llmwatch.collectors.calls import CallEvents, CallFinished
from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.config import ConfigError, Section, load_model
from llmwatch.core.metrics import MetricGroup, counter
from llmwatch.core.records import Sample

# --- the component's module ---------------------------------------------------------------------


class CountingSection(Section):
    enabled: bool = False
    label: str = Field("counted", min_length=1)


class CountingMetrics(MetricGroup):
    samples = counter("llmwatch_example_samples", "Samples the example exporter was handed.")


class CountingSink:
    name = "example"
    raw = False  # it gets redacted copies, like every sink that stores or ships

    def __init__(self, metrics: CountingMetrics, events: list[str]) -> None:
        self.metrics = metrics
        self.events = events
        self.samples: list[Sample] = []

    def write(self, samples: Sequence[Sample]) -> None:
        self.samples.extend(samples)
        self.metrics.samples.inc(len(samples))

    def close(self) -> None:
        self.events.append("sink closed")


class CountingExporter:
    def __init__(self, sink: CountingSink, ctx: Context) -> None:
        self.sink = sink
        self._ctx = ctx

    async def start(self) -> None:
        # Exporters start before receivers: no call can reach the pipeline before this runs.
        proxy = self._ctx.find(_proxy_component_type())
        self.sink.events.append(f"exporter started, proxy listening: {bool(proxy and proxy.port)}")

    async def stop(self) -> None:
        self.sink.events.append("exporter stopped")


EVENTS: list[str] = []


def _create(ctx: Context, section: CountingSection) -> Component | None:
    if not section.enabled:
        return None
    sink = CountingSink(ctx.metrics.group(CountingMetrics), EVENTS)
    ctx.add_sink(sink)
    return CountingExporter(sink, ctx)


COUNTING = Factory("counting", "exporter", CountingSection, _create, metrics=(CountingMetrics,))


def _proxy_component_type() -> type:
    from llmwatch.collectors.receivers.proxy.factory import ProxyComponent

    return ProxyComponent


# --- the registry line ------------------------------------------------------------------------------


class WithCounting(Config):
    counting: Annotated[CountingSection, COUNTING] = Field(default_factory=CountingSection)


# --- what the two give ------------------------------------------------------------------------------


def overrides(upstream: str, tmp_path: Path) -> dict:
    return {
        "upstream": upstream,
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "data_dir": str(tmp_path / "data"),
        "scoring": {"enabled": False},
        "sampling": {"rate": 1.0},
    }


def test_the_new_section_is_read_from_the_file_format_and_the_environment_like_any_other(tmp_path):
    cfg = load_model(
        WithCounting,
        overrides=overrides("http://127.0.0.1:9", tmp_path),
        environ={"LLMWATCH_COUNTING__ENABLED": "true", "LLMWATCH_COUNTING__LABEL": "mine"},
    )
    assert cfg.counting == CountingSection(enabled=True, label="mine")
    with pytest.raises(ConfigError) as err:
        load_model(WithCounting, overrides={"counting": {"enabeld": True}}, environ={})
    assert "counting.enabeld" in str(err.value)
    assert "enabled" in str(err.value)  # the allowed keys are listed, as for the built-in sections


def test_the_registry_line_is_what_lists_its_factory_and_its_metrics():
    assert COUNTING in factories(WithCounting) and COUNTING not in factories()
    assert CountingMetrics in metric_groups(WithCounting) and CountingMetrics not in metric_groups()


async def test_the_new_exporter_gets_samples_metrics_and_its_turn_to_start_and_stop(sim, tmp_path):
    import aiohttp

    EVENTS.clear()
    cfg = load_model(
        WithCounting, overrides={**overrides(sim.url, tmp_path), "counting": {"enabled": True}}, environ={}
    )
    agent = Agent(cfg)
    await agent.start()
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(3):
                body = {"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": f"hello {i}"}]}
                async with session.post(f"{proxy_url(agent)}/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200
        exporter = agent.components["counting"]
        assert isinstance(exporter, CountingExporter)
        await wait_until(lambda: len(exporter.sink.samples) == 3)
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_example_samples_total") == 3
    finally:
        await agent.stop()
    assert EVENTS == ["exporter started, proxy listening: False", "exporter stopped", "sink closed"]


async def test_the_new_family_is_listed_while_its_component_is_off(sim, tmp_path):
    agent = Agent(load_model(WithCounting, overrides=overrides(sim.url, tmp_path), environ={}))
    await agent.start()
    try:
        assert "counting" not in agent.components
        assert metric(await scrape(agent), "llmwatch_example_samples_total") == 0
        assert ("llmwatch_example_samples_total", ()) in await scrape(agent)
    finally:
        await agent.stop()


# --- a component that follows calls: it subscribes to the proxy's "call finished" event ----------


class TalliesSection(Section):
    enabled: bool = False


class CallTally:
    """Counts every proxied call by status, sampled or not; its second subscriber always fails."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.sampled: list[str | None] = []

    def on_call(self, call: CallFinished) -> None:
        self.statuses.append(call.facts.status)
        self.sampled.append(call.sampled)

    def broken(self, call: CallFinished) -> None:
        raise RuntimeError("a subscriber with a bug")

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _create_tally(ctx: Context, section: TalliesSection) -> Component | None:
    if not section.enabled:
        return None
    tally = CallTally()
    events = ctx.get(CallEvents)
    events.subscribe(tally.broken)  # first, so the test shows the others are still told
    events.subscribe(tally.on_call)
    return tally


TALLY = Factory("tally", "exporter", TalliesSection, _create_tally)


class WithTally(Config):
    tally: Annotated[TalliesSection, TALLY] = Field(default_factory=TalliesSection)


async def test_a_component_that_follows_calls_is_told_of_every_call_and_a_failing_subscriber_costs_no_call(
    sim, tmp_path
):
    import aiohttp

    cfg = load_model(
        WithTally,
        overrides={**overrides(sim.url, tmp_path), "sampling": {"rate": 0.0}, "tally": {"enabled": True}},
        environ={},
    )
    agent = Agent(cfg)
    await agent.start()
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(4):
                body = {"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": f"hi {i}"}]}
                async with session.post(f"{proxy_url(agent)}/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200
                    await resp.read()
        tally = agent.components["tally"]
        assert isinstance(tally, CallTally)
        await wait_until(lambda: len(tally.statuses) == 4)
        assert tally.statuses == [200] * 4
        assert tally.sampled == [None] * 4  # told of calls that sampling skipped too
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_internal_errors_total", stage="call_finished") == 4
    finally:
        await agent.stop()
