"""A cheap, fixed-latency OpenAI-shaped upstream for benchmarks (separate process).

Unlike the simulator it precomputes its bodies, so its own CPU cost is tiny and stable and the
figures measure the proxy. Non-streaming calls sleep about `--latency-ms`; streaming calls wait about
`--ttft-ms`, then send `--chunks` SSE chunks about `--gap-ms` apart, then usage and [DONE].
Delays are lognormal (`--jitter` sigma, default 0.25) as a model server's are: with a fixed
delay, a closed-loop load generator sends its requests in lock-step waves, and the figures
would measure that artefact instead of the proxy. A request may name its own delay in the
`x-bench-delay-ms` header: the benchmark sends the same seeded sequence of delays direct and
through the proxy, so that the two runs differ only by the proxy, not by the dice.
"""

from __future__ import annotations

import argparse
import asyncio
import random

import orjson
from aiohttp import web

ANSWER = (
    "Roast the chicken at 220 C for about 20 minutes per 500 g, then rest it for ten minutes before carving. " * 6
).strip()


def plain_body() -> bytes:
    """The non-streamed answer this upstream sends (also what bench/redaction_cost.py redacts)."""
    words = ANSWER.split(" ")
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 24, "completion_tokens": len(words), "total_tokens": 24 + len(words)},
        }
    )


def build(args: argparse.Namespace) -> web.Application:
    words = ANSWER.split(" ")
    body = plain_body()
    per_chunk = max(1, len(words) // args.chunks)
    pieces = [" ".join(words[i : i + per_chunk]) + " " for i in range(0, len(words), per_chunk)][: args.chunks]

    def event(obj) -> bytes:
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    head = event(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        }
    )
    chunks = [
        event(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}],
            }
        )
        for p in pieces
    ]
    tail = (
        event(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
        )
        + event(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "gpt-4o-mini",
                "choices": [],
                "usage": {"prompt_tokens": 24, "completion_tokens": len(pieces), "total_tokens": 24 + len(pieces)},
            }
        )
        + b"data: [DONE]\n\n"
    )

    rng = random.Random(1)

    def delay(ms: float) -> float:
        return ms / 1000.0 * (rng.lognormvariate(0.0, args.jitter) if args.jitter > 0 else 1.0)

    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        asked = request.headers.get("x-bench-delay-ms")
        if b'"stream":true' not in raw.replace(b" ", b""):
            await asyncio.sleep(float(asked) / 1000.0 if asked else delay(args.latency_ms))
            return web.Response(body=body, content_type="application/json", headers={"x-model-version": "bench-1"})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "x-model-version": "bench-1"})
        await resp.prepare(request)
        await asyncio.sleep(float(asked) * args.ttft_ms / args.latency_ms / 1000.0 if asked else delay(args.ttft_ms))
        await resp.write(head)
        for chunk in chunks:
            await resp.write(chunk)
            await asyncio.sleep(delay(args.gap_ms))
        await resp.write(tail)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--ttft-ms", type=float, default=30.0)
    p.add_argument("--chunks", type=int, default=30)
    p.add_argument("--gap-ms", type=float, default=3.0)
    p.add_argument("--jitter", type=float, default=0.25, help="lognormal sigma of every delay; 0 for fixed delays")
    args = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(build(args), host="127.0.0.1", port=args.port, access_log=None, print=None, backlog=4096)


if __name__ == "__main__":
    main()
