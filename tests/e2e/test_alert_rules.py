"""The Prometheus rules: valid for the real promtool, unit-tested, documented."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "alerts" / "llmwatch-rules.yaml"
RULE_TESTS = ROOT / "dashboards" / "alerts" / "llmwatch-rules.test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/llmwatch/llmwatch/blob/main/docs/runbooks.md#"

REQUIRED_ALERTS = {
    "LLMWatchDriftEvidence",
    "LLMWatchDriftDetected",
    "LLMWatchPerformanceRegression",
    "LLMWatchTrafficChanged",
    "LLMWatchServedVersionChanged",
    "LLMWatchCanaryWorse",
    "LLMWatchQualityPassRateDrop",
    "LLMWatchLatencyRegression",
    "LLMWatchTTFTRegression",
    "LLMWatchCostPerRequestUp",
    "LLMWatchSamplesDropped",
    "LLMWatchKafkaDeliveryLoss",
    "LLMWatchScoringLagHigh",
    "LLMWatchUpstreamErrors",
    "LLMWatchUpstreamRateLimitLow",
    "LLMWatchShadowCandidateWorse",
    "LLMWatchShadowCandidateErrors",
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed (Debian package `prometheus`); run `bash tests/services.sh`")
    return path


def run_promtool(*args: str) -> None:
    proc = subprocess.run([promtool(), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"promtool {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def github_anchors(markdown: str) -> set[str]:
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_promtool_check_rules():
    run_promtool("check", "rules", str(RULES.relative_to(ROOT)))


def test_promtool_unit_tests():
    run_promtool("test", "rules", str(RULE_TESTS.relative_to(ROOT)))


def test_every_alert_is_labelled_annotated_and_has_a_runbook():
    anchors = github_anchors(RUNBOOKS.read_text())
    rules = alert_rules()
    assert REQUIRED_ALERTS <= {r["alert"] for r in rules}
    for rule in rules:
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in {"critical", "warning", "info"}, name
        assert rule.get("for"), f"{name}: without `for:` a single evaluation pages someone"
        annotations = rule.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            assert annotations.get(key, "").strip(), f"{name}: missing annotation {key}"
        assert "{{" in annotations["description"], f"{name}: the description should carry the measured values"
        url = annotations["runbook_url"]
        assert url.startswith(RUNBOOK_BASE), f"{name}: runbook_url {url} is not under {RUNBOOK_BASE}"
        anchor = url[len(RUNBOOK_BASE) :]
        assert anchor in anchors, f"{name}: docs/runbooks.md has no section for #{anchor}"


def test_recording_rules_are_namespaced():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    records = [rule["record"] for group in groups for rule in group["rules"] if "record" in rule]
    assert records
    for record in records:
        assert record.startswith("llmwatch:") and record.count(":") == 2, record


def test_every_alert_has_firing_and_silent_unit_tests():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fires: set[str] = set()
    silent: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - fires == set(), f"alerts never shown firing in {RULE_TESTS.name}"
    assert names - silent == set(), f"alerts never shown staying silent in {RULE_TESTS.name}"
    # Exact annotations in the firing cases: a broken template cannot pass unnoticed.
    for case in tests:
        for check in case.get("alert_rule_test", []):
            for expected in check.get("exp_alerts") or []:
                assert {"summary", "description", "runbook_url"} <= set(expected.get("exp_annotations", {})), check[
                    "alertname"
                ]
