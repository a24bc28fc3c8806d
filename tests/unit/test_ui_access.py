"""Who may read `llmwatch ui`: no token on loopback unless asked, a token anywhere else, kept
privately in --token-file when given; a bad --listen or token file is refused with its fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmwatch.agent.apps.ui.app import UiError, parse_listen, resolve_token


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_needs_no_token_unless_asked(host: str):
    assert resolve_token("auto", host, None) is None
    assert len(resolve_token("token", host, None) or "") >= 32


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::"])
def test_any_other_address_gets_a_token_unless_told_a_proxy_authenticates(host: str):
    first, second = resolve_token("auto", host, None), resolve_token("auto", host, None)
    assert first and second and first != second  # a new one per start without --token-file
    assert resolve_token("none", host, None) is None


def test_a_token_file_is_made_private_and_kept(tmp_path: Path):
    path = tmp_path / "ui.token"
    token = resolve_token("token", "0.0.0.0", str(path))
    assert path.read_text().strip() == token and path.stat().st_mode & 0o777 == 0o600
    assert resolve_token("token", "0.0.0.0", str(path)) == token
    os.chmod(path, 0o644)
    assert resolve_token("token", "0.0.0.0", str(path)) == token and path.stat().st_mode & 0o777 == 0o600
    path.write_text("short\n")
    with pytest.raises(UiError, match="fewer than 16 characters; remove it"):
        resolve_token("token", "0.0.0.0", str(path))


@pytest.mark.parametrize("listen", ["8090", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000"])
def test_a_bad_listen_address_says_the_form(listen: str):
    with pytest.raises(UiError, match=r"expected HOST:PORT, e.g. 127.0.0.1:8090 \(port 0 picks a free one\)"):
        parse_listen(listen)
    assert parse_listen("[::1]:0") == ("::1", 0)
