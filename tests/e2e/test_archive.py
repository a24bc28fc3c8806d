"""`llmwatch archive` on a real broker (tansu): a worker killed mid-run loses and doubles nothing."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import orjson
import pyarrow.parquet as pq
from kafka import KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from llmwatch.collectors.exporters.kafka import create_topics
from llmwatch.core.parquet import PART_NAME
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 20, 0, tzinfo=timezone.utc)
N_SAMPLES = 900
N_SCORES = 300
TOPICS = {"t.samples": 3, "t.scores": 2, "t.pairs": 1}


def sample(i: int) -> Sample:
    version = "v2" if i % 3 == 0 else "v1"
    answer = "I'm sorry, but I can't help with that." if i % 10 == 0 else " ".join(["word"] * (20 + i % 30)) + "."
    return Sample(
        id=f"s-{i}",
        timestamp=T0 + timedelta(seconds=20 * i),  # five hours: two dates
        model="m",
        model_version=version,
        status=200,
        latency_ms=50.0 + i % 100,
        request={"messages": [{"role": "user", "content": f"question {i}?"}]},
        response={"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]},
    )


def start_archive(
    tmp_path: Path, bootstrap: str, out: Path, name: str, group: str = "g"
) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    env = {**os.environ, "LLMWATCH_LOGGING__LEVEL": "info", "LLMWATCH_LOGGING__FORMAT": "json"}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "llmwatch.agent.cli", "archive", "--kafka", bootstrap, "--group", group,
                "--topic", "t.samples", "--scores-topic", "t.scores", "--pairs-topic", "t.pairs",
                "--out", str(out), "--batch-records", "25", "--flush-s", "0.5", "--metrics-listen", "127.0.0.1:0",
            ],
            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
        )  # fmt: skip
    return proc, log


def wait_for(predicate, timeout: float, what: str, procs=()) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for proc, log in procs:
            if proc.poll() is not None:
                raise AssertionError(f"archive worker exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            tails = "\n".join(log.read_text()[-2000:] for _, log in procs)
            raise AssertionError(f"{what}: not within {timeout}s\n{tails}")
        time.sleep(0.1)  # poll interval of a bounded wait


def metrics_port(log: Path, procs) -> int:
    found: list[int] = []

    def started() -> bool:
        for line in log.read_text().splitlines():
            if line.startswith("{") and '"archive_started"' in line:
                found.append(int(orjson.loads(line)["metrics_port"]))
                return True
        return False

    wait_for(started, 60, "archive_started", procs)
    return found[0]


LAST_SCRAPE: dict[str, float] = {}


def consumed(port: int | None, outcome: str) -> float:
    """llmwatch_kafka_consumed_total{outcome} from the worker's /metrics (the last scrape when it has stopped)."""
    if port is not None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            return 0.0
        LAST_SCRAPE.clear()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "llmwatch_kafka_consumed_total":
                    LAST_SCRAPE[s.labels["outcome"]] = s.value
    return LAST_SCRAPE.get(outcome, 0.0)


def assigned(log: Path) -> bool:
    return any(
        '"archive_assigned"' in line and orjson.loads(line)["partitions"]
        for line in log.read_text().splitlines()
        if line.startswith("{")
    )


def rows(out: Path, kind: str) -> int:
    return (
        sum(pq.ParquetFile(p).metadata.num_rows for p in (out / kind).rglob("*.parquet"))
        if (out / kind).is_dir()
        else 0
    )


def test_two_workers_one_killed_archive_every_record_exactly_once(kafka_broker, tmp_path):
    create_topics([kafka_broker.bootstrap], TOPICS)
    out = tmp_path / "dataset"
    a = start_archive(tmp_path, kafka_broker.bootstrap, out, "a")
    b = start_archive(tmp_path, kafka_broker.bootstrap, out, "b")
    procs = [a, b]
    try:
        wait_for(lambda: assigned(a[1]) and assigned(b[1]), 60, "both workers own partitions", procs)
        producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5)
        samples = [sample(i) for i in range(N_SAMPLES)]
        for s in samples:
            producer.send("t.samples", key=s.id.encode(), value=s.to_json())
        for s in samples[:N_SCORES]:
            score = Score(sample_id=s.id, check="length", kind="rule", result="pass", value=0.5,
                          model=s.model, model_version=s.model_version, sample_timestamp=s.timestamp)  # fmt: skip
            producer.send("t.scores", key=s.id.encode(), value=score.to_json())
        producer.send("t.samples", value=b"not json")  # skipped, counted, never a row
        producer.flush(30)
        producer.close()

        # Kill worker a by PID once it has written part of its share: mid-run, offsets maybe uncommitted.
        wait_for(lambda: 0 < rows(out, "samples") < N_SAMPLES, 60, "first files written", procs)
        a[0].send_signal(signal.SIGKILL)
        a[0].wait(10)
        written_before_restart = rows(out, "samples")
        c = start_archive(tmp_path, kafka_broker.bootstrap, out, "c")  # a restart of the killed worker
        procs = [b, c]
        wait_for(lambda: rows(out, "samples") >= N_SAMPLES and rows(out, "scores") >= N_SCORES, 120, "all rows", procs)
        # Let the group settle and every member flush what it holds; no more rows may appear.
        wait_for(lambda: assigned(c[1]), 60, "the restarted worker owns partitions", procs)
        for proc, _ in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, log in procs:
            assert proc.wait(30) == 0, log.read_text()[-3000:]
    finally:
        for proc, _ in [a, b, *procs]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert 0 < written_before_restart < N_SAMPLES

    # A worker whose group has no committed offsets at all (lost, reset, a new group) replays every
    # record from offset 0: each one is already in a file, so it writes nothing.
    d = start_archive(tmp_path, kafka_broker.bootstrap, out, "d", group="g-replay")
    try:
        port = metrics_port(d[1], [d])
        wait_for(
            lambda: consumed(port, "duplicate") + consumed(port, "archived") >= N_SAMPLES + N_SCORES,
            60,
            "the replay read to the end",
            [d],
        )
        d[0].send_signal(signal.SIGTERM)
        assert d[0].wait(30) == 0, d[1].read_text()[-3000:]
    finally:
        if d[0].poll() is None:
            d[0].kill()
            d[0].wait(10)
    assert consumed(None, "archived") == 0  # as of its last scrape, after the whole replay

    con = duckdb.connect()
    glob = f"{out}/samples/**/*.parquet"
    total, distinct = con.sql(f"select count(*), count(distinct id) from read_parquet('{glob}')").fetchall()[0]
    assert total == distinct == N_SAMPLES
    s_total, s_distinct = con.sql(
        f"select count(*), count(distinct sample_id) from read_parquet('{out}/scores/**/*.parquet')"
    ).fetchall()[0]
    assert s_total == s_distinct == N_SCORES
    by_partition = dict(
        con.sql(
            f"select date || '/' || model_version, count(*) from read_parquet('{glob}', hive_partitioning=true) group by 1"
        ).fetchall()
    )
    expected: dict[str, int] = {}
    for s in (sample(i) for i in range(N_SAMPLES)):
        k = f"{s.timestamp:%Y-%m-%d}/{s.model_version}"
        expected[k] = expected.get(k, 0) + 1
    assert by_partition == expected and len(expected) == 4

    # The files' offset ranges never overlap, per topic partition: nothing for a reader to dedupe.
    ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for p in out.rglob("*.parquet"):
        m = PART_NAME.match(p.name)
        assert m, p
        ranges.setdefault((m["topic"], int(m["partition"])), []).append((int(m["first"]), int(m["last"])))
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    for spans in ranges.values():
        spans.sort()
        assert all(prev[1] < nxt[0] for prev, nxt in zip(spans, spans[1:])), spans
    assert all(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in out.rglob("*") if d.is_dir())

    # The offline commands read the dataset as they read JSON Lines.
    env = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false"}
    cli = [sys.executable, "-m", "llmwatch.agent.cli"]
    frozen = subprocess.run(
        [*cli, "baseline", "freeze", "--samples", str(out), "--model-version", "v1", "--out", str(tmp_path / "b.json")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert frozen.returncode == 0, frozen.stderr
    drift = subprocess.run(
        [*cli, "drift", "--baseline", str(tmp_path / "b.json"), "--samples", str(out), "--format", "json"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert drift.returncode in (0, 1), drift.stderr
    report = orjson.loads(drift.stdout)
    assert report["n_current"] == N_SAMPLES and set(report["families"]) >= {"behaviour"}
