"""OTLP span content (otel.capture_content) masks the upstream URL's credentials by exact value,
with redaction on or off, as samples do (llmwatch.core.secrets)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from llmwatch.collectors.exporters.otlp import OtelExporter  # noqa: E402
from llmwatch.collectors.otel.config import OtelSection  # noqa: E402
from llmwatch.collectors.receivers.proxy.capture import CallFacts  # noqa: E402
from llmwatch.core.metrics import Metrics  # noqa: E402
from llmwatch.core.secrets import upstream_secrets  # noqa: E402

PASSWORD = "Pr1mary-Pass.77"


class _Span:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add_event(self, name: str, attributes: dict[str, Any], timestamp: int) -> None:
        self.events.append(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        pass


def _facts(answer: str) -> CallFacts:
    return CallFacts(
        operation="chat",
        model="m",
        response_model="m",
        stream=False,
        status=200,
        error_type=None,
        duration_s=0.1,
        ttft_s=None,
        input_tokens=1,
        output_tokens=1,
        tokens_estimated=False,
        finish_reason="stop",
        request={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        response={"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]},
        notes=[],
    )


@pytest.mark.parametrize("with_secrets", [True, False], ids=["masked", "control"])
def test_span_content_never_carries_the_password_llmwatch_sent_the_upstream(with_secrets):
    upstream = f"http://svc:{PASSWORD}@127.0.0.1:9/v1"
    exporter = OtelExporter(
        OtelSection(enabled=True, endpoint="http://127.0.0.1:9/v1/traces", capture_content=True),
        upstream=upstream,
        metrics=Metrics(),
        redact=None,  # redaction off: the exact-value mask still holds
        secrets=upstream_secrets(upstream) if with_secrets else None,
    )
    span = _Span()
    try:
        exporter._add_content(span, _facts(f"you sent {PASSWORD}"), 0)
    finally:
        exporter.shutdown(timeout_s=1.0)
    text = span.events[0]["gen_ai.output.messages"]
    if with_secrets:
        assert PASSWORD not in text and "you sent ***" in text
    else:
        assert PASSWORD in text  # the control: without the mask the answer is exported as it came
