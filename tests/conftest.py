"""Fixtures for every lane: a real simulator upstream, real agents on real sockets (helpers live in tests/helpers)."""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path
from typing import Any

import pytest
import structlog
from helpers.engines import setting

# The real Kafka broker (tansu) as a fixture for every test module that names it.
from helpers.kafka_broker import kafka_broker  # noqa: E402,F401
from hypothesis import settings

from llmwatch.agent.apps.simulator.server import SimProfile, start_simulator
from llmwatch.agent.components import load_config
from llmwatch.agent.runtime import Agent

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Generated inputs (hypothesis): `tests/run.sh`, and so CI, runs the `ci` profile: each property
# test draws the same examples every run (seeded by its name), so a run is red only for a change,
# never for a rare draw. A plain `pytest` keeps hypothesis's random exploration and its example
# database, which replays what failed before; a failure found that way becomes an `@example` beside
# its property (tests/unit/test_relay_chunks.py and tests/integration/test_bad_records.py have one).
settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _uncached_configure(*args: Any, **kwargs: Any) -> None:
    # Production caches each logger on first use (llmwatch.core.logs): cheap, and the configuration
    # of that moment is baked in. In one test process that is the configuration of whichever earlier
    # test first used the logger: after an in-process command configured `warning`, a module's info
    # lines were filtered for the rest of the run, and loggers cached under an older processor list
    # never reached `structlog.testing.capture_logs` at all, so a "never logs the secret" check
    # could pass on no lines. In tests every logger reads the configuration of the moment.
    kwargs["cache_logger_on_first_use"] = False
    _structlog_configure(*args, **kwargs)


_structlog_configure = structlog.configure
structlog.configure = _uncached_configure  # type: ignore[assignment]
_STRUCTLOG_AT_START = structlog.get_config()


@pytest.fixture(autouse=True)
def _logging_as_at_start():
    """Each test starts with structlog as the session found it (no level filter, the default
    processors): what one test's in-process command configured does not decide what the next
    test's log capture sees."""
    yield
    start = _STRUCTLOG_AT_START
    _structlog_configure(
        processors=list(start["processors"]),
        wrapper_class=start["wrapper_class"],
        context_class=start["context_class"],
        logger_factory=start["logger_factory"],
        cache_logger_on_first_use=False,
    )


@pytest.fixture(autouse=True)
def _signal_handlers_put_back(request: pytest.FixtureRequest):
    """Each test leaves SIGINT and SIGTERM as it found them; one that does not is named.

    An in-process test that runs code installing handlers (the agent's stop signals, a worker's)
    and leaves them changed would make the rest of the run ignore Ctrl-C, or die on SIGTERM
    without its teardown. The code puts back what it found (llmwatch.agent.signals); this is the
    net under it, for code that does not.
    """
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
            warnings.warn(
                f"{request.node.nodeid} left the {sig.name} handler changed; put back", RuntimeWarning, stacklevel=1
            )


@pytest.fixture
async def sim():
    # Small but non-zero delays: streams really are spread over time, tests stay fast.
    handle = await start_simulator("127.0.0.1", 0, SimProfile(latency_scale=0.02), seed=1)
    yield handle
    await handle.close()


@pytest.fixture
def proxy_engine() -> str:
    """The `proxy.engine` of the agents `make_agent` starts. A module whose tests must hold on both
    engines overrides it with `helpers.engines.both_engines` (design record 0067, step 4)."""
    return "python"


@pytest.fixture
async def make_agent(tmp_path: Path, proxy_engine: str):
    agents: list[Agent] = []

    async def factory(upstream: str, *, extra_sinks=(), **sections: Any) -> Agent:
        # Scoring (a child process with the embedding model) only where a test asks for it.
        sections.setdefault("scoring", {"enabled": False})
        engine, forward = setting(proxy_engine)  # the default `auto` would pick by what is built
        sections["proxy"] = {"engine": engine, **(sections.get("proxy") or {})}
        overrides = {
            "upstream": upstream,
            "listen": "127.0.0.1:0",
            "metrics_listen": "127.0.0.1:0",
            "data_dir": str(tmp_path / "data"),
            **sections,
        }
        agent = Agent(load_config(None, overrides=overrides, environ={}), extra_sinks=extra_sinks)
        # The relay reads DATAPLANE_FORWARD when it starts (design record 0067): set for that only.
        previous = os.environ.get("DATAPLANE_FORWARD")
        os.environ["DATAPLANE_FORWARD"] = "1" if forward else "0"
        try:
            await agent.start()
        finally:
            if previous is None:
                del os.environ["DATAPLANE_FORWARD"]
            else:
                os.environ["DATAPLANE_FORWARD"] = previous
        agents.append(agent)
        return agent

    yield factory
    for agent in agents:
        await agent.stop()
