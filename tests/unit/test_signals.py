"""SIGINT/SIGTERM handling of the long-running commands: after the agent stops, the process's
signal handlers are the ones it had before it started.

The event loop's own `remove_signal_handler` puts back the defaults (SIG_DFL for SIGTERM,
`default_int_handler` for SIGINT), and uvloop puts back nothing once its loop has stopped: code
that runs an agent in a process that had handlers of its own (pytest's in-process tests, an
embedding application, `asyncio.run`'s Ctrl-C handler) lost them.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from helpers.ports import dead_address

from llmwatch.agent.signals import stop_signals, wait_for_signal

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture
def own_handlers() -> Iterator[dict[signal.Signals, Any]]:
    """Handlers of this test's own on SIGINT and SIGTERM (so a stray signal never ends pytest), put back after."""
    got: list[signal.Signals] = []

    def mine_int(signum: int, frame: Any) -> None:
        got.append(signal.Signals(signum))

    def mine_term(signum: int, frame: Any) -> None:
        got.append(signal.Signals(signum))

    mine = {signal.SIGINT: mine_int, signal.SIGTERM: mine_term}
    before = {sig: signal.signal(sig, handler) for sig, handler in mine.items()}
    try:
        yield mine
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert got == [], f"a signal reached the test's own handlers: {got}"


def _config(tmp_path: Path) -> Any:
    from llmwatch.agent.components import load_config

    return load_config(
        None,
        overrides={
            "upstream": f"http://{dead_address()}",
            "listen": "127.0.0.1:0",
            "metrics_listen": "127.0.0.1:0",
            "data_dir": str(tmp_path / "data"),
            "scoring": {"enabled": False},
        },
        environ={},
    )


async def _until(predicate, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)  # poll interval of a bounded wait


async def test_the_agent_puts_back_the_signal_handlers_it_found_after_its_stop(tmp_path: Path, own_handlers):
    from llmwatch.agent.cli.main import _serve_until_signal
    from llmwatch.agent.runtime import Agent

    cfg = _config(tmp_path)
    agents: list[Agent] = []

    def make() -> Agent:
        agents.append(Agent(cfg))
        return agents[-1]

    serving = asyncio.create_task(_serve_until_signal(make))
    # Serving: the agent has started and SIGTERM is the loop's (the test's own handler is not called).
    await _until(
        lambda: (
            bool(agents)
            and agents[0].proxy_port > 0
            and signal.getsignal(signal.SIGTERM) is not own_handlers[signal.SIGTERM]
        )
    )
    signal.raise_signal(signal.SIGTERM)
    assert await asyncio.wait_for(serving, 30) == 0
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


async def test_a_sigterm_during_start_up_stops_the_agent_cleanly_once_started(tmp_path: Path, own_handlers):
    # Before, the handlers came after start-up: a SIGTERM during it was the default action (the
    # process killed without its stop) in a real process; here it would reach the test's handler
    # and the agent would serve on.
    from llmwatch.agent.cli.main import _serve_until_signal
    from llmwatch.agent.runtime import Agent

    class SignalledWhileStarting(Agent):
        async def start(self) -> None:
            signal.raise_signal(signal.SIGTERM)
            await super().start()

    agents: list[Agent] = []

    def make() -> Agent:
        agents.append(SignalledWhileStarting(_config(tmp_path)))
        return agents[-1]

    assert await asyncio.wait_for(_serve_until_signal(make), 30) == 0
    agent = agents[0]
    assert agent.proxy_port > 0, "the start was completed before the stop"
    assert not agent.pipeline.alive, "agent.stop() ran"
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


async def test_a_wait_that_ends_on_its_duration_puts_back_the_handlers(own_handlers):
    await wait_for_signal(0.01)
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


async def test_a_signal_sets_the_stop_event_only_while_inside(own_handlers):
    with stop_signals() as stop:
        assert not stop.is_set()
        signal.raise_signal(signal.SIGINT)
        await _until(stop.is_set)
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


def test_under_uvloop_too(own_handlers):
    uvloop = pytest.importorskip("uvloop")

    async def main() -> bool:
        with stop_signals() as stop:
            signal.raise_signal(signal.SIGTERM)
            await _until(stop.is_set)
        return stop.is_set()

    assert uvloop.run(main()) is True
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


async def test_a_second_sigterm_during_the_stop_does_not_cut_the_stop_short(tmp_path: Path, own_handlers):
    # A supervisor that signals the process and then its group, or a wrapper that forwards a
    # SIGTERM after a Ctrl-C, sends a second signal while the stop drains the queue. With the
    # handlers put back when the wait ended, that SIGTERM was the process's previous action: in
    # `llmwatch proxy` the default one, which killed it midway through its stop (exit 143, the
    # samples held unwritten); here it would reach the test's own handler and fail the test.
    from llmwatch.agent.cli.main import _serve_until_signal
    from llmwatch.agent.runtime import Agent

    during_stop: dict[signal.Signals, Any] = {}

    class SignalledWhileStopping(Agent):
        async def stop(self) -> None:
            during_stop.update({sig: signal.getsignal(sig) for sig in SIGNALS})
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(0)  # the loop takes the signal while the stop is under way
            await super().stop()

    agents: list[Agent] = []

    def make() -> Agent:
        agents.append(SignalledWhileStopping(_config(tmp_path)))
        return agents[-1]

    serving = asyncio.create_task(_serve_until_signal(make))
    await _until(lambda: bool(agents) and agents[0].proxy_port > 0)
    signal.raise_signal(signal.SIGTERM)
    assert await asyncio.wait_for(serving, 30) == 0
    assert not agents[0].pipeline.alive, "the stop ran to its end"
    # Both stay the loop's until the stop is done: SIGTERM to be logged, Ctrl-C to cancel the
    # stop (a second one gives up a stop that takes too long).
    assert during_stop[signal.SIGINT] is not own_handlers[signal.SIGINT]
    assert during_stop[signal.SIGTERM] is not own_handlers[signal.SIGTERM]
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


async def test_an_install_that_fails_midway_puts_back_what_it_installed(own_handlers, monkeypatch):
    # SIGINT installed, then the loop refuses SIGTERM with an error other than "not here": the
    # caller never gets in, and SIGINT must not stay the loop's (Ctrl-C setting an event nobody waits on).
    loop = asyncio.get_running_loop()
    install = loop.add_signal_handler

    def add_signal_handler(sig: int, callback: Any, *args: Any) -> None:
        if sig == signal.SIGTERM:
            raise OSError(9, "Bad file descriptor")
        install(sig, callback, *args)

    monkeypatch.setattr(loop, "add_signal_handler", add_signal_handler)
    with pytest.raises(OSError):
        with stop_signals():
            pytest.fail("not reached: the install failed")
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


async def test_a_second_sigterm_during_a_cleanup_is_logged_and_the_cleanup_runs_to_its_end(own_handlers, monkeypatch):
    # The one stop of every long-running command (ui, review serve, simulate, demo, proxy): the
    # first signal ends `main`, a second SIGTERM while the cleanup runs is said and taken by the
    # loop, not the process's previous action (the default one killed it midway).
    from helpers.loglines import LogLines

    from llmwatch.agent import signals as signals_module
    from llmwatch.agent.signals import run_until_stopped, until

    steps: list[str] = []
    go_on = asyncio.Event()

    async def cleanup() -> None:
        steps.append("cleanup started")
        signal.raise_signal(signal.SIGTERM)  # the second signal, while the cleanup waits
        await go_on.wait()  # set by the test once the loop has taken the second signal
        steps.append("cleanup done")

    async def main(stop: asyncio.Event) -> str:
        signal.raise_signal(signal.SIGTERM)  # the first signal
        await until(stop)
        return "served"

    logs = LogLines()  # not capture_logs: see helpers/loglines.py
    monkeypatch.setattr(signals_module, "log", logs)
    serving = asyncio.create_task(run_until_stopped(main, cleanup))
    await _until(lambda: "stop_signal_again" in logs.events)
    go_on.set()
    assert await asyncio.wait_for(serving, 30) == "served"
    assert steps == ["cleanup started", "cleanup done"]
    assert [e["signal"] for e in logs.lines if e["event"] == "stop_signal_again"] == ["SIGTERM"]
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


async def test_a_second_ctrl_c_during_a_cleanup_gives_it_up_at_once(own_handlers):
    # The cleanup is cancelled where it waits, then KeyboardInterrupt, which `llmwatch` turns
    # into exit 130 without a traceback.
    from llmwatch.agent.signals import run_until_stopped, until

    steps: list[str] = []

    async def cleanup() -> None:
        steps.append("cleanup started")
        signal.raise_signal(signal.SIGINT)
        try:
            await asyncio.Event().wait()  # a wait that never ends by itself
        except asyncio.CancelledError:
            steps.append("cancelled where it waited")
            raise
        steps.append("not reached")

    async def main(stop: asyncio.Event) -> None:
        signal.raise_signal(signal.SIGINT)
        await until(stop)

    with pytest.raises(KeyboardInterrupt):
        await run_until_stopped(main, cleanup)
    assert steps == ["cleanup started", "cancelled where it waited"]
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


async def test_a_failing_main_is_cleaned_up_too(own_handlers):
    from llmwatch.agent.signals import run_until_stopped

    cleaned: list[bool] = []

    async def main(stop: asyncio.Event) -> None:
        raise OSError(98, "Address already in use")

    async def cleanup() -> None:
        cleaned.append(True)

    with pytest.raises(OSError):
        await run_until_stopped(main, cleanup)
    assert cleaned == [True]
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == own_handlers


def test_the_cli_puts_back_the_sigterm_handler_it_found(tmp_path: Path) -> None:
    """An offline command takes SIGTERM to unwind (its temporary files removed) only while it runs,
    and only over the default action: an embedding application's own handler is left in place."""
    from llmwatch.agent.cli.main import main

    missing = str(tmp_path / "missing.jsonl")
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert main(["score", "--in", missing, "--out", str(tmp_path / "s.jsonl")]) == 2
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    def mine(signum: int, frame: Any) -> None:
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        assert main(["score", "--in", missing, "--out", str(tmp_path / "s.jsonl")]) == 2
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_sigterm_after_a_long_running_command_stopped_on_one_ends_nothing_half_way(tmp_path: Path) -> None:
    """`timeout` signals a process and then its group: the second SIGTERM reached `llmwatch ui` after
    its stop had put the CLI's handler back, raised inside asyncio's shutdown, and its executor's
    thread printed "RuntimeError: Event loop is closed". Once a long-running command has taken a
    stop signal, a later SIGTERM is ignored; an offline command's first SIGTERM still unwinds it."""
    from llmwatch.agent.cli.main import Terminated, _sigterm_unwinds

    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    async def serve_until_signalled() -> None:
        with stop_signals() as stop:
            signal.raise_signal(signal.SIGTERM)  # the first signal: the command's own stop
            await asyncio.wait_for(stop.wait(), 10)

    with _sigterm_unwinds():
        asyncio.run(serve_until_signalled())
        try:
            signal.raise_signal(signal.SIGTERM)  # the group's signal, while the process shuts down
        except Terminated:
            pytest.fail("a SIGTERM after the command's own stop raised Terminated into its shutdown")
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    # A command that took no stop signal (an offline one) still unwinds on its first SIGTERM.
    with pytest.raises(Terminated):
        with _sigterm_unwinds():
            signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
