"""The upstream's rate-limit budget on /metrics (issue 27): x-ratelimit-* and retry-after response
headers become gauges per upstream, model and resource, the client gets the headers exactly as the
upstream sent them, and an in-flight gauge counts calls not yet answered to the end."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
from aiohttp import web
from helpers.agents import metric, proxy_url, scrape, wait_until
from helpers.upstreams import gated_stream_app, serve

from llmwatch.collectors.receivers.proxy.ratelimits import duration_s, retry_after_s

BUDGET = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-remaining-requests": "37",
    "x-ratelimit-reset-requests": "6m0s",
    "x-ratelimit-limit-tokens": "30000",
    "X-RateLimit-Remaining-Tokens": "1200",  # any case: header names are case-insensitive
    "x-ratelimit-reset-tokens": "1.5s",
}


def limited_app() -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        answer = {
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
        if body["model"] == "busy-model":
            error = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
            return web.Response(
                status=429, body=orjson.dumps(error), content_type="application/json", headers={"Retry-After": "20"}
            )
        return web.Response(body=orjson.dumps(answer), content_type="application/json", headers=BUDGET)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_remaining_requests_from_the_upstream_appear_in_metrics(make_agent):
    runner, upstream = await serve(limited_app())
    try:
        agent = await make_agent(upstream, metrics={"models": ["gpt-4o", "busy-model"]})
        host = upstream.removeprefix("http://")
        async with aiohttp.ClientSession() as client:
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
            async with client.post(f"{proxy_url(agent)}/v1/chat/completions", json=body) as r:
                assert r.status == 200
                # Forwarded untouched: the same names, spelling and values the upstream sent.
                sent = {k.decode(): v.decode() for k, v in r.raw_headers if k.lower().startswith(b"x-ratelimit")}
                assert sent == BUDGET
            busy = {"model": "busy-model", "messages": [{"role": "user", "content": "hi"}]}
            async with client.post(f"{proxy_url(agent)}/v1/chat/completions", json=busy) as r:
                assert r.status == 429 and r.headers["Retry-After"] == "20"
        # Both calls are finished (their metrics recorded) once the second one's counter moved.
        retried = {"upstream": host, "gen_ai_request_model": "busy-model"}
        await wait_until(
            lambda: (
                agent.metrics.registry.get_sample_value("llmwatch_upstream_retry_after_responses_total", retried) == 1
            )
        )
        m = await scrape(agent)
    finally:
        await runner.cleanup()
    labels = {"upstream": host, "gen_ai_request_model": "gpt-4o"}
    assert metric(m, "llmwatch_upstream_ratelimit_remaining", resource="requests", **labels) == 37
    assert metric(m, "llmwatch_upstream_ratelimit_remaining", resource="tokens", **labels) == 1200
    assert metric(m, "llmwatch_upstream_ratelimit_limit", resource="requests", **labels) == 500
    assert metric(m, "llmwatch_upstream_ratelimit_reset_seconds", resource="requests", **labels) == 360
    assert metric(m, "llmwatch_upstream_ratelimit_reset_seconds", resource="tokens", **labels) == 1.5
    assert metric(m, "llmwatch_upstream_ratelimit_observed_timestamp_seconds", resource="requests", **labels) > 1.7e9
    busy_labels = {"upstream": host, "gen_ai_request_model": "busy-model"}
    assert metric(m, "llmwatch_upstream_retry_after_seconds", **busy_labels) == 20
    assert metric(m, "llmwatch_upstream_retry_after_responses_total", **busy_labels) == 1
    assert metric(m, "llmwatch_proxy_in_flight_requests") == 0


async def test_a_stream_still_open_is_in_flight_and_leaves_it_when_done(make_agent):
    gate = asyncio.Event()
    runner, upstream = await serve(gated_stream_app(gate))
    try:
        agent = await make_agent(upstream)
        async with aiohttp.ClientSession() as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            async with client.post(f"{proxy_url(agent)}/v1/chat/completions", json=body) as r:
                await r.content.readuntil(b"\n\n")  # the first event arrived: the call is under way
                assert metric(await scrape(agent), "llmwatch_proxy_in_flight_requests") == 1
                gate.set()
                await r.read()

        def in_flight() -> float | None:
            return agent.metrics.registry.get_sample_value("llmwatch_proxy_in_flight_requests")

        # The proxy finishes the call right after its last byte: waited for under a deadline.
        await wait_until(lambda: in_flight() == 0)
    finally:
        await runner.cleanup()


def test_budget_values_are_read_in_their_wire_formats():
    assert duration_s("6m0s") == 360 and duration_s("20ms") == 0.02 and duration_s("1h2m3.5s") == 3723.5
    assert duration_s("17") == 17 and duration_s("soon") is None and duration_s("1x") is None
    assert retry_after_s("20") == 20
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_s("not a date") is None and retry_after_s("-5") is None
