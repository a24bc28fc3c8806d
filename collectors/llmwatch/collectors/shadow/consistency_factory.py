"""The `consistency:` probe's factory and component (section and metrics: consistency.py).

Apart from consistency.py because it makes a `ShadowMirror` (parent.py), which imports the probe's
metrics from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from llmwatch.collectors.calls import CallEvents
from llmwatch.collectors.late_scores import LateScores
from llmwatch.collectors.shadow.config import ShadowConfig
from llmwatch.collectors.shadow.consistency import ConsistencyMetrics, ConsistencySection, consistency_shadow_section
from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.config import ConfigError
from llmwatch.core.pricing import PriceTable

__all__ = ["CONSISTENCY", "ConsistencyComponent"]


class ConsistencyComponent:
    def __init__(self, mirror: Any) -> None:
        self.mirror = mirror

    async def start(self) -> None:
        await self.mirror.start()

    async def stop(self) -> None:
        await self.mirror.close(5.0)


def _create(ctx: Context, section: ConsistencySection) -> Component | None:
    if not (section.enabled and ctx.serve_proxy):
        return None  # re-asks are of proxied calls
    from llmwatch.collectors.shadow.child import child_main
    from llmwatch.collectors.shadow.parent import ShadowMirror

    upstream = ctx.setting("upstream")
    if not upstream:
        raise ConfigError("consistency.enabled needs the proxy's upstream (--upstream or `upstream:`)")
    root: Any = ctx.config
    cfg = root.model_copy(
        update={
            "shadow": consistency_shadow_section(section, str(upstream)),
            "data_dir": Path(ctx.setting("data_dir")) / "consistency",
        }
    )
    # The verdicts go on to the scorer's drift windows (a `pass_rate:consistency` signal online),
    # when the runtime offers the event (it always does; a bare Context in a test may not).
    late = ctx.find(LateScores)
    mirror = ShadowMirror(
        cast(ShadowConfig, cfg),
        ctx.metrics,
        ctx.get(PriceTable),
        child_main=child_main,
        score_sinks=[late.publish] if late is not None else [],
    )
    # Told of every proxied call, as shadow evaluation is: with both on, each call is offered to both.
    ctx.get(CallEvents).subscribe(mirror.offer)
    return ConsistencyComponent(mirror)


CONSISTENCY = Factory("consistency", "exporter", ConsistencySection, _create, metrics=(ConsistencyMetrics,))
