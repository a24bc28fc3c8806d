"""One OpenTelemetry span per captured call, exported over OTLP (HTTP or gRPC).

Spans follow the GenAI semantic conventions (`gen_ai.*` attributes, name "{operation} {model}",
kind CLIENT) and carry the call's real start and end times, so a trace backend shows the same
latencies as the Prometheus histograms. The proxy only builds the span on the event loop; the
SDK's BatchSpanProcessor owns a bounded queue and its own thread, so a slow or dead collector
costs dropped spans (counted in `llmwatch_otel_spans_total{outcome}`), never proxy latency.

Nothing from request or response headers goes into a span, and prompt/answer text only with
`otel.capture_content: true`, redacted like stored samples.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence
from urllib.parse import urlparse

import orjson
import structlog
from opentelemetry import context as otel_context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import SpanKind, Status, StatusCode

from llmwatch.collectors.calls import CallFinished
from llmwatch.collectors.otel.config import OtelMetrics, OtelSection
from llmwatch.collectors.receivers.proxy.capture import CallFacts, Exchange
from llmwatch.core.metrics import Metrics
from llmwatch.core.secrets import SecretMask
from llmwatch.core.wire import content_to_text, extract_answer_text, extract_prompt_text

log = structlog.get_logger(__name__)

_PROVIDER = "openai"
# Serialized messages beyond this are left out of the span rather than cut into invalid JSON.
_MAX_CONTENT_BYTES = 128 * 1024
_EMPTY_CONTEXT = otel_context.Context()


class _CountingExporter(SpanExporter):
    """Counts what the wrapped OTLP exporter delivered and what it gave up on."""

    def __init__(self, inner: SpanExporter, count: Callable[[str, int], None]) -> None:
        self._inner = inner
        self._count = count

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        self._count("exported" if result is SpanExportResult.SUCCESS else "failed", len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _CountingProcessor(BatchSpanProcessor):
    def __init__(self, exporter: SpanExporter, count: Callable[[str, int], None], **kw: Any) -> None:
        super().__init__(exporter, **kw)
        self._count = count

    def on_end(self, span: ReadableSpan) -> None:
        # The SDK drops the oldest span of a full queue without telling its caller; peek at the
        # queue (a private attribute, hence the guard) so that the loss shows up in Prometheus.
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
        if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
            self._count("dropped", 1)
        super().on_end(span)


def _otlp_exporter(cfg: OtelSection) -> SpanExporter:
    headers = {k.lower(): v.get_secret_value() for k, v in cfg.headers.items()}
    endpoint = cfg.resolved_endpoint()
    if cfg.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        return GrpcExporter(
            endpoint=parsed.netloc, insecure=parsed.scheme != "https", headers=headers, timeout=cfg.timeout_s
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=endpoint, headers=headers, timeout=cfg.timeout_s)


def _messages_in(request: Any) -> list[dict[str, Any]]:
    """The request as `gen_ai.input.messages` (role + parts) of the conventions."""
    if not isinstance(request, dict):
        return []
    out: list[dict[str, Any]] = []
    messages = request.get("messages")
    if isinstance(messages, list):
        for m in messages:
            if not isinstance(m, dict):
                continue
            parts: list[dict[str, Any]] = []
            text = content_to_text(m.get("content"))
            if m.get("role") == "tool":
                parts.append({"type": "tool_call_response", "id": m.get("tool_call_id"), "response": text})
            elif text:
                parts.append({"type": "text", "content": text})
            parts += _tool_call_parts(m.get("tool_calls"))
            out.append({"role": m.get("role", "user"), "parts": parts})
        return out
    prompt = extract_prompt_text(request)
    return [{"role": "user", "parts": [{"type": "text", "content": prompt}]}] if prompt else []


def _tool_call_parts(tool_calls: Any) -> list[dict[str, Any]]:
    """A message's `tool_calls` as GenAI `tool_call` parts (the same for what was asked and what was answered)."""
    parts: list[dict[str, Any]] = []
    for call in tool_calls or []:
        if isinstance(call, dict):
            fn = call.get("function") or {}
            parts.append(
                {"type": "tool_call", "id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")}
            )
    return parts


def _messages_out(response: Any, finish_reason: str | None) -> list[dict[str, Any]]:
    if not isinstance(response, dict):
        return []
    choices = response.get("choices")
    if isinstance(choices, list):
        out = []
        for c in choices:
            if not isinstance(c, dict):
                continue
            raw_message = c.get("message")
            message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
            parts: list[dict[str, Any]] = []
            text = content_to_text(message.get("content")) if message else c.get("text")
            if isinstance(text, str) and text:
                parts.append({"type": "text", "content": text})
            parts += _tool_call_parts(message.get("tool_calls"))
            out.append(
                {"role": message.get("role", "assistant"), "parts": parts, "finish_reason": c.get("finish_reason")}
            )
        return out
    answer = extract_answer_text(response)
    return (
        [{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": finish_reason}]
        if answer
        else []
    )


def _finish_reasons(facts: CallFacts) -> list[str]:
    response = facts.response
    if isinstance(response, dict) and isinstance(response.get("choices"), list):
        reasons = [
            c["finish_reason"]
            for c in response["choices"]
            if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)
        ]
        if reasons:
            return reasons
    return [facts.finish_reason] if facts.finish_reason else []


class OtelExporter:
    """Owns a private TracerProvider (never the global one: the host app may have its own)."""

    def __init__(
        self,
        cfg: OtelSection,
        *,
        upstream: str,
        metrics: Metrics,
        redact: Callable[[Any], Any] | None,
        secrets: SecretMask | None = None,
    ) -> None:
        self.cfg = cfg
        self._metrics = metrics
        self._redact = redact
        # The upstream URL's credentials, masked in exported content with redaction on or off.
        self._secrets = secrets if secrets else None
        parsed = urlparse(upstream)
        self._server = parsed.hostname or ""
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        spans = metrics.group(OtelMetrics).otel_spans

        def count(outcome: str, n: int) -> None:
            spans.labels(outcome=outcome).inc(n)

        self._processor = _CountingProcessor(
            _CountingExporter(_otlp_exporter(cfg), count),
            count,
            max_queue_size=cfg.max_queue,
            max_export_batch_size=min(512, cfg.max_queue),
        )
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": cfg.service_name}),
            sampler=ALWAYS_ON,
            # An atexit shutdown could wait 30 s on a dead collector; `shutdown` is called explicitly.
            shutdown_on_exit=False,
        )
        self._provider.add_span_processor(self._processor)
        self._tracer = self._provider.get_tracer("llmwatch")

    def on_call(self, call: CallFinished) -> None:
        """Told by the proxy once per captured call, after the client has its response."""
        try:
            self._record(call.exchange, call.facts, call.version, call.cost_usd, call.sampled)
        except Exception:
            self._metrics.internal_errors.labels(stage="otel_export").inc()
            log.exception("otel_span_failed", route=call.exchange.route)

    def _record(  # noqa: C901
        self, ex: Exchange, facts: CallFacts, version: str | None, cost: float | None, reason: str | None
    ) -> None:
        op = facts.operation
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": op,
            "gen_ai.provider.name": _PROVIDER,
            "gen_ai.system": _PROVIDER,
            "server.address": self._server,
            "server.port": self._port,
            "llmwatch.sampled": reason is not None,
        }
        if ex.status:
            attrs["http.response.status_code"] = ex.status
        if facts.model:
            attrs["gen_ai.request.model"] = facts.model
        if facts.response_model:
            attrs["gen_ai.response.model"] = facts.response_model
        if version:
            attrs["llmwatch.model_version"] = version
        request = facts.request if isinstance(facts.request, dict) else {}
        max_tokens = request.get("max_completion_tokens", request.get("max_tokens", request.get("max_output_tokens")))
        for key, value in (
            ("max_tokens", max_tokens),
            ("temperature", request.get("temperature")),
            ("top_p", request.get("top_p")),
        ):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attrs[f"gen_ai.request.{key}"] = value
        if isinstance(facts.response, dict) and isinstance(facts.response.get("id"), str):
            attrs["gen_ai.response.id"] = facts.response["id"]
        if facts.input_tokens is not None:
            attrs["gen_ai.usage.input_tokens"] = facts.input_tokens
        if facts.output_tokens is not None:
            attrs["gen_ai.usage.output_tokens"] = facts.output_tokens
        reasons = _finish_reasons(facts)
        if reasons:
            attrs["gen_ai.response.finish_reasons"] = reasons
        if facts.ttft_s is not None:
            attrs["llmwatch.ttft_ms"] = round(facts.ttft_s * 1000.0, 3)
        if cost is not None:
            attrs["llmwatch.cost_usd"] = cost
        if reason is not None:
            attrs["llmwatch.sample_id"] = ex.sample_id or ex.request_id
        if facts.error_type:
            attrs["error.type"] = facts.error_type
        start_ns = int(ex.started_at * 1e9)
        end_ns = start_ns + int(max(ex.t_end - ex.t0, 0.0) * 1e9)
        name = f"{op} {facts.model}" if facts.model else op
        span = self._tracer.start_span(
            name, context=_EMPTY_CONTEXT, kind=SpanKind.CLIENT, attributes=attrs, start_time=start_ns
        )
        if facts.error_type:
            span.set_status(Status(StatusCode.ERROR, facts.error_type))
        if self.cfg.capture_content:
            self._add_content(span, facts, end_ns)
        span.end(end_time=end_ns)

    def _add_content(self, span: Any, facts: CallFacts, at_ns: int) -> None:
        redact = self._redact or (lambda v: v)
        event: dict[str, Any] = {}
        for key, messages in (
            ("gen_ai.input.messages", _messages_in(facts.request)),
            ("gen_ai.output.messages", _messages_out(facts.response, facts.finish_reason)),
        ):
            if not messages:
                continue
            kept = redact(messages)
            if self._secrets is not None:
                kept = self._secrets.value(kept)
            text = orjson.dumps(kept).decode()
            if len(text) > _MAX_CONTENT_BYTES:
                span.set_attribute("llmwatch.content_omitted", True)
                continue
            event[key] = text
        if event:
            span.add_event("gen_ai.client.inference.operation.details", attributes=event, timestamp=at_ns)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now (blocking; call it from a thread)."""
        return self._provider.force_flush(int(timeout_s * 1000))

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush and stop, waiting at most `timeout_s`; what is still queued then is lost (and logged)."""
        done = threading.Event()

        def run() -> None:
            try:
                self._provider.shutdown()
            except Exception as exc:
                log.error("otel_shutdown_failed", error=repr(exc))
            finally:
                done.set()

        # The SDK's shutdown waits up to 30 s on a dead collector; bound it from outside.
        threading.Thread(target=run, name="llmwatch-otel-shutdown", daemon=True).start()
        if not done.wait(timeout_s):
            log.warning("otel_shutdown_timed_out", timeout_s=timeout_s)
