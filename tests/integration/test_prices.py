"""Prices as data through a real agent (issue 27): a call whose usage reports cached tokens is
priced at the cached rate, a long-context call above a tier at the tier, and every sample names
the price row its cost came from."""

from __future__ import annotations

import httpx2 as httpx  # the HTTP client the openai SDK ships with
import orjson
from aiohttp import web
from helpers.agents import drained, metric, proxy_url, scrape
from helpers.upstreams import serve

USAGES = {
    # OpenAI: 10,000 prompt tokens, 8,000 of them cache reads; 600 output, 400 of them reasoning.
    "gpt-4o": {
        "prompt_tokens": 10_000,
        "completion_tokens": 600,
        "prompt_tokens_details": {"cached_tokens": 8_000},
        "completion_tokens_details": {"reasoning_tokens": 400},
    },
    # Above gemini-2.5-pro's 200,000-token tier.
    "gemini-2.5-pro": {"prompt_tokens": 250_000, "completion_tokens": 1_000},
    # Anthropic's own usage shape: cache tokens beside input_tokens.
    "claude-3-5-haiku": {
        "input_tokens": 100,
        "output_tokens": 50,
        "cache_read_input_tokens": 4_000,
        "cache_creation_input_tokens": 1_000,
    },
}


def priced_app() -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model = body["model"]
        message = {"role": "assistant", "content": "Here is the answer you asked for."}
        if not body.get("stream"):
            payload = {"model": model, "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
            return web.json_response({**payload, "usage": USAGES[model]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in (
            {"model": model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Here"}}]},
            {"model": model, "choices": [{"index": 0, "delta": {"content": " it is."}, "finish_reason": "stop"}]},
            {"model": model, "choices": [], "usage": USAGES[model]},
        ):
            await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_cached_tokens_tiers_and_price_rows_reach_samples_and_the_cost_counter(make_agent):
    runner, upstream = await serve(priced_app())
    try:
        agent = await make_agent(upstream, sampling={"rate": 1.0})
        async with httpx.AsyncClient(timeout=30) as client:
            for stream in (False, True):
                for model in USAGES:
                    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
                    r = await client.post(f"{proxy_url(agent)}/v1/chat/completions", json=body)
                    assert r.status_code == 200
        samples = await drained(agent, 2 * len(USAGES))
        metrics = await scrape(agent)
    finally:
        await runner.cleanup()
    by_model: dict[str, list[dict]] = {}
    for s in samples:
        by_model.setdefault(s["model"], []).append(s)
    expected = {
        # 2,000 at 2.50, 8,000 cached at 1.25; reasoning billed as output (10.00).
        "gpt-4o": ((2_000 * 2.50 + 8_000 * 1.25 + 600 * 10.00) / 1e6, "builtin:gpt-4o"),
        "gemini-2.5-pro": ((250_000 * 2.50 + 1_000 * 15.00) / 1e6, "builtin:gemini-2.5-pro>200000"),
        # input counts all 5,100 prompt tokens: 100 at 0.80, 4,000 read at 0.08, 1,000 written at 1.00.
        "claude-3-5-haiku": ((100 * 0.80 + 4_000 * 0.08 + 1_000 * 1.00 + 50 * 4.00) / 1e6, "builtin:claude-3-5-haiku"),
    }
    for model, (usd, row) in expected.items():
        assert len(by_model[model]) == 2  # streamed and not: the same figures
        for s in by_model[model]:
            assert s["price_row"] == row and abs(s["cost_usd"] - usd) < 1e-12, s
            assert not s["usage"]["estimated"]
        total = metric(metrics, "llmwatch_cost_usd_total", gen_ai_request_model=model)
        assert abs(total - 2 * usd) < 1e-9, (model, total)
    gpt = by_model["gpt-4o"][0]["usage"]
    assert (gpt["input_tokens"], gpt["cached_input_tokens"], gpt["reasoning_tokens"]) == (10_000, 8_000, 400)
    claude = by_model["claude-3-5-haiku"][0]["usage"]
    assert (claude["input_tokens"], claude["cached_input_tokens"], claude["cache_write_tokens"]) == (
        5_100,
        4_000,
        1_000,
    )
