"""Running a module's proxy tests on both engines (`proxy.engine`: python, native; design record 0067).

    from helpers.engines import both_engines as proxy_engine  # noqa: F401  (overrides the fixture)

`all_engines` adds `native-forward`: the native engine with C forwarding plain calls.

`native` needs the C extension: without a C compiler its cases are skipped; with one and no
extension built, they fail (build it: `python hatch_build.py`).
"""

from __future__ import annotations

import shutil

import pytest

from llmwatch.collectors.receivers.proxy.native import load

_native, _why = load()
_NO_COMPILER = shutil.which("cc") is None and shutil.which("gcc") is None

ENGINES = [
    "python",
    pytest.param(
        "native", marks=pytest.mark.skipif(_native is None and _NO_COMPILER, reason="no C compiler: no native engine")
    ),
]


# `native` with C forwarding plain calls (DATAPLANE_FORWARD=1, design record 0067): what the ring
# hands to the proxy's finish path must read as the relay's in the capture tests.
FORWARD = "native-forward"
ALL_ENGINES = [
    *ENGINES,
    pytest.param(
        FORWARD, marks=pytest.mark.skipif(_native is None and _NO_COMPILER, reason="no C compiler: no native engine")
    ),
]


@pytest.fixture(params=ENGINES)
def both_engines(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=ALL_ENGINES)
def all_engines(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def engine_environ(engine: str) -> dict[str, str]:
    """The environment a proxy of `engine` runs with (the relay reads DATAPLANE_FORWARD at start)."""
    if engine == FORWARD:
        return {"LLMWATCH_PROXY__ENGINE": "native", "DATAPLANE_FORWARD": "1"}
    return {"LLMWATCH_PROXY__ENGINE": engine, "DATAPLANE_FORWARD": "0"}
