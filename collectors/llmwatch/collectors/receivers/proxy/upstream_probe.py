"""Is the upstream there? A TCP connect now and then, for the log and `/readyz`, never for traffic.

The proxy forwards whatever the probe says: a client of an unreachable upstream gets the
proxy's 502 naming it, exactly as without llmwatch it would get a connection error. So the
probe's answer is reported beside readiness (`upstream_reachable`), not as part of it: a sidecar
that went unready with its upstream would be taken out of the load balancer and turn an upstream
outage into a proxy outage, hiding the upstream's own errors from the client.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from yarl import URL

from llmwatch.core.urls import mask_url

log = structlog.get_logger(__name__)


def upstream_address(url: str) -> tuple[str, int]:
    parsed = URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.host or "", port


def describe_connect_error(host: str, port: int, exc: BaseException) -> str:
    """A connection failure in words, naming host:port; not aiohttp's text, which says
    `ssl:default` even for plain http and hides the reason in a nested error."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = getattr(exc, "os_error", None) or exc
    if isinstance(reason, asyncio.TimeoutError):
        return f"no answer from {where} in time (connect timeout)"
    if isinstance(reason, ConnectionRefusedError):
        return f"connection to {where} refused (nothing listening there?)"
    text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return f"cannot connect to {where}: {text}"


class UpstreamProbe:
    """Connects to the upstream's host:port every `interval_s`; logs a warning when it stops
    answering (once per outage, so a down upstream does not flood the log) and when it is back."""

    def __init__(self, url: str, *, interval_s: float = 10.0, timeout_s: float = 5.0) -> None:
        self.url = url
        # What logs may show: a URL's password never reaches them.
        self.shown = mask_url(url)
        self.host, self.port = upstream_address(url)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.reachable: bool | None = None  # None until the first probe has finished
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    async def probe(self) -> bool:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            if self.reachable is not False:
                log.warning(
                    "upstream_unreachable",
                    upstream=self.shown,
                    error=describe_connect_error(self.host, self.port, exc),
                    note="the proxy keeps forwarding; clients get a 502 naming the upstream until it answers",
                )
            self.reachable = False
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        if self.reachable is False:
            log.info("upstream_reachable_again", upstream=self.shown)
        self.reachable = True
        return True

    async def _loop(self) -> None:
        # Ended by `_closing`, not by the cancellation alone: before Python 3.12, `asyncio.wait_for`
        # returns the connect's outcome instead of raising CancelledError when the connect fails in
        # the same turn of the loop as the cancel (CPython gh-86296). A dead upstream refuses at once,
        # so a SIGTERM soon after start-up hit that; the probe then slept and probed forever and the
        # proxy's stop waited on it (a pod that would not stop).
        while not self._closing:
            await self.probe()
            if self._closing:
                break
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
