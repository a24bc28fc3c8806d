"""Version A, then a subtly degraded version B behind the proxy: the drift alert fires for B, never for A.

Real components end to end: the simulator, the proxy, the scorer process, a Prometheus server
scraping the agent and evaluating the repo's alerting rules, an Alertmanager routing to a
webhook receiver, and the agent's own Alertmanager-compatible webhook.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from helpers.agents import proxy_url, settled, wait_progressing, wait_until
from helpers.chat import seeded_calls
from helpers.dashboards import DASHBOARD_DIR, defined_variables, expressions, load, substitute, variable_queries
from helpers.ports import free_port
from helpers.prom import Prometheus, alertmanager_binary, finite, start_prometheus
from helpers.upstreams import serve

from llmwatch.agent.apps.simulator.server import PROFILES, SimProfile, start_simulator

RULES = Path(__file__).resolve().parents[2] / "dashboards" / "alerts" / "llmwatch-rules.yaml"
PROMPTS = [
    "How do I roast a chicken?",
    "Explain Python list comprehensions.",
    "Plan a weekend in Lisbon.",
    "Why is the sky blue?",
    "How should I water tomatoes?",
]


class Hook:
    def __init__(self) -> None:
        self.payloads: list[dict] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.payloads.append(await request.json())
        return web.Response()

    def alerts(self, name: str = "LLMWatchDriftDetected") -> list[dict]:
        return [
            a
            for p in self.payloads
            for a in p["alerts"]
            if a["labels"].get("alertname") == name and a["status"] == "firing"
        ]


async def serve_hook(hook: Hook) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/{name}", hook.handle)
    return await serve(app)


def start_alertmanager(tmp: Path, hook_url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    (tmp / "am.yml").write_text(
        yaml.safe_dump(
            {
                "route": {
                    "receiver": "hook",
                    "group_by": ["alertname", "model_version"],
                    "group_wait": "100ms",
                    "group_interval": "1s",
                    "repeat_interval": "1h",
                },
                "receivers": [
                    {"name": "hook", "webhook_configs": [{"url": hook_url + "/alertmanager", "send_resolved": True}]}
                ],
            }
        )
    )
    proc = subprocess.Popen(
        [
            alertmanager_binary(),
            f"--config.file={tmp / 'am.yml'}",
            f"--storage.path={tmp / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(tmp)},
    )
    return proc, f"127.0.0.1:{port}"


def rules_without_for(tmp: Path) -> Path:
    """The repo's rules with `for:` set to 0s: the durations are covered by `promtool test rules`;
    here the expressions must fire (or not) on live data within a test's time."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def drift_dashboard_gaps(prom: Prometheus) -> list[str]:
    """What of the drift dashboard shows nothing in this Prometheus: each query as Grafana runs it
    (variables set to match everything), with the query's own words. The dashboards test has no
    baseline, so its drift panels can only parse; here drift has fired, and each must show it."""
    dashboard = load(DASHBOARD_DIR / "llmwatch-drift.json")
    variables = defined_variables(dashboard)
    gaps = []
    for where, expr in expressions(dashboard):
        promql = substitute(expr, variables)
        result = prom.query(promql)
        if not result or not finite(result):
            gaps.append(f"{where}: {result!r} for {promql}")
    for name, query in variable_queries(dashboard):
        label_query = substitute(query, variables)
        selector, _, label = label_query.removeprefix("label_values(").removesuffix(")").rpartition(",")
        if not prom.label_values(label.strip(), selector):
            gaps.append(f"${name}: no values for {label_query}")
    return gaps


async def traffic(base: str, n: int, seed0: int) -> None:
    await seeded_calls(base, [PROMPTS[i % len(PROMPTS)] for i in range(n)], seed0)


@pytest.mark.slow
async def test_drift_alert_fires_for_degraded_version_b_and_not_for_a(tmp_path, make_agent):
    hook = Hook()
    hook_runner, hook_url = await serve_hook(hook)
    fast = {"latency_scale": 0.05}
    sim = await start_simulator("127.0.0.1", 0, SimProfile(**{**PROFILES["A"].__dict__, **fast}), seed=3)
    am_proc = prom = None
    try:
        agent = await make_agent(
            sim.url,
            sampling={"rate": 1.0},
            scoring={"enabled": True, "embeddings": False},
            drift={
                "interval_s": 1.0,
                "min_samples": 40,
                "window": 300,
                "alpha": 0.01,
                "webhook": {"url": hook_url + "/agent", "repeat_interval_s": 3600},
            },
        )
        am_proc, am_addr = start_alertmanager(tmp_path, hook_url)
        prom = start_prometheus(
            tmp_path / "prom",
            [f"127.0.0.1:{agent.metrics_port}"],
            [rules_without_for(tmp_path)],
            alertmanagers=[am_addr],
        )
        await wait_until(lambda: agent.scorer.ready.is_set(), timeout=60)

        # Version A: freeze a baseline from its first 250 calls, then 250 fresh calls of A.
        await traffic(proxy_url(agent), 250, 0)
        await wait_until(lambda: settled(agent), timeout=60)
        baseline = tmp_path / "baseline-A.json"
        await asyncio.to_thread(agent.scorer.freeze_baseline, "A", str(baseline))
        agent.scorer.load_baseline(str(baseline))
        await traffic(proxy_url(agent), 250, 10_000)
        await wait_until(lambda: any(k[0] == "A" for k in agent.drift_state), timeout=60)
        # A few scrapes and rule evaluations of A alone, so that "no alert" below means something.
        # In threads: the agent shares this event loop and must keep answering scrapes.
        since = time.time()
        await asyncio.to_thread(prom.wait_for_scrape, since, 3, 30.0)
        await asyncio.to_thread(prom.wait_for_evaluations, since, 3, 1.0, 30.0)
        assert any(t["health"] == "up" for t in prom.active_targets()), "Prometheus scrapes the agent"
        assert prom.query('llmwatch_drift_detected{model_version="A"}'), "A's drift verdicts reached Prometheus"
        a_alerts = [a for a in prom.alerts() if a["labels"].get("alertname") == "LLMWatchDriftDetected"]
        assert a_alerts == [], f"stable version A must not alert: {a_alerts}"

        # Version B: subtly degraded (shorter answers, more refusals, slower).
        sim.set_profile(SimProfile(**{**PROFILES["B"].__dict__, **fast}))
        await traffic(proxy_url(agent), 300, 20_000)
        # As long as B's samples are still being scored and compared: on a loaded machine the
        # scorer's 300 samples take minutes, not the seconds they take on a quiet one.
        await wait_progressing(
            lambda: any(k[0] == "B" and v[2] for k, v in agent.drift_state.items()),
            lambda: (
                agent.proxy.waiting,
                agent.queue.depth(),
                agent.scorer.pending,
                sorted((k, v[3]) for k, v in agent.drift_state.items() if k[0] == "B"),
            ),
            what="B's drift verdict",
        )
        try:
            # In a thread: the agent shares this event loop and must keep answering scrapes.
            await asyncio.to_thread(
                prom.wait_until,
                lambda: any(
                    a["labels"].get("model_version") == "B"
                    for a in prom.alerts()
                    if a["labels"].get("alertname") == "LLMWatchDriftDetected"
                ),
                30,
                "LLMWatchDriftDetected for B in Prometheus",
            )
        except AssertionError:
            raise AssertionError(
                f"agent state {agent.drift_state}; prometheus series {prom.query('llmwatch_drift_detected')}; alerts {prom.alerts()}; targets {prom.active_targets()}"
            ) from None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            any(a["labels"]["model_version"] == "B" for a in hook.alerts())
            and {p.get("receiver") for p in hook.payloads} >= {"hook", "llmwatch"}
        ):
            await asyncio.sleep(0.2)
        firing = hook.alerts()
        versions = {a["labels"]["model_version"] for a in firing}
        assert versions == {"B"}, f"alerts fired for {versions}"
        receivers = {p["receiver"] for p in hook.payloads}
        assert {"hook", "llmwatch"} <= receivers, "both Alertmanager and the agent's own webhook delivered"
        signals = {a["labels"]["signal"] for a in firing}
        assert signals & {"output_tokens", "pass_rate:refusal", "latency_ms", "ttft_ms", "failure_modes", "cost_usd"}
        for alert in firing:
            assert alert["annotations"]["runbook_url"].endswith("#llmwatchdriftdetected")

        # What an on-call engineer opens next: every panel of the drift dashboard shows B's drift.
        # Live traffic goes on while they look: the request-rate panels read a 1m window, which on
        # a loaded machine the drift wait above can outlast (0/0 read as NaN, a gap that is the
        # test's pause, not the dashboard's). The scrapes after these calls carry every series.
        await traffic(proxy_url(agent), 20, 40_000)
        since = time.time()
        await asyncio.to_thread(prom.wait_for_scrape, since, 2, 30.0)
        deadline = time.monotonic() + 30
        gaps = await asyncio.to_thread(drift_dashboard_gaps, prom)
        while gaps and time.monotonic() < deadline:
            await asyncio.to_thread(prom.wait_for_scrape, time.time(), 1, 30.0)
            gaps = await asyncio.to_thread(drift_dashboard_gaps, prom)
        assert gaps == [], "drift dashboard queries with no data after drift fired:\n" + "\n".join(gaps)
    finally:
        if prom is not None:
            prom.stop()
        if am_proc is not None:
            am_proc.terminate()
            am_proc.wait(10)
        await sim.close()
        await hook_runner.cleanup()
