"""Captured exchanges and server-sent-event bodies built by hand, for capture tests."""

from __future__ import annotations

import orjson

from llmwatch.collectors.receivers.proxy.capture import Exchange


def sse(*events):
    return [b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n\n" for e in events]


def exchange(route, request, chunks, *, content_type="application/json", times=None, status=200, encoding=None):
    ex = Exchange(request_id="r1", started_at=1_700_000_000.0, t0=100.0, method="POST", route=route)
    ex.request_body = orjson.dumps(request) if not isinstance(request, bytes) else request
    ex.status = status
    ex.response_headers = {"content-type": content_type}
    if encoding:
        ex.response_headers["content-encoding"] = encoding
    size = 0
    for i, chunk in enumerate(chunks):
        size += len(chunk)
        ex.response_chunks.append(chunk)
        ex.chunk_ends.append(size)
        ex.chunk_times.append(times[i] if times else 100.0 + 0.01 * (i + 1))
    ex.t_end = 101.0
    return ex


def chunk(content=None, role=None, finish=None, index=0):
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }
