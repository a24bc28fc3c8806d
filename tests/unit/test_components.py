"""The component registry: the root config's fields are the registry, and it is consistent.

Each factory is registered on the field of the section it is made from; names are unique; every
metric family is declared once, by one component, and can be listed without a running agent.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from llmwatch.agent.components import Config, factories, metric_groups
from llmwatch.core.component import START_ORDER, Factory
from llmwatch.core.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]


def test_each_factory_is_registered_on_the_field_of_the_section_it_is_made_from():
    for name, field in Config.model_fields.items():
        for factory in field.metadata:
            if isinstance(factory, Factory):
                assert field.annotation is factory.config, (name, factory.name)
                # Its name is the section, or a part of it, where it is configured.
                assert factory.name == name or factory.name.startswith(name + "."), (name, factory.name)


def test_factory_names_are_unique_and_kinds_are_the_four_the_runtime_orders():
    names = [f.name for f in factories()]
    assert len(names) == len(set(names))
    assert {f.kind for f in factories()} <= set(START_ORDER)
    assert {"proxy", "files", "scoring", "kafka", "otel", "shadow"} <= set(names)


def test_every_metric_family_is_declared_once_with_help_and_a_known_type():
    families = [f for group in metric_groups() for f in group.families()]
    names = [f.name for f in families]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for f in families:
        assert f.help and f.kind in ("counter", "gauge", "histogram"), f.name
        assert (f.buckets is not None) == (f.kind == "histogram"), f.name


def test_the_declared_families_are_what_an_agent_registers():
    metrics = Metrics(groups=metric_groups())
    registered = {c._name for c in metrics.registry._collector_to_names}  # what a scrape is made from
    assert registered == {f.name for g in metric_groups() for f in g.families()}


def test_the_dashboards_and_alert_rules_read_only_declared_families():
    exposed = {f.exposed_name for g in metric_groups() for f in g.families()}
    series = set(exposed)
    for f in (f for g in metric_groups() for f in g.families() if f.kind == "histogram"):
        series |= {f.name + "_bucket", f.name + "_sum", f.name + "_count"}
    text = " ".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "dashboards").glob("*.json")))
    text += " ".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "dashboards" / "alerts").glob("*.yaml")))
    labels = {label for g in metric_groups() for f in g.families() for label in f.labels}
    # The dashboards' own variables (`${llmwatch_ui_url}`) are not series.
    variables = {
        v["name"]
        for p in (ROOT / "dashboards").glob("*.json")
        for v in json.loads(p.read_text(encoding="utf-8")).get("templating", {}).get("list", [])
    }
    read = set(re.findall(r"\b(?:llmwatch|gen_ai)_[a-z0-9_]+", text)) - labels - variables
    # Recording rules' own series are named llmwatch:..., which the pattern does not take.
    unknown = {name for name in read if name not in series}
    assert not unknown, sorted(unknown)


def test_a_group_is_made_once_per_metrics_and_shares_its_label_caps():
    from llmwatch.collectors.exporters.kafka import KafkaMetrics

    metrics = Metrics(max_versions=3)
    assert metrics.group(KafkaMetrics) is metrics.group(KafkaMetrics)
    assert metrics.group(KafkaMetrics).version_label is metrics.version_label
    json.dumps([f.name for f in KafkaMetrics.families()])  # plain data, enumerable without a registry
