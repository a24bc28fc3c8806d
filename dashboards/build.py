"""Build llmwatch's Grafana dashboards with the Grafana Foundation SDK.

    python dashboards/build.py           # write dashboards/*.json, helm/llmwatch/dashboards/*.json and the chart's copy of the alert rules
    python dashboards/build.py --check   # exit 1 if a committed JSON file differs from what this builds

The JSON files are committed: Grafana (file provisioning, the Helm chart's dashboard ConfigMap,
the Grafana sidecar) reads them, not this script. Edit this script, run it, commit both.

Every dashboard has a `datasource` variable (any Prometheus data source) and multi-select `model`,
`version` and `operation` variables (labels gen_ai_request_model, model_version and
gen_ai_operation_name). PromQL conventions: counters through rate()/increase() over
$__rate_interval (instant "over the time range" panels: $__range); quantiles with
histogram_quantile over `sum by (le, ...)`.

Requires `grafana-foundation-sdk` (pinned in pyproject's `test` extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from grafana_foundation_sdk.builders import barchart, heatmap, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as promb
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUTPUTS = (HERE, ROOT / "helm" / "llmwatch" / "dashboards")
RULES_SOURCE = HERE / "alerts" / "llmwatch-rules.yaml"
RULES_COPY = ROOT / "helm" / "llmwatch" / "files" / "alerts.yaml"

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
RI = "$__rate_interval"
RANGE = "$__range"

# Label filters, one per family of metrics (only labels the metric really has).
CALL = 'gen_ai_request_model=~"$model", model_version=~"$version", gen_ai_operation_name=~"$operation"'
MODEL_VERSION = 'gen_ai_request_model=~"$model", model_version=~"$version"'
VERSION = 'model_version=~"$version"'
INSTANCE = 'instance=~"$instance"'

DURATION = "gen_ai_client_operation_duration_seconds"
TTFT = "gen_ai_server_time_to_first_token_seconds"
TOKENS = "gen_ai_client_token_usage"
COST = "llmwatch_cost_usd_total"

BY_MV = "gen_ai_request_model, model_version"
MV_LEGEND = "{{gen_ai_request_model}} {{model_version}}"
TAGS = ["llmwatch", "llm", "gen-ai"]


# --- small helpers ------------------------------------------------------------------------------


def q(expr: str, legend: str = "", *, instant: bool = False, fmt: pm.PromQueryFormat | None = None) -> promb.Dataquery:
    query = promb.Dataquery().expr(expr).datasource(DS)
    if legend:
        query = query.legend_format(legend)
    query = query.instant() if instant else query.range()
    if fmt is not None:
        query = query.format(fmt)
    return query


def legend_table() -> cb.VizLegendOptions:
    return (
        cb.VizLegendOptions()
        .display_mode(cm.LegendDisplayMode.TABLE)
        .placement(cm.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "max", "lastNotNull"])
    )


def tooltip() -> cb.VizTooltipOptions:
    return cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)


def ts(
    title: str,
    description: str,
    unit: str,
    targets: Sequence[promb.Dataquery],
    *,
    w: int = 12,
    h: int = 8,
    min_val: float | None = None,
    max_val: float | None = None,
    stacked: bool = False,
    log: bool = False,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .span(w)
        .height(h)
        .legend(legend_table())
        .tooltip(tooltip())
        .line_width(1)
        .fill_opacity(10 if not stacked else 40)
        .show_points(cm.VisibilityMode.NEVER)
    )
    if min_val is not None:
        panel = panel.min(min_val)
    if max_val is not None:
        panel = panel.max(max_val)
    if stacked:
        panel = panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    if log:
        panel = panel.scale_distribution(cb.ScaleDistributionConfig().type(cm.ScaleDistribution.LOG).log(10))
    for target in targets:
        panel = panel.with_target(target)
    return panel


def stat_panel(
    title: str,
    description: str,
    unit: str,
    expr: str,
    *,
    w: int = 6,
    h: int = 4,
    thresholds: Sequence[tuple[float | None, str]] = ((None, "green"),),
    decimals: int | None = None,
) -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .span(w)
        .height(h)
        .graph_mode(cm.BigValueGraphMode.AREA)
        .color_mode(cm.BigValueColorMode.VALUE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(
            db.ThresholdsConfig()
            .mode(dm.ThresholdsMode.ABSOLUTE)
            .steps([dm.Threshold(value=v, color=c) for v, c in thresholds])
        )
        .with_target(q(expr))
    )
    if decimals is not None:
        panel = panel.decimals(decimals)
    return panel


# --- links to `llmwatch ui` (docs/guide/ui.md) ------------------------------------------------------

UI_URL = "${llmwatch_ui_url}"
# The panel's time range, as epoch milliseconds (the UI reads `since`/`until` in ms or ISO 8601).
UI_RANGE = "since=${__from}&until=${__to}"


class DataLink:
    """A field data link ({title, url, targetBlank}): clicking a series or a point opens this URL."""

    def __init__(self, title: str, url: str) -> None:
        self.value = {"title": title, "url": url, "targetBlank": True}

    def build(self) -> dict[str, Any]:
        return self.value


def ui_link(title: str, **params: str) -> DataLink:
    """A link to the UI's samples page; `params` are its filters (Grafana interpolates the values).

    Every value goes through `:percentencode` so that a version or check with `&` or `#` stays one
    parameter; a variable set to All becomes ".*", which the UI reads as no filter.
    """
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return DataLink(title, f"{UI_URL}/samples?{query}&{UI_RANGE}")


def ui_variable() -> db.TextBoxVariable:
    return (
        db.TextBoxVariable("llmwatch_ui_url")
        .label("llmwatch ui")
        .description("Base URL of `llmwatch ui` (data links on the pass-rate and drift panels open its samples pages)")
        .default_value("http://127.0.0.1:8090")
        .current(dm.VariableOption(selected=True, text="http://127.0.0.1:8090", value="http://127.0.0.1:8090"))
    )


def quantiles(
    metric: str, selector: str, by: str, legend: str, qs: Iterable[float] = (0.5, 0.95, 0.99)
) -> list[promb.Dataquery]:
    return [
        q(
            f"histogram_quantile({x}, sum by (le, {by}) (rate({metric}_bucket{{{selector}}}[{RI}])))",
            f"p{round(x * 100)} {legend}",
        )
        for x in qs
    ]


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\n{denominator}"


def share(part: str, whole: str, by: str = "", *, fn: str = "rate", window: str = RI) -> str:
    """sum(part) / sum(whole), 0 (not "no data") where `part` has no series but `whole` has."""
    agg = f"sum by ({by}) " if by else "sum"
    p, w = f"{agg}({fn}({part}[{window}]))", f"{agg}({fn}({whole}[{window}]))"
    return f"(\n  {p}\n  or\n  {w} * 0\n)\n/\n{w}"


def or_zero(expr: str, present: str) -> str:
    """`expr`, or 0 where `expr` has no series but `present` (a sum over what must exist) has."""
    return f"({expr} or {present} * 0)"


def query_variable(name: str, label: str, query: str, *, description: str) -> db.QueryVariable:
    return (
        db.QueryVariable(name)
        .label(label)
        .description(description)
        .datasource(DS)
        .query({"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"})
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
    )


def base(uid: str, title: str, description: str, extra_variables: Sequence[Any] = ()) -> db.Dashboard:
    calls = f"{DURATION}_count"
    dash = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-3h", "now")
        .timezone("browser")
        .with_variable(
            db.DatasourceVariable("datasource")
            .label("Data source")
            .description("The Prometheus that scrapes llmwatch")
            .type("prometheus")
            .current(dm.VariableOption(selected=True, text="default", value="default"))
        )
        .with_variable(
            query_variable(
                "model",
                "Model",
                f"label_values({calls}, gen_ai_request_model)",
                description="Requested model (gen_ai_request_model)",
            )
        )
        .with_variable(
            query_variable(
                "version",
                "Version",
                f'label_values({calls}{{gen_ai_request_model=~"$model"}}, model_version)',
                description="Serving model version (model_version)",
            )
        )
        .with_variable(
            query_variable(
                "operation",
                "Route",
                f'label_values({calls}{{gen_ai_request_model=~"$model", model_version=~"$version"}}, gen_ai_operation_name)',
                description="Operation / route (gen_ai_operation_name: chat, text_completion, embeddings, ...)",
            )
        )
        .link(
            db.DashboardLink("llmwatch")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["llmwatch"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for variable in extra_variables:
        dash = dash.with_variable(variable)
    return dash


def version_rollout_annotation() -> db.AnnotationQuery:
    calls = f'{DURATION}_count{{gen_ai_request_model=~"$model"}}'
    expr = (
        f"count by (model_version) (rate({calls}[5m]) > 0)\n"
        f"unless\ncount by (model_version) (rate({calls}[5m] offset 15m) > 0)"
    )
    return (
        db.AnnotationQuery().name("Model version rollout").datasource(DS).enable(True).icon_color("purple").expr(expr)
    )


def alerts_annotation() -> db.AnnotationQuery:
    return (
        db.AnnotationQuery()
        .name("llmwatch alerts")
        .datasource(DS)
        .enable(True)
        .icon_color("red")
        .expr('ALERTS{alertname=~"LLMWatch.*", alertstate="firing"}')
    )


# Prometheus annotation options the SDK has no setter for.
ANNOTATION_EXTRAS = {
    "Model version rollout": {
        "step": "1m",
        "titleFormat": "model_version {{model_version}} began serving",
        "textFormat": "first traffic in 15 minutes",
        "tagKeys": "model_version",
    },
    "llmwatch alerts": {
        "step": "1m",
        "titleFormat": "{{alertname}}",
        "textFormat": "{{severity}} {{gen_ai_request_model}} {{model_version}} {{signal}}",
        "tagKeys": "alertname,severity",
    },
}


# --- dashboards ---------------------------------------------------------------------------------


def overview() -> db.Dashboard:
    calls = f"{DURATION}_count{{{CALL}}}"
    errors = f'{DURATION}_count{{{CALL}, error_type!=""}}'
    ok = f'{CALL}, error_type=""'
    cost = f"{COST}{{{CALL}}}"
    return (
        base(
            "llmwatch-overview",
            "llmwatch / Overview",
            "Traffic, errors, latency, time to first token, tokens and cost of the LLM calls llmwatch proxies.",
        )
        .annotation(version_rollout_annotation())
        .annotation(alerts_annotation())
        .with_row(db.Row("Now"))
        .with_panel(
            stat_panel(
                "Requests / s",
                "Calls through the proxy, all operations selected.",
                "reqps",
                f"sum(rate({calls}[{RI}]))",
            )
        )
        .with_panel(
            stat_panel(
                "Error ratio",
                "Share of calls that ended in an upstream error status or a proxy error.",
                "percentunit",
                share(errors, calls),
                thresholds=((None, "green"), (0.01, "orange"), (0.05, "red")),
            )
        )
        .with_panel(
            stat_panel(
                "p95 latency",
                "95th percentile of request start to last byte, successful calls.",
                "s",
                f"histogram_quantile(0.95, sum by (le) (rate({DURATION}_bucket{{{ok}}}[{RI}])))",
                thresholds=((None, "green"), (5, "orange"), (20, "red")),
            )
        )
        .with_panel(
            stat_panel(
                "Cost / hour",
                "USD per hour at the current rate, from the configured price table.",
                "currencyUSD",
                f"sum(rate({cost}[{RI}])) * 3600",
                decimals=2,
            )
        )
        .with_row(db.Row("Traffic and errors"))
        .with_panel(
            ts(
                "Request rate by model / version",
                "Calls per second.",
                "reqps",
                [q(f"sum by ({BY_MV}) (rate({calls}[{RI}]))", MV_LEGEND)],
            )
        )
        .with_panel(
            ts(
                "Request rate by route",
                "Calls per second by operation (gen_ai_operation_name).",
                "reqps",
                [q(f"sum by (gen_ai_operation_name) (rate({calls}[{RI}]))", "{{gen_ai_operation_name}}")],
            )
        )
        .with_panel(
            ts(
                "Errors by error_type",
                'Failed calls per second: the upstream\'s HTTP status ("429", "503") or the proxy\'s own kind (upstream_unavailable, upstream_timeout, stream_interrupted).',
                "reqps",
                [q(f"sum by (error_type) (rate({errors}[{RI}]))", "{{error_type}}")],
                stacked=True,
            )
        )
        .with_panel(
            ts(
                "Error ratio by model / version",
                "Share of calls that failed.",
                "percentunit",
                [q(share(errors, calls, BY_MV), MV_LEGEND)],
                min_val=0,
            )
        )
        .with_row(db.Row("Latency"))
        .with_panel(
            ts(
                "Latency p50 / p95 / p99",
                "Request start to last response byte, successful calls (gen_ai.client.operation.duration).",
                "s",
                quantiles(DURATION, ok, BY_MV, MV_LEGEND),
            )
        )
        .with_panel(
            ts(
                "Time to first token p50 / p95 / p99",
                "Request start to the first content token, streamed calls (gen_ai.server.time_to_first_token).",
                "s",
                quantiles(TTFT, CALL, BY_MV, MV_LEGEND),
            )
        )
        .with_row(db.Row("Tokens and cost"))
        .with_panel(
            ts(
                "Tokens / s by type",
                "Input and output tokens per second (from the upstream's usage, else estimated).",
                "short",
                [
                    q(
                        f"sum by (gen_ai_token_type, {BY_MV}) (rate({TOKENS}_sum{{{CALL}}}[{RI}]))",
                        "{{gen_ai_token_type}} " + MV_LEGEND,
                    )
                ],
            )
        )
        .with_panel(
            ts(
                "Tokens per call p50 / p95 by type",
                "Distribution of tokens per call.",
                "short",
                quantiles(
                    TOKENS,
                    CALL,
                    "gen_ai_token_type, gen_ai_request_model",
                    "{{gen_ai_token_type}} {{gen_ai_request_model}}",
                    qs=(0.5, 0.95),
                ),
            )
        )
        .with_panel(
            ts(
                "Cost per hour",
                "USD per hour at the rate of the moment, by model and version.",
                "currencyUSD",
                [q(f"sum by ({BY_MV}) (rate({cost}[{RI}])) * 3600", MV_LEGEND)],
            )
        )
        .with_panel(
            ts(
                "Cost per 1k requests",
                "USD per thousand calls, by model and version.",
                "currencyUSD",
                [
                    q(
                        ratio(
                            f"1000 * sum by ({BY_MV}) (rate({cost}[{RI}]))", f"sum by ({BY_MV}) (rate({calls}[{RI}]))"
                        ),
                        MV_LEGEND,
                    )
                ],
            )
        )
        .with_panel(
            ts(
                "Unpriced calls / s",
                "Calls whose model has no price in metrics.pricing: their cost is not counted above.",
                "reqps",
                [
                    q(
                        f'sum by (gen_ai_request_model) (rate(llmwatch_unpriced_calls_total{{gen_ai_request_model=~"$model"}}[{RI}]))',
                        "{{gen_ai_request_model}}",
                    )
                ],
                w=24,
                h=6,
            )
        )
    )


def check_variable() -> db.QueryVariable:
    return query_variable(
        "check",
        "Check",
        f"label_values(llmwatch_check_total{{{MODEL_VERSION}}}, check)",
        description="Quality check (scorers)",
    )


def quality() -> db.Dashboard:
    sel = f'{MODEL_VERSION}, check=~"$check"'
    checks = f"llmwatch_check_total{{{sel}}}"
    passed = f'llmwatch_check_total{{{sel}, result="pass"}}'
    decided = f'llmwatch_check_total{{{sel}, result=~"pass|fail"}}'
    score = "llmwatch_quality_score"
    by_cv = "check, model_version"
    matrix = dm.DataTransformerConfig(
        id_val="groupingToMatrix",
        options={"columnField": "model_version", "rowField": "check", "valueField": "Value", "emptyValue": "null"},
    )
    return (
        base(
            "llmwatch-quality",
            "llmwatch / Quality",
            "Check verdicts and quality scores of sampled traffic, per check, model and version.",
            [check_variable(), ui_variable()],
        )
        .annotation(version_rollout_annotation())
        .annotation(alerts_annotation())
        .with_row(db.Row("Now"))
        .with_panel(
            stat_panel(
                "Pass rate",
                "Share of pass among pass + fail verdicts (errors and skips excluded).",
                "percentunit",
                share(passed, decided),
                thresholds=((None, "red"), (0.9, "orange"), (0.97, "green")),
            ).data_links(
                [
                    ui_link(
                        "Failed samples in llmwatch ui",
                        model_version="${version:percentencode}",
                        check="${check:percentencode}",
                        outcome="fail",
                    )
                ]
            )
        )
        .with_panel(
            stat_panel(
                "Verdicts / s", "Check results recorded per second, all results.", "short", f"sum(rate({checks}[{RI}]))"
            )
        )
        .with_panel(
            stat_panel(
                "Check errors / s",
                "Checks that could not run (timeouts, crashes).",
                "short",
                or_zero(
                    f'sum(rate(llmwatch_check_total{{{sel}, result="error"}}[{RI}]))', f"sum(rate({checks}[{RI}]))"
                ),
                thresholds=((None, "green"), (0.001, "orange")),
            )
        )
        .with_panel(
            stat_panel(
                "Mean score",
                "Mean quality score (0..1) across the selected checks.",
                "percentunit",
                ratio(f"sum(rate({score}_sum{{{sel}}}[{RI}]))", f"sum(rate({score}_count{{{sel}}}[{RI}]))"),
            )
        )
        .with_row(db.Row("Pass rate per check"))
        .with_panel(
            ts(
                "Pass rate per check",
                "pass / (pass + fail), per check. Click a series: its failed samples in llmwatch ui.",
                "percentunit",
                [q(share(passed, decided, "check"), "{{check}}")],
                min_val=0,
                max_val=1,
            ).data_links(
                [
                    ui_link(
                        "Failed samples of ${__field.labels.check} in llmwatch ui",
                        model_version="${version:percentencode}",
                        check="${__field.labels.check:percentencode}",
                        outcome="fail",
                    )
                ]
            )
        )
        .with_panel(
            ts(
                "Verdicts by result",
                "Check results per second: pass, fail, error, skip.",
                "short",
                [q(f"sum by (result) (rate({checks}[{RI}]))", "{{result}}")],
                stacked=True,
            )
        )
        .with_row(db.Row("Score distributions"))
        .with_panel(
            heatmap.Panel()
            .title("Score distribution: $check")
            .description("Quality scores (0..1) over time, from the llmwatch_quality_score histogram buckets.")
            .datasource(DS)
            .span(8)
            .height(8)
            .repeat("check")
            .repeat_direction("h")
            .max_per_row(3)
            .calculate(False)
            .y_axis(heatmap.YAxisConfig().unit("short").min(0).max(1))
            .color(
                heatmap.HeatmapColorOptions()
                .mode(hm.HeatmapColorMode.SCHEME)
                .scheme("Spectral")
                .scale(hm.HeatmapColorScale.EXPONENTIAL)
                .exponent(0.5)
                .steps(64)
            )
            .cell_values(heatmap.CellValues().unit("short"))
            .show_legend()
            .with_target(
                q(f"sum by (le) (increase({score}_bucket{{{sel}}}[{RI}]))", "{{le}}", fmt=pm.PromQueryFormat.HEATMAP)
            )
        )
        .with_panel(
            ts(
                "Mean score per check",
                "Mean quality score per check.",
                "percentunit",
                [
                    q(
                        ratio(
                            f"sum by (check) (rate({score}_sum{{{sel}}}[{RI}]))",
                            f"sum by (check) (rate({score}_count{{{sel}}}[{RI}]))",
                        ),
                        "{{check}}",
                    )
                ],
                w=24,
                min_val=0,
                max_val=1,
            )
        )
        .with_row(db.Row("Version vs version"))
        .with_panel(
            barchart.Panel()
            .title("Pass rate by check and version (time range)")
            .description(
                "pass / (pass + fail) over the dashboard's time range; one bar per model_version, side by side."
            )
            .datasource(DS)
            .unit("percentunit")
            .min(0)
            .max(1)
            .span(12)
            .height(9)
            .orientation(cm.VizOrientation.HORIZONTAL)
            .legend(
                cb.VizLegendOptions()
                .display_mode(cm.LegendDisplayMode.LIST)
                .placement(cm.LegendPlacement.BOTTOM)
                .show_legend(True)
            )
            .with_transformation(matrix)
            .with_target(
                q(
                    share(passed, decided, by_cv, fn="increase", window=RANGE),
                    instant=True,
                    fmt=pm.PromQueryFormat.TABLE,
                )
            )
        )
        .with_panel(
            ts(
                "Pass rate by version",
                "pass / (pass + fail) per model_version, all selected checks. Click a series: its failed samples in llmwatch ui.",
                "percentunit",
                [q(share(passed, decided, "model_version"), "{{model_version}}")],
                min_val=0,
                max_val=1,
                h=9,
            ).data_links(
                [
                    ui_link(
                        "Failed samples of ${__field.labels.model_version} in llmwatch ui",
                        model_version="${__field.labels.model_version:percentencode}",
                        check="${check:percentencode}",
                        outcome="fail",
                    )
                ]
            )
        )
        .with_panel(
            table.Panel()
            .title("Mean score by check and version (time range)")
            .description("Mean quality score over the dashboard's time range; one column per model_version.")
            .datasource(DS)
            .unit("percentunit")
            .decimals(3)
            .span(12)
            .height(8)
            .with_transformation(matrix)
            .with_target(
                q(
                    ratio(
                        f"sum by ({by_cv}) (increase({score}_sum{{{sel}}}[{RANGE}]))",
                        f"sum by ({by_cv}) (increase({score}_count{{{sel}}}[{RANGE}]))",
                    ),
                    instant=True,
                    fmt=pm.PromQueryFormat.TABLE,
                )
            )
        )
        .with_panel(
            table.Panel()
            .title("Verdicts by check and version (time range)")
            .description("Number of pass + fail verdicts behind the rates above.")
            .datasource(DS)
            .unit("short")
            .decimals(0)
            .span(12)
            .height(8)
            .with_transformation(matrix)
            .with_target(
                q(f"sum by ({by_cv}) (increase({decided}[{RANGE}]))", instant=True, fmt=pm.PromQueryFormat.TABLE)
            )
        )
        .with_row(db.Row("Scoring cost"))
        .with_panel(
            ts(
                "Scoring duration p50 / p95 by check",
                "Time one check takes on one sample.",
                "s",
                quantiles("llmwatch_scoring_duration_seconds", 'check=~"$check"', "check", "{{check}}", qs=(0.5, 0.95)),
                w=24,
            )
        )
        .with_row(db.Row("Shadow evaluation: primary vs candidate"))
        .with_panel(
            ts(
                "Paired pass-rate difference (candidate - primary)",
                "Over each candidate's last pairs (same prompts, same checks): below 0 the candidate fails checks the primary passes. "
                "`llmwatch shadow report` gives the verdict with intervals and margins.",
                "percentunit",
                [q("max by (candidate) (llmwatch_shadow_pass_rate_difference)", "{{candidate}}")],
                w=8,
            )
        )
        .with_panel(
            ts(
                "Wins and losses per paired check",
                "Share of paired check results the candidate wins (passes where the primary fails) and loses.",
                "percentunit",
                [
                    q("max by (candidate) (llmwatch_shadow_win_rate)", "win {{candidate}}"),
                    q("max by (candidate) (llmwatch_shadow_loss_rate)", "loss {{candidate}}"),
                ],
                w=8,
                min_val=0,
            )
        )
        .with_panel(
            ts(
                "Latency and cost ratio (candidate / primary)",
                "p95 latency and mean cost of the candidate over the primary's on the same requests; 1 = the same.",
                "short",
                [
                    q("max by (candidate) (llmwatch_shadow_latency_ratio)", "p95 latency {{candidate}}"),
                    q("max by (candidate) (llmwatch_shadow_cost_ratio)", "cost {{candidate}}"),
                ],
                w=8,
            )
        )
        .with_panel(
            ts(
                "Mirrors per second: sent, skipped, failed",
                "Calls mirrored to each candidate, skipped (queue_full, concurrency, spend_cap, rate_cap, not_captured) and failed at the candidate. "
                "A mirror that never fires shows here as skips, not as silence.",
                "reqps",
                [
                    q(f"sum by (candidate) (rate(llmwatch_shadow_mirrored_total[{RI}]))", "sent {{candidate}}"),
                    q(
                        f"sum by (candidate, reason) (rate(llmwatch_shadow_skipped_total[{RI}]))",
                        "skipped {{candidate}} {{reason}}",
                    ),
                    q(
                        f"sum by (candidate, error_type) (rate(llmwatch_shadow_candidate_errors_total[{RI}]))",
                        "failed {{candidate}} {{error_type}}",
                    ),
                ],
                w=24,
            )
        )
    )


def signal_variable() -> db.QueryVariable:
    return query_variable(
        "signal",
        "Signal",
        f"label_values(llmwatch_drift_statistic{{{VERSION}}}, signal)",
        description="Drift signal (statistic computed on sampled traffic)",
    )


def drift_link() -> DataLink:
    """The samples behind a drift series: its version and operation, filtered by what the signal measures
    (`signal=pass_rate:<check>` shows that check's failures, `failure_modes` the failed calls, latency
    and cost signals sort by them; docs/guide/ui.md)."""
    return ui_link(
        "Samples behind ${__field.labels.signal} in llmwatch ui",
        model_version="${__field.labels.model_version:percentencode}",
        operation="${__field.labels.gen_ai_operation_name:percentencode}",
        signal="${__field.labels.signal:percentencode}",
    )


def drift() -> db.Dashboard:
    sel = f'{VERSION}, gen_ai_operation_name=~"$operation", signal=~"$signal"'
    calls = f"{DURATION}_count{{{CALL}}}"
    by = "signal, model_version, gen_ai_operation_name"
    pager_by = "signal, family, model_version, gen_ai_operation_name"
    legend = "{{signal}} {{model_version}} {{gen_ai_operation_name}}"
    return (
        base(
            "llmwatch-drift",
            "llmwatch / Drift",
            "Drift statistics, p-values and detections per signal and model version; annotations mark version rollouts and llmwatch alerts.",
            [signal_variable(), ui_variable()],
        )
        .annotation(version_rollout_annotation())
        .annotation(alerts_annotation())
        .with_row(db.Row("Detections"))
        .with_panel(
            stat_panel(
                "Signals drifting now",
                "Signal / version / route combinations whose drift detector says drift.",
                "short",
                f"count(llmwatch_drift_detected{{{sel}}} == 1) or vector(0)",
                w=6,
                h=8,
                thresholds=((None, "green"), (1, "red")),
                decimals=0,
            )
        )
        .with_panel(
            statetimeline.Panel()
            .title("Drift detected")
            .description(
                "llmwatch_drift_detected per signal, model version and route: 1 = drift (adjusted p < alpha and a large enough effect)."
            )
            .datasource(DS)
            .span(18)
            .height(8)
            .show_value(cm.VisibilityMode.NEVER)
            .merge_values(True)
            .fill_opacity(80)
            .mappings(
                [
                    dm.ValueMap(
                        options={
                            "0": dm.ValueMappingResult(text="no drift", color="green", index=0),
                            "1": dm.ValueMappingResult(text="drift", color="red", index=1),
                        }
                    )
                ]
            )
            .thresholds(
                db.ThresholdsConfig()
                .mode(dm.ThresholdsMode.ABSOLUTE)
                .steps([dm.Threshold(value=None, color="green"), dm.Threshold(value=1, color="red")])
            )
            .with_target(q(f"max by ({by}) (llmwatch_drift_detected{{{sel}}})", legend))
            .data_links([drift_link()])
        )
        .with_row(db.Row("Statistics"))
        .with_panel(
            ts(
                "Drift statistic per signal",
                "Each signal's test statistic, current window against the frozen baseline.",
                "short",
                [q(f"max by ({by}) (llmwatch_drift_statistic{{{sel}}})", legend)],
            ).data_links([drift_link()])
        )
        .with_panel(
            ts(
                "p-value per signal",
                "Multiple-testing-adjusted p-value of each signal; low means drift (log scale).",
                "short",
                [q(f"min by ({by}) (llmwatch_drift_p_value{{{sel}}})", legend)],
                log=True,
            ).data_links([drift_link()])
        )
        .with_row(db.Row("Pager (the page: LLMWatchDriftEvidence)"))
        .with_panel(
            stat_panel(
                "Signals paging now",
                "Signal / version / route combinations the drift pager holds decisive (docs/design/0064-sequential-drift.md).",
                "short",
                f"count(llmwatch_drift_evidence_decisive{{{VERSION}}} == 1) or vector(0)",
                w=6,
                h=8,
                thresholds=((None, "green"), (1, "red")),
                decimals=0,
            )
        )
        .with_panel(
            ts(
                "Pager evidence / threshold per signal",
                "Each pager signal's e-detector value over its threshold: 1 pages (log scale). A stable version stays far below.",
                "short",
                [
                    q(
                        f"max by ({pager_by}) (llmwatch_drift_evidence{{{VERSION}}})"
                        f" / on ({pager_by}) max by ({pager_by}) (llmwatch_drift_evidence_threshold{{{VERSION}}})",
                        "{{signal}} {{model_version}} {{gen_ai_operation_name}}",
                    )
                ],
                log=True,
                w=18,
            )
        )
        .with_row(db.Row("Versions"))
        .with_panel(
            ts(
                "Traffic share by version",
                "Share of calls served by each model_version: rollouts show up here and as annotations.",
                "percentunit",
                [
                    q(
                        ratio(
                            f"sum by (model_version) (rate({calls}[{RI}]))",
                            f"ignoring (model_version) group_left sum(rate({calls}[{RI}]))",
                        ),
                        "{{model_version}}",
                    )
                ],
                stacked=True,
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Samples in the drift window",
                "Samples in each model version's current drift window: few samples mean weak tests.",
                "short",
                [q(f"max by (model_version) (llmwatch_drift_window_samples{{{VERSION}}})", "{{model_version}}")],
            )
        )
    )


def instance_variable() -> db.QueryVariable:
    return query_variable(
        "instance",
        "Instance",
        "label_values(llmwatch_queue_depth, instance)",
        description="llmwatch process (scrape target)",
    )


def agent_health() -> db.Dashboard:
    inst = INSTANCE
    produced = f"llmwatch_kafka_produced_total{{{inst}}}"
    kafka_dropped = f"llmwatch_kafka_dropped_total{{{inst}}}"
    agents = f"sum(llmwatch_queue_depth{{{inst}}})"
    return (
        base(
            "llmwatch-agent-health",
            "llmwatch / Agent health",
            "The sidecar itself: sampling queue, kept and dropped samples, capture gaps, proxy and internal errors, scoring lag, Kafka delivery.",
            [instance_variable()],
        )
        .annotation(alerts_annotation())
        .with_row(db.Row("Now"))
        .with_panel(
            stat_panel(
                "Agents reporting",
                "llmwatch processes whose metrics Prometheus has now.",
                "short",
                f"count(llmwatch_queue_depth{{{inst}}})",
                decimals=0,
            )
        )
        .with_panel(
            stat_panel(
                "Queue depth",
                "Samples waiting in the in-process queue, all agents.",
                "short",
                f"sum(llmwatch_queue_depth{{{inst}}})",
                thresholds=((None, "green"), (1000, "orange"), (5000, "red")),
            )
        )
        .with_panel(
            stat_panel(
                "Samples dropped / s",
                "Samples selected but lost (queue full, sink or build errors).",
                "short",
                or_zero(f"sum(rate(llmwatch_samples_dropped_total{{{inst}}}[{RI}]))", agents),
                thresholds=((None, "green"), (0.001, "red")),
            )
        )
        .with_panel(
            stat_panel(
                "Proxy + internal errors / s",
                "Calls the proxy could not complete plus exceptions in llmwatch's own analysis.",
                "short",
                or_zero(f"sum(rate(llmwatch_proxy_errors_total{{{inst}}}[{RI}]))", agents)
                + " + "
                + or_zero(f"sum(rate(llmwatch_internal_errors_total{{{inst}}}[{RI}]))", agents),
                thresholds=((None, "green"), (0.001, "orange")),
            )
        )
        .with_row(db.Row("Sampling pipeline"))
        .with_panel(
            ts(
                "Queue depth",
                "Samples waiting for storage, per agent.",
                "short",
                [q(f"max by (instance) (llmwatch_queue_depth{{{inst}}})", "{{instance}}")],
            )
        )
        .with_panel(
            ts(
                "Samples kept by reason",
                "Samples selected per second: rate (sampled), error, slow.",
                "short",
                [q(f"sum by (reason) (rate(llmwatch_samples_total{{{inst}}}[{RI}]))", "{{reason}}")],
                stacked=True,
            )
        )
        .with_panel(
            ts(
                "Samples dropped by reason",
                "Samples lost per second: queue_full, sink_error, build_error, ...",
                "short",
                [q(f"sum by (reason) (rate(llmwatch_samples_dropped_total{{{inst}}}[{RI}]))", "{{reason}}")],
                stacked=True,
            )
        )
        .with_panel(
            ts(
                "Samples written by sink",
                "Samples stored per second by each sink.",
                "short",
                [q(f"sum by (sink) (rate(llmwatch_samples_written_total{{{inst}}}[{RI}]))", "{{sink}}")],
            )
        )
        .with_panel(
            ts(
                "Captures skipped by reason",
                "Calls forwarded but not (fully) captured: bodies too large, not JSON, incomplete streams.",
                "short",
                [q(f"sum by (reason) (rate(llmwatch_capture_skipped_total{{{inst}}}[{RI}]))", "{{reason}}")],
                stacked=True,
                w=24,
            )
        )
        .with_row(db.Row("Errors"))
        .with_panel(
            ts(
                "Proxy errors by error_type",
                "Calls the proxy could not complete: upstream_unavailable, upstream_timeout, stream_interrupted, client_disconnected.",
                "short",
                [q(f"sum by (error_type) (rate(llmwatch_proxy_errors_total{{{inst}}}[{RI}]))", "{{error_type}}")],
                stacked=True,
            )
        )
        .with_panel(
            ts(
                "Internal errors by stage",
                "Exceptions in llmwatch's own code; traffic was forwarded regardless.",
                "short",
                [q(f"sum by (stage) (rate(llmwatch_internal_errors_total{{{inst}}}[{RI}]))", "{{stage}}")],
                stacked=True,
            )
        )
        .with_row(db.Row("Scoring"))
        .with_panel(
            ts(
                "Scoring lag p50 / p95 / p99",
                "From a call's start to its scores being recorded.",
                "s",
                quantiles("llmwatch_scoring_lag_seconds", inst, "instance", "{{instance}}"),
            )
        )
        .with_panel(
            ts(
                "Scoring duration p95 by check",
                "Time one check takes on one sample.",
                "s",
                quantiles("llmwatch_scoring_duration_seconds", inst, "check", "{{check}}", qs=(0.95,)),
            )
        )
        .with_panel(
            ts(
                "Samples waiting for the scorer",
                "Handed to the scorer process and not yet scored.",
                "short",
                [q(f"max by (instance) (llmwatch_scoring_pending{{{inst}}})", "{{instance}}")],
                w=24,
                h=6,
            )
        )
        .with_row(db.Row("Kafka delivery"))
        .with_panel(
            ts(
                "Kafka delivery",
                "Samples produced to Kafka and dropped before delivery, per second.",
                "short",
                [
                    q(f"sum(rate({produced}[{RI}]))", "produced"),
                    q(f"sum by (reason) (rate({kafka_dropped}[{RI}]))", "dropped: {{reason}}"),
                ],
            )
        )
        .with_panel(
            ts(
                "Kafka delivery ratio",
                "produced / (produced + dropped).",
                "percentunit",
                [
                    q(
                        ratio(
                            f"sum(rate({produced}[{RI}]))",
                            f"(sum(rate({produced}[{RI}])) + "
                            + or_zero(f"sum(rate({kafka_dropped}[{RI}]))", f"sum(rate({produced}[{RI}]))")
                            + ")",
                        ),
                        "delivered",
                    )
                ],
                min_val=0,
                max_val=1,
                w=6,
            )
        )
        .with_panel(
            ts(
                "Kafka buffer depth",
                "Samples handed to the Kafka sink and not yet acknowledged, per agent.",
                "short",
                [q(f"max by (instance) (llmwatch_kafka_buffer_depth{{{inst}}})", "{{instance}}")],
                w=6,
            )
        )
        .with_panel(
            ts(
                "Kafka workers: records consumed by outcome",
                "Records read by the Kafka workers, by outcome. scorer: scored, duplicate, invalid. aggregate: "
                "duplicate_score, invalid, join_overflow_sample (samples dropped from the join: they never reach "
                "a drift window), join_overflow_score (scores dropped waiting for their sample). archive: "
                "archived, duplicate, invalid. Any join_overflow_* or invalid is data lost to the dashboards.",
                "short",
                [q(f"sum by (outcome) (rate(llmwatch_kafka_consumed_total{{{inst}}}[{RI}]))", "{{outcome}}")],
                stacked=True,
                w=24,
                h=6,
            )
        )
    )


DASHBOARDS = {
    "llmwatch-overview.json": overview,
    "llmwatch-quality.json": quality,
    "llmwatch-drift.json": drift,
    "llmwatch-agent-health.json": agent_health,
}


# --- output -------------------------------------------------------------------------------------

REF_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def layout(panels: list[dict[str, Any]]) -> None:
    """Left to right, wrapping at 24 columns; a row starts a new line; a repeated panel gets a
    line of its own (Grafana fills it with the repeats)."""
    x = y = line_height = 0
    for panel in panels:
        pos = panel["gridPos"]
        if panel["type"] == "row" or panel.get("repeat") or x + pos["w"] > 24:
            if x:
                y += line_height
            x = line_height = 0
        pos["x"], pos["y"] = x, y
        if panel["type"] == "row" or panel.get("repeat"):
            y += pos["h"]
            continue
        x += pos["w"]
        line_height = max(line_height, pos["h"])
        if x >= 24:
            y += line_height
            x = line_height = 0


def finalize(model: dm.Dashboard) -> dict[str, Any]:
    """To plain JSON, then what the SDK leaves to the caller: unique panel ids, query refIds,
    annotation options without setters."""
    data = json.loads(json.dumps(model, cls=JSONEncoder))
    layout(data.get("panels", []))
    next_id = 1
    for panel in data.get("panels", []):
        panel["id"] = next_id
        next_id += 1
        if panel["type"] != "row":
            panel.setdefault("fieldConfig", {"defaults": {}, "overrides": []})
        for i, target in enumerate(panel.get("targets", [])):
            target["refId"] = REF_IDS[i]
    for annotation in data.get("annotations", {}).get("list", []):
        annotation.update(ANNOTATION_EXTRAS.get(annotation.get("name"), {}))
    # Grafana's own "Annotations & Alerts" entry, as Grafana adds it on save.
    data.setdefault("annotations", {}).setdefault("list", []).insert(
        0,
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        },
    )
    for variable in data.get("templating", {}).get("list", []):
        if isinstance(variable.get("query"), dict):
            variable["definition"] = variable["query"]["query"]
    data.pop("id", None)
    data["version"] = 1
    return data


def render(name: str) -> str:
    return json.dumps(finalize(DASHBOARDS[name]().build()), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a committed file is not what this script builds"
    )
    args = parser.parse_args(argv)
    stale = []
    for name in DASHBOARDS:
        text = render(name)
        for out in OUTPUTS:
            path = out / name
            if args.check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path.relative_to(ROOT)))
            else:
                out.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    # Helm cannot read outside the chart: the PrometheusRule carries a copy of the repo's rules.
    rules_text = RULES_SOURCE.read_text()
    if args.check:
        if not RULES_COPY.exists() or RULES_COPY.read_text() != rules_text:
            stale.append(str(RULES_COPY.relative_to(ROOT)))
    else:
        RULES_COPY.write_text(rules_text)
    if args.check:
        for out in OUTPUTS:
            extra = sorted(p.name for p in out.glob("*.json") if p.name not in DASHBOARDS)
            stale.extend(str((out / e).relative_to(ROOT)) + " (not built by build.py)" for e in extra)
        if stale:
            sys.stderr.write("out of date, run `python dashboards/build.py`: " + ", ".join(stale) + "\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
