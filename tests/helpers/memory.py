"""What the bounded-memory tests measure: the peak of Python's traced allocations (numpy's included)."""

from __future__ import annotations

import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import orjson


def peak_bytes(run: Callable[[], Any]) -> int:
    """The peak traced allocation, in bytes, while `run()` runs."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def write_varied_samples(
    path: Path, n: int, *, two_routes: bool = False, failures: bool = False, prompt_cycle: int | None = None
) -> None:
    """`n` chat samples of version B, 6 s apart, over four topics with varied answers, latencies and usage.

    `two_routes`: every third on /v2/chat/completions; `failures`: every 97th a 500; `prompt_cycle`:
    the prompts repeat every that many samples (else each is its own).
    """
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with open(path, "wb") as out:
        for i in range(n):
            topic = ("billing", "caching", "joins", "invoices")[i % 4]
            number = i % prompt_cycle if prompt_cycle else i
            record = {
                "schema_version": 1,
                "id": f"s{i}",
                "timestamp": (t0 + timedelta(seconds=6 * i)).isoformat(),
                "route": "/v2/chat/completions" if two_routes and i % 3 == 0 else "/v1/chat/completions",
                "operation": "chat",
                "model": "gpt-4o-mini",
                "model_version": "B",
                "status": 500 if failures and i % 97 == 0 else 200,
                "latency_ms": 500.0 + (i * 37) % 400,
                "ttft_ms": 100.0 + (i * 13) % 90,
                "usage": {"input_tokens": 20 + i % 40, "output_tokens": 30 + i % 70},
                "cost_usd": 0.0001,
                "metadata": {"category": topic},
                "request": {
                    "messages": [{"role": "user", "content": f"Explain {topic} number {number} in detail, please."}]
                },
                "response": {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": f"Here is {topic} {i}: " + "words " * (i % 50)},
                            "finish_reason": "stop",
                        }
                    ]
                },
            }
            out.write(orjson.dumps(record) + b"\n")
