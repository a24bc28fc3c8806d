"""The registry: every component of the agent, and the root configuration assembled from their sections.

The root `Config` is the one validated configuration (llmwatch.core.config has the loader). Each
field is a section, named as in the configuration file and typed by the model its component owns;
a section that configures components carries their factories as metadata:

    kafka: Annotated[KafkaSection, KAFKA] = Field(default_factory=KafkaSection)

So the field is the registry line: the runtime (llmwatch.agent.runtime) reads the factories from
the fields, `metric_groups()` enumerates every metric family from them, and the configuration
reference is generated from the same models. Adding a component is its own module (section,
metrics, factory) and one line here (docs/design/0040-component-model.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Mapping

from pydantic import Field, field_validator, model_validator

from llmwatch.agent.processes.scoring import SCORING
from llmwatch.collectors.exporters.files import FILES
from llmwatch.collectors.exporters.kafka import KAFKA, KafkaSection
from llmwatch.collectors.exporters.webhook import DRIFT_WEBHOOK
from llmwatch.collectors.intake import PipelineMetrics
from llmwatch.collectors.judge.config import JudgeSection
from llmwatch.collectors.judge.factory import JUDGE
from llmwatch.collectors.otel.config import OtelSection
from llmwatch.collectors.otel.factory import OTLP_EXPORTER, OTLP_RECEIVER
from llmwatch.collectors.receivers.proxy.config import CaptureSection, ProxyConfig, ProxySection
from llmwatch.collectors.receivers.proxy.factory import PROXY
from llmwatch.collectors.sentinel import VERSION_SENTINEL
from llmwatch.collectors.shadow.config import ShadowConfig, ShadowSection
from llmwatch.collectors.shadow.consistency import ConsistencySection
from llmwatch.collectors.shadow.consistency_factory import CONSISTENCY
from llmwatch.collectors.shadow.factory import SHADOW
from llmwatch.core.component import Context, Factory
from llmwatch.core.config import (
    FilesSection,
    LoggingSection,
    MetricsSection,
    ModelVersionSection,
    QueueSection,
    Section,
    host_port,
    load_model,
    normalize_upstream,
)
from llmwatch.core.metrics import InternalMetrics, MetricGroup, Metrics
from llmwatch.core.urls import check_http_url
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.drift.config import DriftSection
from llmwatch.scorers.evaluation.config import MatrixSection
from llmwatch.scorers.pipeline.redaction import RedactionSection
from llmwatch.scorers.pipeline.sampler import SamplingSection


class Config(Section):
    """The root configuration: the top-level settings, then one line per section.

    A section that configures a component carries its factory (or factories) as metadata; the
    runtime makes the components from these lines, in this order within each kind (see
    llmwatch.core.component for the order of kinds). The other sections are settings the runtime
    itself or several components read.
    """

    upstream: str | None = None
    listen: str = "127.0.0.1:8080"
    metrics_listen: str = "127.0.0.1:9464"
    data_dir: Path = Path("llmwatch-data")
    proxy: Annotated[ProxySection, PROXY] = Field(default_factory=ProxySection)
    capture: CaptureSection = Field(default_factory=CaptureSection)
    sampling: SamplingSection = Field(default_factory=SamplingSection)
    queue: QueueSection = Field(default_factory=QueueSection)
    redaction: RedactionSection = Field(default_factory=RedactionSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    model_version: ModelVersionSection = Field(default_factory=ModelVersionSection)
    files: Annotated[FilesSection, FILES] = Field(default_factory=FilesSection)
    scoring: Annotated[ScoringSection, SCORING] = Field(default_factory=ScoringSection)
    kafka: Annotated[KafkaSection, KAFKA] = Field(default_factory=KafkaSection)
    drift: Annotated[DriftSection, VERSION_SENTINEL, DRIFT_WEBHOOK] = Field(default_factory=DriftSection)
    otel: Annotated[OtelSection, OTLP_EXPORTER, OTLP_RECEIVER] = Field(default_factory=OtelSection)
    matrix: MatrixSection = Field(default_factory=MatrixSection)
    shadow: Annotated[ShadowSection, SHADOW] = Field(default_factory=ShadowSection)
    consistency: Annotated[ConsistencySection, CONSISTENCY] = Field(default_factory=ConsistencySection)
    judge: Annotated[JudgeSection, JUDGE] = Field(default_factory=JudgeSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)

    @field_validator("listen", "metrics_listen")
    @classmethod
    def _valid_address(cls, value: str) -> str:
        return host_port(value)

    @field_validator("data_dir")
    @classmethod
    def _data_dir_is_a_folder(cls, value: Path) -> Path:
        # Here, where the error names its origin (--data-dir, LLMWATCH_DATA_DIR, the file): at the
        # first write it was "[Errno 20] Not a directory: 'afile/samples'" and nothing more.
        if value.exists() and not value.is_dir():
            raise ValueError(f"{str(value)!r} is a file, not a folder; give a folder (it is created if missing)")
        return value

    @field_validator("upstream")
    @classmethod
    def _valid_upstream(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return normalize_upstream(check_http_url(value, "http://127.0.0.1:8000"))

    @model_validator(mode="after")
    def _scores_only_stays_on_this_host(self) -> "Config":
        # Kafka workers score what they receive; in scores_only mode that is no text at all.
        if self.redaction.enabled and self.redaction.mode == "scores_only" and self.kafka.enabled:
            raise ValueError(
                "redaction.mode: scores_only keeps request and response text on this host, but kafka.enabled ships "
                "samples to `llmwatch scorer` workers, which would score empty text; score here (kafka.enabled: false) "
                "or use redaction.mode: mask"
            )
        return self


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Config:
    """File, then environment (`LLMWATCH_<SECTION>__<FIELD>`), then overrides (CLI flags); validated once."""
    return load_model(Config, path, overrides=overrides, environ=environ, flags=flags)


def factories(model: type[Config] | None = None) -> list[Factory[Any]]:
    """Every registered factory, in registry order (the order of the root config's fields)."""
    fields = (model or Config).model_fields.values()
    return [m for field in fields for m in field.metadata if isinstance(m, Factory)]


def configured(cfg: Config) -> list[tuple[Factory[Any], Any]]:
    """(factory, the section it is made from) for every factory registered on `cfg`'s model, in order.

    A model derived from Config (a field added for a component of one's own) is read the same way.
    """
    out = []
    for name, field in type(cfg).model_fields.items():
        for factory in field.metadata:
            if isinstance(factory, Factory):
                out.append((factory, getattr(cfg, name)))
    return out


def metric_groups(model: type[Config] | None = None) -> tuple[type[MetricGroup], ...]:
    """Every metric group of the agent: what a scrape lists, whether or not its component is on.

    The runtime's own (internal errors, the pipeline's), then each factory's, once each; the
    metrics reference is generated from these (`MetricGroup.families()`).
    """
    groups: dict[type[MetricGroup], None] = {InternalMetrics: None, PipelineMetrics: None}
    for factory in factories(model):
        groups.update(dict.fromkeys(factory.metrics))
    return tuple(groups)


def check_config(cfg: Config, *, proxy: bool = True) -> None:
    """Every feature the config switches on has its extra; the first one missing is refused."""
    ctx = Context(cfg, Metrics(), serve_proxy=proxy)
    for factory, section in configured(cfg):
        if factory.check is not None:
            factory.check(ctx, section)


if TYPE_CHECKING:
    # The root config has every section the proxy and the shadow mirror read (mypy checks it).
    _proxy_view: ProxyConfig = Config()
    _shadow_view: ShadowConfig = Config()
