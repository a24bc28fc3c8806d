"""The served-version sentinel against a hostile or broken upstream, through a real `llmwatch proxy`.

A flapping upstream is one fact, not a change per call: the command runs at most once and the
sentinel says "flapping" instead; what the upstream calls its version is bounded before it reaches a
log line, a label, the command's environment or the webhook; and spans from an unauthenticated OTLP
sender never drive it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web
from helpers.agents import metric, wait_until
from helpers.procs import Proc, scrape_metrics, start_configured_proxy, stop_gracefully
from helpers.upstreams import serve

from llmwatch.core.served import ServedVersion

CHAT = {"model": "m-storm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
# The command a user would point at `llmwatch regress`: here it appends what it was told, one line per run.
RECORD = "import os, sys; open(sys.argv[1], 'a').write(str(len(os.environ['LLMWATCH_NEW_VERSION'])) + ' ' + os.environ['LLMWATCH_NEW_VERSION'][:40] + '\\n')"


def fingerprint_app(fingerprints: list[str]) -> web.Application:
    """A chat upstream whose answers name `fingerprints[i % len]` for its i-th call."""
    calls = {"n": 0}

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        fp = fingerprints[calls["n"] % len(fingerprints)]
        calls["n"] += 1
        body = {
            "id": f"c{calls['n']}",
            "object": "chat.completion",
            "model": "m-storm-2026-01",
            "system_fingerprint": fp,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    app = web.Application(client_max_size=1 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def hook_app(received: list[dict]) -> web.Application:
    async def hook(request: web.Request) -> web.Response:
        received.append(orjson.loads(await request.read()))
        return web.Response(status=204)

    app = web.Application(client_max_size=1 << 24)
    app.router.add_post("/hook", hook)
    return app


def start_proxy(tmp_path: Path, upstream: str, **sections) -> tuple[Proc, dict]:
    sampling = {"rate": 0.0, "keep_errors": False, "slow_ms": None}
    return start_configured_proxy(
        tmp_path, {"upstream": upstream, "sampling": sampling, "scoring": {"enabled": False}, **sections}
    )


def stop(proxy: Proc) -> None:
    # SIGTERM: a clean stop lets a running command finish and drops what was held (never run at exit).
    stop_gracefully(proxy)


async def test_ten_rotating_fingerprints_run_the_command_once_and_read_as_flapping(tmp_path: Path):
    received: list[dict] = []
    up_runner, upstream = await serve(fingerprint_app([f"fp_{i}" for i in range(10)]))
    hook_runner, hook = await serve(hook_app(received))
    runs = tmp_path / "runs.txt"
    proxy, ports = start_proxy(
        tmp_path,
        upstream,
        drift={
            "version_change": {
                "command": [sys.executable, "-c", RECORD, str(runs)],
                "webhook": f"{hook}/hook",
                "remember_s": 3600,
            }
        },
    )
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(40):
                async with session.post(f"http://127.0.0.1:{ports['proxy_port']}/v1/chat/completions", json=CHAT) as r:
                    assert r.status == 200
                    await r.read()
            await asyncio.to_thread(proxy.wait_event, "version_change_command_exited", 60)
            flapping = await asyncio.to_thread(proxy.wait_event, "served_version_flapping", 30)
            assert flapping["model"] == "m-storm" and flapping["versions_seen"] >= 4
            m = await scrape_metrics(session, ports)
            assert metric(m, "llmwatch_model_version_flapping", gen_ai_request_model="m-storm") == 1
            # Changes counted until it read as flapping (3 by default), not 39.
            assert metric(m, "llmwatch_model_version_changes_total", gen_ai_request_model="m-storm") == 3
            assert metric(m, "llmwatch_model_version_change_actions_total", action="command", outcome="coalesced") == 2
    finally:
        stop(proxy)
        await up_runner.cleanup()
        await hook_runner.cleanup()
    assert len(runs.read_text().splitlines()) == 1, "one run for the storm, not one per call"
    assert [r["event"] for r in received] == ["served_version_changed", "served_version_flapping"]
    assert len(proxy.events("served_version_flapping")) == 1


def test_a_rotation_through_more_versions_than_remembered_is_flapping_not_a_change_per_call():
    v = ServedVersion(remember_s=3600, max_changes=3, flap_window_s=600)
    seen = [v.see(("m", f"fp_{i % 100}"), now=float(i))[0] for i in range(400)]
    assert seen[0] == "first" and seen.count("new") == 3 and seen.count("flapping") == 1
    assert set(seen[5:]) == {"unsettled"} and v.is_flapping(400.0) and v.known_count() <= 64
    # Calm for flap_window_s: flapping ends, and the next change is judged afresh.
    assert not v.is_flapping(399.0 + 600)
    assert v.see(("m", "fp_new"), now=399.0 + 601)[0] == "new"


async def test_a_200kb_fingerprint_is_bounded_in_logs_labels_environment_and_webhook(tmp_path: Path):
    received: list[dict] = []
    huge = "fp_" + "x" * 200_000
    up_runner, upstream = await serve(fingerprint_app(["fp_small"] * 3 + [huge + "\u0000\n\x1b[31m"] * 3))
    hook_runner, hook = await serve(hook_app(received))
    runs = tmp_path / "runs.txt"
    proxy, ports = start_proxy(
        tmp_path,
        upstream,
        drift={"version_change": {"command": [sys.executable, "-c", RECORD, str(runs)], "webhook": f"{hook}/hook"}},
    )
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(6):
                async with session.post(f"http://127.0.0.1:{ports['proxy_port']}/v1/chat/completions", json=CHAT) as r:
                    assert r.status == 200
                    await r.read()
            done = await asyncio.to_thread(proxy.wait_event, "version_change_command_exited", 60)
            assert done["exit_code"] == 0, "the command started (no E2BIG) and ran"
            m = await scrape_metrics(session, ports)
            [(_, labels)] = [k for k, v in m.items() if k[0] == "llmwatch_model_version_info" and v == 1]
            assert len(dict(labels)["system_fingerprint"]) <= 128
            await wait_until(lambda: bool(received), timeout=60)
    finally:
        stop(proxy)
        await up_runner.cleanup()
        await hook_runner.cleanup()
    [line] = runs.read_text().splitlines()
    length = int(line.split()[0])
    assert 0 < length <= 512, "LLMWATCH_NEW_VERSION is short"
    assert max(len(x) for x in proxy.lines) < 4096, "no log line carries the upstream's 200 KB"
    [body] = received
    assert len(body["new"]) <= 512 and len(body["new_parts"]["system_fingerprint"]) <= 128
    assert all(c.isprintable() for c in body["new"]), "control characters from the upstream do not pass"


def _span(i: int, fingerprint: str) -> dict:
    t0 = 1_700_000_000_000_000_000 + i
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m-otlp",
        "gen_ai.response.model": "m-otlp-2025-01",
        "gen_ai.openai.response.system_fingerprint": fingerprint,
    }
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": f"{0xBBB19B7EC3C1B100 + i:016x}",
        "name": "chat m-otlp",
        "kind": 3,
        "startTimeUnixNano": str(t0),
        "endTimeUnixNano": str(t0 + 42_000_000),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


async def test_spans_from_an_unauthenticated_sender_never_drive_the_sentinel(tmp_path: Path):
    runs = tmp_path / "runs.txt"
    proxy, ports = start_proxy(
        tmp_path,
        "http://127.0.0.1:9",
        otel={"ingest_listen": "127.0.0.1:0"},
        drift={"version_change": {"command": [sys.executable, "-c", RECORD, str(runs)], "min_action_interval_s": 0}},
    )
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(10):
                body = {
                    "resourceSpans": [
                        {"resource": {}, "scopeSpans": [{"scope": {}, "spans": [_span(i, f"fp_made_up_{i}")]}]}
                    ]
                }
                async with session.post(f"http://127.0.0.1:{ports['ingest_port']}/v1/traces", json=body) as r:
                    assert r.status == 200
            m = await scrape_metrics(session, ports)
            assert metric(m, "llmwatch_otlp_ingest_spans_total", outcome="unsampled") == 10, "the spans were taken"
            assert not [k for k in m if k[0] == "llmwatch_model_version_info"]
            assert not metric(m, "llmwatch_model_version_changes_total")
    finally:
        stop(proxy)
    assert not runs.exists(), "no command ran for made-up fingerprints"
    assert proxy.events("otlp_versions_not_watched")
