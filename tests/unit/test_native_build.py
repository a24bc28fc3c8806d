"""The proxy's optional C extension (hatch_build.py): built with hardened flags when a compiler is
present, and a missing compiler is a warning, not a failed install (design record 0067, step 1)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from helpers.planners import smallest_planner

ROOT = Path(__file__).resolve().parents[2]


def _hook_module():
    spec = importlib.util.spec_from_file_location("llmwatch_hatch_build", ROOT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")


@needs_cc
def test_the_extension_builds_hardened_and_plans_a_plain_head(tmp_path):
    built, why = _hook_module().build_native(tmp_path)
    assert built is not None, why
    assert built.parent == tmp_path and built.name.startswith("dataplane.") and built.suffix == ".so"
    data = built.read_bytes()
    # -fstack-protector-strong: functions with local arrays call the canary check on return.
    assert b"__stack_chk_fail" in data
    # -D_FORTIFY_SOURCE=2 at -O2: libc calls with a known object size go to their checked variants.
    assert re.search(rb"__[a-z_]+_chk\x00", data.replace(b"__stack_chk_fail", b""))
    spec = importlib.util.spec_from_file_location("llmwatch.collectors.receivers.proxy.dataplane", built)
    assert spec is not None and spec.loader is not None
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    planner = smallest_planner(native)
    verdict = planner.plan(b"GET /v1/models HTTP/1.1\r\nHost: me\r\n\r\n")
    assert verdict[0] == native.PLAIN and verdict[1] == b"GET /v1/models HTTP/1.1\r\nHost: up\r\n\r\n"


def test_without_a_compiler_the_build_says_why_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    built, why = _hook_module().build_native(tmp_path / "out")
    assert built is None
    assert "/nonexistent/cc" in why
    assert not (tmp_path / "out").exists()


def test_the_vendored_llhttp_is_the_one_httptools_runs_and_keeps_its_licence():
    import httptools

    llhttp = ROOT / "native" / "llhttp"
    assert "Permission is hereby granted" in (llhttp / "LICENSE-MIT").read_text()
    header = (llhttp / "include" / "llhttp.h").read_text()
    version = ".".join(
        re.search(rf"LLHTTP_VERSION_{part} (\d+)", header).group(1) for part in ("MAJOR", "MINOR", "PATCH")
    )  # type: ignore[union-attr]
    origin = " ".join((llhttp / "ORIGIN.md").read_text().split())
    # Both engines must read a head alike: the vendored copy is the one of the httptools installed.
    assert f"llhttp {version}" in origin and f"httptools {httptools.__version__} sdist" in origin
