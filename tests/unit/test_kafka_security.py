"""Kafka over TLS and SASL: the `kafka` section's security settings, checked at config load, and
the one function (`connection_settings`) that hands them to every client llmwatch opens."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import structlog
from pydantic import ValidationError

from llmwatch.agent.components import Config
from llmwatch.collectors.exporters.kafka import (
    KafkaSection,
    connection_settings,
    consumer_settings,
    create_topics,
    producer_settings,
    quiet_kafka_logs,
)
from llmwatch.core.config import ConfigError, load_model

PASSWORD = "hunter2-s3cr3t"
SASL_ENV = {
    "LLMWATCH_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
    "LLMWATCH_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
    "LLMWATCH_KAFKA__SASL_USERNAME": "llmwatch",
    "LLMWATCH_KAFKA__SASL_PASSWORD": PASSWORD,
}


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def load(environ: dict[str, str]) -> Config:
    return load_model(Config, environ=environ)


def config_error(environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        load(environ)
    return str(info.value)


# --- the settings ------------------------------------------------------------------------------


def test_plaintext_by_default_with_no_tls_or_sasl_arguments() -> None:
    settings = connection_settings(KafkaSection())
    assert settings == {"bootstrap_servers": ["127.0.0.1:9092"], "security_protocol": "PLAINTEXT"}


def test_ssl_with_a_ca_file_gives_kafka_python_its_paths(pem: Path) -> None:
    cfg = KafkaSection(security_protocol="SSL", ssl_cafile=pem, ssl_check_hostname=False)
    assert connection_settings(cfg) == {
        "bootstrap_servers": ["127.0.0.1:9092"],
        "security_protocol": "SSL",
        "ssl_check_hostname": False,
        "ssl_cafile": str(pem),
    }


def test_mutual_tls_needs_both_the_certificate_and_its_key(tmp_path: Path, pem: Path) -> None:
    key = tmp_path / "client.key"
    key.write_text("key")
    cfg = KafkaSection(security_protocol="SSL", ssl_cafile=pem, ssl_certfile=pem, ssl_keyfile=key)
    assert connection_settings(cfg)["ssl_certfile"] == str(pem)
    assert connection_settings(cfg)["ssl_keyfile"] == str(key)
    with pytest.raises(ValidationError, match="needs both kafka.ssl_certfile and kafka.ssl_keyfile"):
        KafkaSection(security_protocol="SSL", ssl_certfile=pem)


def test_sasl_ssl_gives_mechanism_user_and_password() -> None:
    settings = connection_settings(load(SASL_ENV).kafka)
    assert settings["security_protocol"] == "SASL_SSL"
    assert settings["sasl_mechanism"] == "SCRAM-SHA-512"
    assert settings["sasl_plain_username"] == "llmwatch"
    assert settings["sasl_plain_password"] == PASSWORD
    assert settings["ssl_check_hostname"] is True


@pytest.mark.parametrize("password", ["yes", "0123", "null", "~", "1e3", "[x", "a: b"])
def test_a_password_from_the_environment_is_taken_as_written_not_as_yaml(password: str) -> None:
    # Other variables are read as YAML (`yes` -> True, `0123` -> 83, `null` -> None): not a secret.
    cfg = load({**SASL_ENV, "LLMWATCH_KAFKA__SASL_PASSWORD": password}).kafka
    assert cfg.sasl_password is not None
    assert cfg.sasl_password.get_secret_value() == password


def test_a_missing_ca_file_is_refused_at_load_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    message = config_error(
        {"LLMWATCH_KAFKA__SECURITY_PROTOCOL": "SSL", "LLMWATCH_KAFKA__SSL_CAFILE": str(tmp_path / "nope.pem")}
    )
    assert "kafka.ssl_cafile" in message
    assert "LLMWATCH_KAFKA__SSL_CAFILE" in message
    assert "nope.pem' is not there; give the path of a PEM file" in message


def test_a_folder_is_not_a_key_file(tmp_path: Path, pem: Path) -> None:
    message = config_error(
        {
            "LLMWATCH_KAFKA__SECURITY_PROTOCOL": "SSL",
            "LLMWATCH_KAFKA__SSL_CERTFILE": str(pem),
            "LLMWATCH_KAFKA__SSL_KEYFILE": str(tmp_path),
        }
    )
    assert "kafka.ssl_keyfile" in message and "is a folder" in message


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_sasl_without_its_password_is_refused_pointing_at_the_variable(protocol: str) -> None:
    env = {**SASL_ENV, "LLMWATCH_KAFKA__SECURITY_PROTOCOL": protocol}
    del env["LLMWATCH_KAFKA__SASL_PASSWORD"]
    message = config_error(env)
    assert f"kafka.security_protocol {protocol} needs kafka.sasl_password" in message
    assert "LLMWATCH_KAFKA__SASL_PASSWORD" in message


def test_sasl_needs_a_mechanism_and_a_user() -> None:
    message = config_error({"LLMWATCH_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "LLMWATCH_KAFKA__SASL_PASSWORD": "x"})
    assert "needs kafka.sasl_mechanism, kafka.sasl_username" in message


def test_an_empty_password_is_no_password() -> None:
    message = config_error({**SASL_ENV, "LLMWATCH_KAFKA__SASL_PASSWORD": ""})
    assert "needs kafka.sasl_password" in message


def test_sasl_settings_without_a_sasl_protocol_are_refused() -> None:
    env = {**SASL_ENV, "LLMWATCH_KAFKA__SECURITY_PROTOCOL": "SSL"}
    message = config_error(env)
    assert (
        "kafka.sasl_mechanism, kafka.sasl_username, kafka.sasl_password given but kafka.security_protocol is SSL"
        in (message)
    )


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_tls_files_without_tls_are_refused(protocol: str, pem: Path) -> None:
    env = {**SASL_ENV} if protocol.startswith("SASL") else {}
    env.update({"LLMWATCH_KAFKA__SECURITY_PROTOCOL": protocol, "LLMWATCH_KAFKA__SSL_CAFILE": str(pem)})
    message = config_error(env)
    assert f"kafka.ssl_cafile given but kafka.security_protocol is {protocol}: set it to SSL (or SASL_SSL)" in message


def test_an_unknown_mechanism_is_refused() -> None:
    message = config_error({**SASL_ENV, "LLMWATCH_KAFKA__SASL_MECHANISM": "GSSAPI"})
    assert "kafka.sasl_mechanism" in message and "SCRAM-SHA-256" in message


# --- the password stays secret -----------------------------------------------------------------


def test_the_password_is_not_in_the_sections_repr_str_or_dump() -> None:
    cfg = load(SASL_ENV)
    for text in (repr(cfg.kafka), str(cfg.kafka), repr(cfg), cfg.kafka.model_dump_json(), str(cfg.kafka.model_dump())):
        assert PASSWORD not in text
    assert "**********" in repr(cfg.kafka)


def test_the_password_is_not_in_config_errors() -> None:
    # Another field is wrong, and the password's own checks fail: none of the messages quotes it.
    for env in (
        {**SASL_ENV, "LLMWATCH_KAFKA__SASL_MECHANISM": "NOPE"},
        {**SASL_ENV, "LLMWATCH_KAFKA__SECURITY_PROTOCOL": "PLAINTEXT"},
        {**SASL_ENV, "LLMWATCH_KAFKA__SASL_USERNAME": ""},
    ):
        assert PASSWORD not in config_error(env)


def test_a_non_text_password_in_a_file_is_taken_as_text_and_not_echoed(tmp_path: Path) -> None:
    config = tmp_path / "llmwatch.yaml"
    config.write_text(
        "kafka:\n  security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: PLAIN\n  sasl_username: u\n  sasl_password: 987654\n"
    )
    cfg = load_model(Config, config, environ={})
    assert cfg.kafka.sasl_password is not None and cfg.kafka.sasl_password.get_secret_value() == "987654"
    with pytest.raises(ConfigError) as info:
        load_model(Config, config, environ={"LLMWATCH_KAFKA__SECURITY_PROTOCOL": "SSL"})
    assert "987654" not in str(info.value)


def test_kafka_pythons_own_debug_log_of_its_configuration_is_masked(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("kafka")
    # KafkaAdminClient logs "Starting KafkaAdminClient with configuration: {...}" at DEBUG.
    settings = connection_settings(load(SASL_ENV).kafka)
    quiet_kafka_logs()
    with caplog.at_level(logging.DEBUG, logger="kafka.admin.client"):
        logging.getLogger("kafka.admin.client").debug("Starting KafkaAdminClient with configuration: %s", settings)
    assert caplog.records, "the record must still be logged"
    assert PASSWORD not in caplog.text
    assert "'sasl_plain_password': '**********'" in caplog.text


def test_the_help_does_not_show_a_password(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    from llmwatch.agent.cli.main import main

    for key, value in SASL_ENV.items():
        monkeypatch.setenv(key, value)
    for command in (["--help"], ["proxy", "--help"], ["scorer", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
        assert PASSWORD not in capsys.readouterr().out


# --- every client gets them --------------------------------------------------------------------


def test_producer_and_consumer_settings_start_from_the_connection_settings() -> None:
    cfg = load(SASL_ENV).kafka
    expected = connection_settings(cfg)
    producer = producer_settings(cfg, client_id="x")
    consumer = consumer_settings(cfg, group_id="g", client_id="c")
    assert {k: producer[k] for k in expected} == expected
    assert {k: consumer[k] for k in expected} == expected


class Client:
    """Stands in for KafkaConsumer / KafkaProducer / KafkaAdminClient: records its arguments; its
    first poll stops the worker."""

    made: list[tuple[str, dict[str, Any]]] = []
    stop: threading.Event | None = None

    def __init__(self, kind: str, **kwargs: Any) -> None:
        Client.made.append((kind, kwargs))

    def poll(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        assert Client.stop is not None
        Client.stop.set()
        return {}

    def assignment(self) -> set[Any]:
        return set()

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@pytest.fixture
def clients(monkeypatch) -> list[tuple[str, dict[str, Any]]]:
    pytest.importorskip("kafka")
    import kafka
    import kafka.admin

    Client.made = []
    monkeypatch.setattr(kafka, "KafkaConsumer", lambda **kw: Client("consumer", **kw))
    monkeypatch.setattr(kafka, "KafkaProducer", lambda **kw: Client("producer", **kw))
    monkeypatch.setattr(kafka.admin, "KafkaAdminClient", lambda **kw: Client("admin", **kw))
    return Client.made


def secured(tmp_path: Path) -> Config:
    ca = tmp_path / "ca.pem"
    ca.write_text("ca")
    return load(
        {
            **SASL_ENV,
            "LLMWATCH_KAFKA__SSL_CAFILE": str(ca),
            "LLMWATCH_METRICS_LISTEN": "127.0.0.1:0",
            "LLMWATCH_DATA_DIR": str(tmp_path / "data"),
        }
    )


def assert_secured(made: list[tuple[str, dict[str, Any]]], cfg: Config, kinds: list[str]) -> None:
    expected = connection_settings(cfg.kafka)
    assert [kind for kind, _ in made] == kinds
    for kind, kwargs in made:
        assert {k: kwargs.get(k) for k in expected} == expected, kind


def test_the_scorer_workers_consumer_and_producer_connect_secured(clients, tmp_path: Path) -> None:
    from llmwatch.agent.processes.kafka_scorer import run_scorer

    cfg = secured(tmp_path)
    Client.stop = threading.Event()
    run_scorer(cfg, stop=Client.stop, worker_id="w")
    assert_secured(clients, cfg, ["consumer", "producer"])


def test_the_aggregators_consumer_connects_secured(clients, tmp_path: Path) -> None:
    from llmwatch.agent.processes.kafka_aggregate import run_aggregator

    cfg = secured(tmp_path)
    Client.stop = threading.Event()
    run_aggregator(cfg, stop=Client.stop)
    assert_secured(clients, cfg, ["consumer"])


def test_the_archivers_consumer_connects_secured(clients, tmp_path: Path) -> None:
    from llmwatch.agent.processes.kafka_archive import run_archiver

    cfg = secured(tmp_path)
    Client.stop = threading.Event()
    run_archiver(cfg, str(tmp_path / "archive"), stop=Client.stop)
    assert_secured(clients, cfg, ["consumer"])


def test_the_topic_admin_connects_secured(clients, tmp_path: Path) -> None:
    cfg = secured(tmp_path)
    create_topics(cfg.kafka, {"t": 1})
    assert_secured(clients, cfg, ["admin"])


def test_the_sidecars_producer_connects_secured_and_its_logs_and_metrics_hold_no_password(
    clients, tmp_path: Path
) -> None:
    from prometheus_client import generate_latest

    from llmwatch.collectors.exporters.kafka import KafkaSampleSink
    from llmwatch.core.metrics import Metrics

    cfg = secured(tmp_path)
    metrics = Metrics()
    with structlog.testing.capture_logs() as logs:
        sink = KafkaSampleSink(cfg.kafka, metrics)
        try:
            connected = threading.Event()
            for _ in range(200):  # the sender thread builds the producer: wait for it, bounded
                if sink.connected:
                    break
                connected.wait(0.05)
        finally:
            sink.close(timeout=1)
    assert_secured(clients, cfg, ["producer"])
    assert any(e["event"] == "kafka_connected" for e in logs)
    assert PASSWORD not in repr(logs)
    assert PASSWORD.encode() not in generate_latest(metrics.registry)


def test_the_scorer_worker_logs_a_sample_record_it_refuses_without_its_values() -> None:
    # pydantic's message quotes the input (`input_value={...}`): the record's prompt, or a key in
    # it, reached the log line that should say only where the record is and why it was refused.
    from types import SimpleNamespace

    from structlog.testing import capture_logs

    from llmwatch.agent.processes.kafka_scorer import _decode
    from llmwatch.collectors.exporters.kafka import RecentIds

    record = SimpleNamespace(topic="t", partition=0, offset=3, value=b'{"id": "x", "request": "Bearer sk-SECRET-1"}')
    with capture_logs() as logs:
        samples, duplicates, invalid = _decode([record], RecentIds())
    assert (samples, invalid) == ([], 1)
    [line] = [e for e in logs if e["event"] == "invalid_sample_record"]
    assert "SECRET" not in str(line), line
    assert line["offset"] == 3 and "timestamp" in line["error"]
