"""The component model: receivers, processors, exporters and extensions, each made by a factory.

Built like the OpenTelemetry Collector's: a component owns its configuration section (a pydantic
model beside its code), its metric families (a `MetricGroup`) and a `Factory` that makes it from
that section. The factories are registered in one place, llmwatch.agent.components, as the
metadata of the root configuration's fields:

    kafka: Annotated[KafkaSection, KAFKA] = Field(default_factory=KafkaSection)

and the runtime (llmwatch.agent.runtime) makes, starts and stops what they return. This module
holds only the contract, so that a component in any layer can implement it.

Order: the runtime starts components by kind, extensions, then processors, then exporters, then
receivers, and within a kind in registry order; it stops them in the reverse order. So nothing is
handed traffic before what it hands it to is running, and on the way down receivers stop taking
calls before the exporters behind them are flushed and closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Literal, Protocol, TypeVar, cast, runtime_checkable

from pydantic import BaseModel

from llmwatch.core.metrics import MetricGroup, Metrics

Kind = Literal["extension", "processor", "exporter", "receiver"]
START_ORDER: tuple[Kind, ...] = ("extension", "processor", "exporter", "receiver")

S = TypeVar("S", bound=BaseModel)
T = TypeVar("T")


@runtime_checkable
class Component(Protocol):
    """What the runtime starts and stops. Both are bounded: a stop never waits without a limit."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class Ready(Protocol):
    """A component that reports readiness checks (the metrics server's /readyz)."""

    def readiness(self) -> dict[str, bool]: ...


@dataclass(frozen=True)
class Factory(Generic[S]):
    """How one component is made.

    `name` is the component's config section as a dotted path from the root (`kafka`,
    `drift.webhook`); `config` the model of the root field it is registered on, whose value
    `create` receives. `create` returns None when the section leaves the component off, and
    raises ConfigError for a section it cannot work with. `check` runs before any component is
    made, so that a refusal (a missing extra) comes before anything has started.
    """

    name: str
    kind: Kind
    config: type[S]
    create: Callable[[Context, S], Component | None]
    metrics: tuple[type[MetricGroup], ...] = ()
    check: Callable[[Context, S], None] | None = None


class Context:
    """What a factory gets besides its section: the root config, the metrics, shared services.

    Services are objects the runtime or an earlier component provides, found by type
    (`ctx.get(Intake)`); components made earlier in registry order are found the same way.
    """

    def __init__(self, config: BaseModel, metrics: Metrics, *, serve_proxy: bool = True) -> None:
        self.config = config
        self.metrics = metrics
        # False for `llmwatch ingest`: the pipeline, the scorer and the OTLP receiver, no proxy.
        self.serve_proxy = serve_proxy
        self._services: dict[type, object] = {}
        self.sinks: list[Any] = []  # llmwatch.collectors.intake.Sink, which this layer cannot name

    def section(self, model: type[S]) -> S:
        """The root config's section of this model (`ctx.section(FilesSection)`)."""
        for name in type(self.config).model_fields:
            value = getattr(self.config, name)
            if isinstance(value, model):
                return value
        raise LookupError(f"the configuration has no {model.__name__} section")

    def setting(self, name: str) -> Any:
        """A top-level setting of the root config (upstream, listen, metrics_listen, data_dir)."""
        return getattr(self.config, name)

    def provide(self, service: object, kind: type | None = None) -> None:
        self._services[kind or type(service)] = service

    def find(self, kind: type[T]) -> T | None:
        found = self._services.get(kind)
        if found is None:
            found = next((s for s in self._services.values() if isinstance(s, kind)), None)
        return cast("T | None", found)

    def get(self, kind: type[T]) -> T:
        found = self.find(kind)
        if found is None:
            raise LookupError(f"no {kind.__name__} was provided before this component")
        return found

    def add_sink(self, sink: Any) -> None:
        """Hand samples to `sink` too (an exporter of samples): the pipeline writes every batch to it."""
        self.sinks.append(sink)


class Event(Generic[T]):
    """Something that happens and who is told: subscribers are called in order, on the publisher's thread.

    A subscriber that raises is not the publisher's problem: it is logged by the caller's
    `on_error` and the others are still told.
    """

    def __init__(self, on_error: Callable[[Callable[[T], None], Exception], None] | None = None) -> None:
        self._subscribers: list[Callable[[T], None]] = []
        self._on_error = on_error

    def subscribe(self, subscriber: Callable[[T], None]) -> None:
        self._subscribers.append(subscriber)

    def publish(self, value: T) -> None:
        for subscriber in self._subscribers:
            try:
                subscriber(value)
            except Exception as exc:
                if self._on_error is None:
                    raise
                self._on_error(subscriber, exc)

    def __bool__(self) -> bool:
        return bool(self._subscribers)


class Passive(Generic[T]):
    """A component with nothing to start or stop of its own (a sink the pipeline writes to and closes)."""

    def __init__(self, value: T) -> None:
        self.value = value

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass
