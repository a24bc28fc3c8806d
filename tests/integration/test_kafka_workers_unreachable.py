"""A Kafka worker started before its broker says so without flooding its log, as a real process.

Newcomer trial: `llmwatch archive --kafka HOST:PORT --out DIR` with no broker there printed
kafka-python's own ERROR and WARNING lines about ten a second ("Connection failed:
KafkaConnectionError: 111 ECONNREFUSED", "Bootstrap ... not ready; waiting 0.41 secs", ...),
burying llmwatch's one `kafka_unreachable` line. The producer (the sidecar's Kafka sink) had the
rate limit of `quiet_kafka_logs` (one line per kafka-python logger per 10 s); the consumers of
`archive`, `scorer` and `aggregate` did not.
"""

from __future__ import annotations

import re
import socket
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers.procs import Proc, agent_env

pytest.importorskip("kafka")
pytest.importorskip("pyarrow")

CLI = [sys.executable, "-m", "llmwatch.agent.cli"]


@pytest.mark.parametrize("command", [["archive", "--out", "{out}"], ["scorer"]])
def test_a_worker_whose_broker_is_down_logs_kafka_python_at_most_once_per_logger_per_10_s(
    tmp_path: Path, command: list[str]
):
    with socket.socket() as refused:  # bound, never listening: every connect is refused at once
        refused.bind(("127.0.0.1", 0))
        broker = f"127.0.0.1:{refused.getsockname()[1]}"
        argv = [*CLI, *(part.format(out=tmp_path / "ds") for part in command), "--kafka", broker]
        proc = Proc(argv, env=agent_env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
        try:
            # The first bootstrap gives up after 5 s (bootstrap_timeout_ms), well inside the 10 s
            # of the rate limit: kafka-python retried dozens of times by then.
            event = proc.wait_event("kafka_unreachable", timeout=90)
        finally:
            proc.stop()
    assert "127.0.0.1" in event["error"] or "bootstrap" in event["error"].lower()
    assert "--kafka (kafka.bootstrap_servers)" in event["fix"], "the line says what to do"
    per_logger = Counter(m.group(1) for m in map(re.compile(r"^(?:ERROR|WARNING) (kafka\S*) ").match, proc.lines) if m)
    assert per_logger, "kafka-python said nothing at all: the test no longer sees its lines"
    assert max(per_logger.values()) == 1, per_logger
