"""The `otel` section: spans of captured calls out over OTLP, and the OTLP/HTTP trace receiver in."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from llmwatch.core.config import Section, host_port, secret_header_values
from llmwatch.core.metrics import MetricGroup, counter
from llmwatch.core.urls import check_http_url, mask_url


class OtelSection(Section):
    """OpenTelemetry: one span per captured call out over OTLP, and an OTLP/HTTP trace receiver in."""

    # `enabled` switches the exporter; the receiver is on whenever `ingest_listen` is set.
    ungated_settings: ClassVar[frozenset[str]] = frozenset(
        {"ingest_listen", "ingest_max_body_bytes", "ingest_max_spans", "ingest_token_env"}
    )
    enabled: bool = False
    # Before `endpoint`, whose check depends on it (a field validator sees the fields above it).
    protocol: Literal["http", "grpc"] = "http"
    # http: the full traces URL; grpc: HOST:PORT (https:// for TLS). Unset: the local collector's.
    endpoint: str | None = None
    service_name: str = Field("llmwatch", min_length=1)
    # Sent to the collector only (e.g. authorization); secret: never logged, never in a span.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    # Prompt and answer as a span event (gen_ai.input/output.messages), redacted like samples.
    capture_content: bool = False
    # Spans waiting for export; beyond it the oldest are dropped and counted.
    max_queue: int = Field(2048, ge=1)
    timeout_s: float = Field(10.0, gt=0)
    # Serve an OTLP/HTTP receiver (POST /v1/traces) here; its LLM spans become samples.
    ingest_listen: str | None = None
    ingest_max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    # Spans in one export request; beyond it the request is refused (413). Converting spans costs
    # CPU in the agent's process (one 15 MB batch of 190k spans cost 30-50 s): bound it per request.
    ingest_max_spans: int = Field(10_000, ge=1, le=1_000_000)
    # The NAME of an environment variable holding a bearer token; when set, the receiver answers 401
    # to requests without `Authorization: Bearer <token>`. The token itself is never in the config.
    ingest_token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("ingest_listen")
    @classmethod
    def _valid_ingest(cls, value: str | None) -> str | None:
        return None if value is None else host_port(value)

    @field_validator("headers", mode="before")
    @classmethod
    def _header_values_as_text(cls, value: Any) -> Any:
        return secret_header_values(value, "{authorization: 'Bearer ...'}")

    @field_validator("endpoint")
    @classmethod
    def _valid_endpoint(cls, endpoint: str | None, info: ValidationInfo) -> str | None:
        # The http rule is the one every URL setting has (check_http_url: same message, password
        # masked); the hint after it is for a HOST:PORT given with the default protocol. A protocol
        # that was itself refused is not in info.data: its own error says what is wrong.
        protocol = info.data.get("protocol")
        if endpoint is None or protocol is None:
            return endpoint
        if protocol == "http":
            try:
                return check_http_url(endpoint, "http://127.0.0.1:4318/v1/traces")
            except ValueError as exc:
                raise ValueError(f"{exc} (protocol http; protocol grpc takes HOST:PORT)") from None
        if not re.match(r"^(https?://)?[^/\s:]+:\d+/?$", endpoint):
            raise ValueError(f"expected HOST:PORT such as 127.0.0.1:4317 (protocol grpc), got {mask_url(endpoint)!r}")
        return endpoint

    def resolved_endpoint(self) -> str:
        if self.endpoint:
            return self.endpoint
        return "127.0.0.1:4317" if self.protocol == "grpc" else "http://127.0.0.1:4318/v1/traces"


class OtelMetrics(MetricGroup):
    """Spans out (the OTLP exporter) and in (the OTLP/HTTP trace receiver)."""

    otel_spans = counter(
        "llmwatch_otel_spans",
        "Spans of captured calls for OTLP export, by outcome (exported, failed: the collector refused or was unreachable, dropped: export queue full).",
        ["outcome"],
    )
    otlp_ingest_spans = counter(
        "llmwatch_otlp_ingest_spans",
        "Spans received on the OTLP trace receiver, by outcome (sampled, unsampled, not_llm, rejected).",
        ["outcome"],
    )
