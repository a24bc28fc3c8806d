"""A chat request and an OpenAI client pointed at a proxy."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import openai

CHAT = {"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": "How do I roast a chicken?"}], "seed": 42}


def client(base: str, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-test-abcdefghijklmnopqrstuvwxyz", max_retries=0, **kw)


async def seeded_calls(
    base: str, prompts: Sequence[str], seed0: int, headers: Sequence[Mapping[str, str]] = ()
) -> None:
    """One chat call per prompt through `base`, at most 16 in flight; the i-th carries seed `seed0 + i`
    (the simulator then draws the same answer and delays every run) and `headers[i]` if given."""
    c = openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with sem:
            await c.chat.completions.create(
                model="sim-gpt-4o-mini",
                messages=[{"role": "user", "content": prompts[i]}],
                seed=seed0 + i,
                extra_headers=dict(headers[i]) if headers else None,
            )

    await asyncio.gather(*[one(i) for i in range(len(prompts))])
    await c.close()
