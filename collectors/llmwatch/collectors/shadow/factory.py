"""Shadow evaluation as a component: the mirror (parent side), its child process, its pair sinks."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from llmwatch.collectors.calls import CallEvents
from llmwatch.collectors.exporters.kafka import KafkaSampleSink, KafkaSection
from llmwatch.collectors.shadow.config import ShadowConfig, ShadowMetrics, ShadowSection
from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.pricing import PriceTable

if TYPE_CHECKING:
    from llmwatch.collectors.shadow.parent import ShadowMirror


class ShadowComponent:
    def __init__(self, mirror: ShadowMirror) -> None:
        self.mirror = mirror

    async def start(self) -> None:
        # Before the proxy listens (receivers start last): the child is running when calls come.
        await self.mirror.start()

    async def stop(self) -> None:
        # Waits up to a few seconds for mirrors in flight (the child writes their pairs).
        await self.mirror.close(5.0)


def _create(ctx: Context, shadow: ShadowSection) -> Component | None:
    if not (shadow.enabled and ctx.serve_proxy):
        return None  # mirrors are of proxied calls
    from llmwatch.collectors.shadow.child import child_main
    from llmwatch.collectors.shadow.parent import ShadowMirror

    pair_sinks = []
    kafka = ctx.section(KafkaSection)
    if kafka.enabled:
        # Pairs go where samples go: files, and Kafka when it is on.
        counts = ctx.metrics.group(ShadowMetrics)
        pair_sinks.append(
            KafkaSampleSink(
                kafka,
                ctx.metrics,
                topic=kafka.pairs_topic,
                key=lambda pair: pair.id.encode(),
                produced=counts.shadow_kafka_produced,
                dropped=counts.shadow_kafka_dropped,
                track_depth=False,
            )
        )
    # The mirror is a child process (redacting with its own Redactor from the redaction section).
    mirror = ShadowMirror(
        cast(ShadowConfig, ctx.config), ctx.metrics, ctx.get(PriceTable), child_main=child_main, pair_sinks=pair_sinks
    )
    ctx.get(CallEvents).subscribe(mirror.offer)
    return ShadowComponent(mirror)


SHADOW = Factory("shadow", "exporter", ShadowSection, _create, metrics=(ShadowMetrics,))
