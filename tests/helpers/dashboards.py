"""Reading Grafana dashboards as the tests do: their PromQL expressions, template variables, and
the metric names an expression selects (tests/e2e/test_dashboards.py checks every dashboard
against a live Prometheus; tests/e2e/test_drift_alerting.py the drift dashboard once drift fired)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "dashboards"

# Grafana's built-in variables, as the test substitutes them.
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "5m",
    "__range_s": "300",
    "__range_ms": "300000",
}
VARIABLE_RE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # panels inside collapsed rows


def expressions(dashboard: dict) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every query of the dashboard."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel '{panel['title']}' {target['refId']}", target["expr"]
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            yield f"annotation '{annotation['name']}'", annotation["expr"]


def variable_queries(dashboard: dict) -> Iterator[tuple[str, str]]:
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["name"], variable["query"]["query"]


def defined_variables(dashboard: dict) -> set[str]:
    return {v["name"] for v in dashboard["templating"]["list"]}


def substitute(expr: str, variables: set[str]) -> str:
    def replace(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in BUILTINS:
            return BUILTINS[name]
        if name in variables:
            return ".*"
        raise AssertionError(f"undefined variable ${name} in {expr}")

    return VARIABLE_RE.sub(replace, expr)


_KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
    "Inf",
    "NaN",
}


def metric_names(expr: str) -> list[str]:
    """Metric names a PromQL expression selects (for the expressions written here: selectors,
    functions, aggregations with by/without, binary operators with on/ignoring/group_*)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = []
    for m in re.finditer(r"(?<![\w.:])[A-Za-z_:][\w:]*", s):
        token = m.group()
        if token in _KEYWORDS or s[m.end() :].lstrip().startswith("("):
            continue
        if token not in names:
            names.append(token)
    return names
