"""The demo's waits for the scorer: on while it makes progress, bounded, and they say why they ended.

On a loaded machine the embedding scorer falls behind the demo's traffic; a fixed wait gave up
while it was still scoring and the run exited 2. The rule (`wait_while_progressing`) is checked
here on a clock the test moves: each poll's sleep advances it, nothing really waits.
"""

from __future__ import annotations

import asyncio
from typing import Callable

import pytest

from llmwatch.agent.apps.demo import wait_while_progressing


class Clock:
    """A clock that only the waiting function's sleeps move; `on_tick` lets the test act at each poll."""

    def __init__(self, on_tick: Callable[[float], None] = lambda now: None) -> None:
        self.now = 1000.0
        self.sleeps = 0
        self.on_tick = on_tick

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        self.on_tick(self.now)


async def wait(clock: Clock, done: Callable[[], bool], progress: Callable[[], object], **kw):
    kw.setdefault("stall_s", 45.0)
    kw.setdefault("cap_s", 300.0)
    return await wait_while_progressing(done, progress, clock=clock, sleep=clock.sleep, poll_s=1.0, **kw)


async def test_a_slow_scorer_that_keeps_scoring_is_waited_for_past_the_stall_time():
    # One sample scored every 30 s (slower than the stall time would allow if it were a fixed
    # deadline), 8 to go: 240 s, well past 45 s, and under the 300 s cap.
    left = [8]
    clock = Clock(lambda now: left.__setitem__(0, max(0, 8 - int((now - 1000.0) // 30))))
    waited = await wait(clock, lambda: left[0] == 0, lambda: left[0])
    assert waited.outcome == "done"
    assert waited.waited_s == 240.0


async def test_a_scorer_that_scores_nothing_is_given_up_on_after_the_stall_time():
    clock = Clock()
    waited = await wait(clock, lambda: False, lambda: 17)
    assert waited.outcome == "stalled"
    assert waited.waited_s == 45.0 and waited.idle_s == 45.0


async def test_a_scorer_that_stops_midway_is_given_up_on_the_stall_time_after_its_last_score():
    scored = [0]
    clock = Clock(lambda now: scored.__setitem__(0, min(int(now - 1000.0) // 10, 5)))  # 5 scores, last at 50 s
    waited = await wait(clock, lambda: False, lambda: scored[0])
    assert waited.outcome == "stalled"
    assert waited.waited_s == 50.0 + 45.0 and waited.idle_s == 45.0


async def test_progress_never_makes_a_wait_longer_than_its_cap():
    clock = Clock()
    waited = await wait(clock, lambda: False, lambda: clock.now)  # progress at every poll
    assert waited.outcome == "capped"
    assert waited.waited_s == 300.0


async def test_done_at_once_does_not_wait_and_ctrl_c_ends_a_wait_at_once():
    clock = Clock()
    waited = await wait(clock, lambda: True, lambda: 0)
    assert (waited.outcome, waited.waited_s, clock.sleeps) == ("done", 0.0, 0)

    stop = asyncio.Event()
    clock = Clock(lambda now: stop.set() if now >= 1003.0 else None)
    waited = await wait(clock, lambda: False, lambda: clock.now, stop=stop)
    assert (waited.outcome, waited.waited_s) == ("stopped", 3.0)


def test_demo_help_says_what_a_run_does_how_long_it_takes_and_what_its_exit_code_means(capsys):
    # A new user's first command: `llmwatch demo --help` listed the options and nothing of the run.
    from llmwatch.agent.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["demo", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for said in ("three phases", "version B", "About 2.5 minutes", "Exit 0 when", "2 when it could not be", "Ctrl-C"):
        assert said in text, f"{said!r} not in: {text}"
