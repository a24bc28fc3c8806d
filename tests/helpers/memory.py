"""What the bounded-memory tests measure: the peak of Python's traced allocations (numpy's included)."""

from __future__ import annotations

import tracemalloc
from typing import Any, Callable


def peak_bytes(run: Callable[[], Any]) -> int:
    """The peak traced allocation, in bytes, while `run()` runs."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
