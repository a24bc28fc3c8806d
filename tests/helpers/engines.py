"""Running a module's proxy tests on each engine (`proxy.engine`: python, native; design record 0067).

    from helpers.engines import both_engines as proxy_engine  # noqa: F401  (overrides the fixture)

`native` is the native engine as it serves: C forwards plain calls itself and hands the rest to the
relay. `all_engines` adds `native-front`: C as a front door only (DATAPLANE_FORWARD=0), handing
every connection to the relay, which is what the native engine does for an https upstream.

`native` needs the C extension: without a C compiler its cases are skipped; with one and no
extension built, they fail (build it: `python hatch_build.py`).
"""

from __future__ import annotations

import shutil

import pytest

from llmwatch.collectors.receivers.proxy.native import load

_native, _why = load()
_NO_COMPILER = shutil.which("cc") is None and shutil.which("gcc") is None
_SKIP = pytest.mark.skipif(_native is None and _NO_COMPILER, reason="no C compiler: no native engine")

FRONT = "native-front"

ENGINES = ["python", pytest.param("native", marks=_SKIP)]
ALL_ENGINES = [*ENGINES, pytest.param(FRONT, marks=_SKIP)]


@pytest.fixture(params=ENGINES)
def both_engines(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=ALL_ENGINES)
def all_engines(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def setting(engine: str) -> tuple[str, bool]:
    """(proxy.engine, whether C forwards) for a test's engine name."""
    if engine == "python":
        return "python", False
    return "native", engine != FRONT


def engine_environ(engine: str) -> dict[str, str]:
    """The environment a proxy of `engine` runs with (the relay reads DATAPLANE_FORWARD at start)."""
    name, forward = setting(engine)
    return {"LLMWATCH_PROXY__ENGINE": name, "DATAPLANE_FORWARD": "1" if forward else "0"}
