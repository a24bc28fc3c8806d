"""The base install is the slim sidecar; features that need an extra say which, in one line.

A sidecar runs in every pod: torch, the embedding model, Kafka clients and grpcio are extras, and a
config that switches one of those features on without its extra is refused before anything starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from llmwatch.agent.components import check_config, load_config
from llmwatch.core.extras import MissingExtra, installed

ROOT = Path(__file__).resolve().parents[2]
HEAVY = (
    "torch",
    "transformers",
    "sentence-transformers",
    "kafka-python",
    "confluent-kafka",
    "aiokafka",
    "grpcio",
    "opentelemetry",
)


def _name(requirement: str) -> str:
    return (
        requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip().lower()
    )


def without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    # What an install without the extra looks like to the import system.
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_the_base_dependencies_carry_no_model_runtime_kafka_client_or_grpc() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    assert not [h for h in HEAVY if any(b == h or b.startswith(h + "-") for b in base)], base
    extras = project["optional-dependencies"]
    assert {"embeddings", "kafka", "otel", "reports", "all"} <= set(extras)
    assert any(_name(r) == "torch" for r in extras["embeddings"])
    assert any(_name(r) == "kafka-python" for r in extras["kafka"])
    assert any(_name(r) == "grpcio" for r in extras["otel"])


@pytest.mark.slow
def test_the_base_install_resolves_without_the_heavy_packages(tmp_path: Path) -> None:
    # pip's own resolver, against the package index, in dry-run: what `pip install llmwatch` would bring.
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 and "No matching distribution" in proc.stderr:
        pytest.skip(f"the package index is not reachable here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "llmwatch" in names
    assert not [
        n for n in names if n in HEAVY or n.startswith(("torch", "nvidia-", "opentelemetry", "grpcio", "kafka"))
    ], sorted(names)


def test_kafka_configured_without_its_extra_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "kafka")
    cfg = load_config(None, overrides={"kafka": {"enabled": True}}, environ={})
    with pytest.raises(MissingExtra) as err:
        check_config(cfg)
    assert (
        str(err.value)
        == "kafka.enabled needs the [kafka] extra: pip install 'llmwatch[kafka]' (or set kafka.enabled: false)"
    )
    assert err.value.exit_code == 2


def test_otel_export_and_ingest_without_their_extra_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "opentelemetry", "opentelemetry.sdk", "grpc")
    with pytest.raises(MissingExtra, match=r"otel.enabled needs the \[otel\] extra"):
        check_config(load_config(None, overrides={"otel": {"enabled": True}}, environ={}))
    with pytest.raises(MissingExtra, match=r"otel.ingest_listen needs the \[otel\] extra"):
        check_config(load_config(None, overrides={"otel": {"ingest_listen": "127.0.0.1:4318"}}, environ={}))


def test_the_default_config_needs_no_extra_but_the_embedding_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "kafka", "opentelemetry", "grpc", "matplotlib")
    check_config(load_config(None, environ={}))  # proxy, sampling, files, metrics: the base install


def test_embedding_checks_without_their_extra_are_refused_with_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmwatch.scorers.checks.suite import validate_scoring

    without(monkeypatch, "sentence_transformers", "torch")
    cfg = load_config(None, environ={})
    with pytest.raises(MissingExtra) as err:
        validate_scoring(cfg.scoring)
    assert "[embeddings] extra" in str(err.value) and "scoring.embeddings: false" in str(err.value)
    # Rule checks only: the base install scores.
    validate_scoring(load_config(None, overrides={"scoring": {"embeddings": False}}, environ={}).scoring)


def test_a_missing_parent_package_reads_as_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # find_spec("opentelemetry.sdk") must import the parent, which raises instead of answering None.
    for loaded in [m for m in sys.modules if m.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, loaded)
    without(monkeypatch, "opentelemetry")
    assert installed("otel") is False


def test_the_commands_that_need_an_extra_say_so_in_one_line() -> None:
    # A subprocess whose import system has no kafka, as on a slim install: one line, exit 2.
    code = (
        "import sys; sys.modules['kafka'] = None\n"
        "from llmwatch.agent.cli.main import main\n"
        "raise SystemExit(main(['scorer', '--kafka', '127.0.0.1:9', '--metrics-listen', '127.0.0.1:0']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "llmwatch: llmwatch scorer needs the [kafka] extra: pip install 'llmwatch[kafka]'"
    assert "Traceback" not in proc.stderr
