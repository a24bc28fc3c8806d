"""The proxy's per-call histograms observe by bisection; a scrape must read exactly what
prometheus-client's own `Histogram.observe` would have left."""

from __future__ import annotations

import math
import random

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from llmwatch.collectors.receivers.proxy.handler import _BucketFinder, _fast_child

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 10.0, 1000.0)


def _pair() -> tuple[CollectorRegistry, Histogram, CollectorRegistry, Histogram]:
    a, b = CollectorRegistry(), CollectorRegistry()
    return (
        a,
        Histogram("h", "h", ["op"], buckets=BUCKETS, registry=a),
        b,
        Histogram("h", "h", ["op"], buckets=BUCKETS, registry=b),
    )


def test_every_value_lands_in_the_bucket_observe_puts_it_in() -> None:
    reg_a, hist_a, reg_b, hist_b = _pair()
    plain = hist_a.labels("chat")
    fast = _fast_child(hist_b.labels("chat"))
    assert isinstance(fast, _BucketFinder)
    rng = random.Random(7)
    values = [*BUCKETS, 0.0, -1.0, math.inf, -math.inf, math.nan, 1e300, 24, 95]
    values += [bound * (1 + eps) for bound in BUCKETS for eps in (-1e-12, 1e-12)]
    values += [rng.expovariate(1.0) for _ in range(2000)]
    for value in values:
        plain.observe(value)
        fast.observe(value)
    assert generate_latest(reg_a) == generate_latest(reg_b)


def test_children_other_than_histograms_are_left_as_they_are() -> None:
    counter = Counter("c", "c", ["op"], registry=CollectorRegistry()).labels("chat")
    assert _fast_child(counter) is counter
