"""The sample queue's batches: the pipeline thread lets a batch gather, and a stop never waits for one.

At low rates the pipeline would otherwise wake for one or two samples at a time and pay its
per-batch cost (sink writes, cold code) for each; `min_items` / `linger_s` let a batch gather for
a bounded time, and `flush` (the pipeline's stop) ends the gathering at once, so nothing queued is
held back at shutdown. Deadlines below are for the event, never timed assertions: a linger of an
hour can only end by the behaviour under test.
"""

from __future__ import annotations

import threading
from typing import Sequence

from llmwatch.collectors.intake import Pipeline
from llmwatch.core.metrics import Metrics
from llmwatch.core.queue import BoundedQueue
from llmwatch.core.records import Sample
from tests.helpers.samples import chat_sample

HOUR = 3600.0


def _in_thread(fn):
    """Run `fn` in a thread; (thread, result holder) so the caller waits with a deadline."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def test_a_batch_gathers_items_that_arrive_while_it_lingers():
    queue: BoundedQueue[int] = BoundedQueue(100, poll_s=0.001)
    queue.offer(1)
    thread, out = _in_thread(lambda: queue.get_batch(10, timeout=HOUR, min_items=3, linger_s=HOUR))
    queue.offer(2)
    queue.offer(3)
    thread.join(10)
    assert not thread.is_alive(), "the batch did not end once min_items had gathered"
    assert out == [[1, 2, 3]]


def test_without_min_items_a_batch_is_what_is_there():
    queue: BoundedQueue[int] = BoundedQueue(100, poll_s=0.001)
    queue.offer(1)
    assert queue.get_batch(10, timeout=HOUR) == [1]


def test_a_batch_is_never_more_than_max_items_and_the_rest_stays_queued():
    queue: BoundedQueue[int] = BoundedQueue(100, poll_s=0.001)
    for i in range(5):
        queue.offer(i)
    assert queue.get_batch(3, timeout=HOUR, min_items=3, linger_s=HOUR) == [0, 1, 2]
    assert queue.depth() == 2


def test_a_linger_ends_after_linger_s_with_what_gathered():
    queue: BoundedQueue[int] = BoundedQueue(100, poll_s=0.001)
    queue.offer(7)
    assert queue.get_batch(10, timeout=HOUR, min_items=50, linger_s=0.01) == [7]


def test_a_set_flush_event_ends_the_linger_at_once():
    queue: BoundedQueue[int] = BoundedQueue(100, poll_s=0.001)
    queue.offer(1)
    flush = threading.Event()
    flush.set()
    thread, out = _in_thread(lambda: queue.get_batch(10, timeout=HOUR, min_items=50, linger_s=HOUR, flush=flush))
    thread.join(10)
    assert not thread.is_alive(), "a set flush event did not end the linger"
    assert out == [[1]]


class _Sink:
    name = "memory"
    raw = True

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def write(self, samples: Sequence[Sample]) -> int | None:
        self.samples.extend(samples)
        return None

    def close(self) -> None:
        pass


def test_closing_the_pipeline_writes_a_batch_that_was_still_gathering():
    queue: BoundedQueue[Sample] = BoundedQueue(100, poll_s=0.001)
    sink = _Sink()
    pipeline = Pipeline(queue, [sink], Metrics(), redact=None, min_batch=100, linger_s=HOUR)
    pipeline.start()
    queued = [chat_sample(id=f"s{i}") for i in range(3)]
    for sample in queued:
        assert queue.offer(sample)
    pipeline.close(timeout=10)
    assert not pipeline.alive, "close() waited for a batch that could only end by its hour-long linger"
    assert [s.id for s in sink.samples] == ["s0", "s1", "s2"]
