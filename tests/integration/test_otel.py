"""OpenTelemetry both ways, against real receivers and real SDK exporters.

Export: the proxy's spans go over OTLP/HTTP to an aiohttp collector that decodes them with
opentelemetry-proto, and over gRPC to a grpcio TraceService; a dead or hung collector costs
spans (counted), never traffic. Ingest: spans from the real opentelemetry-sdk with its OTLP/HTTP
exporter, in the GenAI, OpenLLMetry and OpenInference styles, become stored, redacted samples.
"""

from __future__ import annotations

import asyncio
import gzip
import signal
import socket
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import aiohttp
import grpc
import openai
import orjson
import pytest
import structlog.testing
from aiohttp import web
from google.rpc import status_pb2
from helpers.agents import calls_observed, drained, metric, proxy_url, scrape, wait_until
from helpers.ports import dead_address
from helpers.procs import Proc, agent_env, agent_started
from helpers.upstreams import serve
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from llmwatch.agent.apps.simulator.server import FAULT_HEADER
from llmwatch.agent.components import load_config
from llmwatch.agent.runtime import Agent
from llmwatch.core.config import ConfigError
from llmwatch.core.records import extract_answer_text, extract_prompt_text

MODEL = "sim-gpt-4o-mini"
API_KEY = "sk-test-abcdefghijklmnopqrstuvwxyz"


def client(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base + "/v1", api_key=API_KEY, max_retries=0)


def attrs_of(span: Span) -> dict:
    out = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = (
            [getattr(v, v.WhichOneof("value")) for v in kv.value.array_value.values]
            if kind == "array_value"
            else getattr(kv.value, kind)
        )
    return out


class HttpCollector:
    """An OTLP/HTTP trace endpoint that keeps every request: headers, raw bytes, decoded spans."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict, bytes, trace_service_pb2.ExportTraceServiceRequest]] = []

    def app(self) -> web.Application:
        async def traces(request: web.Request) -> web.Response:
            body = await request.read()
            raw = gzip.decompress(body) if request.headers.get("Content-Encoding") == "gzip" else body
            self.requests.append(
                (dict(request.headers), raw, trace_service_pb2.ExportTraceServiceRequest.FromString(raw))
            )
            return web.Response(
                body=trace_service_pb2.ExportTraceServiceResponse().SerializeToString(),
                content_type="application/x-protobuf",
            )

        app = web.Application()
        app.router.add_post("/v1/traces", traces)
        return app

    def spans(self) -> list[tuple[dict, Span]]:
        return [
            ({kv.key: kv.value.string_value for kv in rs.resource.attributes}, span)
            for _, _, req in self.requests
            for rs in req.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]


async def test_export_over_otlp_http_one_span_per_call_with_genai_attributes(sim, make_agent):
    collector = HttpCollector()
    runner, url = await serve(collector.app())
    try:
        agent = await make_agent(
            sim.url,
            sampling={"rate": 1.0},
            otel={
                "enabled": True,
                "endpoint": url + "/v1/traces",
                "headers": {"Authorization": "Bearer collector-token-123"},
                "capture_content": True,
            },
        )
        c = client(proxy_url(agent))
        prompt = [{"role": "user", "content": "My email is jane.doe@example.com. How do I roast a chicken?"}]
        await c.chat.completions.create(model=MODEL, messages=prompt, max_tokens=64, temperature=0.3, top_p=0.9, seed=1)
        stream = await c.chat.completions.create(
            model=MODEL, messages=prompt, stream=True, stream_options={"include_usage": True}
        )
        async for _ in stream:
            pass
        try:
            await c.chat.completions.create(model=MODEL, messages=prompt, extra_headers={FAULT_HEADER: "status=503"})
        except openai.APIStatusError as exc:
            assert exc.status_code == 503
        samples = {s["id"]: s for s in await drained(agent, 3)}
        await asyncio.to_thread(agent.otel.flush)
        await wait_until(lambda: len(collector.spans()) >= 3)
    finally:
        await runner.cleanup()

    spans = collector.spans()
    assert len(spans) == 3, "one span per call"
    by_kind = {}
    for resource, span in spans:
        a = attrs_of(span)
        assert resource["service.name"] == "llmwatch"
        assert span.name == f"chat {MODEL}" and span.kind == Span.SPAN_KIND_CLIENT
        assert (
            a["gen_ai.operation.name"],
            a["gen_ai.provider.name"],
            a["gen_ai.system"],
            a["gen_ai.request.model"],
        ) == ("chat", "openai", "openai", MODEL)
        assert a["server.address"] == "127.0.0.1" and a["server.port"] == int(sim.url.rsplit(":", 1)[1])
        assert a["llmwatch.sampled"] is True
        sample = samples[a["llmwatch.sample_id"]]
        # Start and end are the call's own times: the span lasts exactly what the sample measured.
        assert abs((span.end_time_unix_nano - span.start_time_unix_nano) / 1e6 - sample["latency_ms"]) < 0.01
        assert abs(span.start_time_unix_nano / 1e9 - time.time()) < 60
        assert a["http.response.status_code"] == sample["status"]
        by_kind["error" if "error.type" in a else "stream" if "llmwatch.ttft_ms" in a else "plain"] = (span, a, sample)
    assert set(by_kind) == {"plain", "stream", "error"}

    span, a, sample = by_kind["plain"]
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (
        64,
        0.3,
        0.9,
    )
    assert a["gen_ai.response.model"] == sample["response_model"] and a["llmwatch.model_version"] == "A"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        sample["usage"]["input_tokens"],
        sample["usage"]["output_tokens"],
    )
    assert a["gen_ai.response.finish_reasons"] == [sample["finish_reason"]]
    assert span.status.code != PbStatus.STATUS_CODE_ERROR
    # Content, as the conventions' event, redacted like the stored sample.
    (event,) = [e for e in span.events if e.name == "gen_ai.client.inference.operation.details"]
    content = {kv.key: orjson.loads(kv.value.string_value) for kv in event.attributes}
    assert (
        content["gen_ai.input.messages"][0]["parts"][0]["content"] == "My email is [EMAIL]. How do I roast a chicken?"
    )
    assert content["gen_ai.output.messages"][0]["parts"][0]["content"] == extract_answer_text(sample["response"])

    span, a, sample = by_kind["stream"]
    assert a["llmwatch.ttft_ms"] == sample["ttft_ms"] and 0 < a["llmwatch.ttft_ms"] < sample["latency_ms"]

    span, a, sample = by_kind["error"]
    assert a["error.type"] == "503" and a["http.response.status_code"] == 503
    assert span.status.code == PbStatus.STATUS_CODE_ERROR

    # The collector's credential went to the collector, and no secret is in any span.
    assert all(h.get("Authorization") == "Bearer collector-token-123" for h, _, _ in collector.requests)
    raw = b"".join(body for _, body, _ in collector.requests)
    for secret in (API_KEY.encode(), b"collector-token", b"Bearer", b"uthorization", b"jane.doe@example.com"):
        assert secret not in raw
    m = await scrape(agent)
    assert metric(m, "llmwatch_otel_spans_total", outcome="exported") == 3
    assert metric(m, "llmwatch_otel_spans_total", outcome="dropped") == 0


class GrpcTraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metadata: list[dict] = []

    def Export(self, request, context):  # noqa: N802 (the generated service's name)
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        return trace_service_pb2.ExportTraceServiceResponse()


async def test_export_over_otlp_grpc(sim, make_agent):
    service = GrpcTraceService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        agent = await make_agent(
            sim.url,
            otel={
                "enabled": True,
                "protocol": "grpc",
                "endpoint": f"127.0.0.1:{port}",
                "headers": {"X-Collector-Token": "grpc-secret-42"},
            },
        )
        c = client(proxy_url(agent))
        for _ in range(2):
            await c.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Tell me about Jupiter"}]
            )
        await wait_until(lambda: calls_observed(agent) >= 2)  # both spans ended: the flush exports them
        await asyncio.to_thread(agent.otel.flush)
        await wait_until(
            lambda: (
                sum(len(ss.spans) for r in service.requests for rs in r.resource_spans for ss in rs.scope_spans) >= 2
            )
        )
    finally:
        server.stop(0)
    spans = [s for r in service.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == 2
    for span in spans:
        a = attrs_of(span)
        assert (
            span.name == f"chat {MODEL}" and a["gen_ai.request.model"] == MODEL and a["gen_ai.usage.output_tokens"] > 0
        )
        assert span.end_time_unix_nano > span.start_time_unix_nano
        assert not any(e.name.startswith("gen_ai.client") for e in span.events), "no content unless capture_content"
    assert all(md.get("x-collector-token") == "grpc-secret-42" for md in service.metadata)
    assert b"grpc-secret-42" not in b"".join(r.SerializeToString() for r in service.requests)


async def test_a_dead_or_hung_collector_costs_spans_never_traffic(sim, make_agent):
    # Hung: accepts connections (kernel backlog) and never answers, so every export waits out its timeout.
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    nowhere = dead_address()  # nothing listens there: connection refused
    try:
        slow = await make_agent(
            sim.url,
            otel={
                "enabled": True,
                "endpoint": f"http://127.0.0.1:{hung.getsockname()[1]}/v1/traces",
                "timeout_s": 1.0,
                "max_queue": 2,
            },
        )
        dead = await make_agent(
            sim.url, otel={"enabled": True, "endpoint": f"http://{nowhere}/v1/traces", "timeout_s": 0.5}
        )
        c_slow, c_dead = client(proxy_url(slow)), client(proxy_url(dead))

        async def call(c):
            t = time.perf_counter()
            r = await c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8)
            assert r.choices[0].message.content
            return time.perf_counter() - t

        t0 = time.perf_counter()
        durations = await asyncio.gather(*(call(c_slow) for _ in range(20)), *(call(c_dead) for _ in range(3)))
        # The hung collector holds an export for a second; calls are not held with it.
        assert time.perf_counter() - t0 < 1.0 and max(durations) < 1.0
        await wait_until(lambda: calls_observed(slow) >= 20 and calls_observed(dead) >= 3)  # every span ended
        await asyncio.gather(asyncio.to_thread(slow.otel.flush), asyncio.to_thread(dead.otel.flush))

        async def outcomes(agent):
            m = await scrape(agent)
            return {o: metric(m, "llmwatch_otel_spans_total", outcome=o) for o in ("exported", "failed", "dropped")}

        o = await outcomes(slow)
        assert o["exported"] == 0 and o["dropped"] > 0 and o["failed"] > 0, o
        # A batch is popped before it is exported, so at most a queue plus a batch in flight survive.
        assert o["failed"] + o["dropped"] >= 20 - 2, o
        o = await outcomes(dead)
        assert o == {"exported": 0, "failed": 3, "dropped": 0}, o
        for agent in (slow, dead):
            m = await scrape(agent)
            assert metric(m, "llmwatch_internal_errors_total") == 0
            assert metric(m, "gen_ai_client_operation_duration_seconds_count", error_type="") >= 3
    finally:
        hung.close()


# --- ingest ------------------------------------------------------------------------------------

T0 = 1_767_000_000_000_000_000  # ns; fixed so latencies are exact


def emit_spans(port: int, build) -> None:
    """The real SDK and OTLP/HTTP exporter (gzip), as an instrumented app would send them."""
    provider = TracerProvider(resource=Resource.create({"service.name": "shop-app"}), shutdown_on_exit=False)
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", compression=Compression.Gzip, timeout=5)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    build(provider.get_tracer("app"))
    assert provider.force_flush(10_000)
    provider.shutdown()


def build_three_styles(tracer) -> None:
    # (a) GenAI semantic conventions, content as gen_ai.input/output.messages attributes.
    s = tracer.start_span(
        "chat gpt-4o",
        kind=SpanKind.CLIENT,
        start_time=T0,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.input_tokens": 12,
            "gen_ai.usage.output_tokens": 3,
            "gen_ai.response.finish_reasons": ["stop"],
            "gen_ai.request.temperature": 0.2,
            "llmwatch.model_version": "v7",
            "gen_ai.input.messages": orjson.dumps(
                [
                    {
                        "role": "user",
                        "parts": [{"type": "text", "content": "Capital of France? Reply to bob@example.com"}],
                    }
                ]
            ).decode(),
            "gen_ai.output.messages": orjson.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Paris."}], "finish_reason": "stop"}]
            ).decode(),
        },
    )
    s.end(end_time=T0 + 250_000_000)
    # (a') the earlier conventions: per-message span events.
    s = tracer.start_span(
        "chat gpt-4o-mini",
        kind=SpanKind.CLIENT,
        start_time=T0,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.model": "gpt-4o-mini",
            "error.type": "429",
            "http.response.status_code": 429,
        },
    )
    s.add_event("gen_ai.system.message", {"content": "You are terse."})
    s.add_event("gen_ai.user.message", {"content": "Name a prime number"})
    s.set_status(Status(StatusCode.ERROR))
    s.end(end_time=T0 + 80_000_000)
    s = tracer.start_span(
        "chat gpt-4o-mini",
        kind=SpanKind.CLIENT,
        start_time=T0,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
        },
    )
    s.add_event("gen_ai.user.message", {"content": "Name a color"})
    s.add_event(
        "gen_ai.choice",
        {
            "index": 0,
            "finish_reason": "stop",
            "message": orjson.dumps({"role": "assistant", "content": "Teal."}).decode(),
        },
    )
    s.end(end_time=T0 + 90_000_000)
    # (b) OpenLLMetry / Traceloop.
    s = tracer.start_span(
        "openai.chat",
        kind=SpanKind.CLIENT,
        start_time=T0,
        attributes={
            "llm.request.type": "chat",
            "gen_ai.system": "OpenAI",
            "gen_ai.request.model": "gpt-3.5-turbo",
            "gen_ai.response.model": "gpt-3.5-turbo-0125",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "You are a travel agent.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "Plan a day in Rome",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Colosseum, then pasta.",
            "gen_ai.completion.0.finish_reason": "stop",
            "gen_ai.usage.prompt_tokens": 20,
            "gen_ai.usage.completion_tokens": 5,
            "llm.usage.total_tokens": 25,
        },
    )
    s.end(end_time=T0 + 400_000_000)
    # (c) OpenInference / Arize Phoenix, messages as flattened attributes ...
    s = tracer.start_span(
        "ChatCompletion",
        start_time=T0,
        attributes={
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.provider": "openai",
            "input.value": orjson.dumps({"messages": [{"role": "user", "content": "Say hi in French"}]}).decode(),
            "input.mime_type": "application/json",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Say hi in French",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Bonjour !",
            "llm.token_count.prompt": 6,
            "llm.token_count.completion": 3,
            "llm.invocation_parameters": '{"temperature": 0.7}',
        },
    )
    s.end(end_time=T0 + 120_000_000)
    # ... and with only input.value / output.value (plain text).
    s = tracer.start_span(
        "llm",
        start_time=T0,
        attributes={
            "openinference.span.kind": "LLM",
            "llm.model_name": "llama-3-8b",
            "input.value": "Translate 'cat' to German",
            "input.mime_type": "text/plain",
            "output.value": "Katze",
            "output.mime_type": "text/plain",
        },
    )
    s.end(end_time=T0 + 60_000_000)
    # Not an LLM call: ignored.
    s = tracer.start_span(
        "GET /api/cart",
        kind=SpanKind.SERVER,
        start_time=T0,
        attributes={"http.request.method": "GET", "http.route": "/api/cart"},
    )
    s.end(end_time=T0 + 5_000_000)
    s = tracer.start_span(
        "execute_tool get_weather",
        start_time=T0,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"},
    )
    s.end(end_time=T0 + 5_000_000)


async def test_ingest_genai_openllmetry_and_openinference_spans_from_the_real_sdk(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, otel={"ingest_listen": "127.0.0.1:0"})
    await asyncio.to_thread(emit_spans, agent.ingest_port, build_three_styles)
    samples = await drained(agent, 6)
    assert len(samples) == 6
    by_model = {}
    for s in samples:
        assert s["metadata"]["source"] == "otlp" and s["metadata"]["service_name"] == "shop-app" and s["redacted"]
        by_model.setdefault(s["model"], []).append(s)

    (genai,) = by_model["gpt-4o"]
    assert extract_prompt_text(genai["request"]) == "Capital of France? Reply to [EMAIL]", "redacted like proxy samples"
    assert extract_answer_text(genai["response"]) == "Paris."
    assert (genai["operation"], genai["route"], genai["response_model"], genai["model_version"]) == (
        "chat",
        "/v1/chat/completions",
        "gpt-4o-2024-08-06",
        "v7",
    )
    assert genai["usage"] == {
        "input_tokens": 12,
        "output_tokens": 3,
        "estimated": False,
        "cached_input_tokens": None,  # the span reports no cache or reasoning counts
        "cache_write_tokens": None,
        "reasoning_tokens": None,
    }
    assert (genai["latency_ms"], genai["finish_reason"], genai["status"], genai["error_type"]) == (
        250.0,
        "stop",
        200,
        None,
    )
    assert genai["request"]["temperature"] == 0.2 and genai["timestamp"].startswith("2025-12-29")

    old = {extract_prompt_text(s["request"]): s for s in by_model["gpt-4o-mini"] if s["metadata"].get("span_id")}
    errored = old["Name a prime number"]
    assert errored["request"]["messages"][0] == {"role": "system", "content": "You are terse."}
    assert (errored["status"], errored["error_type"], errored["sample_reason"], errored["latency_ms"]) == (
        429,
        "429",
        "error",
        80.0,
    )
    colored = old["Name a color"]
    assert extract_answer_text(colored["response"]) == "Teal." and colored["finish_reason"] == "stop"
    assert colored["usage"]["estimated"] is True, "no usage in the span: estimated from the text"

    (traceloop,) = by_model["gpt-3.5-turbo"]
    assert [m["role"] for m in traceloop["request"]["messages"]] == ["system", "user"]
    assert extract_prompt_text(traceloop["request"]) == "Plan a day in Rome"
    assert extract_answer_text(traceloop["response"]) == "Colosseum, then pasta."
    assert (traceloop["usage"]["input_tokens"], traceloop["usage"]["output_tokens"], traceloop["latency_ms"]) == (
        20,
        5,
        400.0,
    )
    assert traceloop["model_version"] == "gpt-3.5-turbo-0125"

    phoenix = {s["latency_ms"]: s for s in by_model["gpt-4o-mini"] if s["latency_ms"] == 120.0}[120.0]
    assert (
        extract_prompt_text(phoenix["request"]) == "Say hi in French"
        and extract_answer_text(phoenix["response"]) == "Bonjour !"
    )
    assert (phoenix["usage"]["input_tokens"], phoenix["usage"]["output_tokens"]) == (6, 3) and phoenix["request"][
        "temperature"
    ] == 0.7
    (plain,) = by_model["llama-3-8b"]
    assert (
        extract_prompt_text(plain["request"]) == "Translate 'cat' to German"
        and extract_answer_text(plain["response"]) == "Katze"
    )
    assert plain["latency_ms"] == 60.0

    m = await scrape(agent)
    assert metric(m, "llmwatch_otlp_ingest_spans_total", outcome="not_llm") == 2
    assert metric(m, "llmwatch_otlp_ingest_spans_total", outcome="sampled") == 6


def otlp_json(*spans: dict) -> bytes:
    return orjson.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-app"}}]},
                    "scopeSpans": [{"scope": {"name": "hand"}, "spans": list(spans)}],
                }
            ]
        }
    )


def json_span(span_id: str, content: str, *, trace_id: str = "5b8efff798038103d269b633813fc60c") -> dict:
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "name": "chat m-json",
        "kind": 3,
        "startTimeUnixNano": str(T0),
        "endTimeUnixNano": str(T0 + 42_000_000),
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "m-json"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "4"}},
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 2}},
            {"key": "gen_ai.response.finish_reasons", "value": {"arrayValue": {"values": [{"stringValue": "stop"}]}}},
            {
                "key": "gen_ai.input.messages",
                "value": {
                    "stringValue": orjson.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": content}]}]
                    ).decode()
                },
            },
            {
                "key": "gen_ai.output.messages",
                "value": {"stringValue": '[{"role":"assistant","parts":[{"type":"text","content":"ok"}]}]'},
            },
        ],
        "status": {},
        "futureField": {"ignored": True},
    }


async def test_ingest_json_bodies_partial_success_and_bad_requests(sim, make_agent):
    agent = await make_agent(
        sim.url, sampling={"rate": 1.0}, otel={"ingest_listen": "127.0.0.1:0", "ingest_max_body_bytes": 65536}
    )
    url = f"http://127.0.0.1:{agent.ingest_port}/v1/traces"
    async with aiohttp.ClientSession() as http:

        async def post(body: bytes, content_type: str, **headers):
            async with http.post(url, data=body, headers={"Content-Type": content_type, **headers}) as r:
                return r.status, r.headers.get("Content-Type", ""), await r.read()

        status, ctype, body = await post(otlp_json(json_span("eee19b7ec3c1b174", "json one")), "application/json")
        assert (status, ctype, orjson.loads(body)) == (200, "application/json", {})
        # One good span and one without ids: partial success, the bad one named.
        status, _, body = await post(
            gzip.compress(otlp_json(json_span("eee19b7ec3c1b175", "json two"), json_span("", "bad", trace_id=""))),
            "application/json",
            **{"Content-Encoding": "gzip"},
        )
        answer = orjson.loads(body)
        assert (
            status == 200
            and answer["partialSuccess"]["rejectedSpans"] in ("1", 1)
            and "trace_id" in answer["partialSuccess"]["errorMessage"]
        )

        status, _, body = await post(b"\xff\xfe definitely not protobuf", "application/x-protobuf")
        assert status == 400 and "protobuf" in status_pb2.Status.FromString(body).message
        status, _, body = await post(b'{"resourceSpans": [', "application/json")
        assert status == 400 and "not valid JSON" in orjson.loads(body)["message"]
        status, _, body = await post(
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "zz"}]}]}]}', "application/json"
        )
        assert status == 400 and "not hex" in orjson.loads(body)["message"]
        status, _, body = await post(b"not gzip at all", "application/json", **{"Content-Encoding": "gzip"})
        assert status == 400 and "gzip" in orjson.loads(body)["message"]
        status, _, body = await post(b"hello", "text/plain")
        assert status == 415 and "application/x-protobuf" in orjson.loads(body)["message"]
        status, _, body = await post(b"{" + b" " * 70_000 + b"}", "application/json")
        assert status == 413 and "limit" in orjson.loads(body)["message"]
        status, _, body = await post(
            gzip.compress(b"{" + b" " * 200_000 + b"}"), "application/json", **{"Content-Encoding": "gzip"}
        )
        assert status == 413, "the decompressed size counts too"

        # Still serving after all that.
        status, _, _ = await post(otlp_json(json_span("eee19b7ec3c1b176", "json three")), "application/json")
        assert status == 200
    samples = await drained(agent, 3)
    assert sorted(extract_prompt_text(s["request"]) for s in samples) == ["json one", "json three", "json two"]
    assert all(
        s["latency_ms"] == 42.0 and s["usage"]["input_tokens"] == 4 and s["metadata"]["service_name"] == "json-app"
        for s in samples
    )
    m = await scrape(agent)
    assert metric(m, "llmwatch_otlp_ingest_spans_total", outcome="rejected") == 1


async def test_an_error_type_that_only_looks_numeric_keeps_its_span(sim, make_agent):
    """error.type "503" is the status; "\u00b2" passes str.isdigit() but is no number: the span is kept, status 500."""
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, otel={"ingest_listen": "127.0.0.1:0"})
    spans = []
    for i, error_type in enumerate(("503", "\u00b2")):
        span = json_span(f"ccc19b7ec3c1b17{i}", f"failed {i}")
        span["attributes"].append({"key": "error.type", "value": {"stringValue": error_type}})
        spans.append(span)
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{agent.ingest_port}/v1/traces",
            data=otlp_json(*spans),
            headers={"Content-Type": "application/json"},
        ) as r:
            assert (r.status, orjson.loads(await r.read())) == (200, {}), "no span rejected"
    samples = await drained(agent, 2)
    got = sorted((extract_prompt_text(s["request"]), s["status"], s["error_type"]) for s in samples)
    assert got == [("failed 0", 503, "503"), ("failed 1", 500, "\u00b2")]


async def test_a_span_body_over_the_capture_limit_is_not_stored_as_for_proxied_calls(sim, make_agent):
    agent = await make_agent(
        sim.url, sampling={"rate": 1.0}, capture={"max_body_bytes": 4096}, otel={"ingest_listen": "127.0.0.1:0"}
    )
    big, small = json_span("ddd29b7ec3c1b174", "x" * 10_000), json_span("ddd29b7ec3c1b175", "small")
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{agent.ingest_port}/v1/traces",
            data=otlp_json(big, small),
            headers={"Content-Type": "application/json"},
        ) as r:
            assert r.status == 200
    by_id = {s["metadata"]["span_id"]: s for s in await drained(agent, 2)}
    stored = by_id["ddd29b7ec3c1b174"]
    assert stored["request"] is None and "request_too_large" in stored["capture_notes"]
    assert extract_answer_text(stored["response"]) == "ok" and stored["usage"]["input_tokens"] == 4, "the rest kept"
    assert extract_prompt_text(by_id["ddd29b7ec3c1b175"]["request"]) == "small"
    assert by_id["ddd29b7ec3c1b175"]["capture_notes"] == []


async def test_a_gzipped_body_is_inflated_off_the_event_loop_the_proxy_shares(sim, make_agent, monkeypatch):
    """16 KB of gzip inflate to 16 MiB in ~50 ms: on the loop, every proxied stream would wait.
    A body of several gzip members is read whole, as RFC 1952 defines it."""
    from llmwatch.collectors.receivers import otlp

    threads: list[int] = []
    statuses: list[int] = []
    real = otlp.inflate

    def spy(*args):
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(otlp, "inflate", spy)
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, otel={"ingest_listen": "127.0.0.1:0"})
    async with aiohttp.ClientSession() as http:
        whole = otlp_json(json_span("fff29b7ec3c1b174", "zipped"), json_span("fff29b7ec3c1b175", "in two members"))
        # Two gzip members one after the other (RFC 1952, `cat a.gz b.gz`): one body.
        members = gzip.compress(whole[:100]) + gzip.compress(whole[100:])
        for body in (members, b"not gzip", gzip.compress(b" " * (17 << 20))):
            async with http.post(
                f"http://127.0.0.1:{agent.ingest_port}/v1/traces",
                data=body,
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            ) as r:
                statuses.append(r.status)
    assert statuses == [200, 400, 413] and len(threads) == 3
    assert threading.get_ident() not in threads, "inflated on the event loop (the test's loop is the agent's)"
    samples = await drained(agent, 2)
    assert sorted(extract_prompt_text(s["request"]) for s in samples) == ["in two members", "zipped"]


async def test_beyond_eight_requests_in_decoding_a_sender_is_told_503_and_when_to_retry(sim, make_agent, monkeypatch):
    """The receiver decodes in two threads of its own (not the loop's default executor, which also
    resolves the proxy's upstream names) and holds at most eight requests; the ninth is refused
    before its body is read, with the status OTLP exporters retry."""
    from llmwatch.collectors.otel.factory import OtlpReceiverComponent
    from llmwatch.collectors.receivers import otlp

    release, names = threading.Event(), []
    real = otlp.inflate

    def held(*args):
        names.append(threading.current_thread().name)
        assert release.wait(30), "the test never released the decoders"
        return real(*args)

    monkeypatch.setattr(otlp, "inflate", held)
    agent = await make_agent(sim.url, sampling={"rate": 1.0}, otel={"ingest_listen": "127.0.0.1:0"})
    receiver = agent._component(OtlpReceiverComponent).receiver
    url = f"http://127.0.0.1:{agent.ingest_port}/v1/traces"
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with aiohttp.ClientSession() as http:

        async def send(i: int) -> int:
            body = gzip.compress(otlp_json(json_span(f"abc19b7ec3c1b1{i:02d}", f"held {i}")))
            async with http.post(url, data=body, headers=headers) as r:
                return r.status

        try:
            eight = [asyncio.ensure_future(send(i)) for i in range(8)]
            await wait_until(lambda: receiver._pending == 8 and len(names) == 2)
            async with http.post(url, data=gzip.compress(b"{}"), headers=headers) as r:
                refused = (r.status, r.headers.get("Retry-After"), orjson.loads(await r.read()))
        finally:
            release.set()
        assert await asyncio.gather(*eight) == [200] * 8
    assert refused[:2] == (503, "1") and refused[2]["code"] == 14 and "retry later" in refused[2]["message"]
    assert len(names) == 8 and all(n.startswith("llmwatch-otlp") for n in names), names
    assert len(await drained(agent, 8)) == 8


async def test_ingested_spans_fall_back_to_model_version_default_as_proxied_calls_do(sim, make_agent):
    """Version order, one intake for both ways in: declared (header / span attribute) -> model_version.default -> response model -> request model."""
    agent = await make_agent(
        sim.url, sampling={"rate": 1.0}, model_version={"default": "canary-3"}, otel={"ingest_listen": "127.0.0.1:0"}
    )
    declared = json_span("ddd19b7ec3c1b175", "declared")
    declared["attributes"].append({"key": "llmwatch.model_version", "value": {"stringValue": "v9"}})
    answered = json_span("ddd19b7ec3c1b176", "answered")
    answered["attributes"].append({"key": "gen_ai.response.model", "value": {"stringValue": "m-json-2025"}})
    async with aiohttp.ClientSession() as http:
        body = otlp_json(json_span("ddd19b7ec3c1b174", "undeclared"), declared, answered)
        async with http.post(
            f"http://127.0.0.1:{agent.ingest_port}/v1/traces", data=body, headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 200
    samples = await drained(agent, 3)
    versions = {extract_prompt_text(s["request"]): s["model_version"] for s in samples}
    assert versions == {"undeclared": "canary-3", "declared": "v9", "answered": "canary-3"}
    m = await scrape(agent)
    assert metric(m, "llmwatch_samples_total", reason="rate") == 3, "counted once each, when selected"
    assert metric(m, "llmwatch_otlp_ingest_spans_total", outcome="sampled") == 3


async def test_llmwatch_spans_round_trip_through_its_own_receiver(sim, make_agent):
    # The export endpoint is fixed before the agent binds its receiver on port 0, so the agent
    # exports to a relay (on a port it bound itself) that forwards each export unchanged to the
    # receiver's reported port: no probed port to race for.
    receiver: list[str] = []

    async def relay(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "content-encoding")}
        async with aiohttp.ClientSession() as http:
            async with http.post(receiver[0] + request.path, data=body, headers=headers) as r:
                return web.Response(
                    status=r.status,
                    body=await r.read(),
                    headers={"Content-Type": r.headers.get("Content-Type", "application/x-protobuf")},
                )

    app = web.Application()
    app.router.add_post("/v1/traces", relay)
    runner, relay_url = await serve(app)
    try:
        await _round_trip(make_agent, sim.url, relay_url, receiver)
    finally:
        await runner.cleanup()


async def _round_trip(make_agent, upstream: str, relay_url: str, receiver: list[str]) -> None:
    agent = await make_agent(
        upstream,
        sampling={"rate": 1.0},
        otel={
            "enabled": True,
            "endpoint": f"{relay_url}/v1/traces",
            "capture_content": True,
            "ingest_listen": "127.0.0.1:0",
        },
    )
    receiver.append(f"http://127.0.0.1:{agent.ingest_port}")
    c = client(proxy_url(agent))
    stream = await c.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me about Saturn"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    async for _ in stream:
        pass
    await drained(agent, 1)
    await asyncio.to_thread(agent.otel.flush)
    samples = await drained(agent, 2)
    proxied, ingested = sorted(samples, key=lambda s: s["metadata"].get("source", ""))
    assert ingested["metadata"]["source"] == "otlp"
    for key in (
        "model",
        "response_model",
        "model_version",
        "status",
        "usage",
        "finish_reason",
        "ttft_ms",
        "operation",
        "route",
    ):
        assert ingested[key] == proxied[key], key
    assert abs(ingested["latency_ms"] - proxied["latency_ms"]) < 0.01
    assert extract_answer_text(ingested["response"]) == extract_answer_text(proxied["response"])
    assert extract_prompt_text(ingested["request"]) == "Tell me about Saturn"


async def test_ingest_only_agent_runs_without_a_proxy(tmp_path: Path):
    cfg = load_config(
        None,
        overrides={
            "metrics_listen": "127.0.0.1:0",
            "data_dir": str(tmp_path),
            "scoring": {"enabled": False},
            "sampling": {"rate": 1.0},
            "otel": {"ingest_listen": "127.0.0.1:0"},
        },
        environ={},
    )
    agent = Agent(cfg, serve_proxy=False)
    await agent.start()
    try:
        assert agent.proxy is None and agent.proxy_port == 0
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{agent.metrics_port}/readyz") as r:
                assert r.status == 200 and (await r.json())["checks"] == {
                    "pipeline_alive": True,
                    "ingest_listening": True,
                }
            async with http.post(
                f"http://127.0.0.1:{agent.ingest_port}/v1/traces",
                data=otlp_json(json_span("aaa19b7ec3c1b174", "solo")),
                headers={"Content-Type": "application/json"},
            ) as r:
                assert r.status == 200
        samples = await drained(agent, 1)
        assert extract_prompt_text(samples[0]["request"]) == "solo"
    finally:
        await agent.stop()


def test_llmwatch_ingest_command(tmp_path: Path):
    env = agent_env(LLMWATCH_SCORING__ENABLED="false", LLMWATCH_SAMPLING__RATE="1.0")
    proc = Proc(
        [
            sys.executable,
            "-m",
            "llmwatch.agent.cli",
            "ingest",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path),
        ],
        env=env,
    )
    try:
        port = agent_started(proc, timeout=30)["ingest_port"]  # logged once the receiver listens
        emit_spans(port, build_three_styles)
        deadline = time.time() + 10
        while time.time() < deadline and len(list((tmp_path / "samples").glob("*.jsonl"))) == 0:
            time.sleep(0.1)  # poll interval of a bounded wait for the first samples file
    finally:
        proc.popen.send_signal(signal.SIGTERM)
        proc.popen.wait(timeout=20)
        proc.stop()
    assert proc.popen.returncode == 0, proc.output()
    # otel.enabled switches the exporter only: the receiver's settings are not "off".
    assert "config_section_off" not in proc.output()
    lines = [orjson.loads(ln) for f in (tmp_path / "samples").glob("*.jsonl") for ln in f.read_bytes().splitlines()]
    assert len(lines) == 6 and {s["metadata"]["service_name"] for s in lines} == {"shop-app"}


def test_otel_config_is_checked_and_keeps_its_secrets():
    with pytest.raises(
        ConfigError, match=r"otel\.endpoint: expected HOST:PORT such as 127\.0\.0\.1:4317 \(protocol grpc\)"
    ):
        load_config(
            None, overrides={"otel": {"protocol": "grpc", "endpoint": "http://collector/v1/traces"}}, environ={}
        )
    with pytest.raises(ConfigError, match="otel.ingest_listen"):
        load_config(None, overrides={"otel": {"ingest_listen": "nowhere"}}, environ={})
    cfg = load_config(
        None,
        overrides={"otel": {"enabled": True}},
        environ={"LLMWATCH_OTEL__HEADERS__AUTHORIZATION": "Bearer s3cret-token"},
    )
    assert cfg.otel.headers["authorization"].get_secret_value() == "Bearer s3cret-token"
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.model_dump(mode="json"))
    assert cfg.otel.resolved_endpoint() == "http://127.0.0.1:4318/v1/traces"


async def test_ingest_refuses_deep_json_and_oversized_batches_without_converting_them(sim, make_agent):
    agent = await make_agent(
        sim.url, sampling={"rate": 1.0}, otel={"ingest_listen": "127.0.0.1:0", "ingest_max_spans": 3}
    )
    url = f"http://127.0.0.1:{agent.ingest_port}/v1/traces"
    async with aiohttp.ClientSession() as http:
        # 1,000 levels: within orjson's own limit, deeper than Python's recursion limit.
        deep = b'{"resourceSpans": [' + b'{"a": [' * 499 + b"1" + b"]}" * 499 + b"]}"
        async with http.post(url, data=deep, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400, "a 1,000-deep body is bad input, not a server error"
            assert "nests too deeply" in orjson.loads(await r.read())["message"]
        four = otlp_json(*(json_span(f"fff19b7ec3c1b17{i}", f"span {i}") for i in range(4)))
        async with http.post(url, data=four, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 413 and "otel.ingest_max_spans" in orjson.loads(await r.read())["message"]
        three = otlp_json(*(json_span(f"aaa29b7ec3c1b17{i}", f"kept {i}") for i in range(3)))
        async with http.post(url, data=three, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200
    samples = await drained(agent, 3)
    assert sorted(extract_prompt_text(s["request"]) for s in samples) == ["kept 0", "kept 1", "kept 2"], (
        "nothing of the refused batch was queued"
    )


async def test_ingest_with_a_bearer_token_refuses_other_senders_and_never_logs_the_token(sim, make_agent, monkeypatch):
    monkeypatch.setenv("LLMW_TEST_INGEST_TOKEN", "s3cret-ingest-token")
    with structlog.testing.capture_logs() as logs:
        agent = await make_agent(
            sim.url,
            sampling={"rate": 1.0},
            otel={"ingest_listen": "127.0.0.1:0", "ingest_token_env": "LLMW_TEST_INGEST_TOKEN"},
        )
        url = f"http://127.0.0.1:{agent.ingest_port}/v1/traces"
        body = otlp_json(json_span("bbb19b7ec3c1b174", "with token"))
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-ingest-token"}):
                async with http.post(url, data=body, headers={"Content-Type": "application/json", **headers}) as r:
                    assert r.status == 401, headers
                    assert "s3cret" not in (await r.text())
            async with http.post(
                url,
                data=body,
                headers={"Content-Type": "application/json", "Authorization": "Bearer s3cret-ingest-token"},
            ) as r:
                assert r.status == 200
        samples = await drained(agent, 1)
    assert extract_prompt_text(samples[0]["request"]) == "with token"
    # The capture saw the refusals (else "never logged" would hold of no lines at all) ...
    assert [e["status"] for e in logs if e["event"] == "otlp_request_refused"] == [401, 401, 401]
    # ... and the token is in none of them.
    assert "s3cret" not in repr(logs)


async def test_a_refused_body_is_explained_to_its_sender_but_none_of_its_words_reach_the_log(sim, make_agent):
    secret = "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
    wrong_type = json_span("eee29b7ec3c1b174", "typed")
    wrong_type["attributes"].append({"key": "api_key", "value": {"intValue": secret}})
    bodies = {
        "a value of the wrong type": otlp_json(wrong_type),
        "an id that is not hex": otlp_json(json_span("eee29b7ec3c1b175", "ids", trace_id=secret)),
        "no JSON": b'{"resourceSpans": "' + secret.encode() + b"",
    }
    with structlog.testing.capture_logs() as logs:
        agent = await make_agent(sim.url, otel={"ingest_listen": "127.0.0.1:0"})
        async with aiohttp.ClientSession() as http:
            for what, body in bodies.items():
                async with http.post(
                    f"http://127.0.0.1:{agent.ingest_port}/v1/traces",
                    data=body,
                    headers={"Content-Type": "application/json"},
                ) as r:
                    assert r.status == 400, what
                    if what != "no JSON":
                        assert secret in orjson.loads(await r.read())["message"], "the sender sees what is wrong"
    refusals = [e for e in logs if e["event"] == "otlp_request_refused"]
    assert [e["reason"] for e in refusals] == [
        "body is not an OTLP/JSON ExportTraceServiceRequest",
        "traceId is not hex",
        "body is not valid JSON",
    ]
    assert "sk-proj" not in repr(logs)


def test_an_ingest_token_variable_that_is_not_set_is_refused_at_start(monkeypatch):
    from llmwatch.agent.components import load_config
    from llmwatch.core.config import ConfigError

    monkeypatch.delenv("LLMW_TEST_MISSING_TOKEN", raising=False)
    cfg = load_config(
        None,
        overrides={
            "upstream": "http://127.0.0.1:9",
            "otel": {"ingest_listen": "127.0.0.1:0", "ingest_token_env": "LLMW_TEST_MISSING_TOKEN"},
        },
        environ={},
    )
    with pytest.raises(ConfigError, match="LLMW_TEST_MISSING_TOKEN is not set"):
        Agent(cfg)
