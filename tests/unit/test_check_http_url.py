"""`check_http_url`: the one check behind every http(s) URL setting (upstream, shadow candidates,
the judge, the drift webhook); what it refuses is shown without its credentials."""

from __future__ import annotations

import pytest

from llmwatch.agent.components import Config
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
