"""Running a module's proxy tests on both engines (`proxy.engine`: python, native; design record 0067).

    from helpers.engines import both_engines as proxy_engine  # noqa: F401  (overrides the fixture)

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


@pytest.fixture(params=ENGINES)
def both_engines(request: pytest.FixtureRequest) -> str:
    return str(request.param)
