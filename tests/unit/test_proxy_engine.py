"""`proxy.engine`: python (the relay core, the default) or native (the C front door, design record
0067); native without the C extension is refused before anything starts, saying why and the fix."""

from __future__ import annotations

import pytest

from llmwatch.agent.components import check_config, load_config
from llmwatch.collectors.receivers.proxy import native
from llmwatch.core.config import ConfigError


def test_the_python_engine_is_the_default_and_native_is_accepted():
    assert load_config(None, overrides={"upstream": "http://u"}, environ={}).proxy.engine == "python"
    cfg = load_config(None, overrides={"upstream": "http://u", "proxy": {"engine": "native"}}, environ={})
    assert cfg.proxy.engine == "native"


def test_native_without_the_extension_is_refused_with_the_reason_and_the_fix(monkeypatch):
    monkeypatch.setattr(native, "load", lambda: (None, "the proxy's C extension is not built (no module)"))
    cfg = load_config(None, overrides={"upstream": "http://u", "proxy": {"engine": "native"}}, environ={})
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert "proxy.engine native: the proxy's C extension is not built" in str(err.value)
    assert "set proxy.engine: python" in str(err.value)
    # The python engine never asks for it; nor does a process that serves no proxy (`llmwatch ingest`).
    check_config(load_config(None, overrides={"upstream": "http://u"}, environ={}))
    check_config(cfg, proxy=False)
