"""What the Kafka workers remember of a name read from a topic is bounded in bytes, not only in count:
a sample id, a check name or a model version is any string a producer writes, megabytes included.
The scorer's and the aggregator's dedupe memory (`RecentIds`, 200,000 ids) and the label caps'
memory of names seen (up to 50 times the cap) kept each whole."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

from helpers.samples import rule_score

from llmwatch.agent.components import load_config
from llmwatch.agent.processes.kafka_aggregate import Aggregator
from llmwatch.collectors.exporters.kafka import RecentIds
from llmwatch.core.metrics import OTHER, LabelCap, Metrics

LONG = 100_000  # characters of each made-up name


def retained(feed: Callable[[], None]) -> int:
    """Bytes still allocated after `feed` ran (its temporaries freed)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        feed()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_the_dedupe_memory_holds_long_ids_in_bounded_bytes() -> None:
    # `llmwatch scorer` remembers every sample id it scored; 300 ids of 100 kB held 30 MB.
    ids = RecentIds()
    held = retained(lambda: [ids.add(f"{i}-" + "x" * LONG) for i in range(300)] and None)
    assert held < 1_000_000, f"{held} bytes kept for 300 ids"
    assert "7-" + "x" * LONG in ids and "7-" + "x" * (LONG - 1) not in ids, "still exact on what it holds"
    assert len(ids) == 300


def test_label_caps_remember_long_names_in_bounded_bytes() -> None:
    # The cap remembers names it admitted and, up to 50 times its limit, names it turned away.
    cap = LabelCap(100)
    labels: list[str] = []
    held = retained(lambda: labels.extend(cap(f"{i:04}-" + "v" * LONG) for i in range(300)))
    assert held < 1_000_000, f"{held} bytes kept for 300 names"
    assert labels[:100] == [f"{i:04}-" + "v" * 59 for i in range(100)] and set(labels[100:]) == {OTHER}
    assert cap("0007-" + "v" * LONG) == "0007-" + "v" * 59, "an admitted long name keeps its label"
    assert cap("0007-" + "v" * (LONG + 1)) == OTHER, "another long name with the same start is another name"


def test_the_aggregator_remembers_long_sample_ids_and_check_names_in_bounded_bytes() -> None:
    # Each score record is bounded by the join's bytes; what it leaves behind once joined (its
    # dedupe key, its check name in the label cap) is bounded by a count only, so it must be small.
    cfg = load_config(None, overrides={"kafka": {"aggregate_join_max_bytes": 1024 * 1024}}, environ={})
    agg = Aggregator(cfg, Metrics())

    def feed() -> None:
        for i in range(300):
            agg.add_score(rule_score(f"{i}-" + "s" * LONG, check=f"{i}-" + "c" * LONG))

    held = retained(feed)
    # The join itself holds up to its 1 MiB of encoded scores (and their parsed copies).
    assert held < 4 * 1024 * 1024, f"{held} bytes kept for 300 scores"
