"""Kafka scorer and aggregator workers as real processes (`llmwatch scorer --kafka ...`), for the
tests that run them against the real broker (tests/e2e/test_kafka.py, test_dashboards.py).

    worker = start_worker(tmp_path, broker.bootstrap, "samples", "scores", "scorers", "w1")
    worker.checks(); worker.consumed("scored"); worker.health()
    stop_workers([worker])

Each worker binds its metrics port on port 0 and reports it in its start-up log line.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import orjson
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
CHECK = "refusal"  # a rule check that applies to every chat sample


@dataclass
class Worker:
    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def id(self) -> str:
        return f"{socket.gethostname()}/{self.proc.pid}"

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
            return resp.read()

    def health(self) -> dict:
        try:
            return orjson.loads(self.get("/healthz"))
        except OSError:
            return {}

    def checks(self, check: str = CHECK) -> float:
        total = 0.0
        for family in text_string_to_metric_families(self.get("/metrics").decode()):
            for s in family.samples:
                if s.name == "llmwatch_check_total" and s.labels.get("check") == check:
                    total += s.value
        return total

    def consumed(self, outcome: str) -> float:
        for family in text_string_to_metric_families(self.get("/metrics").decode()):
            for s in family.samples:
                if s.name == "llmwatch_kafka_consumed_total" and s.labels.get("outcome") == outcome:
                    return s.value
        return 0.0

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def start_worker(
    tmp_path: Path, bootstrap: str, topic: str, scores_topic: str, group: str, name: str, command: str = "scorer"
) -> Worker:
    log = tmp_path / f"{name}.log"
    env = {
        **os.environ,
        "LLMWATCH_SCORING__EMBEDDINGS": "false",
        "LLMWATCH_LOGGING__LEVEL": "info",
        "LLMWATCH_LOGGING__FORMAT": "json",
        "PYTHONPATH": str(ROOT),
    }
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                command,
                "--kafka",
                bootstrap,
                "--topic",
                topic,
                "--group",
                group,
                "--scores-topic",
                scores_topic,
                "--metrics-listen",
                "127.0.0.1:0",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
        )
    return Worker(proc, reported_metrics_port(proc, log), log)


def reported_metrics_port(proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> int:
    """The metrics port a worker bound on port 0, from its start-up log line (`scorer_starting`,
    `aggregator_started`: both carry metrics_port)."""
    deadline = time.monotonic() + timeout
    while True:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"metrics_port"' in line:
                return int(orjson.loads(line)["metrics_port"])
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"no metrics_port in the worker's log (exit {proc.poll()}):\n{log.read_text(errors='replace')[-3000:]}"
            )
        time.sleep(0.05)  # poll interval of a bounded wait for the line


def stop_workers(workers: list[Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None:
            w.proc.terminate()
    for w in workers:
        try:
            w.proc.wait(15)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait(5)
