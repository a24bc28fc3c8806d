"""The `otel` section's two components: the OTLP span exporter and the OTLP/HTTP trace receiver.

Both need the [otel] extra; their modules are imported only when configured, so a slim install
can load the registry.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from llmwatch.collectors.calls import CallEvents
from llmwatch.collectors.intake import Intake
from llmwatch.collectors.otel.config import OtelMetrics, OtelSection
from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.config import ConfigError
from llmwatch.core.extras import require
from llmwatch.core.secrets import SecretMask
from llmwatch.scorers.pipeline.redaction import Redactor

if TYPE_CHECKING:
    from llmwatch.collectors.exporters.otlp import OtelExporter
    from llmwatch.collectors.receivers.otlp import OtlpReceiver

# --- the exporter: one span per captured call ---------------------------------------------------


class OtlpExporterComponent:
    def __init__(self, exporter: OtelExporter) -> None:
        self.exporter = exporter

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        # In a thread: the collector may be served by this very event loop (tests, demos).
        await asyncio.to_thread(self.exporter.shutdown, 5.0)


def _check_exporter(ctx: Context, otel: OtelSection) -> None:
    if otel.enabled and ctx.serve_proxy:
        require("otel", "otel.enabled", "set otel.enabled: false")


def _create_exporter(ctx: Context, otel: OtelSection) -> Component | None:
    if not (otel.enabled and ctx.serve_proxy):
        return None  # spans are of proxied calls
    from llmwatch.collectors.exporters.otlp import OtelExporter

    upstream = ctx.setting("upstream") or ""
    exporter = OtelExporter(
        otel, upstream=upstream, metrics=ctx.metrics, redact=ctx.find(Redactor), secrets=ctx.find(SecretMask)
    )
    # Spans carry the answer, so streams are assembled for every call while this is on.
    ctx.get(CallEvents).subscribe(exporter.on_call, wants_answer=True)
    return OtlpExporterComponent(exporter)


OTLP_EXPORTER = Factory(
    "otel", "exporter", OtelSection, _create_exporter, metrics=(OtelMetrics,), check=_check_exporter
)


# --- the receiver: LLM spans in, as samples ----------------------------------------------------------


class OtlpReceiverComponent:
    def __init__(self, receiver: OtlpReceiver, listen: str, setting: str) -> None:
        self.receiver = receiver
        self.listen = listen
        self.setting = setting
        self.port = 0
        self._runner: Any = None

    async def start(self) -> None:
        from llmwatch.collectors.exporters.prometheus import serve_app

        self._runner, self.port = await serve_app(self.receiver.app(), self.listen, setting=self.setting)
        self.receiver.announce()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.receiver.close()

    def readiness(self) -> dict[str, bool]:
        return {"ingest_listening": self.port > 0}


def _check_receiver(ctx: Context, otel: OtelSection) -> None:
    if otel.ingest_listen:
        require("otel", "otel.ingest_listen", "remove otel.ingest_listen")


def _create_receiver(ctx: Context, otel: OtelSection) -> Component | None:
    if not otel.ingest_listen:
        return None
    from llmwatch.collectors.receivers.otlp import OtlpReceiver
    from llmwatch.collectors.receivers.proxy.config import CaptureSection

    token = None
    if otel.ingest_token_env:
        token = os.environ.get(otel.ingest_token_env)
        if not token:
            raise ConfigError(
                f"otel.ingest_token_env: environment variable {otel.ingest_token_env} is not set or empty; set it to the bearer token senders use"
            )
    receiver = OtlpReceiver(
        ctx.get(Intake),
        ctx.metrics,
        max_body_bytes=otel.ingest_max_body_bytes,
        max_spans=otel.ingest_max_spans,
        token=token,
        # The bodies a span may store: the same capture.max_body_bytes as a proxied call's.
        max_capture_bytes=ctx.section(CaptureSection).max_body_bytes,
    )
    # `llmwatch ingest` takes the address from --listen.
    setting = "config otel.ingest_listen" if ctx.serve_proxy else "--listen, config otel.ingest_listen"
    return OtlpReceiverComponent(receiver, otel.ingest_listen, setting)


OTLP_RECEIVER = Factory(
    "otel.ingest_listen", "receiver", OtelSection, _create_receiver, metrics=(OtelMetrics,), check=_check_receiver
)
