"""Stability as evaluation practice defines it, end to end with real processes.

Two `llmwatch simulate` processes (version A, and version B that decays over a conversation's
turns), each behind a real `llmwatch proxy`; multi-turn chats that resend their growing history
and send no conversation header. The samples must carry conversation ids and turn numbers, and
`llmwatch report --format json` must give each version a decay slope whose interval separates B
(decays) from A.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from helpers.procs import Proc, agent_env, agent_started, proxy_argv, simulator_url, start_simulator

MODEL = "sim-gpt-4o-mini"
QUESTIONS = [
    "How should I store fresh basil so it lasts longer?",
    "What is a good way to learn Python for data analysis?",
    "How do I train for my first half marathon?",
    "How can I improve my sleep schedule?",
    "What should I pack for a week of hiking?",
    "How do I keep sourdough starter alive?",
    "What are the basics of personal budgeting?",
    "How do I repot a houseplant without killing it?",
]
FOLLOW_UPS = ["Can you say more?", "Why is that?", "What should I avoid?", "Any other tips?", "Summarise that for me."]


async def chat(session: aiohttp.ClientSession, base: str, conversation: int, turns: int) -> None:
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(turns):
        question = QUESTIONS[conversation % len(QUESTIONS)] if turn == 0 else FOLLOW_UPS[turn % len(FOLLOW_UPS)]
        messages.append({"role": "user", "content": question})
        body = {"model": MODEL, "messages": messages, "seed": conversation * 100 + turn}
        async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            answer = (await resp.json())["choices"][0]["message"]["content"]
        messages.append({"role": "assistant", "content": answer})


def run_version(
    profile: str,
    data_dir: Path,
    conversations: int,
    turns: int,
    extra_env: dict[str, str],
    after_traffic: Callable[[int], None] | None = None,
) -> Proc:
    sim = start_simulator("--profile", profile, "--seed", "11", "--latency-scale", "0")
    proxy = None
    try:
        upstream = simulator_url(sim)
        proxy = Proc(
            proxy_argv(upstream, data_dir),
            env=agent_env(**{"LLMWATCH_SAMPLING__RATE": "1.0", "LLMWATCH_SCORING__ENABLED": "false", **extra_env}),
        )
        ports = agent_started(proxy)
        port = ports["proxy_port"]
        if extra_env.get("LLMWATCH_CONSISTENCY__ENABLED") == "true":
            # The probe's child is up: re-asks are sent from the first call on.
            assert proxy.wait_event("shadow_mirror_ready", 120)["candidates"] == ["consistency"]

        async def traffic() -> None:
            async with aiohttp.ClientSession() as session:
                # A few conversations at a time, interleaved as real clients are.
                for start in range(0, conversations, 8):
                    await asyncio.gather(
                        *(
                            chat(session, f"http://127.0.0.1:{port}", c, turns)
                            for c in range(start, min(conversations, start + 8))
                        )
                    )

        asyncio.run(traffic())
        if after_traffic is not None:
            after_traffic(ports["metrics_port"])
        # A graceful stop drains the pipeline: every sample is on disk when it exits.
        proxy.popen.send_signal(signal.SIGTERM)
        assert proxy.popen.wait(timeout=60) == 0, proxy.output()
        return proxy
    finally:
        if proxy is not None:
            proxy.stop()
        sim.stop()


def llmwatch(*args: str) -> subprocess.CompletedProcess:
    """`python -m llmwatch.agent.cli ARGS` with the embeddings off, as a user runs it on the samples."""
    return subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", *args],
        capture_output=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "LLMWATCH_SCORING__EMBEDDINGS": "false"},
        timeout=600,
    )


def read_samples(data_dir: Path) -> list[dict]:
    out = []
    for path in sorted(glob.glob(str(data_dir / "samples" / "*.jsonl"))):
        with open(path, "rb") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def test_conversations_are_found_without_a_header_and_the_decaying_version_is_told_apart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    conversations, turns = 48, 6
    run_version("A", data, conversations, turns, {})
    run_version("B", data, conversations, turns, {})

    samples = read_samples(data)
    assert len(samples) == 2 * conversations * turns
    by_conversation: dict[str, list[dict]] = defaultdict(list)
    for s in samples:
        assert s["conversation_id"] and s["conversation_id"].startswith("h-")
        by_conversation[s["conversation_id"]].append(s)
    # Every chat was followed from its first turn to its last, and no two chats were merged.
    assert len(by_conversation) == 2 * conversations
    for items in by_conversation.values():
        assert sorted(s["turn"] for s in items) == list(range(1, turns + 1))
        assert len({s["model_version"] for s in items}) == 1

    report = llmwatch("report", "--samples", str(data / "samples"), "--format", "json")
    assert report.returncode == 0, report.stderr.decode()
    decay = {d["model_version"]: d for d in json.loads(report.stdout)["turn_decay"]}
    a, b = decay["A"], decay["B"]
    assert a["conversations"] == b["conversations"] == conversations
    assert b["verdict"] == "decays" and b["ci"][1] < 0
    assert a["ci"][0] <= 0 <= a["ci"][1] or a["ci"][0] > b["ci"][1]
    assert b["ci"][1] < a["ci"][0]  # the intervals do not overlap: the sign separates A from B
    assert b["by_turn"]["1"]["mean"] > b["by_turn"][str(turns)]["mean"]


def scrape(metrics_port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(values: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in values.items() if n == name and want <= ls)


@pytest.mark.parametrize("turns", [1])
def test_the_version_that_changes_its_answers_has_the_lower_consistency_rate(tmp_path: Path, turns: int) -> None:
    data = tmp_path / "data"
    counted: dict[str, dict] = {}

    def settled(version: str) -> Callable[[int], None]:
        def wait(metrics_port: int) -> None:
            # Every re-ask the probe sent has been compared (or failed): wait for it, with a deadline.
            deadline = time.monotonic() + 60
            while True:
                values = scrape(metrics_port)
                sent = total(values, "llmwatch_shadow_mirrored_total", candidate="consistency")
                failed = total(values, "llmwatch_shadow_candidate_errors_total", candidate="consistency")
                compared = total(values, "llmwatch_consistency_pairs_total")
                if sent > 0 and compared + failed >= sent:
                    counted[version] = values
                    return
                assert time.monotonic() < deadline, f"re-asks not compared: sent {sent}, compared {compared}"
                time.sleep(0.1)

        return wait

    probe = {
        "LLMWATCH_CONSISTENCY__ENABLED": "true",
        "LLMWATCH_CONSISTENCY__RATE": "1.0",
        "LLMWATCH_CONSISTENCY__MAX_REQUESTS_PER_MINUTE": "100000",
        "LLMWATCH_CONSISTENCY__MAX_CONCURRENCY": "512",
        "LLMWATCH_CONSISTENCY__MAX_QUEUE": "1000",
    }
    run_version("A", data, 160, turns, probe, settled("A"))
    run_version("B", data, 160, turns, probe, settled("B"))

    # The clients got their answers (run_version asserts every status); the re-asks went to files.
    pairs = data / "consistency" / "pairs"
    assert glob.glob(str(pairs / "*.jsonl"))
    assert not glob.glob(str(data / "pairs" / "*.jsonl"))  # not mixed with shadow candidates' pairs

    for version in ("A", "B"):
        values = counted[version]
        agree = total(values, "llmwatch_consistency_pairs_total", model_version=version, result="agree")
        disagree = total(values, "llmwatch_consistency_pairs_total", model_version=version, result="disagree")
        skipped = {
            dict(ls)["reason"]: v
            for (n, ls), v in values.items()
            if n == "llmwatch_shadow_skipped_total" and dict(ls).get("candidate") == "consistency" and v
        }
        assert agree + disagree >= 100, f"{version}: {agree} agree, {disagree} disagree, skipped {skipped}"
        if version == "A":
            assert disagree == 0
        else:
            assert disagree > 0.2 * (agree + disagree)
            assert total(values, "llmwatch_consistency_confident_unstable_total", model_version="B") > 0

    report = llmwatch("report", "--samples", str(data / "samples"), "--consistency", str(pairs), "--format", "json")
    assert report.returncode == 0, report.stderr.decode()
    rows = {r["model_version"]: r for r in json.loads(report.stdout)["consistency"]}
    a, b = rows["A"], rows["B"]
    assert a["compared"] >= 100 and b["compared"] >= 100
    assert b["rate"] < a["rate"]
    assert b["ci"][1] < a["ci"][0]  # Wilson intervals that do not overlap
    assert b["confident_unstable"] > 0 and a["confident_unstable"] == 0

    # The verdicts join the re-asked samples as the `consistency` check: a behaviour drift signal.
    freeze = llmwatch(
        *("baseline", "freeze", "--samples", str(data / "samples"), "--model-version", "A"),
        *("--consistency", str(pairs), "--out", str(tmp_path / "baseline-A.json")),
    )
    assert freeze.returncode == 0, freeze.stderr.decode()
    drift = llmwatch(
        *("drift", "--baseline", str(tmp_path / "baseline-A.json"), "--samples", str(data / "samples")),
        *("--model-version", "B", "--consistency", str(pairs), "--format", "json"),
    )
    assert drift.returncode == 1, drift.stderr.decode()
    signals = {sig["name"]: sig for sig in json.loads(drift.stdout)["signals"]}
    consistency = signals["pass_rate:consistency"]
    assert consistency["family"] == "behaviour" and consistency["verdict"] == "drift"
    assert consistency["effect_size"] < 0

    # Online: the sidecar's scorer, with that baseline, joins the probe's verdicts to its window
    # (they come from the probe's child, not the scoring pipeline) and B's drift names the signal.
    found: dict[str, float] = {}

    def drift_named(metrics_port: int) -> None:
        deadline = time.monotonic() + 180
        while True:
            values = scrape(metrics_port)
            detected = {
                dict(ls)["signal"]: v
                for (n, ls), v in values.items()
                if n == "llmwatch_drift_detected" and dict(ls).get("model_version") == "B"
            }
            if detected.get("pass_rate:consistency") == 1.0:
                found.update(detected)
                return
            assert time.monotonic() < deadline, f"no consistency drift online: {detected}"
            time.sleep(0.2)

    online = {
        **probe,
        "LLMWATCH_SCORING__ENABLED": "true",
        "LLMWATCH_SCORING__EMBEDDINGS": "false",
        "LLMWATCH_DRIFT__BASELINE": str(tmp_path / "baseline-A.json"),
        "LLMWATCH_DRIFT__INTERVAL_S": "1",
    }
    run_version("B", tmp_path / "online", 160, turns, online, drift_named)
    assert found["pass_rate:consistency"] == 1.0

    # `suite build` keeps the hidden errors as regression cases, each with the re-ask beside it.
    online_data = tmp_path / "online"
    suite = tmp_path / "unstable.jsonl"
    built = llmwatch(
        *("suite", "build", "--samples", str(online_data / "samples"), "--scores", str(online_data / "scores")),
        *("--consistency", str(online_data / "consistency" / "pairs"), "--similarity", "text"),
        *("--out", str(suite), "--size", "8", "--failure-quota", "1", "--edge-quota", "0", "--seed", "1"),
    )
    assert built.returncode == 0, built.stderr.decode()
    manifest = json.loads((tmp_path / "unstable.manifest.json").read_text())
    unstable = [e for e in manifest["cases"].values() if "confident_unstable" in e["failure_modes"]]
    assert unstable and all(e["source"] == "failure" for e in unstable)
    for entry in unstable:
        assert entry["re_asks"] and all(r["answer"] != r["re_ask"] for r in entry["re_asks"])
    from llmwatch.scorers.evaluation.regress import load_suite

    assert len(load_suite(suite).cases) == len(manifest["cases"])


@contextlib.asynccontextmanager
async def consistency_proxy(
    tmp_path: Path, on_re_ask: Callable[[bytes, Any], Awaitable[Any]], max_concurrency: int
) -> AsyncIterator[tuple[Proc, dict, dict[bytes, bytes]]]:
    """A real `llmwatch proxy` with the consistency probe on (rate 1.0, scoring off) in front of an
    upstream that answers each question once with bytes of its own (`answers`, by request body) and
    hands a repeat of a question, the probe's re-ask, to `on_re_ask(key, request)`: its response,
    or None to answer it like a first call. Yields (proxy, ports, answers) once the probe is up."""
    from aiohttp import web
    from helpers.upstreams import serve

    seen: set[bytes] = set()
    answers: dict[bytes, bytes] = {}

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        # The re-ask is the same request; its bytes may differ (sent with `stream: false`).
        parsed = json.loads(body)
        key = json.dumps([parsed["model"], parsed["messages"]]).encode()
        if key in seen:
            response = await on_re_ask(key, request)
            if response is not None:
                return response
        seen.add(key)
        answers[body] = orjson_answer(len(answers))
        return web.Response(body=answers[body], content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner, upstream = await serve(app)
    proxy = Proc(
        proxy_argv(upstream, tmp_path / "data"),
        env=agent_env(
            LLMWATCH_SCORING__ENABLED="false",
            LLMWATCH_CONSISTENCY__ENABLED="true",
            LLMWATCH_CONSISTENCY__RATE="1.0",
            LLMWATCH_CONSISTENCY__MAX_CONCURRENCY=str(max_concurrency),
        ),
    )
    try:
        ports = await asyncio.to_thread(agent_started, proxy)
        await asyncio.to_thread(proxy.wait_event, "shadow_mirror_ready", 120)
        yield proxy, ports, answers
    finally:
        proxy.popen.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proxy.popen.wait, 60)
        proxy.stop()
        await runner.cleanup()


async def twenty_questions(proxy_port: int) -> list[tuple[bytes, int, bytes]]:
    """Twenty distinct chat calls, one at a time: (request body, status, response body) of each."""
    replies = []
    async with aiohttp.ClientSession() as session:
        for i in range(20):
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": f"question {i}"}]})
            async with session.post(
                f"http://127.0.0.1:{proxy_port}/v1/chat/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as resp:
                replies.append((body.encode(), resp.status, await resp.read()))
    return replies


async def test_a_re_ask_that_hangs_changes_nothing_for_clients(tmp_path: Path) -> None:
    gate = asyncio.Event()
    reasks: list[bytes] = []

    async def hang(key: bytes, request: Any) -> None:
        reasks.append(key)
        await gate.wait()  # the re-ask: held until the test ends

    async with consistency_proxy(tmp_path, hang, max_concurrency=2) as (proxy, ports, answers):
        try:
            for body, status, got in await twenty_questions(ports["proxy_port"]):
                assert status == 200
                # The client gets the upstream's bytes, whatever the probe does with the call.
                assert got == answers[body]
            deadline = time.monotonic() + 180
            while True:  # every call's offer has been decided (it runs after the client's last byte)
                values = await asyncio.to_thread(scrape, ports["metrics_port"])
                decided = total(values, "llmwatch_shadow_mirrored_total", candidate="consistency") + total(
                    values, "llmwatch_shadow_skipped_total", candidate="consistency"
                )
                if decided >= 20 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert total(values, "llmwatch_shadow_mirrored_total", candidate="consistency") == 2
            assert len(reasks) <= 2  # the two held re-asks (sent or on their way), nothing more
            assert total(values, "llmwatch_shadow_skipped_total", candidate="consistency", reason="concurrency") == 18
        finally:
            gate.set()


async def test_a_re_ask_whose_upstream_connection_dies_changes_nothing_for_clients(tmp_path: Path) -> None:
    """The probe's upstream gone mid re-ask (the connection dropped without an answer, as when the
    server is killed): clients get every byte as before, the re-asks are counted as failed, and no
    verdict is made from them."""
    from aiohttp import web

    dropped: list[bytes] = []

    async def drop(key: bytes, request: Any) -> web.Response:
        dropped.append(key)
        assert request.transport is not None
        request.transport.abort()  # the re-ask: the connection dies, no status, no body
        return web.Response(status=500)

    async with consistency_proxy(tmp_path, drop, max_concurrency=4) as (proxy, ports, answers):
        for body, status, got in await twenty_questions(ports["proxy_port"]):
            assert status == 200
            assert got == answers[body]
        deadline = time.monotonic() + 60
        while True:  # every re-ask decided, and every one sent has ended (failed)
            values = await asyncio.to_thread(scrape, ports["metrics_port"])
            mirrored = total(values, "llmwatch_shadow_mirrored_total", candidate="consistency")
            skipped = total(values, "llmwatch_shadow_skipped_total", candidate="consistency")
            failed = total(values, "llmwatch_shadow_candidate_errors_total", candidate="consistency")
            if mirrored + skipped >= 20 and failed >= mirrored:
                break
            assert time.monotonic() < deadline, f"mirrored {mirrored}, skipped {skipped}, failed {failed}"
            await asyncio.sleep(0.05)
        assert mirrored > 0 and failed == mirrored and len(dropped) == mirrored
        compared = total(values, "llmwatch_consistency_pairs_total", result="agree") + total(
            values, "llmwatch_consistency_pairs_total", result="disagree"
        )
        assert compared == 0  # a re-ask that got no answer says nothing about stability
        # The failed re-asks gave their slots back: the next call is re-asked again.
        async with aiohttp.ClientSession() as session:
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "one more question"}]})
            async with session.post(
                f"http://127.0.0.1:{ports['proxy_port']}/v1/chat/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as resp:
                assert resp.status == 200 and await resp.read() == answers[body.encode()]
        deadline = time.monotonic() + 60
        while total(values, "llmwatch_shadow_mirrored_total", candidate="consistency") == mirrored:
            assert time.monotonic() < deadline, "the probe re-asks nothing after its upstream failed"
            await asyncio.sleep(0.05)
            values = await asyncio.to_thread(scrape, ports["metrics_port"])


def orjson_answer(i: int) -> bytes:
    return json.dumps(
        {
            "id": f"c{i}",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": f"answer {i}"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    ).encode()
