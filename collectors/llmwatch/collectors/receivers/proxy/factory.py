"""The proxy receiver as a component: the Proxy, the server it listens with, the upstream probe."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from llmwatch.collectors.calls import CallEvents
from llmwatch.collectors.intake import Intake
from llmwatch.collectors.receivers.proxy.config import ProxyConfig, ProxyMetrics, ProxySection
from llmwatch.core.component import Component, Context, Factory
from llmwatch.core.config import ConfigError
from llmwatch.core.pricing import PriceTable
from llmwatch.core.urls import mask_url

if TYPE_CHECKING:
    from llmwatch.collectors.receivers.proxy.handler import Proxy
    from llmwatch.collectors.receivers.proxy.upstream_probe import UpstreamProbe


class ProxyComponent:
    def __init__(self, proxy: Proxy, probe: UpstreamProbe | None, listen: str) -> None:
        self.proxy = proxy
        self.probe = probe  # None without an upstream
        self.listen = listen
        self.port = 0
        self._server: Any = None  # the relay server

    async def start(self) -> None:
        from llmwatch.collectors.exporters.prometheus import bind_socket

        proxy = self.proxy
        await proxy.start()
        relay = proxy.relay_server()
        self.port = await relay.start(bind_socket(self.listen, "--listen, config listen"))
        self._server = relay  # cleanup() is its bounded shutdown
        if self.probe is not None:
            self.probe.start()

    async def stop(self) -> None:
        if self.probe is not None:
            await self.probe.close()
        if self._server is not None:
            await self._server.cleanup()  # calls in flight get proxy.shutdown_timeout_s
            self._server = None
        await self.proxy.close()

    def readiness(self) -> dict[str, bool]:
        return {"proxy_listening": self.port > 0}

    def details(self) -> dict[str, object]:
        # Beside the checks, not among them: see upstream_probe.py for why.
        if self.probe is None:
            return {}
        upstream = self.proxy.cfg.upstream or ""
        return {"upstream": mask_url(upstream), "upstream_reachable": self.probe.reachable}


def _check(ctx: Context, section: ProxySection) -> None:
    if section.engine == "native" and ctx.serve_proxy:
        from llmwatch.collectors.receivers.proxy.native import load

        native, why = load()
        if native is None:
            raise ConfigError(f"proxy.engine native: {why}; or set proxy.engine: python")


def _create(ctx: Context, section: ProxySection) -> Component | None:
    if not ctx.serve_proxy:
        return None  # `llmwatch ingest`
    from llmwatch.collectors.receivers.proxy.handler import Proxy
    from llmwatch.collectors.receivers.proxy.upstream_probe import UpstreamProbe

    # The root config has every section the proxy reads (checked statically in llmwatch.agent.components).
    config = cast(ProxyConfig, ctx.config)
    proxy = Proxy(config, ctx.metrics, ctx.get(Intake), prices=ctx.get(PriceTable), events=ctx.find(CallEvents))
    upstream = config.upstream
    probe = UpstreamProbe(upstream, timeout_s=section.connect_timeout_s) if upstream else None
    return ProxyComponent(proxy, probe, ctx.setting("listen"))


PROXY = Factory("proxy", "receiver", ProxySection, _create, metrics=(ProxyMetrics,), check=_check)
