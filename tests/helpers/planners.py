"""A `dataplane.Planner` with the smallest settings (no prefix or credentials, the lowest header
limits): what the tests that need a planner, and not a relay's, build it with."""

from __future__ import annotations

from types import ModuleType
from typing import Any


def smallest_planner(dataplane: ModuleType) -> Any:
    """`dataplane` is the extension module: the in-place build, or one a test built itself."""
    return dataplane.Planner(
        prefix=b"",
        host_header=b"Host: up\r\n",
        authorization=None,
        preserve_host=False,
        max_header_bytes=8190,
        max_headers=32,
        max_head=8190 * 33,
    )
