"""Prometheus metrics of the sidecar, named after the OpenTelemetry GenAI semantic conventions.

`gen_ai.client.operation.duration` becomes `gen_ai_client_operation_duration_seconds`, and so on;
bucket boundaries follow the conventions' advice.

Each component declares its own metric families, declaratively, as a `MetricGroup`:

    class KafkaMetrics(MetricGroup):
        kafka_produced = counter("llmwatch_kafka_produced", "Samples acknowledged by the Kafka broker.")

A group's families are created on the registry of a `Metrics` (one per agent, so that several
agents or tests can live in one process) the first time the group is asked for
(`metrics.group(KafkaMetrics)`); the runtime asks for every registered component's groups at
start-up, so the exposition lists every family whether or not its component is on.
`MetricGroup.families()` enumerates the definitions (name, type, help, labels, buckets) without a
registry: the metrics reference is generated from them.

Label values are bounded: model names and versions pass through a `LabelCap`, and no label ever
carries prompt text, user ids or request ids.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from typing import Any, Generic, Iterable, Literal, TypeVar, cast, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# `_created` series double the exposition size and no dashboard or rule here reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated

OTHER = "other"
UNKNOWN = "unknown"
_MAX_LABEL_LEN = 64
_SAFE = re.compile(r"[^A-Za-z0-9._:/@+-]")
# A name longer than this is remembered by its first _MAX_LABEL_LEN characters and a digest of the
# rest: its label is those characters anyway, and a name can be megabytes (a model a client sends,
# a check or version a Kafka topic names), of which the cap remembers up to 50 times its limit.
_MAX_KEY_LEN = 256


def _key(value: str) -> str:
    if len(value) <= _MAX_KEY_LEN:
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{value[:_MAX_LABEL_LEN]}\x00{digest}"


class LabelCap:
    """Bound the distinct values of a label; every value beyond the bound becomes `other`.

    Names the operator configured (`allow`) and names the upstream confirmed by answering for
    them (`confirm`) always keep their own label: otherwise a client that sends 20 made-up model
    names first would push the real ones into `other` for the life of the process. Only
    unconfirmed names are admitted first-come, up to `limit`, so random names from clients
    cannot grow the series count past the cap.
    """

    # Upstreams are trusted to name real models, but a router can serve hundreds; past this
    # many confirmed names the cap applies to them too, so memory and series stay bounded.
    MAX_CONFIRMED = 500

    def __init__(self, limit: int, preset: tuple[str, ...] = ()) -> None:
        self._limit = limit
        self._seen: dict[str, str] = {}
        self._capped = 0  # unconfirmed names admitted so far
        self._confirmed = 0
        self._lock = threading.Lock()
        self.allow(preset)

    def allow(self, values: Iterable[str]) -> None:
        """Give each configured name its own label, outside the cap."""
        with self._lock:
            for value in values:
                value = _key(value) if value else value
                if value and self._seen.get(value, OTHER) == OTHER:
                    self._seen[value] = _SAFE.sub("_", value[:_MAX_LABEL_LEN])

    def __call__(self, value: str | None) -> str:
        if not value:
            return UNKNOWN
        value = _key(value)
        label = self._seen.get(value)
        if label is not None:
            return label
        with self._lock:
            return self._admit_locked(value)

    def confirm(self, value: str | None) -> str:
        """The label of a name the upstream answered for: its own, even after the cap is full."""
        if not value:
            return UNKNOWN
        value = _key(value)
        label = self._seen.get(value)
        if label is not None and label != OTHER:
            return label
        with self._lock:
            label = self._seen.get(value)
            if label is not None and label != OTHER:
                return label
            if self._confirmed < self.MAX_CONFIRMED:
                self._confirmed += 1
                label = _SAFE.sub("_", value[:_MAX_LABEL_LEN])
                self._seen[value] = label
                return label
            return label or self._admit_locked(value)

    def _admit_locked(self, value: str) -> str:
        label = self._seen.get(value)
        if label is not None:
            return label
        if self._capped < self._limit:
            self._capped += 1
            label = _SAFE.sub("_", value[:_MAX_LABEL_LEN])
        else:
            label = OTHER
        # Remember rejections too (bounded by a second cap) so lookups stay O(1).
        if label != OTHER or len(self._seen) < self._limit * 50:
            self._seen[value] = label
        return label

    @property
    def admitted(self) -> int:
        return sum(1 for v in self._seen.values() if v != OTHER)


@dataclass(frozen=True)
class DriftReading:
    """One drift signal of one model version and operation against the baseline, as the gauges show it."""

    model_version: str
    operation: str
    signal: str
    statistic: float
    p_value: float  # adjusted for multiple testing
    detected: bool
    n_current: int
    # The version the window's samples were served as ("response model, fingerprint"), when they
    # said: after a silent change under one model_version, the reading names the new one.
    served_as: str | None = None
    # Which way it moved and by how much, as `llmwatch drift`'s table prints it ("lower",
    # "rel median -0.452 [-0.548, -0.303]"): the demo's summary said "DRIFT in pass_rate:refusal
    # (p=4.0e-04)" without saying worse or better, nor by how much.
    direction: str = ""
    effect: str = ""


@dataclass(frozen=True)
class CanaryReading:
    """One figure of a canary compared with the stable version in the same window.

    kind: `verdict` (key = family; value 1 worse, 0 not worse, -1 undecided, 2 worse on a family
    `drift.fail_on` leaves out),
    `latency_per_token_ratio` (key = quantile 0.5 or 0.95; canary / stable), `pass_rate_difference`
    (key = check; canary minus stable, stratified) or `samples` (key = stable or canary).
    """

    kind: str
    stable_version: str
    canary_version: str
    key: str
    value: float


@dataclass(frozen=True)
class EvaluationReading:
    """One value of the evaluation report: kind is category_quality, stability, decision, turn_quality (category: the turn), turn_decay_slope (stability_kind: the bound), turn_conversations or prompt_sensitivity."""

    kind: str
    category: str
    stability_kind: str
    model_version: str
    value: float


MetricKind = Literal["counter", "gauge", "histogram"]
M = TypeVar("M", Counter, Gauge, Histogram)
G = TypeVar("G", bound="MetricGroup")


@dataclass(frozen=True)
class MetricFamily(Generic[M]):
    """One metric family as a component declares it; on a group instance, the live metric."""

    name: str  # as given to prometheus_client: counters are exposed with `_total` added
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    attr: str = ""  # the attribute it is declared as (set when the group class is made)

    def __set_name__(self, owner: type, name: str) -> None:
        object.__setattr__(self, "attr", name)

    @property
    def exposed_name(self) -> str:
        """The name a scrape shows (the one dashboards and alert rules read)."""
        return self.name + "_total" if self.kind == "counter" else self.name

    @overload
    def __get__(self, group: None, owner: type | None = None) -> MetricFamily[M]: ...

    @overload
    def __get__(self, group: MetricGroup, owner: type | None = None) -> M: ...

    def __get__(self, group: MetricGroup | None, owner: type | None = None) -> MetricFamily[M] | M:
        if group is None:
            return self
        return cast(M, group._live[self.attr])

    def create(self, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
        if self.kind == "counter":
            return Counter(self.name, self.help, self.labels, registry=registry)
        if self.kind == "gauge":
            return Gauge(self.name, self.help, self.labels, registry=registry)
        buckets = self.buckets if self.buckets is not None else Histogram.DEFAULT_BUCKETS
        return Histogram(self.name, self.help, self.labels, buckets=buckets, registry=registry)


def counter(name: str, help: str, labels: Iterable[str] = ()) -> MetricFamily[Counter]:
    return MetricFamily(name, "counter", help, tuple(labels))


def gauge(name: str, help: str, labels: Iterable[str] = ()) -> MetricFamily[Gauge]:
    return MetricFamily(name, "gauge", help, tuple(labels))


def histogram(name: str, help: str, labels: Iterable[str], buckets: Iterable[float]) -> MetricFamily[Histogram]:
    return MetricFamily(name, "histogram", help, tuple(labels), tuple(buckets))


class MetricGroup:
    """A component's metric families: declared as class attributes, live on an instance.

    An instance is made by `Metrics.group` only, once per `Metrics`; it creates every family of
    its class on that registry. Groups may add methods that set several families at once (e.g.
    `DriftMetrics.set_drift`) and read the shared label caps through `model_label`/`version_label`.
    """

    def __init__(self, metrics: Metrics) -> None:
        self.hub = metrics
        self._live: dict[str, Any] = {f.attr: f.create(metrics.registry) for f in type(self).families()}

    @classmethod
    def families(cls) -> list[MetricFamily[Any]]:
        """The group's families in declaration order (base classes first)."""
        seen: dict[str, MetricFamily[Any]] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, MetricFamily):
                    seen[name] = value
        return list(seen.values())

    @property
    def model_label(self) -> LabelCap:
        return self.hub.model_label

    @property
    def version_label(self) -> LabelCap:
        return self.hub.version_label


class Metrics:
    """One agent's metrics: a registry, the label caps, and the groups made on them so far."""

    def __init__(
        self,
        *,
        max_models: int = 20,
        max_versions: int = 20,
        registry: CollectorRegistry | None = None,
        groups: Iterable[type[MetricGroup]] = (),
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.model_label = LabelCap(max_models)
        self.version_label = LabelCap(max_versions)
        self._groups: dict[type[MetricGroup], MetricGroup] = {}
        self._lock = threading.Lock()
        for group in groups:
            self.group(group)

    def group(self, kind: type[G]) -> G:
        """The group `kind` on this registry, made (and its families registered) on first use."""
        found = self._groups.get(kind)
        if found is None:
            with self._lock:
                found = self._groups.get(kind)
                if found is None:
                    found = self._groups[kind] = kind(self)
        return cast(G, found)

    @property
    def internal_errors(self) -> Counter:
        """Exceptions inside llmwatch's own code, whichever component counts them."""
        return self.group(InternalMetrics).internal_errors


class InternalMetrics(MetricGroup):
    internal_errors = counter(
        "llmwatch_internal_errors",
        "Exceptions inside llmwatch's own capture/metrics code; traffic was forwarded regardless.",
        ["stage"],
    )
