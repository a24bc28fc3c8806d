"""The agent's stop waits for the scorer's last scores (up to `scoring.shutdown_timeout_s`) in a
thread, not on the event loop: what still runs on the loop at that point of the stop (the drift
webhook told of the scorer's last readings, the judge, the version sentinel's actions; in process,
whatever else shares the loop) goes on during the wait instead of freezing for its length.

The order of the stop is unchanged (llmwatch.agent.runtime.Agent.stop): the receivers and the
metrics server stop first, so calls in flight have finished (or been cut, after
`proxy.shutdown_timeout_s`) before the drain begins.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import httpx2 as httpx
import orjson
from helpers.agents import proxy_url, wait_until
from helpers.loglines import LogLines

from llmwatch.agent.components import load_config
from llmwatch.agent.processes import scoring as scoring_module
from llmwatch.agent.runtime import Agent


def records(directory: Path) -> list[dict]:
    return [orjson.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_bytes().splitlines()]


async def test_the_event_loop_keeps_running_while_the_stop_waits_for_the_scorer(sim, tmp_path: Path, monkeypatch):
    overrides = {
        "upstream": sim.url,
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "data_dir": str(tmp_path / "data"),
        "sampling": {"rate": 1.0},
        # The wait's bound: long, so that only the scorer's answer ends it here.
        "scoring": {"enabled": True, "embeddings": False, "shutdown_timeout_s": 120},
    }
    agent = Agent(load_config(None, overrides=overrides, environ={}))
    await agent.start()
    stopping: asyncio.Task | None = None
    scorer = agent.scorer
    assert scorer is not None
    try:
        await wait_until(lambda: scorer.ready.is_set(), timeout=60)
        pid = scorer.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # a scorer behind: it holds what it was given
        try:
            n = 3
            async with httpx.AsyncClient(timeout=30) as client:
                for i in range(n):
                    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": i}
                    r = await client.post(proxy_url(agent) + "/v1/chat/completions", json=body)
                    assert r.status_code == 200
                await wait_until(lambda: scorer.pending == n)
                logs = LogLines()  # not capture_logs: see helpers/loglines.py
                monkeypatch.setattr(scoring_module, "log", logs)
                stopping = asyncio.create_task(agent.stop())
                await wait_until(lambda: "scorer_draining" in logs.events, timeout=60)
                # This coroutine runs while the stop waits on the scorer, and so does the
                # simulator on this loop: it answers a call.
                assert "scorer_stopping" not in logs.events, "the wait is still under way"
                assert not stopping.done()
                r = await client.post(sim.url + "/v1/chat/completions", json=body)
                assert r.status_code == 200
                assert scorer.pending == n, "and still waiting for the scorer"
        finally:
            with contextlib.suppress(ProcessLookupError):  # gone: the stop ended and reaped it
                os.kill(pid, signal.SIGCONT)
        await asyncio.wait_for(stopping, 60)  # the scorer answers: the wait ends, the stop goes on
    finally:
        if stopping is None:
            await agent.stop()
    assert not agent.pipeline.alive
    scores = records(tmp_path / "data" / "scores")
    assert scores and {s["sample_id"] for s in scores} == {s["id"] for s in records(tmp_path / "data" / "samples")}
    assert "error" not in {s["result"] for s in scores}, "the held samples were scored, not given up"
