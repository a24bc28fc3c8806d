"""Reading a topic back from the real broker."""

from __future__ import annotations

import time
from typing import Any

from kafka import KafkaConsumer, TopicPartition


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    expect: int | None = None,
    timeout: float = 15.0,
    idle: float = 1.0,
    connection: dict[str, Any] | None = None,
) -> list:
    """Every record of `topic` (all partitions, from the start), without a consumer group.
    `connection`: kafka-python's connection arguments instead of plaintext `bootstrap` (TLS, SASL)."""
    consumer = KafkaConsumer(
        **(connection or {"bootstrap_servers": bootstrap}), enable_auto_commit=False, metrics_enabled=False
    )
    try:
        deadline = time.monotonic() + timeout
        parts = None
        while not parts and time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                time.sleep(0.1)
        assert parts, f"topic {topic} has no partitions"
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records: list = []
        last = time.monotonic()
        while time.monotonic() < deadline:
            got = consumer.poll(timeout_ms=200)
            for rs in got.values():
                records.extend(rs)
            if got:
                last = time.monotonic()
            if expect is not None and len(records) >= expect and time.monotonic() - last >= idle:
                break
            if expect is None and time.monotonic() - last >= idle and records:
                break
        return records
    finally:
        consumer.close()
