"""`check_http_url`: the one check behind every http(s) URL setting (upstream, shadow candidates,
the judge, the drift webhook, otel.endpoint with protocol http); what it refuses is shown without
its credentials."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmwatch.agent.components import Config
from llmwatch.core.errors import describe_validation_error
from llmwatch.core.urls import check_http_url
from llmwatch.scorers.drift.config import VersionChangeSection


def test_an_http_url_with_a_host_is_kept_as_given():
    assert check_http_url("https://gw.example/openai/v1/", "http://127.0.0.1:8000") == "https://gw.example/openai/v1/"


@pytest.mark.parametrize("value", ["ftp://user:hunter2@host", "127.0.0.1:8000", "http:///v1", "http:// host"])
def test_anything_else_is_refused_with_the_example_and_no_password(value):
    with pytest.raises(ValueError) as refused:
        check_http_url(value, "http://127.0.0.1:9000/hook")
    message = str(refused.value)
    assert message.startswith("expected an http(s) URL such as http://127.0.0.1:9000/hook, got ")
    assert "hunter2" not in message


def test_the_settings_use_it():
    with pytest.raises(ValueError, match=r"such as http://127\.0\.0\.1:8000, got 'ftp://\*\*\*@h'"):
        Config(upstream="ftp://u:pw@h")
    assert Config(upstream="http://127.0.0.1:8000/v1/").upstream == "http://127.0.0.1:8000"
    with pytest.raises(ValueError, match=r"such as http://127\.0\.0\.1:9000/hook"):
        VersionChangeSection(webhook="hook")
    assert VersionChangeSection(webhook=None).webhook is None


def test_otel_endpoint_uses_it_with_protocol_http_and_keeps_its_own_rule_for_grpc():
    # otel.endpoint had a regex of its own and its error was the whole section's
    # ("field 'otel': endpoint: with protocol http, expected a URL such as ...").
    with pytest.raises(ValidationError) as refused:
        Config(otel={"endpoint": "ftp://u:pw@h"})
    assert describe_validation_error(refused.value) == (
        "field 'otel.endpoint': expected an http(s) URL such as http://127.0.0.1:4318/v1/traces, "
        "got 'ftp://***@h' (protocol http; protocol grpc takes HOST:PORT)"
    )
    # The protocol still decides what an endpoint is: HOST:PORT for grpc, a URL for http.
    assert Config(otel={"protocol": "grpc", "endpoint": "collector:4317"}).otel.endpoint == "collector:4317"
    assert Config(otel={"endpoint": "https://collector/v1/traces"}).otel.endpoint == "https://collector/v1/traces"
    with pytest.raises(ValidationError, match=r"such as http://127\.0\.0\.1:4318/v1/traces, got 'collector:4317'"):
        Config(otel={"endpoint": "collector:4317"})
    with pytest.raises(ValidationError) as refused:
        Config(otel={"protocol": "grpc", "endpoint": "http://u:pw@collector/v1/traces"})
    assert describe_validation_error(refused.value) == (
        "field 'otel.endpoint': expected HOST:PORT such as 127.0.0.1:4317 (protocol grpc), "
        "got 'http://***@collector/v1/traces'"
    )
    # A refused protocol is said once, by itself (the endpoint is not checked against no protocol).
    with pytest.raises(ValidationError) as refused:
        Config(otel={"protocol": "udp", "endpoint": "collector:4317"})
    assert [".".join(map(str, e["loc"])) for e in refused.value.errors()] == ["otel.protocol"]
