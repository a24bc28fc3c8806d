"""The scorer's drift readings reach every subscriber: the gauges, the agent's state, the drift webhook.

The readings are published on the scorer's result thread (as ScorerProcess does); the webhook
component lives on the agent's event loop. A real agent, a real local HTTP receiver, no model.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web
from helpers.agents import metric, scrape, wait_until
from helpers.upstreams import serve

from llmwatch.core.metrics import DriftReading


async def test_a_published_drift_reading_sets_the_gauges_the_state_and_fires_the_drift_webhook(sim, make_agent):
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner, url = await serve(app)
    try:
        agent = await make_agent(sim.url, drift={"webhook": {"url": f"{url}/hook"}})
        assert "drift.webhook" in agent.components
        reading = DriftReading("B", "chat", "pass_rate:json_valid", 4.2, 0.001, True, 300, served_as="sim-b")
        # From another thread, as the scorer's result thread publishes.
        publisher = threading.Thread(target=agent.drift_readings.publish, args=([reading],))
        publisher.start()
        await asyncio.to_thread(publisher.join, 10)
        await wait_until(lambda: len(received) >= 1, timeout=10)
        alert = received[0]["alerts"][0]
        assert alert["status"] == "firing"
        assert alert["labels"]["alertname"] == "LLMWatchDriftDetected"
        assert alert["labels"]["model_version"] == "B" and alert["labels"]["signal"] == "pass_rate:json_valid"
        assert "served as sim-b" in alert["annotations"]["description"]
        assert agent.drift_state[("B", "chat", "pass_rate:json_valid")] == (4.2, 0.001, True, 300)
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_drift_detected", model_version="B", signal="pass_rate:json_valid") == 1.0
        assert metric(samples, "llmwatch_drift_window_samples", model_version="B") == 300
        assert metric(samples, "llmwatch_webhook_notifications_total", event="sent") >= 1
    finally:
        await runner.cleanup()
