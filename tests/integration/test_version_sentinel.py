"""The served-version sentinel: a silent change of the version behind a model is seen within one
call, exported, alerted on, opens a new drift window, and triggers the configured webhook and
command (issue 14)."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import orjson
import yaml
from aiohttp import web
from helpers.agents import metric, proxy_url, scrape, wait_until
from helpers.procs import Proc, agent_env, agent_started
from helpers.upstreams import serve

from llmwatch.agent.apps.simulator.server import SimProfile, start_simulator
from llmwatch.collectors.sentinel import SentinelMetrics, VersionSentinel, describe
from llmwatch.core.metrics import Metrics
from llmwatch.core.records import Sample
from llmwatch.scorers.drift.aggregate import WindowAggregator
from llmwatch.scorers.drift.config import DriftSection

INFO = "llmwatch_model_version_info"
CHANGES = "llmwatch_model_version_changes_total"
LAST_CHANGE = "llmwatch_model_version_last_change_timestamp_seconds"


def info_series(metrics: Metrics) -> list[dict[str, str]]:
    return [s.labels for fam in metrics.registry.collect() if fam.name == INFO for s in fam.samples if s.value == 1]


def changes(metrics: Metrics, model: str) -> float:
    return metrics.group(SentinelMetrics).model_version_changes.labels(model)._value.get()


# --- the detector -----------------------------------------------------------------------------


def test_a_change_of_any_watched_part_is_one_change_with_old_and_new():
    m = Metrics()
    seen = []
    s = VersionSentinel(m, on_change=seen.append)
    assert s.observe("gpt-4o", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13", "fp_a") is None  # first sight: no change
    assert info_series(m) == [
        {
            "gen_ai_request_model": "gpt-4o",
            "model_version": "gpt-4o-2024-05-13",
            "response_model": "gpt-4o-2024-05-13",
            "system_fingerprint": "fp_a",
        }
    ]
    for _ in range(3):
        assert s.observe("gpt-4o", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13", "fp_a") is None
    # Only the fingerprint moves: that is a change too.
    change = s.observe("gpt-4o", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13", "fp_b")
    assert change is not None and seen == [change]
    assert (change.model, change.old_text, change.new_text) == (
        "gpt-4o",
        "gpt-4o-2024-05-13 (fp_a)",
        "gpt-4o-2024-05-13 (fp_b)",
    )
    # The info gauge holds the current version only: the old series is gone, not left at 0.
    assert [i["system_fingerprint"] for i in info_series(m)] == ["fp_b"]
    assert changes(m, "gpt-4o") == 1
    assert (
        m.group(SentinelMetrics)
        .model_version_last_change.labels("gpt-4o", "gpt-4o-2024-05-13 (fp_a)", "gpt-4o-2024-05-13 (fp_b)")
        ._value.get()
        > 0
    )
    body = change.payload()
    assert (
        body["old"] == "gpt-4o-2024-05-13 (fp_a)"
        and body["new"] == "gpt-4o-2024-05-13 (fp_b)"
        and body["model"] == "gpt-4o"
    )
    assert datetime.fromisoformat(body["at"].replace("Z", "+00:00")) <= datetime.now(timezone.utc)
    # Another snapshot behind the alias: a second change; only the last change's series remains.
    change = s.observe("gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-2024-08-06", "fp_b")
    assert (
        change is not None
        and change.old_text == "gpt-4o-2024-05-13 (fp_b)"
        and change.new_text == "gpt-4o-2024-08-06 (fp_b)"
    )
    last = [s.labels for fam in m.registry.collect() if fam.name == LAST_CHANGE for s in fam.samples]
    assert last == [
        {
            "gen_ai_request_model": "gpt-4o",
            "from_version": "gpt-4o-2024-05-13 (fp_b)",
            "to_version": "gpt-4o-2024-08-06 (fp_b)",
        }
    ]
    assert changes(m, "gpt-4o") == 2


def test_a_call_that_does_not_tell_a_part_changes_nothing():
    m = Metrics()
    s = VersionSentinel(m)
    s.observe("gpt-4o", "v1", "gpt-4o-2024-05-13", "fp_a")
    # A Responses-API answer has no fingerprint: it is the same version, not a change to "none".
    assert s.observe("gpt-4o", "v1", "gpt-4o-2024-05-13", None) is None
    assert s.observe("gpt-4o", "v1", "gpt-4o-2024-05-13", "fp_a") is None
    assert changes(m, "gpt-4o") == 0


def test_models_are_watched_apart_and_unwatched_parts_are_ignored():
    m = Metrics()
    s = VersionSentinel(m, fields=["model_version", "response_model"])
    s.observe("gpt-4o", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13", "fp_a")
    s.observe("gpt-4o-mini", "gpt-4o-mini-2024-07-18", "gpt-4o-mini-2024-07-18", "fp_x")
    # Fingerprints rotating between backends of one snapshot, with system_fingerprint not watched.
    for fp in ("fp_b", "fp_c", "fp_a"):
        assert s.observe("gpt-4o", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13", fp) is None
    assert s.observe("gpt-4o-mini", "gpt-4o-mini-2025-01-01", "gpt-4o-mini-2025-01-01", "fp_x") is not None
    assert changes(m, "gpt-4o") == 0 and changes(m, "gpt-4o-mini") == 1
    assert sorted(i["gen_ai_request_model"] for i in info_series(m)) == ["gpt-4o", "gpt-4o-mini"]
    assert all(i["system_fingerprint"] == "" for i in info_series(m))


def test_label_values_stay_bounded_however_many_versions_appear():
    m = Metrics(max_models=2)
    # Flapping off (tests/integration/test_version_storms.py has it on): every new version is a change here.
    s = VersionSentinel(m, max_values=3, max_changes=1000)
    for i in range(50):
        s.observe("gpt-4o", "v", "gpt-4o", f"fp_{i}")
    # One info series and one last-change series per model, its labels from at most 3 fingerprints.
    assert len(info_series(m)) == 1 and info_series(m)[0]["system_fingerprint"] == "other"
    last = [x.labels for fam in m.registry.collect() if fam.name == LAST_CHANGE for x in fam.samples]
    assert last == [
        {"gen_ai_request_model": "gpt-4o", "from_version": "v (gpt-4o, other)", "to_version": "v (gpt-4o, other)"}
    ]
    assert changes(m, "gpt-4o") == 49  # every change is counted, whatever its label
    # Models past the model cap share the label `other` and are not watched: they would flap.
    for name in ("a", "b", "c", "d"):
        s.observe(name, "v1", name, "fp")
        s.observe(name, "v2", name, "fp")
    assert {i["gen_ai_request_model"] for i in info_series(m)} == {"gpt-4o", "a"}
    assert changes(m, "a") == 1 and changes(m, "other") == 0


# --- the drift window -------------------------------------------------------------------------


def _sample(i: int, version: str, response_model: str, fingerprint: str | None, status: int = 200) -> Sample:
    response = {"model": response_model, "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}
    if fingerprint:
        response["system_fingerprint"] = fingerprint
    return Sample(
        id=f"s{i}",
        timestamp=datetime.now(timezone.utc),
        model="gpt-4o",
        response_model=response_model,
        model_version=version,
        status=status,
        error_type=None if status < 400 else str(status),
        latency_ms=10.0,
        request={"model": "gpt-4o", "messages": []},
        response=response,
    )


def test_the_drift_window_starts_afresh_when_the_served_version_changes():
    stage = WindowAggregator(None, DriftSection(), None)
    stage.add([_sample(i, "prod", "gpt-4o-2024-05-13", "fp_a") for i in range(30)], [])
    stage.add(
        [_sample(100, "prod", "gpt-4o-2024-05-13", None), _sample(101, "prod", "x", None, status=500)], []
    )  # tells nothing new
    assert len(stage.windows.contents()[0]) == 32
    stage.add([_sample(200 + i, "prod", "gpt-4o-2024-05-13", "fp_b") for i in range(5)], [])
    samples, _ = stage.windows.contents()
    assert [s.id for s in samples] == [f"s{200 + i}" for i in range(5)], (
        "the old version's samples must leave the window"
    )
    assert stage.windows.restarts == 1


def test_one_version_label_over_several_models_is_not_a_version_change():
    # `model_version: A` often covers a chat model and an embedding model at once: their answers
    # name different models on every other call, which is not the version changing under them.
    stage = WindowAggregator(None, DriftSection(), None)
    mixed = []
    for i in range(40):
        s = _sample(i, "A", "sim-gpt-4o-mini" if i % 2 else "sim-text-embedding-3-small", "fp_a")
        mixed.append(s.model_copy(update={"model": s.response_model}))
    stage.add(mixed, [])
    assert len(stage.windows.contents()[0]) == 40 and stage.windows.restarts == 0
    # A change of one of those models still starts the window afresh.
    changed = _sample(100, "A", "sim-gpt-4o-mini", "fp_b")
    stage.add([changed.model_copy(update={"model": "sim-gpt-4o-mini"})], [])
    assert stage.windows.restarts == 1 and [s.id for s in stage.windows.contents()[0]] == ["s100"]


def test_the_drift_window_keeps_filling_when_the_sentinel_is_off_or_ignores_the_part():
    for watch in ({"enabled": False}, {"fields": ["model_version", "response_model"]}):
        stage = WindowAggregator(None, DriftSection(version_change=watch), None)
        stage.add([_sample(i, "prod", "gpt-4o", f"fp_{i % 2}") for i in range(20)], [])
        assert len(stage.windows.contents()[0]) == 20 and stage.windows.restarts == 0


# --- against real processes -------------------------------------------------------------------


async def _chat(session: aiohttp.ClientSession, base: str, *, stream: bool) -> None:
    body = {
        "model": "sim-gpt-4o",
        "messages": [{"role": "user", "content": "How do I roast a chicken?"}],
        "max_tokens": 16,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        await resp.read()


async def _scrape_url(session: aiohttp.ClientSession, url: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(url) as resp:
        text = await resp.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _current(samples: dict) -> list[dict]:
    return [dict(ls) for (n, ls), v in samples.items() if n == INFO and v == 1]


async def test_a_silent_version_switch_behind_the_proxy_flips_the_metric_and_triggers_webhook_and_command(
    tmp_path: Path,
):
    received: list[dict] = []
    got = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        received.append(orjson.loads(await request.read()))
        got.set()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner, hook_base = await serve(app)
    marker = tmp_path / "regress-ran.txt"
    # The command a user would point at `llmwatch regress`; here it writes what it was told.
    script = "import os, sys; open(sys.argv[1], 'w').write(os.environ['LLMWATCH_OLD_VERSION'] + '\\n' + os.environ['LLMWATCH_NEW_VERSION'] + '\\n' + os.environ['LLMWATCH_MODEL'])"
    old_profile = SimProfile(name="A", latency_scale=0.02, served_model="sim-gpt-4o-2024-05-13")
    new_profile = SimProfile(name="B", latency_scale=0.02, served_model="sim-gpt-4o-2024-08-06")
    sim = await start_simulator("127.0.0.1", 0, old_profile, seed=1)
    config = tmp_path / "llmwatch.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "upstream": sim.url,
                "listen": "127.0.0.1:0",
                "metrics_listen": "127.0.0.1:0",
                "data_dir": str(tmp_path / "data"),
                "sampling": {"rate": 0.0, "keep_errors": False, "slow_ms": None},
                "scoring": {"enabled": False},
                "drift": {
                    "version_change": {
                        "webhook": f"{hook_base}/hook",
                        "command": [sys.executable, "-c", script, str(marker)],
                        "command_timeout_s": 60,
                    }
                },
            }
        )
    )
    proxy = Proc([sys.executable, "-m", "llmwatch.agent.cli", "proxy", "--config", str(config)], env=agent_env())
    try:
        ports = agent_started(proxy)
        base, metrics_url = (
            f"http://127.0.0.1:{ports['proxy_port']}",
            f"http://127.0.0.1:{ports['metrics_port']}/metrics",
        )
        async with aiohttp.ClientSession() as session:
            for i in range(3):
                await _chat(session, base, stream=bool(i % 2))
            samples: dict = {}

            async def settled(expected_version: str) -> bool:
                nonlocal samples
                samples = await _scrape_url(session, metrics_url)
                return [c["model_version"] for c in _current(samples)] == [expected_version]

            deadline = asyncio.get_running_loop().time() + 20
            while not await settled("A"):
                assert asyncio.get_running_loop().time() < deadline, _current(samples)
                await asyncio.sleep(0.05)
            assert _current(samples)[0]["response_model"] == "sim-gpt-4o-2024-05-13"
            assert metric(samples, CHANGES) == 0

            # The provider swaps the snapshot behind the alias; one streamed call is enough to see it.
            sim.set_profile(new_profile)
            await _chat(session, base, stream=True)
            deadline = asyncio.get_running_loop().time() + 20
            while not await settled("B"):
                assert asyncio.get_running_loop().time() < deadline, _current(samples)
                await asyncio.sleep(0.05)
            current = _current(samples)[0]
            assert (
                current["gen_ai_request_model"] == "sim-gpt-4o" and current["response_model"] == "sim-gpt-4o-2024-08-06"
            )
            assert current["system_fingerprint"].startswith("fp_sim_")
            assert metric(samples, CHANGES, gen_ai_request_model="sim-gpt-4o") == 1
            [(name, labels)] = [k for k in samples if k[0] == LAST_CHANGE]
            labels = dict(labels)
            assert labels["from_version"].startswith("A (sim-gpt-4o-2024-05-13, fp_sim_") and labels[
                "to_version"
            ].startswith("B (sim-gpt-4o-2024-08-06, fp_sim_")

            await asyncio.wait_for(got.wait(), 30)
            [body] = received
            assert (body["model"], body["old"], body["new"]) == (
                "sim-gpt-4o",
                labels["from_version"],
                labels["to_version"],
            )
            assert (
                body["old_parts"]["response_model"] == "sim-gpt-4o-2024-05-13"
                and body["new_parts"]["model_version"] == "B"
            )

            done = proxy.wait_event("version_change_command_exited", 60)
            assert done["exit_code"] == 0
            assert marker.read_text().splitlines() == [labels["from_version"], labels["to_version"], "sim-gpt-4o"]
            assert proxy.wait_event("served_version_changed", 5)["new"] == labels["to_version"]
            samples = await _scrape_url(session, metrics_url)
            assert metric(samples, "llmwatch_model_version_change_actions_total", action="webhook", outcome="sent") == 1
            assert metric(samples, "llmwatch_model_version_change_actions_total", action="command", outcome="ok") == 1
    finally:
        proxy.stop()
        await sim.close()
        await runner.cleanup()


async def test_a_fingerprint_only_change_in_an_unsampled_stream_is_seen(make_agent):
    # Version pinned by config, same snapshot name: only the fingerprint tells, and the proxy reads
    # it on its metrics-only path (unsampled stream, no assembly).
    sim = await start_simulator(
        "127.0.0.1", 0, SimProfile(name="A", latency_scale=0.02, served_model="sim-snap"), seed=1
    )
    try:
        agent = await make_agent(
            sim.url,
            sampling={"rate": 0.0, "keep_errors": False, "slow_ms": None},
            model_version={"header": "x-not-sent", "default": "prod"},
        )
        async with aiohttp.ClientSession() as session:
            await _chat(session, proxy_url(agent), stream=True)
            await wait_until(lambda: len(info_series(agent.metrics)) == 1)
            first = info_series(agent.metrics)[0]
            sim.set_profile(SimProfile(name="A2", latency_scale=0.02, served_model="sim-snap"))
            await _chat(session, proxy_url(agent), stream=True)
            await wait_until(lambda: changes(agent.metrics, "sim-gpt-4o") == 1)
        [now] = info_series(agent.metrics)
        assert (
            (now["model_version"], now["response_model"])
            == ("prod", "sim-snap")
            == (first["model_version"], first["response_model"])
        )
        assert now["system_fingerprint"] != first["system_fingerprint"] and now["system_fingerprint"].startswith(
            "fp_sim_"
        )
        samples = await scrape(agent)
        assert metric(samples, CHANGES) == 1
    finally:
        await sim.close()


def test_describe_names_each_part_once():
    assert describe(("gpt-4o-2024-08-06", "gpt-4o-2024-08-06", None)) == "gpt-4o-2024-08-06"
    assert describe(("v7", "gpt-4o-2024-08-06", "fp_1")) == "v7 (gpt-4o-2024-08-06, fp_1)"
    assert describe((None, None, "fp_1")) == "unknown (fp_1)"


def test_the_drift_reading_after_a_change_is_of_the_new_version_and_names_it():
    stage = WindowAggregator(None, DriftSection(interval_s=1.0), None)
    stage.add([_sample(i, "prod", "gpt-4o-2024-05-13", "fp_a") for i in range(60)], [])
    stage.set_baseline(stage.freeze("prod"))
    stage.add([_sample(100 + i, "prod", "gpt-4o-2024-05-13", "fp_a") for i in range(60)], [])
    stage.add([_sample(200 + i, "prod", "gpt-4o-2024-05-13", "fp_b") for i in range(10)], [])
    # Ten samples of the new version: not enough to compare, and the old ones are not used instead.
    assert stage.readings(now=1e9).drift == []
    stage.add([_sample(300 + i, "prod", "gpt-4o-2024-05-13", "fp_b") for i in range(50)], [])
    readings = stage.readings(now=2e9).drift
    assert readings and {(r.model_version, r.served_as, r.n_current) for r in readings} == {
        ("prod", "gpt-4o-2024-05-13, fp_b", 60)
    }


async def test_the_simulator_serves_an_alias_as_the_snapshot_it_is_told():
    from helpers.procs import simulator_url
    from helpers.procs import start_simulator as start_simulator_process

    proc = start_simulator_process("--latency-scale", "0", "--served-model", "sim-gpt-4o-2024-05-13")
    try:
        base = simulator_url(proc)
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{base}/v1/chat/completions",
                json={"model": "sim-gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            ) as resp:
                body = await resp.json()
        assert body["model"] == "sim-gpt-4o-2024-05-13" and body["system_fingerprint"].startswith("fp_sim_")
    finally:
        proc.stop()


def _change(i: int):
    from llmwatch.collectors.sentinel import VersionChange

    return VersionChange(
        "gpt-4o", ("v1", "gpt-4o", f"fp_{i}"), ("v1", "gpt-4o", f"fp_{i + 1}"), datetime.now(timezone.utc)
    )


async def test_commands_run_one_at_a_time_and_a_hung_one_is_killed(tmp_path: Path):
    from llmwatch.collectors.sentinel import VersionActions
    from llmwatch.scorers.drift.config import VersionChangeSection

    log_file = tmp_path / "runs.txt"
    # Each run writes `start NEW`, then `end NEW` after a pause: overlapping runs would interleave.
    script = (
        "import os, sys, time; f = open(sys.argv[1], 'a'); f.write('start ' + os.environ['LLMWATCH_NEW_VERSION'] + '\\n'); f.flush(); "
        "time.sleep(0.2); f.write('end ' + os.environ['LLMWATCH_NEW_VERSION'] + '\\n')"
    )
    m = Metrics()
    # No rate limit here (min_action_interval_s: 0): three changes, three runs, one after another.
    actions = VersionActions(
        VersionChangeSection(command=[sys.executable, "-c", script, str(log_file)], min_action_interval_s=0), m
    )
    actions.start()
    for i in range(3):
        actions.submit(_change(i))
    outcome = m.group(SentinelMetrics).model_version_actions.labels(action="command", outcome="ok")
    await wait_until(lambda: outcome._value.get() == 3, timeout=60)
    await actions.close()
    new = [f"v1 (gpt-4o, fp_{i + 1})" for i in range(3)]
    assert log_file.read_text().splitlines() == [line for v in new for line in (f"start {v}", f"end {v}")]

    marker = tmp_path / "child.pid"
    # A command that hangs, with a child of its own: both go at the timeout.
    hang = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(600)"
    actions = VersionActions(
        VersionChangeSection(command=[sys.executable, "-c", hang, str(marker)], command_timeout_s=2), m
    )
    actions.start()
    actions.submit(_change(7))
    timeouts = m.group(SentinelMetrics).model_version_actions.labels(action="command", outcome="timeout")
    await wait_until(lambda: timeouts._value.get() == 1, timeout=60)
    await actions.close()
    child = int(marker.read_text())
    await wait_until(
        lambda: (
            not Path(f"/proc/{child}").exists()
            or "Z" in Path(f"/proc/{child}/stat").read_text().split(")")[1].split()[0]
        ),
        timeout=10,
    )


async def test_the_command_gets_a_minimal_environment_without_llmwatchs_secrets(tmp_path: Path, monkeypatch):
    from llmwatch.collectors.sentinel import VersionActions
    from llmwatch.scorers.drift.config import VersionChangeSection

    monkeypatch.setenv("LLMWATCH_SHADOW__CANDIDATES__0__API_KEY", "sk-never-in-the-hook")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-never-in-the-hook")
    monkeypatch.setenv("KUBECONFIG", "/etc/kube/config")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    out = tmp_path / "env.json"
    script = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"
    m = Metrics()
    outcome = m.group(SentinelMetrics).model_version_actions.labels(action="command", outcome="ok")
    for allow, runs in (([], 1), (["KUBECONFIG"], 2)):
        actions = VersionActions(
            VersionChangeSection(command=[sys.executable, "-c", script, str(out)], command_env=allow), m
        )
        actions.start()
        actions.submit(_change(runs))
        await wait_until(lambda runs=runs: outcome._value.get() == runs, timeout=60)
        await actions.close()
        env = orjson.loads(out.read_bytes())
        assert "sk-never-in-the-hook" not in out.read_text() and "aws-never-in-the-hook" not in out.read_text()
        assert env["LLMWATCH_NEW_VERSION"] == f"v1 (gpt-4o, fp_{runs + 1})" and env["LLMWATCH_MODEL"] == "gpt-4o"
        assert env["LC_ALL"] == "C.UTF-8" and env["PATH"] == os.environ["PATH"]
        # Python adds nothing of its own beyond what it was given (LC_CTYPE aside, on some hosts).
        expected = {"LLMWATCH_OLD_VERSION", "LLMWATCH_NEW_VERSION", "LLMWATCH_MODEL"}
        expected |= {k for k in os.environ if k in ("PATH", "HOME", "LANG", "TZ") or k.startswith("LC_")}
        assert set(env) - {"LC_CTYPE"} == (expected | set(allow)) - {"LC_CTYPE"}
        assert ("KUBECONFIG" in env) == bool(allow)


async def test_a_refused_webhook_is_counted_and_its_secret_never_logged(tmp_path: Path):
    from structlog.testing import capture_logs

    from llmwatch.collectors.sentinel import VersionActions
    from llmwatch.scorers.drift.config import VersionChangeSection

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=400)

    app = web.Application()
    app.router.add_post("/hook/{secret}", refuse)
    runner, base = await serve(app)
    m = Metrics()
    try:
        with capture_logs() as logs:
            actions = VersionActions(VersionChangeSection(webhook=f"{base}/hook/s3cret-path?token=s3cret-query"), m)
            actions.start()
            actions.submit(_change(1))
            failed = m.group(SentinelMetrics).model_version_actions.labels(action="webhook", outcome="failed")
            await wait_until(lambda: failed._value.get() == 1, timeout=30)
            await actions.close()
    finally:
        await runner.cleanup()
    assert any(e["event"] == "webhook_rejected" for e in logs)
    assert "s3cret" not in repr(logs)


def _span(span_id: str, fingerprint: str) -> dict:
    t0 = 1_700_000_000_000_000_000
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m-otlp",
        "gen_ai.response.model": "m-otlp-2025-01",
        "gen_ai.openai.response.system_fingerprint": fingerprint,
        "gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text","content":"hi"}]}]',
        "gen_ai.output.messages": '[{"role":"assistant","parts":[{"type":"text","content":"ok"}]}]',
    }
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": span_id,
        "name": "chat m-otlp",
        "kind": 3,
        "startTimeUnixNano": str(t0),
        "endTimeUnixNano": str(t0 + 42_000_000),
        "status": {},
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


async def test_spans_ingested_over_authenticated_otlp_are_watched_like_proxied_calls(make_agent, monkeypatch):
    # Only senders with the bearer token move the sentinel (tests/integration/test_version_storms.py: the others).
    monkeypatch.setenv("LLMWATCH_TEST_INGEST_TOKEN", "t0ken-for-spans")
    agent = await make_agent(
        "http://127.0.0.1:9",
        sampling={"rate": 0.0, "keep_errors": False, "slow_ms": None},
        otel={"ingest_listen": "127.0.0.1:0", "ingest_token_env": "LLMWATCH_TEST_INGEST_TOKEN"},
    )
    url = f"http://127.0.0.1:{agent.ingest_port}/v1/traces"
    async with aiohttp.ClientSession() as http:
        for span_id, fp in (("aaa19b7ec3c1b174", "fp_a"), ("aaa19b7ec3c1b175", "fp_a"), ("aaa19b7ec3c1b176", "fp_b")):
            body = orjson.dumps(
                {
                    "resourceSpans": [
                        {"resource": {}, "scopeSpans": [{"scope": {"name": "t"}, "spans": [_span(span_id, fp)]}]}
                    ]
                }
            )
            headers = {"Content-Type": "application/json", "Authorization": "Bearer t0ken-for-spans"}
            async with http.post(url, data=body, headers=headers) as r:
                assert r.status == 200
    [now] = info_series(agent.metrics)
    assert (now["gen_ai_request_model"], now["response_model"], now["system_fingerprint"]) == (
        "m-otlp",
        "m-otlp-2025-01",
        "fp_b",
    )
    assert changes(agent.metrics, "m-otlp") == 1


def test_alternating_between_backends_of_one_version_is_one_change_and_a_late_return_is_another():
    from llmwatch.core.served import ServedVersion

    v = ServedVersion(remember_s=600)
    assert v.see(("m", "fp_a"), now=0) == ("first", None)
    assert v.see(("m", "fp_a"), now=1)[0] == "same"
    assert v.see(("m", "fp_b"), now=2) == ("new", ("m", "fp_a"))
    # The provider answers from both backends: calls alternate, nothing more is new.
    assert [v.see(("m", fp), now=3 + i)[0] for i, fp in enumerate(["fp_a", "fp_b"] * 5)] == ["known"] * 10
    assert v.see(("m", None), now=20)[0] == "same"  # a call without a fingerprint
    # fp_b alone for longer than remember_s: a return to fp_a is a change again.
    assert v.see(("m", "fp_a"), now=12 + 601) == ("new", ("m", "fp_b"))
    strict = ServedVersion(remember_s=0)
    strict.see(("m", "fp_a"), now=0)
    assert [strict.see(("m", fp), now=1 + i)[0] for i, fp in enumerate(["fp_b", "fp_a", "fp_b"])] == ["new"] * 3


def test_the_sentinel_and_the_window_count_backend_alternation_once():
    m = Metrics()
    s = VersionSentinel(m)
    for fp in ["fp_a", "fp_b"] * 10:
        s.observe("gpt-4o", "v1", "gpt-4o-2024-08-06", fp)
    assert changes(m, "gpt-4o") == 1
    assert info_series(m)[0]["system_fingerprint"] == "fp_b", "the info series follows the last call"
    stage = WindowAggregator(None, DriftSection(), None)
    stage.add([_sample(i, "v1", "gpt-4o-2024-08-06", ["fp_a", "fp_b"][i % 2]) for i in range(40)], [])
    assert stage.windows.restarts == 1 and len(stage.windows.contents()[0]) == 39
