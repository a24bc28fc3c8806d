"""`proxy.engine`: auto (the default), python (the relay core) or native (the C data plane, design
record 0067). `auto` picks native only where it serves the configuration as the relay would;
native without the C extension is refused before anything starts, saying why and the fix."""

from __future__ import annotations

import pytest

from llmwatch.agent.components import check_config, load_config
from llmwatch.collectors.receivers.proxy import native
from llmwatch.collectors.receivers.proxy.relay import choose_engine
from llmwatch.core.config import ConfigError


def test_auto_is_the_default_and_each_engine_is_accepted():
    assert load_config(None, overrides={"upstream": "http://u"}, environ={}).proxy.engine == "auto"
    for engine in ("auto", "python", "native"):
        cfg = load_config(None, overrides={"upstream": "http://u", "proxy": {"engine": engine}}, environ={})
        assert cfg.proxy.engine == engine


def test_auto_serves_with_c_where_it_can_and_says_why_not_elsewhere(monkeypatch):
    monkeypatch.setattr(native, "load", lambda: (object(), ""))
    assert choose_engine("auto", https=False, host="127.0.0.1")[0] == "native"
    assert choose_engine("auto", https=False, host="::1")[0] == "native"
    assert choose_engine("auto", https=False, host="[fd00::2]")[0] == "native"
    engine, why = choose_engine("auto", https=True, host="127.0.0.1")
    assert (engine, why) == ("python", "the upstream is https: TLS is the relay's")
    # A name: C resolves once and connects to the first address; the relay tries each, every time.
    for name in ("localhost", "vllm.default.svc", "model-server"):
        engine, why = choose_engine("auto", https=False, host=name)
        assert engine == "python" and f"the upstream is a name ({name})" in why
    # Set explicitly, the setting is what serves.
    assert choose_engine("python", https=False, host="127.0.0.1") == ("python", "set in proxy.engine")
    assert choose_engine("native", https=False, host="model-server") == ("native", "set in proxy.engine")


def test_auto_without_the_extension_is_the_relay_with_the_reason(monkeypatch):
    monkeypatch.setattr(native, "load", lambda: (None, "the proxy's C extension is not built (no module)"))
    assert choose_engine("auto", https=False, host="127.0.0.1") == (
        "python",
        "the proxy's C extension is not built (no module)",
    )
    # auto never refuses to start for it.
    check_config(load_config(None, overrides={"upstream": "http://127.0.0.1:9"}, environ={}))


def test_native_without_the_extension_is_refused_with_the_reason_and_the_fix(monkeypatch):
    monkeypatch.setattr(native, "load", lambda: (None, "the proxy's C extension is not built (no module)"))
    cfg = load_config(None, overrides={"upstream": "http://u", "proxy": {"engine": "native"}}, environ={})
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert "proxy.engine native: the proxy's C extension is not built" in str(err.value)
    assert "set proxy.engine: python" in str(err.value)
    # The python engine never asks for it; nor does a process that serves no proxy (`llmwatch ingest`).
    check_config(load_config(None, overrides={"upstream": "http://u", "proxy": {"engine": "python"}}, environ={}))
    check_config(cfg, proxy=False)


def test_the_build_switch_in_the_environment_is_not_read_as_a_setting():
    # LLMWATCH_NATIVE=0/1 is hatch_build.py's (skip / require the C extension); left set after an
    # install, it must not stop `llmwatch proxy` as an unknown configuration field.
    cfg = load_config(None, overrides={"upstream": "http://u"}, environ={"LLMWATCH_NATIVE": "1"})
    assert cfg.proxy.engine == "auto"
