"""The shadow spend cap is a promise: it holds under concurrency and whatever the candidate answers.

Against a real `llmwatch proxy` (its mirror child included) on loopback: a candidate that answers
at length while the primary answers in one token, twenty calls at once, and a candidate whose
answers cannot be analysed. The reservation is a worst case (the request's bytes as input tokens,
its max_tokens as output, sent as the candidate's limit), settled on the real usage; an answer that
cannot be analysed gives its reservation back on what can be read of it, never holds it for good.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from helpers.agents import metric, wait_until
from helpers.procs import Proc, scrape_metrics, start_configured_proxy, stop_gracefully
from helpers.upstreams import serve

PRICE = {"input_per_million": 10.0, "output_per_million": 10.0}  # $0.00001 a token, for the candidate


def primary_app(usage: tuple[int, int] = (3, 1)) -> web.Application:
    """Answers every call with `usage` tokens: what the old reservation was sized on."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        answer = {
            "id": "p",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def candidate_app(gate: asyncio.Event, seen: list[dict], *, broken: bool = False) -> web.Application:
    """Answers with as many tokens as it is allowed (its max_tokens), once `gate` opens.

    `broken`: a stream whose chunks name no index (`"index": null`), which the capture analysis of
    this version cannot read: the pair cannot be built, the usage is still in the bytes."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        await gate.wait()
        n = int(body.get("max_tokens") or 100_000)  # no limit sent: an answer as long as it likes
        if broken:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            chunk = {"id": "c", "object": "chat.completion.chunk", "model": "cand",
                     "choices": [{"index": None, "delta": {"content": ["not", "text"]}, "finish_reason": None}]}  # fmt: skip
            usage = {"id": "c", "object": "chat.completion.chunk", "model": "cand", "choices": [],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 2}}  # fmt: skip
            for event in (chunk, usage):
                await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        answer = {
            "id": "c",
            "object": "chat.completion",
            "model": "cand",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "word " * 50}, "finish_reason": "length"}
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": n},
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def start_proxy(tmp_path: Path, primary: str, candidate: str, **candidate_spec) -> tuple[Proc, dict]:
    candidate_section = {"name": "cand", "upstream": candidate, "rate": 1.0, "model": "cand", **candidate_spec}
    config = {
        "upstream": primary,
        "sampling": {"rate": 0.0, "keep_errors": False, "slow_ms": None},
        "scoring": {"enabled": False},
        "metrics": {"pricing": {"cand": PRICE}},
        "shadow": {"enabled": True, "candidates": [candidate_section]},
    }
    return start_configured_proxy(tmp_path, config)


async def calls(session: aiohttp.ClientSession, ports: dict, n: int, **extra) -> list[int]:
    async def one(i: int) -> int:
        body = {"model": "prim", "messages": [{"role": "user", "content": f"question {i}"}], **extra}
        async with session.post(f"http://127.0.0.1:{ports['proxy_port']}/v1/chat/completions", json=body) as r:
            await r.read()
            return r.status

    return await asyncio.gather(*(one(i) for i in range(n)))


async def settled(session: aiohttp.ClientSession, ports: dict, n: int) -> dict:
    """Metrics once every one of `n` calls was mirrored or skipped, and every mirror has ended."""
    m: dict = {}

    async def done() -> bool:
        nonlocal m
        m = await scrape_metrics(session, ports)
        mirrored = metric(m, "llmwatch_shadow_mirrored_total", candidate="cand")
        skipped = metric(m, "llmwatch_shadow_skipped_total", candidate="cand")
        ended = metric(m, "llmwatch_shadow_pairs_total", candidate="cand") + metric(
            m, "llmwatch_shadow_pairs_dropped_total", candidate="cand"
        )
        return mirrored + skipped == n and ended == mirrored

    deadline = asyncio.get_running_loop().time() + 60
    while not await done():
        assert asyncio.get_running_loop().time() < deadline, m
        await asyncio.sleep(0.1)
    return m


async def test_twenty_concurrent_calls_never_spend_past_the_cap_whatever_the_candidate_answers(tmp_path: Path):
    gate = asyncio.Event()
    seen: list[dict] = []
    p_runner, primary = await serve(primary_app())
    c_runner, candidate = await serve(candidate_app(gate, seen))
    cap = 0.02  # two answers of 1000 tokens; the old reservation (the primary's 4 tokens) let four run at once
    proxy, ports = start_proxy(tmp_path, primary, candidate, max_usd_per_hour=cap, max_concurrency=4)
    try:
        async with aiohttp.ClientSession() as session:
            assert await calls(session, ports, 20, max_tokens=1000) == [200] * 20
            # Every offer is decided while the mirrors in flight are held at the candidate.
            await wait_until(lambda: len(seen) >= 1, timeout=30)  # the cap leaves room for one at a time
            gate.set()
            m = await settled(session, ports, 20)
        spent = metric(m, "llmwatch_shadow_spend_usd_total", candidate="cand")
        assert 0 < spent <= cap, spent
        assert metric(m, "llmwatch_shadow_skipped_total", candidate="cand", reason="spend_cap") > 0
        # The candidate was sent the limit its reservation was made for.
        assert {b["max_tokens"] for b in seen} == {1000}
    finally:
        gate.set()
        stop_gracefully(proxy)
        await p_runner.cleanup()
        await c_runner.cleanup()


async def test_a_request_without_max_tokens_is_mirrored_with_the_candidates_ceiling(tmp_path: Path):
    gate = asyncio.Event()
    gate.set()
    seen: list[dict] = []
    p_runner, primary = await serve(primary_app())
    c_runner, candidate = await serve(candidate_app(gate, seen))
    proxy, ports = start_proxy(tmp_path, primary, candidate, max_usd_per_hour=1.0, max_output_tokens=500)
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                assert await calls(session, ports, 1) == [200]
            m = await settled(session, ports, 3)
        assert [b["max_tokens"] for b in seen] == [500] * 3
        # 12 + 500 tokens each, at $10 per million: the spend is the candidate's real usage.
        assert metric(m, "llmwatch_shadow_spend_usd_total", candidate="cand") == pytest.approx(3 * 512 * 1e-5)
    finally:
        stop_gracefully(proxy)
        await p_runner.cleanup()
        await c_runner.cleanup()


async def test_answers_that_cannot_be_analysed_give_their_reservation_back(tmp_path: Path):
    gate = asyncio.Event()
    gate.set()
    seen: list[dict] = []
    # The primary's answers are long: the old reservation of each (1,503 tokens, $0.015) leaked for good.
    p_runner, primary = await serve(primary_app(usage=(3, 1500)))
    c_runner, candidate = await serve(candidate_app(gate, seen, broken=True))
    # Room for about six worst cases (the body's bytes + 1000 tokens each), and for four old leaks.
    proxy, ports = start_proxy(tmp_path, primary, candidate, max_usd_per_hour=0.07, max_concurrency=1)
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(12):
                assert await calls(session, ports, 1, max_tokens=1000, stream=True) == [200]
                await settled(session, ports, i + 1)  # one at a time: each mirror ends before the next call
            m = await scrape_metrics(session, ports)
        assert metric(m, "llmwatch_shadow_mirrored_total", candidate="cand") == 12, "no mirror was refused for spend"
        assert metric(m, "llmwatch_shadow_skipped_total", candidate="cand", reason="spend_cap") == 0
        # Settled on the usage found in the bytes (3 + 2 tokens each), not held, not the worst case.
        assert metric(m, "llmwatch_shadow_spend_usd_total", candidate="cand") <= 12 * 5 * 1e-5 + 1e-12
    finally:
        stop_gracefully(proxy)
        await p_runner.cleanup()
        await c_runner.cleanup()
