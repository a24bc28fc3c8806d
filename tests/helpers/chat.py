"""A chat request and an OpenAI client pointed at a proxy."""

from __future__ import annotations

import openai

CHAT = {"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": "How do I roast a chicken?"}], "seed": 42}


def client(base: str, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-test-abcdefghijklmnopqrstuvwxyz", max_retries=0, **kw)
