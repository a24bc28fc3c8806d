"""The Grafana dashboards: structure, freshness, and every PromQL expression run against a real
Prometheus that scrapes real llmwatch processes carrying real traffic.

Expressions are taken from the committed JSON (panel targets, annotations, template variables),
Grafana's variables are replaced (`$model` -> `.*`, `$__rate_interval` -> `1m`, ...), and each
must be accepted by Prometheus (status success) and return at least one finite value once the
traffic has been scraped. The traffic reaches every panel but the drift dashboard's: a sidecar
with a shadow candidate that answers and one that does not, faults from the simulator and one
injected inside llmwatch (internal errors), and the fleet's Kafka shape on the real broker (a
sidecar publishing, a scorer worker consuming, a sidecar whose broker is down). An expression
whose metrics have no series in that Prometheus is only required to parse; its data check is an
xfail naming those metrics, computed from Prometheus at run time, so it turns into a pass by itself
once such series exist. The drift dashboard's queries (no frozen baseline here) are run with data
where drift fires: tests/e2e/test_drift_alerting.py.
"""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Coroutine, Iterator

import aiohttp
import jsonschema
import pytest
import yaml
from helpers.dashboards import (
    BUILTINS,
    DASHBOARD_DIR,
    VARIABLE_RE,
    defined_variables,
    expressions,
    load,
    metric_names,
    panels,
    substitute,
    variable_queries,
)
from helpers.kafka_broker import Broker, broker_binary
from helpers.kafka_workers import Worker, start_worker, stop_workers
from helpers.ports import dead_address
from helpers.prom import Prometheus, finite, running_prometheus

from llmwatch.agent.apps.simulator.server import FAULT_HEADER, SimProfile, start_simulator
from llmwatch.agent.components import Config, load_config
from llmwatch.agent.runtime import Agent
from llmwatch.collectors.exporters.kafka import create_topics

ROOT = Path(__file__).resolve().parents[2]
CHART_DASHBOARD_DIR = ROOT / "helm" / "llmwatch" / "dashboards"
CHART_ALERTS = ROOT / "helm" / "llmwatch" / "files" / "alerts.yaml"
DASHBOARD_FILES = sorted(DASHBOARD_DIR.glob("*.json"))

REQUIRED_VARIABLES = {"model": "gen_ai_request_model", "version": "model_version", "operation": "gen_ai_operation_name"}

# --- the subset of Grafana's dashboard model these files use ---------------------------------------

DATASOURCE_REF = {
    "type": "object",
    "required": ["type", "uid"],
    "properties": {"type": {"const": "prometheus"}, "uid": {"const": "${datasource}"}},
}
TARGET = {
    "type": "object",
    "required": ["refId", "expr", "datasource"],
    "properties": {
        "refId": {"type": "string", "pattern": "^[A-Z]$"},
        "expr": {"type": "string", "minLength": 1},
        "legendFormat": {"type": "string"},
        "instant": {"type": "boolean"},
        "range": {"type": "boolean"},
        "format": {"enum": ["time_series", "table", "heatmap"]},
        "datasource": DATASOURCE_REF,
    },
}
GRID_POS = {
    "type": "object",
    "required": ["h", "w", "x", "y"],
    "properties": {
        "h": {"type": "integer", "minimum": 1},
        "w": {"type": "integer", "minimum": 1, "maximum": 24},
        "x": {"type": "integer", "minimum": 0, "maximum": 23},
        "y": {"type": "integer", "minimum": 0},
    },
}
PANEL = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "title": {"type": "string", "minLength": 1},
        "gridPos": GRID_POS,
    },
    "if": {"properties": {"type": {"const": "row"}}},
    "then": {"properties": {"panels": {"type": "array"}}},
    "else": {
        "required": ["datasource", "targets", "description", "fieldConfig"],
        "properties": {
            "type": {"enum": ["timeseries", "stat", "heatmap", "state-timeline", "barchart", "table"]},
            "datasource": DATASOURCE_REF,
            "description": {"type": "string", "minLength": 1},
            "targets": {"type": "array", "minItems": 1, "items": TARGET},
            "fieldConfig": {"type": "object", "required": ["defaults"]},
        },
    },
}
VARIABLE = {
    "type": "object",
    "required": ["name", "type"],
    "properties": {
        "name": {"type": "string", "pattern": r"^\w+$"},
        "type": {"enum": ["datasource", "query", "textbox"]},
    },
    "allOf": [
        {
            # The one free-text variable: the base URL of `llmwatch ui`, which the data links open.
            "if": {"properties": {"type": {"const": "textbox"}}},
            "then": {
                "required": ["query"],
                "properties": {
                    "name": {"const": "llmwatch_ui_url"},
                    "query": {"type": "string", "pattern": "^https?://"},
                },
            },
        },
        {
            "if": {"properties": {"type": {"const": "query"}}},
            "then": {
                "required": ["datasource", "query", "multi", "includeAll", "allValue", "refresh"],
                "properties": {
                    "datasource": DATASOURCE_REF,
                    "query": {
                        "type": "object",
                        "required": ["query", "refId"],
                        "properties": {"query": {"type": "string", "pattern": r"^label_values\(.+,\s*\w+\)$"}},
                    },
                    "multi": {"const": True},
                    "includeAll": {"const": True},
                    "allValue": {"const": ".*"},
                    "refresh": {"enum": [1, 2]},
                },
            },
        },
        {
            "if": {"properties": {"type": {"const": "datasource"}}},
            "then": {
                "required": ["query"],
                "properties": {"name": {"const": "datasource"}, "query": {"const": "prometheus"}},
            },
        },
    ],
}
ANNOTATION = {
    "type": "object",
    "required": ["name", "datasource", "enable"],
    # Grafana's own built-in entry (builtIn: 1) aside, every annotation is a Prometheus query.
    "if": {"required": ["builtIn"], "properties": {"builtIn": {"const": 1}}},
    "else": {
        "required": ["expr", "titleFormat"],
        "properties": {"datasource": DATASOURCE_REF, "expr": {"type": "string", "minLength": 1}},
    },
}
DASHBOARD_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["uid", "title", "panels", "templating", "schemaVersion", "time", "tags"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "tags": {"type": "array", "contains": {"const": "llmwatch"}},
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {"list": {"type": "array", "items": VARIABLE}},
        },
        "annotations": {"type": "object", "properties": {"list": {"type": "array", "items": ANNOTATION}}},
    },
}


def test_metric_names_parser() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, model_version) (rate(a_bucket{x=~"$m", y="by(z)"}[$__rate_interval]))) '
        "/ ignoring (model_version) group_left sum(rate(b_total[5m] offset 15m)) or vector(0) unless count(c == 1)"
    )
    assert metric_names(expr) == ["a_bucket", "b_total", "c"]


CASES = [
    pytest.param(path.name, where, expr, id=f"{path.stem}: {where}")
    for path in DASHBOARD_FILES
    for where, expr in expressions(load(path))
]
VARIABLE_CASES = [
    pytest.param(path.name, name, query, id=f"{path.stem}: ${name}")
    for path in DASHBOARD_FILES
    for name, query in variable_queries(load(path))
]


# --- structure ---------------------------------------------------------------------------------------


def test_there_are_four_dashboards() -> None:
    assert {p.name for p in DASHBOARD_FILES} == {
        "llmwatch-overview.json",
        "llmwatch-quality.json",
        "llmwatch-drift.json",
        "llmwatch-agent-health.json",
    }


def test_committed_json_is_what_build_py_builds() -> None:
    try:
        import grafana_foundation_sdk  # noqa: F401
    except ImportError:
        pytest.fail(
            "grafana-foundation-sdk is not installed: `pip install -e '.[test]'` (tests/run.sh does)", pytrace=False
        )
    import importlib.util

    spec = importlib.util.spec_from_file_location("dashboards_build", DASHBOARD_DIR / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, (
        "dashboards/*.json or helm/llmwatch/dashboards/*.json are stale: run `python dashboards/build.py`"
    )


def test_chart_carries_the_same_dashboards() -> None:
    chart = sorted(CHART_DASHBOARD_DIR.glob("*.json"))
    assert [p.name for p in chart] == [p.name for p in DASHBOARD_FILES]
    for path in DASHBOARD_FILES:
        assert (CHART_DASHBOARD_DIR / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_dashboard_structure(path: Path) -> None:
    dashboard = load(path)
    jsonschema.validate(dashboard, DASHBOARD_SCHEMA)

    # The SDK's own model reads it back (types and enums of every field it knows).
    from grafana_foundation_sdk.models.dashboard import Dashboard

    model = Dashboard.from_json(dashboard)
    assert model.uid == dashboard["uid"] and len(model.panels) == len(dashboard["panels"])

    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), f"duplicate refId in '{panel['title']}'"
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, f"'{panel['title']}' overflows the grid"

    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for name, label in REQUIRED_VARIABLES.items():
        assert name in variables, f"missing ${name}"
        query = variables[name]["query"]["query"]
        assert re.fullmatch(rf"label_values\(.+,\s*{label}\)", query), query

    defined = defined_variables(dashboard)
    for where, expr in expressions(dashboard):
        for m in VARIABLE_RE.finditer(expr):
            name = m.group(1) or m.group(2)
            assert name in defined or name in BUILTINS, f"{where}: undefined ${name}"
        if where.startswith("panel"):
            # Counters through rate()/increase() over Grafana's interval, never a fixed window.
            for fn, window in re.findall(r"\b(rate|irate|increase)\(\s*[^\[\(]*\[([^\]]*)\]", expr):
                assert window in ("$__rate_interval", "$__range"), f"{where}: {fn}(...[{window}])"
        for group in re.findall(r"histogram_quantile\(\s*[\d.]+\s*,\s*sum by \(([^)]*)\)", expr):
            assert "le" in [g.strip() for g in group.split(",")], f"{where}: histogram_quantile needs sum by (le, ...)"
        assert "histogram_quantile" not in expr or re.search(r"histogram_quantile\(\s*[\d.]+\s*,\s*sum by \(", expr), (
            f"{where}: {expr}"
        )
        # Only Grafana's documented form of the data-source variable.
        assert "$datasource" not in expr


def test_pass_rate_and_drift_panels_link_to_the_samples_in_llmwatch_ui() -> None:
    """Data links open `${llmwatch_ui_url}/samples` with the series' version and check (or drift
    signal) and the panel's time range; tests/e2e/test_ui_browser.py opens such a URL in Chromium."""
    linked: dict[str, list[str]] = {}
    for path in DASHBOARD_FILES:
        dashboard = load(path)
        defined = defined_variables(dashboard)
        for panel in panels(dashboard):
            for link in panel.get("fieldConfig", {}).get("defaults", {}).get("links", []):
                url = link["url"]
                assert url.startswith("${llmwatch_ui_url}/samples?"), url
                assert url.endswith("&since=${__from}&until=${__to}"), url
                for name in re.findall(r"\$\{(\w+)", url):
                    assert name in defined or name.startswith("__"), f"{panel['title']}: undefined ${name}"
                assert "llmwatch_ui_url" in defined
                linked.setdefault(path.stem, []).append(panel["title"])
                params = dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))
                if "check" in params:
                    assert params["model_version"].endswith(":percentencode}") and params["outcome"] == "fail"
                else:
                    assert params["signal"] == "${__field.labels.signal:percentencode}"
    assert linked == {
        "llmwatch-quality": ["Pass rate", "Pass rate per check", "Pass rate by version"],
        "llmwatch-drift": ["Drift detected", "Drift statistic per signal", "p-value per signal"],
    }


def test_required_content() -> None:
    """The panels the dashboards are for, by the metric they read."""
    every = {p.stem: "\n".join(e for _, e in expressions(load(p))) for p in DASHBOARD_FILES}
    overview, quality, drift, health = (
        every[f"llmwatch-{n}"] for n in ("overview", "quality", "drift", "agent-health")
    )
    for needle in (
        "gen_ai_client_operation_duration_seconds_count",
        'error_type!=""',
        "histogram_quantile(0.99",
        "gen_ai_server_time_to_first_token_seconds_bucket",
        "gen_ai_client_token_usage_sum",
        "llmwatch_cost_usd_total",
        "* 3600",
        "1000 *",
    ):
        assert needle in overview, needle
    for needle in ('result="pass"', "llmwatch_quality_score_bucket", "sum by (check, model_version)"):
        assert needle in quality, needle
    for needle in (
        "llmwatch_drift_statistic",
        "llmwatch_drift_p_value",
        "llmwatch_drift_detected",
        "llmwatch_drift_evidence_decisive",
        "llmwatch_drift_evidence_threshold",
        "ALERTS{",
        "count by (model_version)",
    ):
        assert needle in drift, needle
    for needle in (
        "llmwatch_queue_depth",
        "llmwatch_samples_total",
        "llmwatch_samples_dropped_total",
        "llmwatch_capture_skipped_total",
        "llmwatch_proxy_errors_total",
        "llmwatch_internal_errors_total",
        "llmwatch_scoring_lag_seconds_bucket",
        "llmwatch_kafka_produced_total",
        "llmwatch_kafka_dropped_total",
        "llmwatch_kafka_buffer_depth",
    ):
        assert needle in health, needle
    quality_json = load(DASHBOARD_DIR / "llmwatch-quality.json")
    assert any(
        p["type"] == "heatmap" and any(t.get("format") == "heatmap" for t in p["targets"]) for p in panels(quality_json)
    )
    drift_json = load(DASHBOARD_DIR / "llmwatch-drift.json")
    assert any(p["type"] == "state-timeline" for p in panels(drift_json))


# --- a live Prometheus scraping a live agent -----------------------------------------------------------


class FailingSink:
    """A sink that always fails, so that llmwatch_samples_dropped_total{reason="sink_error"} exists."""

    name = "always_failing"
    raw = False

    def write(self, samples: Any) -> None:
        raise OSError("disk full (test sink)")

    def close(self) -> None:
        pass


TEST_RULES = """
groups:
  - name: llmwatch-dashboard-test
    rules:
      # Always firing, so that the dashboards' ALERTS{alertname=~"LLMWatch.*"} annotation has data.
      - alert: LLMWatchDashboardTest
        expr: vector(1)
        labels: {severity: info}
        annotations: {summary: test alert for the dashboards' annotation query}
"""


def scoring_overrides() -> dict[str, Any]:
    """In-process scoring with the cheap rule checks only (no embedding model), if this llmwatch has it."""
    field_info = Config.model_fields.get("scoring")
    if field_info is None:
        return {}
    section = field_info.annotation
    wanted = {"enabled": True, "embeddings": False}
    return {"scoring": {k: v for k, v in wanted.items() if k in getattr(section, "model_fields", {})}}


class LoopThread:
    """An asyncio loop in a thread, so that module-scoped sync fixtures can own async servers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="dashboards-agent-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine, timeout: float = 60.0) -> Any:
        future: Future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _alternating_profiles() -> Any:
    profiles = [SimProfile(name="A", latency_scale=0.02), SimProfile(name="B", latency_scale=0.02, ttft_ms=190.0)]
    counter = iter(range(10**9))
    return lambda: profiles[next(counter) % 2]


async def _call(session: aiohttp.ClientSession, url: str, body: dict, headers: dict | None = None) -> None:
    try:
        async with session.post(url, json=body, headers=headers or {}) as resp:
            await resp.read()
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        pass  # the cut streams: the proxy breaks the client's connection as the upstream did


async def _traffic_round(base: str, big: str) -> None:
    chat = f"{base}/v1/chat/completions"
    msg = [{"role": "user", "content": "How do I rotate my Kubernetes TLS certificates?"}]
    calls = []
    async with aiohttp.ClientSession() as session:
        for _ in range(4):
            calls.append(_call(session, chat, {"model": "gpt-4o-mini", "messages": msg}))
        for _ in range(3):
            calls.append(
                _call(
                    session,
                    chat,
                    {"model": "gpt-4o", "messages": msg, "stream": True, "stream_options": {"include_usage": True}},
                )
            )
        calls += [
            _call(session, chat, {"model": "gpt-4o-mini", "messages": msg, "response_format": {"type": "json_object"}}),
            _call(
                session, f"{base}/v1/completions", {"model": "gpt-3.5-turbo", "prompt": "Say something about databases"}
            ),
            _call(session, f"{base}/v1/embeddings", {"model": "text-embedding-3-small", "input": "vector databases"}),
            _call(session, f"{base}/v1/responses", {"model": "gpt-4o-mini", "input": "Explain DNS caching"}),
            _call(session, chat, {"model": "gpt-4o-mini", "messages": msg}, {FAULT_HEADER: "status=503"}),
            _call(session, chat, {"model": "gpt-4o", "messages": msg, "stream": True}, {FAULT_HEADER: "cut_after=2"}),
            _call(session, chat, {"model": "house-model-7b", "messages": msg}),  # not in the price table
            _call(
                session, chat, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": big}]}
            ),  # over max_body_bytes
            _call(
                session,
                chat,
                {"model": "gpt-4o-mini", "messages": msg},
                {"x-request-id": "llmwatch-test-internal-error"},
            ),
        ]
        await asyncio.gather(*calls)


@dataclass
class Live:
    prom: Prometheus
    exposition: str
    notes: list[str] = field(default_factory=list)

    def declared(self, name: str) -> bool:
        """Whether the agent declares this metric (a # TYPE line), even with no series yet."""
        base = re.sub(r"_(bucket|sum|count|total)$", "", name)
        return re.search(rf"^# TYPE ({re.escape(name)}|{re.escape(base)}) ", self.exposition, re.M) is not None


def _sidecar(upstream: str, data_dir: Path) -> dict[str, Any]:
    """What every sidecar here shares: ports the kernel picks, its own data folder, every call sampled."""
    return {
        "upstream": upstream,
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "data_dir": str(data_dir),
        "sampling": {"rate": 1.0},
    }


async def _start_agent(upstream: str, data_dir: Path, scoring: dict[str, Any]) -> Agent:
    overrides = {
        **_sidecar(upstream, data_dir),
        "capture": {"max_body_bytes": 4096},
        # A candidate (the same simulator) so that the shadow panels have series, and one that
        # nothing answers, so that the candidate-errors query has some.
        "shadow": {
            "enabled": True,
            "candidates": [
                {"name": "same", "upstream": upstream, "rate": 1.0},
                {"name": "unreachable", "upstream": f"http://{dead_address()}", "rate": 1.0},
            ],
        },
        **scoring,
    }
    agent = Agent(load_config(None, overrides=overrides, environ={}), extra_sinks=(FailingSink(),))
    # One call's sampling decision raises inside llmwatch (a fault injected on purpose), so that
    # llmwatch_internal_errors_total{stage="analyze"} has a series. If the hook moves, this fails
    # here rather than turning the internal-error panels into silent xfails.
    sampler = agent.proxy.intake.sampler
    decide = sampler.decide

    def failing_decide(request_id: Any, *args: Any, **kwargs: Any) -> Any:
        if request_id == "llmwatch-test-internal-error":
            raise RuntimeError("injected by test_dashboards")
        return decide(request_id, *args, **kwargs)

    sampler.decide = failing_decide
    await agent.start()
    return agent


async def _start_kafka_agent(upstream: str, data_dir: Path, bootstrap: str, **kafka: Any) -> Agent:
    """A sidecar that publishes its samples to Kafka instead of scoring them (the fleet shape)."""
    overrides = {
        **_sidecar(upstream, data_dir),
        "scoring": {"enabled": False},
        "kafka": {
            "enabled": True,
            "bootstrap_servers": [bootstrap],
            "samples_topic": "samples",
            "linger_ms": 5,
            **kafka,
        },
    }
    agent = Agent(load_config(None, overrides=overrides, environ={}))
    await agent.start()
    return agent


async def _kafka_round(agents: list[Agent]) -> None:
    msg = [{"role": "user", "content": "How do I rotate my Kubernetes TLS certificates?"}]
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(
            *(
                _call(
                    session,
                    f"http://127.0.0.1:{a.proxy_port}/v1/chat/completions",
                    {"model": "gpt-4o-mini", "messages": msg},
                )
                for a in agents
                for _ in range(4)
            )
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    import time

    tmp = tmp_path_factory.mktemp("dashboards")
    rules = tmp / "test-rules.yaml"
    rules.write_text(TEST_RULES)
    # The chart's rules evaluate every minute, and a group's first evaluation lands anywhere in
    # its interval: a copy evaluated every second keeps the wait for it bounded.
    chart_rules = tmp / "chart-alerts.yaml"
    doc = yaml.safe_load(CHART_ALERTS.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
    chart_rules.write_text(yaml.safe_dump(doc, sort_keys=False))
    rule_files = [rules, chart_rules]
    loop = LoopThread()
    notes: list[str] = []
    sim = agent = None
    kafka_agents: list[Agent] = []
    workers: list[Worker] = []
    # The fleet's Kafka panels: a real broker, a sidecar publishing to it, a scorer worker
    # consuming from it, and a sidecar whose broker is down (its samples dropped and counted).
    broker = Broker(broker_binary(), tmp)
    broker.start()
    try:
        create_topics([broker.bootstrap], {"samples": 1, "scores": 1})
        workers.append(start_worker(tmp, broker.bootstrap, "samples", "scores", "scorers", "dashboards-worker"))
        sim = loop.run(start_simulator("127.0.0.1", 0, _alternating_profiles(), seed=7))
        scoring = scoring_overrides()
        try:
            agent = loop.run(_start_agent(sim.url, tmp / "data", scoring))
        except Exception as exc:  # scoring is other work in progress; the dashboards need the rest
            if not scoring:
                raise
            notes.append(
                f"the agent did not start with in-process scoring ({type(exc).__name__}: {exc}); ran without it"
            )
            agent = loop.run(_start_agent(sim.url, tmp / "data2", {"scoring": {"enabled": False}}))
        kafka_agents.append(loop.run(_start_kafka_agent(sim.url, tmp / "kafka-up", broker.bootstrap)))
        kafka_agents.append(loop.run(_start_kafka_agent(sim.url, tmp / "kafka-down", dead_address(), max_buffered=1)))
        targets = [f"127.0.0.1:{a.metrics_port}" for a in [agent, *kafka_agents]]
        targets += [f"127.0.0.1:{w.port}" for w in workers]
        with running_prometheus(tmp / "prometheus", targets=targets, rule_files=rule_files) as prom:
            prom.wait_for_scrape()
            big = "x" * 6000
            for _ in range(5):  # spread over several scrapes, so that rate() sees increases
                loop.run(_traffic_round(f"http://127.0.0.1:{agent.proxy_port}", big))
                loop.run(_kafka_round(kafka_agents))
                time.sleep(0.5)
            # Let the pipeline (and the scorer, if any) catch up, then two more scrapes.
            deadline = time.monotonic() + 15
            while agent.queue.depth() and time.monotonic() < deadline:
                time.sleep(0.1)
            if getattr(agent, "scorer", None) is not None:
                while getattr(agent.scorer, "pending", 0) and time.monotonic() < deadline:
                    time.sleep(0.1)
            # The worker has consumed what the publishing sidecar sent (20 calls, one sample each).
            deadline = time.monotonic() + 60
            while workers[0].consumed("scored") < 20:
                if workers[0].proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the Kafka worker did not score 20 samples:\n{workers[0].log_tail()}")
                time.sleep(0.2)
            prom.wait_for_scrape(after=time.time(), scrapes=2)
            prom.wait_for_rules()
            exposition = loop.run(_fetch(f"http://127.0.0.1:{agent.metrics_port}/metrics"))
            yield Live(prom, exposition, notes)
    finally:
        for a in [agent, *kafka_agents]:
            if a is not None:
                loop.run(a.stop())
        if sim is not None:
            loop.run(sim.close())
        loop.close()
        stop_workers(workers)
        broker.stop()


async def _fetch(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as resp:
            return await resp.text()


def _missing_reason(live: Live, names: list[str]) -> str | None:
    missing = [n for n in names if not live.prom.has_series(n)]
    if not missing:
        return None
    parts = []
    for name in missing:
        if live.declared(name):
            parts.append(f"{name} (declared by the agent, but this test's traffic produced no series)")
        else:
            parts.append(f"{name} (not yet exported by llmwatch)")
    note = f"; note: {'; '.join(live.notes)}" if live.notes else ""
    return "no series in Prometheus for " + ", ".join(parts) + note


@pytest.mark.parametrize(("dashboard", "where", "expr"), CASES)
def test_expression_parses_and_returns_data(live: Live, dashboard: str, where: str, expr: str) -> None:
    variables = defined_variables(load(DASHBOARD_DIR / dashboard))
    promql = substitute(expr, variables)
    body = live.prom.query_raw(promql)
    assert body.get("status") == "success", (
        f"Prometheus rejected {where}: {body.get('errorType')}: {body.get('error')}\n{promql}"
    )
    names = metric_names(promql)
    assert names, f"no metric found in {promql}"
    reason = _missing_reason(live, names)
    if reason:
        pytest.xfail(reason)
    result = live.prom.query(promql)
    assert result, f"{where} returned no data after traffic:\n{promql}"
    assert finite(result), f"{where} returned only NaN/Inf after traffic: {result}\n{promql}"


@pytest.mark.parametrize(("dashboard", "name", "query"), VARIABLE_CASES)
def test_variable_query_returns_values(live: Live, dashboard: str, name: str, query: str) -> None:
    """label_values(SELECTOR, LABEL) as Grafana runs it: /api/v1/label/LABEL/values?match[]=SELECTOR."""
    m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
    assert m, query
    selector = substitute(m.group(1), defined_variables(load(DASHBOARD_DIR / dashboard)))
    assert live.prom.query_raw(selector).get("status") == "success", selector
    reason = _missing_reason(live, metric_names(selector))
    if reason:
        pytest.xfail(reason)
    values = live.prom.label_values(m.group(2), selector)
    assert values, f"${name}: no values for {query}"
    if name == "version":
        assert {"A", "B"} <= set(values), values  # both simulator profiles served traffic


def test_prometheus_loaded_the_rule_files(live: Live) -> None:
    """tests/helpers/prom.py's rule-file support, and the chart's alerts.yaml loading into a real Prometheus."""
    groups = {g["name"] for g in live.prom.rules()}
    assert "llmwatch-dashboard-test" in groups
    if CHART_ALERTS.exists():
        import yaml

        assert {g["name"] for g in yaml.safe_load(CHART_ALERTS.read_text())["groups"]} <= groups
    firing = [a for a in live.prom.alerts() if a["labels"]["alertname"] == "LLMWatchDashboardTest"]
    assert firing and firing[0]["state"] == "firing"
