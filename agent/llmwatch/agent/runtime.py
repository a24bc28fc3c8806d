"""Wiring: from one validated `Config` to a running agent (proxy, queue, pipeline, metrics port)."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

import structlog
from aiohttp import web

from llmwatch.collectors.exporters.files import FileSink
from llmwatch.collectors.exporters.prometheus import bind_socket, metrics_app, serve_app
from llmwatch.collectors.intake import Captured, Intake, Pipeline, Sink
from llmwatch.collectors.receivers.proxy.handler import Proxy
from llmwatch.collectors.receivers.proxy.upstream_probe import UpstreamProbe
from llmwatch.core.config import Config, ConfigError
from llmwatch.core.extras import check_config
from llmwatch.core.metrics import DriftReading, Metrics
from llmwatch.core.pricing import PriceTable
from llmwatch.core.queue import BoundedQueue
from llmwatch.core.urls import mask_url
from llmwatch.scorers.pipeline.redaction import Redactor
from llmwatch.scorers.pipeline.sampler import Sampler

log = structlog.get_logger(__name__)


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
    # What each model version's window was last served as (response model, fingerprint), for the alert text.
    drift_served: dict[str, str] = field(init=False, default_factory=dict)
    metrics_port: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        cfg = self.cfg
        # Before anything starts: a feature configured without its extra is refused in one line.
        check_config(cfg, proxy=self.serve_proxy)
        self.metrics = Metrics(max_models=cfg.metrics.max_models, max_versions=cfg.metrics.max_versions)
        # Polled every 0.1 s rather than the default 0.02: each wake-up of the pipeline thread takes
        # the GIL from the event loop; measured at 200 plain calls/s with 10 % sampled, the thread's
        # CPU per proxied call went from ~80 to ~55 µs (fewer wake-ups, warmer batches), and samples
        # reach their sinks at most ~0.1 s later.
        self.queue = BoundedQueue(cfg.queue.max_size, poll_s=0.1)
        sinks: list[Sink] = []
        if cfg.files.enabled:
            sinks.append(FileSink(str(cfg.data_dir / "samples"), cfg.files.max_file_bytes, self.metrics))
        sinks.extend(self.extra_sinks)
        if cfg.kafka.enabled:
            from llmwatch.collectors.exporters.kafka import KafkaSampleSink

            # In addition to local scoring, unless `scoring.enabled: false` (scorer workers then do it all).
            sinks.append(KafkaSampleSink(cfg.kafka, self.metrics))
        self.scorer = None
        self.recorder = None
        if cfg.scoring.enabled:
            from llmwatch.agent.processes.scoring import ScorerProcess, ScoringSink
            from llmwatch.collectors.exporters.scores import ScoreRecorder
            from llmwatch.core.jsonio import JsonlWriter
            from llmwatch.scorers.checks.suite import validate_scoring

            # Fail at start-up, in this process, on a bad check config or baseline; the model loads in the child.
            validate_scoring(cfg.scoring)
            if cfg.drift.baseline is not None:
                from llmwatch.scorers.drift.baseline import check_minimums, load_baseline
                from llmwatch.scorers.drift.compare import settings_from_config

                check_minimums(
                    load_baseline(cfg.drift.baseline), settings_from_config(cfg.drift), f"baseline {cfg.drift.baseline}"
                )
            self.recorder = ScoreRecorder(
                self.metrics,
                JsonlWriter(cfg.data_dir / "scores", "scores", max_file_bytes=cfg.files.max_file_bytes)
                if cfg.files.enabled
                else None,
            )
            dropped = self.metrics.samples_dropped
            self.scorer = ScorerProcess(
                cfg.scoring.model_dump(mode="json"),
                self.recorder.record,
                max_pending=cfg.scoring.max_pending,
                batch_timeout_s=cfg.scoring.batch_timeout_s,
                drift_payload=cfg.drift.model_dump(mode="json"),
                on_drift=self._on_drift,
                matrix_payload=cfg.matrix.model_dump(mode="json"),
                on_evaluation=self.metrics.set_evaluation,
                on_canary=self.metrics.set_canary,
                log_level=cfg.logging.level,
                on_drop=lambda reason, n: dropped.labels(reason=reason).inc(n),
                on_unscored=lambda reason, n: self.metrics.samples_unscored.labels(reason=reason).inc(n),
                shutdown_timeout_s=cfg.scoring.shutdown_timeout_s,
            )
            self.metrics.scoring_pending.set_function(lambda: self.scorer.pending)
            sinks.append(ScoringSink(self.scorer, cfg.scoring.batch_size))
        elif cfg.drift.baseline is not None:
            raise ConfigError(
                "drift.baseline: drift detection needs the scorer; set scoring.enabled: true or remove drift.baseline"
            )
        self.metrics.queue_depth.set_function(self.queue.depth)
        redactor = Redactor.from_config(cfg.redaction)
        self.pipeline = Pipeline(self.queue, sinks, self.metrics, redact=redactor)
        # One intake for the proxy and the OTLP receiver: the same versions, sampling and counts.
        self.intake = Intake(self.queue, Sampler(cfg.sampling), self.metrics, default_version=cfg.model_version.default)
        self.proxy = (
            Proxy(cfg, self.metrics, self.intake, prices=PriceTable(cfg.metrics.pricing)) if self.serve_proxy else None
        )
        self.sentinel = None
        self.version_actions = None
        watch = cfg.drift.version_change
        if watch.enabled:
            from llmwatch.collectors.sentinel import VersionActions, VersionSentinel

            actions = VersionActions(watch, self.metrics)
            self.version_actions = actions if actions.enabled else None
            self.sentinel = VersionSentinel(
                self.metrics,
                fields=watch.fields,
                remember_s=watch.remember_s,
                max_values=cfg.metrics.max_versions,
                max_changes=watch.max_changes,
                flap_window_s=watch.flap_window_s,
                on_change=self.version_actions.submit if self.version_actions is not None else None,
                on_flapping=self.version_actions.flapping if self.version_actions is not None else None,
            )
            if self.version_actions is not None:
                self.version_actions.state = self.sentinel.state
            self.intake.sentinel = self.sentinel
        self.upstream_probe = (
            UpstreamProbe(cfg.upstream, timeout_s=cfg.proxy.connect_timeout_s)
            if self.proxy is not None and cfg.upstream
            else None
        )
        self.otel = None
        if cfg.otel.enabled and self.proxy is not None:
            from llmwatch.collectors.exporters.otlp import OtelExporter

            self.otel = OtelExporter(
                cfg.otel, upstream=self.proxy.cfg.upstream or "", metrics=self.metrics, redact=redactor
            )
            self.proxy.on_call = self.otel.on_call
        self.shadow = None
        if cfg.shadow.enabled and self.proxy is not None:
            from llmwatch.agent.processes.shadow import child_main
            from llmwatch.collectors.shadow.mirror import ShadowMirror

            pair_sinks = []
            if cfg.kafka.enabled:
                from llmwatch.collectors.exporters.kafka import KafkaSampleSink

                # Pairs go where samples go: files, and Kafka when it is on.
                pair_sinks.append(
                    KafkaSampleSink(
                        cfg.kafka,
                        self.metrics,
                        topic=cfg.kafka.pairs_topic,
                        key=lambda pair: pair.id.encode(),
                        produced=self.metrics.shadow_kafka_produced,
                        dropped=self.metrics.shadow_kafka_dropped,
                        track_depth=False,
                    )
                )
            # The mirror is a child process (redacting with its own Redactor from cfg.redaction).
            self.shadow = ShadowMirror(
                cfg, self.metrics, self.proxy.prices, child_main=child_main, pair_sinks=pair_sinks
            )
            self.proxy.shadow = self.shadow
        self.receiver = None
        if cfg.otel.ingest_listen:
            from llmwatch.collectors.receivers.otlp import OtlpReceiver

            token = None
            if cfg.otel.ingest_token_env:
                token = os.environ.get(cfg.otel.ingest_token_env)
                if not token:
                    raise ConfigError(
                        f"otel.ingest_token_env: environment variable {cfg.otel.ingest_token_env} is not set or empty; set it to the bearer token senders use"
                    )
            self.receiver = OtlpReceiver(
                self.intake,
                self.metrics,
                max_body_bytes=cfg.otel.ingest_max_body_bytes,
                max_spans=cfg.otel.ingest_max_spans,
                token=token,
            )
        self._runners: list[Any] = []  # aiohttp runners, and the relay server (both have cleanup())
        self._loop: asyncio.AbstractEventLoop | None = None
        self.notifier = None
        if cfg.drift.webhook.url:
            from llmwatch.collectors.exporters.webhook import WebhookNotifier

            hook = cfg.drift.webhook
            events = self.metrics.notifications
            self.notifier = WebhookNotifier(
                hook.url,
                repeat_interval_s=hook.repeat_interval_s,
                max_retries=hook.max_retries,
                on_event=lambda name: events.labels(event=name).inc(),
            )

    def _on_drift(self, readings: list[DriftReading]) -> None:
        self.metrics.set_drift(readings)
        for r in readings:
            self.drift_state[(r.model_version, r.operation, r.signal)] = (
                r.statistic,
                r.p_value,
                r.detected,
                r.n_current,
            )
            if r.served_as:
                self.drift_served[r.model_version] = r.served_as
        if self.notifier is not None and self._loop is not None:
            # Called on the scorer's result thread; the notifier lives on the event loop.
            asyncio.run_coroutine_threadsafe(self.notifier.update(self._drift_alerts()), self._loop)

    def _drift_alerts(self) -> dict:
        from llmwatch.collectors.exporters.webhook import AlertSpec, alert_key
        from llmwatch.scorers.drift.model import ALERTS, family_of

        active = {}
        for (version, operation, signal), (statistic, p_value, detected, n) in self.drift_state.items():
            if not detected:
                continue
            # One alert per drift family: behaviour drift pages, a performance regression warns, a
            # change in what users ask (inputs) is information; see scorers/llmwatch/scorers/drift/families.py.
            family = family_of(signal)
            served = f" (served as {self.drift_served[version]})" if version in self.drift_served else ""
            alertname = ALERTS[family]
            labels = {
                "alertname": alertname,
                "severity": "info" if family == "inputs" else "warning",
                "signal": signal,
                "model_version": version,
                "gen_ai_operation_name": operation,
            }
            annotations = {
                "summary": f"{'Traffic changed' if family == 'inputs' else 'Performance regression' if family == 'performance' else 'Behaviour drift'} on {signal} for model_version {version} ({operation})",
                "description": f"Signal {signal} ({family}) of model_version {version}{served} differs from its baseline: Holm-adjusted p-value {p_value:.3g}, statistic {statistic:.4g}, {n} samples in the window.",
                "runbook_url": f"https://github.com/llmwatch/llmwatch/blob/main/docs/runbooks.md#{alertname.lower()}",
            }
            active[alert_key(labels)] = AlertSpec(labels, annotations)
        return active

    def readiness(self) -> dict[str, bool]:
        checks = {"pipeline_alive": self.pipeline.alive}
        if self.scorer is not None:
            # A scorer that failed to start, or lost a thread, scores nothing: not ready, so the
            # orchestrator sees it instead of frozen quality metrics.
            checks["scorer_alive"] = self.scorer.healthy
        if self.proxy is not None:
            checks["proxy_listening"] = self.proxy_port > 0
        if self.receiver is not None:
            checks["ingest_listening"] = self.ingest_port > 0
        return checks

    def readiness_details(self) -> dict[str, object]:
        # Beside the checks, not among them: see collectors/llmwatch/collectors/receivers/proxy/upstream_probe.py for why.
        if self.upstream_probe is None:
            return {}
        return {"upstream": mask_url(self.cfg.upstream or ""), "upstream_reachable": self.upstream_probe.reachable}

    async def _serve(
        self, app: web.Application, address: str, setting: str, runner: web.AppRunner | None = None
    ) -> int:
        runner, port = await serve_app(app, address, runner, setting=setting)
        self._runners.append(runner)
        return port

    async def start(self) -> None:
        # The event loop must get the GIL back quickly from the pipeline thread: the default 5 ms
        # switch interval would show up as 5 ms of added p99 on proxied calls.
        sys.setswitchinterval(0.0005)
        self._loop = asyncio.get_running_loop()
        if self.scorer is not None:
            self.scorer.start()
        self.pipeline.start()
        if self.version_actions is not None:
            self.version_actions.start()
        if self.shadow is not None:
            # Before the proxy listens: the child (a spawned process) is running when calls come.
            await self.shadow.start()
        self.metrics_port = await self._serve(
            metrics_app(self.metrics, self.readiness, details=self.readiness_details),
            self.cfg.metrics_listen,
            "--metrics-listen, config metrics_listen",
        )
        if self.receiver is not None and self.cfg.otel.ingest_listen:
            setting = "config otel.ingest_listen" if self.serve_proxy else "--listen, config otel.ingest_listen"
            self.ingest_port = await self._serve(self.receiver.app(), self.cfg.otel.ingest_listen, setting)
        if self.proxy is not None:
            await self.proxy.start()
            if self.cfg.proxy.engine == "relay":
                relay = self.proxy.relay_server()
                self.proxy_port = await relay.start(bind_socket(self.cfg.listen, "--listen, config listen"))
                self._runners.append(relay)  # stopped like a runner: cleanup() is its bounded shutdown
            else:
                proxy_app = self.proxy.app()
                self.proxy_port = await self._serve(
                    proxy_app, self.cfg.listen, "--listen, config listen", self.proxy.runner(proxy_app)
                )
        if self.upstream_probe is not None:
            self.upstream_probe.start()
        log.info(
            "agent_started",
            upstream=mask_url(self.cfg.upstream) if self.cfg.upstream else None,
            proxy_port=self.proxy_port,
            metrics_port=self.metrics_port,
            ingest_port=self.ingest_port or None,
            otel_export=self.cfg.otel.enabled,
            sampling_rate=self.cfg.sampling.rate,
            redaction=self.cfg.redaction.enabled,
            data_dir=str(self.cfg.data_dir),
            shadow_candidates=[c.name for c in self.cfg.shadow.candidates] if self.shadow is not None else None,
        )

    async def stop(self) -> None:
        # Say what the stop waits for: without it a Ctrl-C that takes seconds looks hung.
        log.info(
            "agent_stopping",
            queued_samples=self.queue.depth(),
            scorer_pending=self.scorer.pending if self.scorer is not None else 0,
        )
        if self.upstream_probe is not None:
            await self.upstream_probe.close()
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self.proxy is not None:
            await self.proxy.close()
        if self.shadow is not None:
            # Waits up to a few seconds for mirrors in flight (the child writes their pairs).
            await self.shadow.close(5.0)
        if self.otel is not None:
            # In a thread: the collector may be served by this very event loop (tests, demos).
            await asyncio.to_thread(self.otel.shutdown, 5.0)
        # The pipeline drains into its sinks before they close; the scorer sink then waits up to
        # scoring.shutdown_timeout_s for scores and records the rest as `error` (see agent/llmwatch/agent/processes/scoring.py).
        self.pipeline.close()
        if self.recorder is not None:
            self.recorder.close()
        if self.notifier is not None:
            await self.notifier.close()
        if self.version_actions is not None:
            await self.version_actions.close()
        log.info("agent_stopped", samples_processed=self.pipeline.processed)
