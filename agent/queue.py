"""The bounded hand-off between the hot path and everything that happens to a sample later.

`offer` never blocks and never grows memory past `max_size`: a full queue refuses the item and
the caller counts the drop. Consumers run in other threads (file sink, scorers, Kafka producer)
so the proxy's event loop never waits on disk, models or brokers.
"""

from __future__ import annotations

import queue
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedQueue(Generic[T]):
    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._q: queue.Queue[T] = queue.Queue(maxsize=max_size)

    def offer(self, item: T) -> bool:
        try:
            self._q.put_nowait(item)
        except queue.Full:
            return False
        return True

    def get(self, timeout: float | None = None) -> T | None:
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None

    def get_batch(self, max_items: int, timeout: float) -> list[T]:
        """Wait up to `timeout` for one item, then take whatever else is already there."""
        first = self.get(timeout)
        if first is None:
            return []
        batch = [first]
        while len(batch) < max_items:
            try:
                batch.append(self._q.get_nowait())
            except queue.Empty:
                break
        return batch

    def depth(self) -> int:
        return self._q.qsize()
