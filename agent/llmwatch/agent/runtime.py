"""The runtime: from one validated `Config` to a running agent, built from the component registry.

The runtime owns the spine every component plugs into: the metrics, the bounded queue, the intake
(sampling, shared by every receiver) and the pipeline (redaction, then every sink), and the
metrics/health server. Everything else is a component made by the factories registered on the
root config's fields (llmwatch.agent.components): the runtime makes them in registry order,
starts them by kind (extensions, processors, then the pipeline, exporters, the metrics server,
receivers) and stops them in the reverse order, each stop bounded by its component.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar, cast

import structlog

from llmwatch.agent.components import Config, check_config, configured, metric_groups
from llmwatch.agent.processes.scoring import ScoringComponent
from llmwatch.collectors.calls import CallEvents, CallFinished
from llmwatch.collectors.exporters.prometheus import metrics_app, serve_app
from llmwatch.collectors.exporters.webhook import WebhookComponent
from llmwatch.collectors.intake import Captured, Intake, Pipeline, PipelineMetrics, Sink
from llmwatch.collectors.late_scores import LateScores
from llmwatch.collectors.otel.factory import OtlpExporterComponent, OtlpReceiverComponent
from llmwatch.collectors.receivers.proxy.factory import ProxyComponent
from llmwatch.collectors.shadow.consistency_factory import ConsistencyComponent
from llmwatch.collectors.shadow.factory import ShadowComponent
from llmwatch.core.component import START_ORDER, Component, Context, Ready
from llmwatch.core.config import inactive_settings
from llmwatch.core.metrics import DriftReading, Metrics
from llmwatch.core.queue import BoundedQueue
from llmwatch.core.secrets import upstream_secrets
from llmwatch.core.urls import mask_url
from llmwatch.scorers.drift.metrics import DriftMetrics, DriftReadings
from llmwatch.scorers.pipeline.redaction import Redactor
from llmwatch.scorers.pipeline.sampler import Sampler

if TYPE_CHECKING:
    from llmwatch.agent.processes.scoring import ScorerProcess
    from llmwatch.collectors.exporters.otlp import OtelExporter
    from llmwatch.collectors.exporters.scores import ScoreRecorder
    from llmwatch.collectors.exporters.webhook import WebhookNotifier
    from llmwatch.collectors.receivers.proxy.handler import Proxy
    from llmwatch.collectors.shadow.parent import ShadowMirror

log = structlog.get_logger(__name__)

C = TypeVar("C")


@dataclass
class Agent:
    cfg: Config
    extra_sinks: Sequence[Sink] = ()
    # False for `llmwatch ingest`: pipeline, scorer and OTLP receiver without the proxy.
    serve_proxy: bool = True
    metrics: Metrics = field(init=False)
    queue: BoundedQueue[Captured] = field(init=False)
    intake: Intake = field(init=False)
    pipeline: Pipeline = field(init=False)
    # The components made from the registry, by factory name, in registry order.
    components: dict[str, Component] = field(init=False, default_factory=dict)
    # Latest reading per (model version, operation, signal): (statistic, adjusted p, detected, n).
    drift_state: dict[tuple[str, str, str], tuple] = field(init=False, default_factory=dict)
    # Per reading as drift_state: (direction, effect as the drift table prints it), for the demo's summary.
    drift_effects: dict[tuple[str, str, str], tuple[str, str]] = field(init=False, default_factory=dict)
    # What each model version's window was last served as (response model, fingerprint), for the alert text.
    drift_served: dict[str, str] = field(init=False, default_factory=dict)
    metrics_port: int = field(init=False, default=0)
    drift_readings: DriftReadings = field(init=False)

    def __post_init__(self) -> None:
        cfg = self.cfg
        # Before anything is made: a feature configured without its extra is refused in one line.
        check_config(cfg, proxy=self.serve_proxy)
        self.metrics = Metrics(
            max_models=cfg.metrics.max_models,
            max_versions=cfg.metrics.max_versions,
            groups=metric_groups(type(cfg)),
        )
        # Polled every 0.1 s rather than the default 0.02: each wake-up of the pipeline thread takes
        # the GIL from the event loop; measured at 200 plain calls/s with 10 % sampled, the thread's
        # CPU per proxied call went from ~80 to ~55 µs (fewer wake-ups, warmer batches), and samples
        # reach their sinks at most ~0.1 s later.
        self.queue = BoundedQueue(cfg.queue.max_size, poll_s=0.1)
        self.metrics.group(PipelineMetrics).queue_depth.set_function(self.queue.depth)
        # One redactor for every sink and exporter: an unsalted `hash` groups within one process only.
        redactor = Redactor.from_config(cfg.redaction)
        # One intake for every receiver: the same versions, sampling and counts.
        self.intake = Intake(self.queue, Sampler(cfg.sampling), self.metrics, default_version=cfg.model_version.default)
        # What the scorer publishes after each drift round: the gauges, then the agent's alert state.
        readings = self.drift_readings = DriftReadings(
            on_error=lambda subscriber, exc: log.exception("drift_subscriber_failed")
        )
        readings.subscribe(self.metrics.group(DriftMetrics).set_drift)
        readings.subscribe(self._on_drift)
        # What the proxy tells after each call; a failing subscriber is counted, the others still told.
        calls = CallEvents(on_error=self._call_subscriber_failed)
        # Scores decided after their sample was scored (the consistency probe's verdicts), for the scorer.
        late_scores = LateScores(
            on_error=lambda subscriber, exc: log.error("late_scores_subscriber_failed", exc_info=exc)
        )

        ctx = Context(cfg, self.metrics, serve_proxy=self.serve_proxy)
        # The upstream URL's credentials, masked wherever an answer of the upstream is kept.
        secrets = upstream_secrets(cfg.upstream)
        for service in (self.intake, cfg.metrics.price_table(), readings, calls, late_scores, redactor, secrets):
            if service is not None:
                ctx.provide(service)
        ctx.sinks.extend(self.extra_sinks)
        for factory, section in configured(cfg):
            component = factory.create(ctx, section)
            if component is not None:
                self.components[factory.name] = component
                ctx.provide(component)
        self._kinds = {factory.name: factory.kind for factory, _ in configured(cfg)}
        # A batch gathers up to `queue.batch_min` samples for at most `queue.batch_linger_s`: at 200 plain
        # calls/s with 10 % sampled, a batch per 0.1 s poll held about two samples and the pipeline
        # thread paid ~22 µs per proxied call; gathering 16 (or 1 s) took that to ~10-12 µs
        # (bench/proxy_threads.py, 4-6 alternating rounds; docs/benchmarks/proxy.md).
        self.pipeline = Pipeline(
            self.queue,
            ctx.sinks,
            self.metrics,
            redact=redactor,
            secrets=secrets,
            min_batch=cfg.queue.batch_min,
            linger_s=cfg.queue.batch_linger_s,
        )
        self._metrics_runner: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _call_subscriber_failed(self, subscriber: Callable[[CallFinished], None], exc: Exception) -> None:
        self.metrics.internal_errors.labels(stage="call_finished").inc()
        log.error(
            "call_subscriber_failed", subscriber=getattr(subscriber, "__qualname__", repr(subscriber)), exc_info=exc
        )

    # --- the components, by what they are ------------------------------------------------------

    def _component(self, kind: type[C]) -> C | None:
        return next((c for c in self.components.values() if isinstance(c, kind)), None)

    @property
    def proxy(self) -> Proxy | None:
        component = self._component(ProxyComponent)
        return component.proxy if component is not None else None

    @property
    def proxy_port(self) -> int:
        component = self._component(ProxyComponent)
        return component.port if component is not None else 0

    @property
    def ingest_port(self) -> int:
        component = self._component(OtlpReceiverComponent)
        return component.port if component is not None else 0

    @property
    def scorer(self) -> ScorerProcess | None:
        component = self._component(ScoringComponent)
        return component.scorer if component is not None else None

    @property
    def recorder(self) -> ScoreRecorder | None:
        component = self._component(ScoringComponent)
        return component.recorder if component is not None else None

    @property
    def shadow(self) -> ShadowMirror | None:
        component = self._component(ShadowComponent)
        return component.mirror if component is not None else None

    @property
    def consistency(self) -> ShadowMirror | None:
        """The consistency probe's mirror (`consistency.enabled`), else None."""
        component = self._component(ConsistencyComponent)
        return cast("ShadowMirror", component.mirror) if component is not None else None

    @property
    def otel(self) -> OtelExporter | None:
        component = self._component(OtlpExporterComponent)
        return component.exporter if component is not None else None

    @property
    def notifier(self) -> WebhookNotifier | None:
        component = self._component(WebhookComponent)
        return component.notifier if component is not None else None

    def _of_kind(self, kind: str) -> list[tuple[str, Component]]:
        return [(name, c) for name, c in self.components.items() if self._kinds[name] == kind]

    # --- drift readings --------------------------------------------------------------------------

    def _on_drift(self, readings: list[DriftReading]) -> None:
        """The agent's own subscriber to the scorer's drift readings: the state, and the webhook's alerts."""
        for r in readings:
            self.drift_state[(r.model_version, r.operation, r.signal)] = (
                r.statistic,
                r.p_value,
                r.detected,
                r.n_current,
            )
            self.drift_effects[(r.model_version, r.operation, r.signal)] = (r.direction, r.effect)
            if r.served_as:
                self.drift_served[r.model_version] = r.served_as
        notifier = self.notifier
        if notifier is not None and self._loop is not None:
            # Called on the scorer's result thread; the notifier lives on the event loop.
            asyncio.run_coroutine_threadsafe(notifier.update(self._drift_alerts()), self._loop)

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

    # --- health ---------------------------------------------------------------------------------

    def readiness(self) -> dict[str, bool]:
        checks = {"pipeline_alive": self.pipeline.alive}
        for component in self.components.values():
            if isinstance(component, Ready):
                checks.update(component.readiness())
        return checks

    def readiness_details(self) -> dict[str, object]:
        component = self._component(ProxyComponent)
        return component.details() if component is not None else {}

    # --- start and stop -----------------------------------------------------------------------

    async def start(self) -> None:
        # The event loop must get the GIL back quickly from the pipeline thread: the default 5 ms
        # switch interval would show up as 5 ms of added p99 on proxied calls.
        sys.setswitchinterval(0.0005)
        self._loop = asyncio.get_running_loop()
        # A section that is off but configured does nothing: say so once, naming the key to set.
        for section, keys in inactive_settings(self.cfg):
            log.warning(
                "config_section_off",
                section=section,
                settings=[f"{section}.{k}" for k in keys],
                fix=f"set {section}.enabled: true to use them, or remove them",
            )
        for kind in START_ORDER:
            if kind == "exporter":
                self.pipeline.start()
            if kind == "receiver":
                # Health and metrics answer before traffic is taken.
                self._metrics_runner, self.metrics_port = await serve_app(
                    metrics_app(
                        self.metrics, self.readiness, details=self.readiness_details, before_scrape=self._before_scrape
                    ),
                    self.cfg.metrics_listen,
                    setting="--metrics-listen, config metrics_listen",
                )
            for _, component in self._of_kind(kind):
                await component.start()
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
            components=list(self.components),
        )

    def _before_scrape(self) -> None:
        # The proxy does its finished calls' bookkeeping in batches (0066): a scrape first runs what
        # waits, so it counts every call finished before it, as when each call's ran at once.
        proxy = self.proxy
        if proxy is not None:
            proxy.flush()

    async def stop(self) -> None:
        # Say what the stop waits for: without it a Ctrl-C that takes seconds looks hung.
        scorer = self.scorer
        log.info(
            "agent_stopping",
            queued_samples=self.queue.depth(),
            scorer_pending=scorer.pending if scorer is not None else 0,
        )
        for kind in reversed(START_ORDER):
            for name, component in reversed(self._of_kind(kind)):
                await self._stop(name, component)
            if kind == "receiver" and self._metrics_runner is not None:
                await self._metrics_runner.cleanup()
                self._metrics_runner = None
            if kind == "exporter":
                # The pipeline drains into its sinks before they close; the scorer sink then waits
                # up to scoring.shutdown_timeout_s for scores and records the rest as `error`.
                await self._close_pipeline()
        log.info("agent_stopped", samples_processed=self.pipeline.processed)

    async def _close_pipeline(self) -> None:
        """`pipeline.close()` (blocking, with its own deadlines) in a thread of its own, the loop
        free meanwhile: the processors and extensions still run (the drift webhook is told the
        scorer's last readings during that wait, the judge's and the version sentinel's calls go
        on) and a repeated signal is taken at once. The receivers and the metrics server stopped
        before (the order above), so no call is in flight any more.

        A daemon thread, not the loop's executor: a stop given up (a second Ctrl-C cancels this
        task) must not leave the process waiting on it at exit; the scorer child is killed then
        (`Pipeline.abandon`), as when the wait was on the loop and the Ctrl-C raised in it."""
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if closed.done():
                return
            if error is None:
                closed.set_result(None)
            else:
                closed.set_exception(error)

        def close() -> None:
            error: BaseException | None = None
            try:
                self.pipeline.close()
            except BaseException as exc:  # raised in the stop, as when it ran on the loop
                error = exc
            try:
                loop.call_soon_threadsafe(settle, error)
            except RuntimeError:
                pass  # the loop is closed: the stop was given up

        threading.Thread(target=close, name="llmwatch-pipeline-close", daemon=True).start()
        try:
            await closed
        except BaseException:
            if not closed.done() or closed.cancelled():  # given up, not the close's own error
                self.pipeline.abandon()
            raise

    @staticmethod
    async def _stop(name: str, component: Component) -> None:
        # One component that fails to stop must not keep the others running.
        try:
            await component.stop()
        except Exception:
            log.exception("component_stop_failed", component=name)
