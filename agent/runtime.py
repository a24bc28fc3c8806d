"""Wiring: from one validated `Config` to a running agent (proxy, queue, pipeline, metrics port)."""

from __future__ import annotations

import asyncio
import socket
import sys
from dataclasses import dataclass, field
from typing import Sequence

import structlog
from aiohttp import web

from llmwatch.core.config import Config, ConfigError
from llmwatch.collectors.health import metrics_app
from llmwatch.core.metrics import Metrics
from llmwatch.collectors.intake import Captured, FileSink, Pipeline, Sink
from llmwatch.core.pricing import PriceTable
from llmwatch.collectors.proxy import Proxy
from llmwatch.core.queue import BoundedQueue
from llmwatch.scorers.redaction import Redactor
from llmwatch.scorers.sampler import Sampler

log = structlog.get_logger(__name__)


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass
class Agent:
    cfg: Config
    extra_sinks: Sequence[Sink] = ()
    # False for `llmwatch ingest`: pipeline, scorer and OTLP receiver without the proxy.
    serve_proxy: bool = True
    metrics: Metrics = field(init=False)
    queue: BoundedQueue[Captured] = field(init=False)
    pipeline: Pipeline = field(init=False)
    proxy: Proxy | None = field(init=False)
    proxy_port: int = field(init=False, default=0)
    ingest_port: int = field(init=False, default=0)
    # Latest reading per (model version, operation, signal): (statistic, adjusted p, detected, n).
    drift_state: dict[tuple[str, str, str], tuple] = field(init=False, default_factory=dict)
    metrics_port: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.metrics = Metrics(max_models=cfg.metrics.max_models, max_versions=cfg.metrics.max_versions)
        self.queue = BoundedQueue(cfg.queue.max_size)
        sinks: list[Sink] = []
        if cfg.files.enabled:
            sinks.append(FileSink(str(cfg.data_dir / "samples"), cfg.files.max_file_bytes))
        sinks.extend(self.extra_sinks)
        if cfg.kafka.enabled:
            from llmwatch.collectors.kafka import KafkaSampleSink

            # In addition to local scoring, unless `scoring.enabled: false` (scorer workers then do it all).
            sinks.append(KafkaSampleSink(cfg.kafka, self.metrics))
        self.scorer = None
        self.recorder = None
        if cfg.scoring.enabled:
            from llmwatch.core.jsonio import JsonlWriter
            from llmwatch.scorers.export import ScoreRecorder
            from llmwatch.scorers.suite import validate_scoring
            from llmwatch.agent.scoring import ScorerProcess, ScoringSink

            # Fail at start-up, in this process, on a bad check config or baseline; the model loads in the child.
            validate_scoring(cfg.scoring)
            if cfg.drift.baseline is not None:
                from llmwatch.scorers.baseline import check_minimums, load_baseline
                from llmwatch.scorers.drift import settings_from_config

                check_minimums(load_baseline(cfg.drift.baseline), settings_from_config(cfg.drift), f"baseline {cfg.drift.baseline}")
            self.recorder = ScoreRecorder(self.metrics, JsonlWriter(cfg.data_dir / "scores", "scores", max_file_bytes=cfg.files.max_file_bytes) if cfg.files.enabled else None)
            dropped = self.metrics.samples_dropped
            self.scorer = ScorerProcess(
                cfg.scoring.model_dump(mode="json"),
                self.recorder.record,
                max_pending=cfg.scoring.max_pending,
                batch_timeout_s=cfg.scoring.batch_timeout_s,
                drift_payload=cfg.drift.model_dump(mode="json"),
                on_drift=self._on_drift,
                matrix_payload=cfg.matrix.model_dump(mode="json"),
                on_evaluation=self._on_evaluation,
                log_level=cfg.logging.level,
                on_drop=lambda reason, n: dropped.labels(reason=reason).inc(n),
            )
            self.metrics.scoring_pending.set_function(lambda: self.scorer.pending)
            sinks.append(ScoringSink(self.scorer, cfg.scoring.batch_size))
        elif cfg.drift.baseline is not None:
            raise ConfigError("drift.baseline: drift detection needs the scorer; set scoring.enabled: true or remove drift.baseline")
        self.metrics.queue_depth.set_function(self.queue.depth)
        redactor = Redactor(cfg.redaction.patterns, cfg.redaction.extra_patterns) if cfg.redaction.enabled else None
        self.pipeline = Pipeline(self.queue, sinks, self.metrics, redact=redactor)
        sampler = Sampler(cfg.sampling)
        self.proxy = Proxy(cfg, self.metrics, self.queue, sampler=sampler, prices=PriceTable(cfg.metrics.pricing)) if self.serve_proxy else None
        self.otel = None
        if cfg.otel.enabled and self.proxy is not None:
            from llmwatch.collectors.otel_export import OtelExporter

            self.otel = OtelExporter(cfg.otel, upstream=self.proxy.cfg.upstream or "", metrics=self.metrics, redact=redactor)
            self.proxy.on_call = self.otel.on_call
        self.receiver = None
        if cfg.otel.ingest_listen:
            from llmwatch.collectors.otlp_ingest import OtlpReceiver

            self.receiver = OtlpReceiver(self.pipeline, sampler, self.metrics, max_body_bytes=cfg.otel.ingest_max_body_bytes)
        self._runners: list[web.AppRunner] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.notifier = None
        if cfg.drift.webhook.url:
            from llmwatch.collectors.webhook import WebhookNotifier

            hook = cfg.drift.webhook
            events = self.metrics.notifications
            self.notifier = WebhookNotifier(hook.url, repeat_interval_s=hook.repeat_interval_s, max_retries=hook.max_retries, on_event=lambda name: events.labels(event=name).inc())

    def _on_drift(self, readings: list[tuple]) -> None:
        m = self.metrics
        for version, operation, signal, statistic, p_value, detected, n in readings:
            v = m.version_label(version)
            m.drift_statistic.labels(signal, v, operation).set(statistic)
            m.drift_p_value.labels(signal, v, operation).set(p_value)
            m.drift_detected.labels(signal, v, operation).set(1.0 if detected else 0.0)
            m.drift_window.labels(v).set(n)
            self.drift_state[(version, operation, signal)] = (statistic, p_value, detected, n)
        if self.notifier is not None and self._loop is not None:
            # Called on the scorer's result thread; the notifier lives on the event loop.
            asyncio.run_coroutine_threadsafe(self.notifier.update(self._drift_alerts()), self._loop)

    def _on_evaluation(self, readings: list[tuple]) -> None:
        m = self.metrics
        for kind, category, stability_kind, version, value in readings:
            v = m.version_label(version)
            if kind == "category_quality":
                m.category_quality.labels(category, v).set(value)
            elif kind == "stability":
                m.stability.labels(stability_kind, category, v).set(value)
            elif kind == "decision":
                m.decision_score.labels(v).set(value)

    def _drift_alerts(self) -> dict:
        from llmwatch.collectors.webhook import AlertSpec, alert_key
        from llmwatch.scorers.drift_model import ALERTS, family_of

        active = {}
        for (version, operation, signal), (statistic, p_value, detected, n) in self.drift_state.items():
            if not detected:
                continue
            # One alert per drift family: behaviour drift pages, a performance regression warns, a
            # change in what users ask (inputs) is information; see scorers/families.py.
            family = family_of(signal)
            alertname = ALERTS[family]
            labels = {"alertname": alertname, "severity": "info" if family == "inputs" else "warning", "signal": signal, "model_version": version, "gen_ai_operation_name": operation}
            annotations = {
                "summary": f"{'Traffic changed' if family == 'inputs' else 'Performance regression' if family == 'performance' else 'Behaviour drift'} on {signal} for model_version {version} ({operation})",
                "description": f"Signal {signal} ({family}) of model_version {version} differs from its baseline: Holm-adjusted p-value {p_value:.3g}, statistic {statistic:.4g}, {n} samples in the window.",
                "runbook_url": f"https://github.com/llmwatch/llmwatch/blob/main/docs/runbooks.md#{alertname.lower()}",
            }
            active[alert_key(labels)] = AlertSpec(labels, annotations)
        return active

    def readiness(self) -> dict[str, bool]:
        checks = {"pipeline_alive": self.pipeline.alive}
        if self.proxy is not None:
            checks["proxy_listening"] = self.proxy_port > 0
        if self.receiver is not None:
            checks["ingest_listening"] = self.ingest_port > 0
        return checks

    async def _serve(self, app: web.Application, address: str) -> int:
        host, port = split_host_port(address)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        # Bind ourselves so that port 0 works and the chosen port is known.
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        site = web.SockSite(runner, sock, backlog=2048)
        await site.start()
        self._runners.append(runner)
        return sock.getsockname()[1]

    async def start(self) -> None:
        # The event loop must get the GIL back quickly from the pipeline thread: the default 5 ms
        # switch interval would show up as 5 ms of added p99 on proxied calls.
        sys.setswitchinterval(0.0005)
        self._loop = asyncio.get_running_loop()
        if self.scorer is not None:
            self.scorer.start()
        self.pipeline.start()
        self.metrics_port = await self._serve(metrics_app(self.metrics, self.readiness), self.cfg.metrics_listen)
        if self.receiver is not None and self.cfg.otel.ingest_listen:
            self.ingest_port = await self._serve(self.receiver.app(), self.cfg.otel.ingest_listen)
        if self.proxy is not None:
            await self.proxy.start()
            self.proxy_port = await self._serve(self.proxy.app(), self.cfg.listen)
        log.info(
            "agent_started",
            upstream=self.cfg.upstream,
            proxy_port=self.proxy_port,
            metrics_port=self.metrics_port,
            ingest_port=self.ingest_port or None,
            otel_export=self.cfg.otel.enabled,
            sampling_rate=self.cfg.sampling.rate,
            redaction=self.cfg.redaction.enabled,
            data_dir=str(self.cfg.data_dir),
        )

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self.proxy is not None:
            await self.proxy.close()
        if self.otel is not None:
            # In a thread: the collector may be served by this very event loop (tests, demos).
            await asyncio.to_thread(self.otel.shutdown, 5.0)
        # The pipeline drains into its sinks (the scorer sink waits for the scores) before they close.
        self.pipeline.close()
        if self.recorder is not None:
            self.recorder.close()
        if self.notifier is not None:
            await self.notifier.close()
        log.info("agent_stopped", samples_processed=self.pipeline.processed)
