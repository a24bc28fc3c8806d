"""The bounded hand-off between the hot path and everything that happens to a sample later.

`offer` never blocks, takes no lock and wakes no thread: it is one length check and one
`deque.append`, both atomic under the GIL. A full queue refuses the item and the caller counts
the drop. The consumer thread polls in batches (every `poll_s` when idle), so the event loop
never pays for waking it, and sample storage runs at most about `poll_s` behind traffic.

A consumer may also ask for a batch to gather (`min_items`, waiting at most `linger_s` after it
first saw an item): what the sample pipeline pays per batch (the sinks' writes, its code run cold
after the event loop's) is then shared by many samples at low rates, where a batch per poll would
hold one or two.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedQueue(Generic[T]):
    def __init__(self, max_size: int, *, poll_s: float = 0.02) -> None:
        self.max_size = max_size
        self._items: deque[T] = deque()
        self._poll_s = poll_s

    def offer(self, item: T) -> bool:
        # len() then append() can race only with other producers, and the hot path is a single
        # event-loop thread; the bound may be overshot by at most one item per extra producer.
        if len(self._items) >= self.max_size:
            return False
        self._items.append(item)
        return True

    def get_batch(
        self,
        max_items: int,
        timeout: float,
        *,
        min_items: int = 1,
        linger_s: float = 0.0,
        flush: threading.Event | None = None,
    ) -> list[T]:
        """Up to `max_items` items, waiting at most `timeout` for the first one; then, until
        `min_items` are there, at most `linger_s` more (not at all once `flush` is set)."""
        deadline = time.monotonic() + timeout
        items = self._items
        while not items:
            if time.monotonic() >= deadline:
                return []
            time.sleep(self._poll_s)
        if len(items) < min_items and linger_s > 0:
            until = time.monotonic() + linger_s
            while len(items) < min_items and not (flush is not None and flush.is_set()):
                left = until - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(self._poll_s, left))
        batch: list[T] = []
        popleft = items.popleft
        while items and len(batch) < max_items:
            batch.append(popleft())
        return batch

    def depth(self) -> int:
        return len(self._items)
