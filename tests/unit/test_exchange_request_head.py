"""A captured call's request head is read with its bookkeeping, and its request body is kept whole.

The relay hands `Proxy.relay_exchange` the few request headers it reads; the client's request
id, the metadata headers, the body's Content-Encoding and the sample id are taken from them in
`_finish` (in the finished calls' batch), and must come out exactly as when they were read at the
start of the call.
"""

from __future__ import annotations

import gzip
import re
import time
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from llmwatch.agent.components import load_config
from llmwatch.agent.runtime import Agent
from llmwatch.collectors.receivers.proxy.capture import Exchange, analyze
from llmwatch.collectors.receivers.proxy.config import ProxyMetrics
from llmwatch.collectors.receivers.proxy.handler import Proxy
from llmwatch.collectors.receivers.proxy.relay import _Call

REQUEST = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]})
RESPONSE = orjson.dumps(
    {
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
)


@pytest.fixture
def proxy_and_queue(tmp_path: Any) -> tuple[Proxy, list[Any]]:
    cfg = load_config(
        overrides={
            "upstream": "http://127.0.0.1:9",
            "data_dir": str(tmp_path),
            "scoring": {"enabled": False},
            "sampling": {"rate": 1.0},
        }
    )
    agent = Agent(cfg)
    proxy = next(c.proxy for c in agent.components.values() if isinstance(getattr(c, "proxy", None), Proxy))
    queued: list[Any] = []
    agent.intake.queue.offer = lambda item: queued.append(item) or True  # type: ignore[method-assign]
    return proxy, queued


def answered(ex: Exchange, request_body: bytes) -> Exchange:
    now = time.perf_counter()
    ex.request_body = request_body
    ex.status = 200
    ex.response_headers = {"content-type": "application/json"}
    ex.response_chunks.append(RESPONSE)
    ex.chunk_ends.append(len(RESPONSE))
    ex.chunk_times.append(now)
    ex.captured_bytes = len(RESPONSE)
    ex.t_end = now
    return ex


def test_the_request_head_is_read_in_the_batch_as_it_was_at_the_start_of_the_call(proxy_and_queue):
    proxy, queued = proxy_and_queue
    headers = {
        "x-request-id": "r" * 300,
        "content-encoding": "gzip",
        "x-llmwatch-category": "billing" * 60,
    }
    ex = proxy.relay_exchange("POST", "/v1/chat/completions", headers, time.perf_counter(), 1_700_000_000.0)
    # Nothing is read while the call runs: no id, no sample id, no metadata yet.
    assert (ex.request_id, ex.sample_id, ex.metadata, ex.request_encoding) == ("", "", {}, None)
    proxy.finish(answered(ex, gzip.compress(REQUEST)))
    proxy.flush()
    (captured,) = queued
    ex = captured.exchange
    assert ex.request_id == "r" * 128  # bounded as before
    assert ex.client_request_id == "r" * 128
    assert ex.metadata == {"category": ("billing" * 60)[:256]}
    assert ex.request_encoding == "gzip"
    assert ex.sample_id.startswith("llmw-") and len(ex.sample_id) == 5 + 16
    assert ex.request_headers is None  # read once, then let go
    # The gzip body was decoded by the analysis: the request's model is known.
    assert captured.facts.model == "gpt-4o-mini" and "request_undecodable" not in captured.facts.notes


def test_a_call_without_a_request_id_is_sampled_by_its_own_sample_id(proxy_and_queue):
    proxy, queued = proxy_and_queue
    ex = proxy.relay_exchange("POST", "/v1/chat/completions", {}, time.perf_counter(), 1_700_000_000.0)
    proxy.finish(answered(ex, REQUEST))
    proxy.flush()
    (captured,) = queued
    assert captured.exchange.client_request_id is None
    assert captured.exchange.request_id == captured.exchange.sample_id != ""
    assert captured.exchange.metadata == {}


def test_each_call_gets_its_own_sample_id(proxy_and_queue):
    proxy, queued = proxy_and_queue
    for _ in range(50):
        proxy.finish(answered(proxy.relay_exchange("POST", "/v1/chat/completions", {}, 0.0, 0.0), REQUEST))
    proxy.flush()
    assert len({c.exchange.sample_id for c in queued}) == 50


def call_with_buffer(limit: int) -> _Call:
    client = SimpleNamespace(body_complete=lambda call: None, body_timer=None, feeding=False)
    call = _Call(client)  # type: ignore[arg-type]
    call.local = (400, b"")  # answered by the proxy: the body is only captured, sent nowhere
    call.ex = Exchange(request_id="", started_at=0.0, t0=0.0, method="POST", route="/", max_body_bytes=limit)
    call.req_buf = bytearray()
    return call


def test_a_body_in_one_read_is_kept_as_it_came():
    call = call_with_buffer(1 << 20)
    piece = REQUEST * 3
    call.body(piece)
    call.body_end()
    assert call.ex is not None and call.ex.request_body is piece  # not copied


@pytest.mark.parametrize("sizes", [[1, 1, 1], [5, 0, 7], [0, 3], [100, 1, 200, 3]])
def test_a_body_in_many_reads_is_captured_whole_and_in_order(sizes):
    call = call_with_buffer(1 << 20)
    pieces = [bytes([65 + i]) * n for i, n in enumerate(sizes)]
    for piece in pieces:
        call.body(piece)
    call.body_end()
    assert call.ex is not None and call.ex.request_body == b"".join(pieces)
    assert type(call.ex.request_body) is bytes


@pytest.mark.parametrize("sizes", [[11], [6, 5], [10, 1], [3, 3, 3, 3]])
def test_a_body_over_the_limit_is_not_kept_and_says_so(sizes):
    call = call_with_buffer(10)
    for n in sizes:
        call.body(b"x" * n)
    call.body_end()
    assert call.ex is not None and call.ex.request_body is None
    assert call.ex.notes == ["request_too_large"]


def test_the_reasons_the_capture_skipped_help_names_are_ones_capture_counts():
    """The help of llmwatch_capture_skipped (on /metrics and in docs/reference/metrics.md) names
    reasons as examples; each must be a label value a call can get (it named `body_too_large`,
    which nothing counts: a body over capture.max_body_bytes is `request_too_large`)."""
    too_large = call_with_buffer(10)
    too_large.body(b"x" * 11)
    too_large.body_end()
    assert too_large.ex is not None
    not_json = Exchange(request_id="", started_at=0.0, t0=0.0, method="POST", route="/v1/chat/completions")
    not_json.request_body = b"model=gpt-4o&x=1"
    not_json.status = 400
    counted = set(too_large.ex.notes) | set(analyze(not_json).notes)

    examples = re.search(r"by reason \(([^)]*)\)", ProxyMetrics.capture_skipped.help)
    assert examples is not None
    named = {name for name in re.findall(r"[a-z_]+", examples.group(1))}
    assert named and named <= counted, f"named in the help, never counted: {sorted(named - counted)}"
