"""Kafka transport and scorer consumer groups, against a real broker (tansu, tests/helpers/kafka_broker.py)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import aiohttp
import orjson
import pytest
from helpers.agents import bound_port, metric, proxy_url, recorded_servers, scrape, wait_until
from helpers.kafka_topics import read_topic
from helpers.kafka_workers import CHECK, Worker, start_worker, stop_workers
from helpers.ports import dead_address
from kafka import KafkaProducer

from llmwatch.agent.components import load_config
from llmwatch.agent.processes import kafka_scorer
from llmwatch.agent.processes.kafka_scorer import SCORER_HEADER, RecentIds, run_scorer
from llmwatch.collectors.exporters.kafka import KafkaMetrics, KafkaSampleSink, KafkaSection, create_topics, sample_key
from llmwatch.core.config import ConfigError
from llmwatch.core.metrics import Metrics
from llmwatch.core.records import Sample

ROOT = Path(__file__).resolve().parents[2]
BODY = orjson.dumps(
    {
        "model": "sim-gpt-4o-mini",
        "messages": [{"role": "user", "content": "How do I roast a chicken? Mail me at a@b.co"}],
    }
)


def sample(i: int, **kw) -> Sample:
    fields = dict(
        id=f"s-{i}",
        timestamp=time.time(),
        model="m",
        status=200,
        latency_ms=12.5,
        request={"messages": [{"role": "user", "content": f"q{i}"}]},
        response={"choices": [{"message": {"content": "x" * 2000}}]},
    )
    return Sample(**{**fields, **kw})


def checks_of(records: list, check: str = CHECK) -> list[dict]:
    out = []
    for r in records:
        score = orjson.loads(r.value)
        if score["check"] == check:
            score["_scorer"] = dict(r.headers).get(SCORER_HEADER, b"").decode()
            out.append(score)
    return out


# --- driving traffic -------------------------------------------------------------------------


async def until(predicate, timeout: float, what: str, workers: list[Worker] = ()) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if await asyncio.to_thread(predicate):
                return
        except OSError:
            pass
        for w in workers:
            if w.proc.poll() is not None:
                raise AssertionError(f"worker {w.id} exited with {w.proc.returncode}:\n{w.log_tail()}")
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {w.id}\n{w.log_tail()}" for w in workers)
            raise AssertionError(f"{what}: not within {timeout}s\n{tails}")
        await asyncio.sleep(0.2)


async def send(agent, ids: list[str], *, rate: float | None = None, concurrency: int = 16) -> list[int]:
    """POST one chat call per id (as x-request-id); returns the statuses."""
    url = proxy_url(agent) + "/v1/chat/completions"
    statuses: list[int] = []
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def one(rid: str) -> None:
            async with sem:
                async with session.post(
                    url, data=BODY, headers={"Content-Type": "application/json", "x-request-id": rid}
                ) as resp:
                    await resp.read()
                    statuses.append(resp.status)

        tasks = []
        for rid in ids:
            tasks.append(asyncio.create_task(one(rid)))
            if rate:
                await asyncio.sleep(1.0 / rate)
        await asyncio.gather(*tasks)
    return statuses


# --- (a) the sink ----------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["gzip", "lz4", "zstd", "snappy", "none"])
def test_sink_round_trip_keys_and_compression(kafka_broker, compression):
    topic = f"samples-{compression}"
    create_topics([kafka_broker.bootstrap], {topic: 2})
    metrics = Metrics()
    sink = KafkaSampleSink(
        KafkaSection(
            bootstrap_servers=[kafka_broker.bootstrap], samples_topic=topic, compression=compression, linger_ms=5
        ),
        metrics,
    )
    sent = [sample(i) for i in range(200)] + [
        sample(1000 + i, metadata={"conversation_id": "conv-7"}) for i in range(5)
    ]
    sink.write(sent)
    deadline = time.monotonic() + 15
    while sink.outstanding and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sink.outstanding == 0
    assert metrics.group(KafkaMetrics).kafka_produced._value.get() == len(sent)
    sink.close()
    records = read_topic(kafka_broker.bootstrap, topic, expect=len(sent))
    assert len(records) == len(sent)
    by_id = {Sample.from_json(r.value).id: r for r in records}
    for s in sent:
        assert Sample.from_json(by_id[s.id].value) == s
        assert by_id[s.id].key == sample_key(s)
    conversation = [r for r in records if r.key == b"conv-7"]
    assert len({r.partition for r in conversation}) == 1, "one conversation stays in one partition"
    assert [Sample.from_json(r.value).id for r in sorted(conversation, key=lambda r: r.offset)] == [
        f"s-{1000 + i}" for i in range(5)
    ], "in order"
    assert len({r.partition for r in records}) == 2, "other samples spread over the partitions"


def test_sink_with_no_broker_never_blocks_and_counts_its_drops(monkeypatch):
    # "Never blocks" as a property of where the network is touched, not of how long a call took on
    # this host: every connection attempt runs on the sink's own thread, never the caller's.
    connecting: list[threading.Thread] = []
    real_connect = KafkaSampleSink._connect

    def recorded(self: KafkaSampleSink) -> object:
        connecting.append(threading.current_thread())
        return real_connect(self)

    monkeypatch.setattr(KafkaSampleSink, "_connect", recorded)
    metrics = Metrics()
    dead = dead_address()  # nothing listens here
    sink = KafkaSampleSink(KafkaSection(bootstrap_servers=[dead], max_buffered=50), metrics)
    for i in range(10):
        sink.write([sample(i * 10 + j) for j in range(10)])
    assert sink.outstanding == 50, "the writes were buffered up to the bound, not sent"
    assert metrics.group(KafkaMetrics).kafka_dropped.labels(reason="buffer_full")._value.get() == 50
    deadline = time.monotonic() + 30
    while not connecting and time.monotonic() < deadline:
        time.sleep(0.01)
    assert connecting and threading.current_thread() not in connecting, "connecting is the sink thread's job"
    # close() is bounded by its timeout: run it aside and wait for it with a generous deadline.
    closer = threading.Thread(target=sink.close, kwargs={"timeout": 1.0})
    closer.start()
    closer.join(60)
    assert not closer.is_alive(), "close() returned"
    assert metrics.group(KafkaMetrics).kafka_dropped.labels(reason="closed")._value.get() == 50
    assert sink.outstanding == 0


def test_kafka_config_is_validated():
    with pytest.raises(ConfigError) as err:
        load_config(
            None,
            overrides={"kafka": {"compresion": "gzip", "bootstrap_servers": "nohost", "samples_topic": "bad topic"}},
            environ={},
        )
    text = str(err.value)
    assert "kafka.compresion: unknown field" in text
    assert "kafka.bootstrap_servers" in text and "HOST:PORT" in text
    assert "kafka.samples_topic" in text
    cfg = load_config(
        None, environ={"LLMWATCH_KAFKA__BOOTSTRAP_SERVERS": "a:9092,b:9093", "LLMWATCH_KAFKA__ENABLED": "true"}
    )
    assert cfg.kafka.enabled and cfg.kafka.bootstrap_servers == ["a:9092", "b:9093"]


def test_recent_ids_are_bounded_by_count_and_age():
    ids = RecentIds(max_size=3, ttl_s=60)
    for i in range(5):
        ids.add(f"x{i}")
    assert len(ids) == 3 and "x0" not in ids and "x4" in ids
    old = RecentIds(max_size=10, ttl_s=0.05)
    old.add("a")
    time.sleep(0.06)
    assert "a" not in old


def test_worker_skips_redelivered_and_invalid_records(kafka_broker, tmp_path, monkeypatch):
    bootstrap = kafka_broker.bootstrap
    create_topics([bootstrap], {"in": 1, "out": 1})
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    first = sample(1)
    for value in (first.to_json(), b"not json", first.to_json(), sample(2).to_json()):
        producer.send("in", value=value)
    producer.flush()
    producer.close()
    servers = recorded_servers(monkeypatch, kafka_scorer)
    cfg = load_config(
        None,
        overrides={
            "metrics_listen": "127.0.0.1:0",
            "scoring": {"embeddings": False},
            "kafka": {"bootstrap_servers": [bootstrap], "samples_topic": "in", "scores_topic": "out", "group_id": "g1"},
        },
        environ={},
    )
    stop = threading.Event()
    thread = threading.Thread(target=run_scorer, args=(cfg,), kwargs={"stop": stop, "worker_id": "w-test"}, daemon=True)
    thread.start()
    try:
        port = bound_port(servers, thread)
        scores = read_topic(bootstrap, "out", timeout=20, idle=2.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            assert resp.status == 200 and orjson.loads(resp.read())["assigned"] == ["in:0"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert 'llmwatch_kafka_consumed_total{outcome="duplicate"} 1.0' in text
        assert 'llmwatch_kafka_consumed_total{outcome="invalid"} 1.0' in text
        assert 'llmwatch_kafka_consumed_total{outcome="scored"} 2.0' in text
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive(), "the worker stops when asked"
    per_sample = Counter((orjson.loads(r.value)["sample_id"], orjson.loads(r.value)["check"]) for r in scores)
    assert {sid for sid, _ in per_sample} == {"s-1", "s-2"}
    assert set(per_sample.values()) == {1}, "the redelivered copy of s-1 was not scored again"
    assert all(dict(r.headers)[SCORER_HEADER] == b"w-test" for r in scores)
    assert all(r.key == orjson.loads(r.value)["sample_id"].encode() for r in scores)


def test_a_worker_without_a_broker_is_alive_but_not_ready(tmp_path, monkeypatch):
    """The shared metrics app: /healthz 200 with the worker's facts, /readyz 503 naming the failing check."""
    import urllib.error

    servers = recorded_servers(monkeypatch, kafka_scorer)
    dead = dead_address()  # nothing listens here
    cfg = load_config(
        None,
        overrides={
            "metrics_listen": "127.0.0.1:0",
            "scoring": {"embeddings": False},
            "kafka": {"bootstrap_servers": [dead], "samples_topic": "in", "scores_topic": "out", "group_id": "g1"},
        },
        environ={},
    )
    stop = threading.Event()
    thread = threading.Thread(
        target=run_scorer, args=(cfg,), kwargs={"stop": stop, "worker_id": "w-alone"}, daemon=True
    )
    thread.start()
    try:
        port = bound_port(servers, thread)
        health = None
        deadline = time.monotonic() + 20
        while health is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                    health = (resp.status, orjson.loads(resp.read()))
            except OSError:
                assert time.monotonic() < deadline and thread.is_alive(), (
                    "the worker serves /healthz while it looks for the broker"
                )
                stop.wait(0.1)
        assert health == (200, {"worker": "w-alone", "group": "g1", "topic": "in", "assigned": [], "status": "ok"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
        body = orjson.loads(refused.value.read())
        assert refused.value.code == 503
        assert (body["status"], body["checks"], body["worker"]) == ("not_ready", {"consumer_polling": False}, "w-alone")
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive(), "the worker stops when asked, even before it ever connected"


def test_a_crash_between_publish_and_commit_rescores_that_batch_once(kafka_broker, monkeypatch):
    """The at-least-once window, made deterministic: the first worker dies right after publishing."""
    import kafka

    bootstrap = kafka_broker.bootstrap
    create_topics([bootstrap], {"in": 1, "out": 1})
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        producer.send("in", value=sample(i).to_json())
    producer.flush()

    def worker(name: str, stop: threading.Event, errors: list) -> threading.Thread:
        cfg = load_config(
            None,
            overrides={
                "metrics_listen": "127.0.0.1:0",
                "scoring": {"embeddings": False},
                "kafka": {
                    "bootstrap_servers": [bootstrap],
                    "samples_topic": "in",
                    "scores_topic": "out",
                    "group_id": "g",
                },
            },
            environ={},
        )

        def run() -> None:
            try:
                run_scorer(cfg, stop=stop, worker_id=name)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    class Killed(BaseException):
        """Not an Exception: the worker's error handling must not see it, as with a real kill."""

    def crash(self, *args, **kwargs):
        raise Killed("killed between publish and commit")

    monkeypatch.setattr(kafka.KafkaConsumer, "commit", crash)
    errors: list = []
    first = worker("first", threading.Event(), errors)
    first.join(30)
    assert not first.is_alive() and errors, "the first worker died at its first commit"
    monkeypatch.undo()

    for i in range(10, 15):
        producer.send("in", value=sample(i).to_json())
    producer.flush()
    producer.close()
    stop = threading.Event()
    second = worker("second", stop, errors)
    try:
        deadline = time.monotonic() + 30
        while True:
            refusal = checks_of(read_topic(bootstrap, "out", timeout=5, idle=0.5))
            if sum(s["_scorer"] == "second" for s in refusal) >= 15 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        time.sleep(1.0)
        refusal = checks_of(read_topic(bootstrap, "out", timeout=5, idle=0.5))
    finally:
        stop.set()
        second.join(15)
    assert len(errors) == 1, errors
    by = Counter(s["_scorer"] for s in refusal)
    assert by == {"first": 10, "second": 15}, "the uncommitted batch was scored again by the next owner, once"
    assert len({s["sample_id"] for s in refusal}) == 15, "deduped by (sample_id, check): one score per sample"


# --- (b) end to end: proxy -> samples topic -> two worker processes -> scores topic ----------


@pytest.mark.slow
async def test_two_workers_score_each_sample_once_and_survive_a_kill(kafka_broker, make_agent, sim, tmp_path):
    bootstrap = kafka_broker.bootstrap
    create_topics([bootstrap], {"samples": 2, "scores": 2})
    workers = [start_worker(tmp_path, bootstrap, "samples", "scores", "scorers", f"w{i}") for i in (1, 2)]
    # The fleet's exact counts: one aggregator reads both topics and dedupes by (sample_id, check).
    aggregator = start_worker(tmp_path, bootstrap, "samples", "scores", "scorers", "aggregator", command="aggregate")
    try:
        agent = await make_agent(
            sim.url,
            sampling={"rate": 1.0},
            scoring={"enabled": False},
            kafka={
                "enabled": True,
                "bootstrap_servers": [bootstrap],
                "samples_topic": "samples",
                "scores_topic": "scores",
                "linger_ms": 5,
            },
        )

        def split() -> bool:
            a, b = (set(w.health().get("assigned", [])) for w in workers)
            return bool(a) and bool(b) and not (a & b) and len(a | b) == 2

        await until(split, 40, "both workers own one partition each", workers)

        # Phase 1, no failure: exactly once, in the metrics and on the topic.
        n1 = 40
        assert set(await send(agent, [f"p1-{i}" for i in range(n1)])) == {200}
        await until(lambda: sum(w.checks() for w in workers) >= n1, 30, f"{n1} samples scored", workers)
        await asyncio.sleep(1.0)
        per_worker = [w.checks() for w in workers]
        assert sum(per_worker) == n1, per_worker
        assert all(c > 0 for c in per_worker), f"both workers took a share: {per_worker}"
        scored = checks_of(read_topic(bootstrap, "scores", expect=n1 * 4))
        assert len(scored) == n1 and len({s["sample_id"] for s in scored}) == n1

        # Phase 2: SIGKILL one worker while samples flow, then restart it.
        n2 = 120
        victim, survivor = workers
        before_kill: dict[str, float] = {}

        async def kill_midway() -> None:
            await asyncio.sleep(1.0)
            before_kill["checks"] = await asyncio.to_thread(victim.checks)
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait(5)

        statuses, _ = await asyncio.gather(send(agent, [f"p2-{i}" for i in range(n2)], rate=40), kill_midway())
        assert set(statuses) == {200}
        restarted = start_worker(tmp_path, bootstrap, "samples", "scores", "scorers", "w1b")
        live = [survivor, restarted]
        workers.append(restarted)
        n = n1 + n2
        ids_sent = {f"p1-{i}" for i in range(n1)} | {f"p2-{i}" for i in range(n2)}

        def all_scored() -> bool:
            return (
                len(
                    {
                        s["sample_id"]
                        for s in checks_of(read_topic(bootstrap, "scores", expect=n * 4, timeout=5, idle=0.5))
                    }
                )
                >= n
            )

        await until(all_scored, 60, f"every one of {n} samples scored after the kill", live)
        await until(lambda: all(w.health().get("assigned") for w in live), 30, "the restarted worker rejoined", live)
        await asyncio.sleep(1.5)

        scores = checks_of(read_topic(bootstrap, "scores", expect=n * 4))
        on_topic = [Sample.from_json(r.value) for r in read_topic(bootstrap, "samples", expect=n)]
        # One sample per call, each with its own id; the client's x-request-id rides along.
        assert {s.client_request_id for s in on_topic} == ids_sent
        sample_ids = {s.id for s in on_topic}
        assert len(sample_ids) == n
        # At least once: every sample has a score for the check, none is missing ...
        assert {s["sample_id"] for s in scores} == sample_ids
        # ... and after dedupe by (sample_id, check) there is exactly one per sample.
        assert len({(s["sample_id"], s["check"]) for s in scores}) == n
        # Duplicates can only be the killed worker's last published-but-uncommitted batch, each
        # re-scored once by another worker; a live worker never scores a sample twice itself.
        per_id = Counter(s["sample_id"] for s in scores)
        dups = {sid for sid, c in per_id.items() if c > 1}
        assert all(per_id[sid] == 2 for sid in dups)
        for sid in dups:
            assert victim.id in {s["_scorer"] for s in scores if s["sample_id"] == sid}, (
                f"{sid} duplicated without the kill"
            )
        assert len(dups) <= 128, "at most one batch (max_poll_records) is re-scored"
        # Metrics: each live worker counts exactly the scores it published; the killed worker's
        # counters died with it (Prometheus keeps what it scraped: `increase()` handles the reset).
        by_scorer = Counter(s["_scorer"] for s in scores)
        for w in live:
            assert w.checks() == by_scorer[w.id], (w.id, w.checks(), by_scorer)
        assert by_scorer[victim.id] >= before_kill["checks"]
        assert sum(w.checks() for w in live) + by_scorer[victim.id] == n + len(dups)
        # Exactly once in the aggregated metrics, kill or not.
        await until(lambda: aggregator.checks() >= n, 30, "the aggregator counted every sample", [aggregator])
        await asyncio.sleep(1.0)
        assert aggregator.checks() == n, (aggregator.checks(), n, len(dups))
        assert aggregator.consumed("duplicate_score") >= len(dups)
    finally:
        stop_workers(workers + [aggregator])
    for w in workers[1:]:
        assert w.proc.returncode == 0, f"SIGTERM stops a worker cleanly:\n{w.log_tail()}"


# --- (c) broker outage while traffic flows ---------------------------------------------------


async def test_broker_outage_costs_counted_samples_not_requests(kafka_broker, make_agent, sim):
    bootstrap = kafka_broker.bootstrap
    create_topics([bootstrap], {"samples": 2})
    agent = await make_agent(
        sim.url,
        sampling={"rate": 1.0},
        kafka={
            "enabled": True,
            "bootstrap_servers": [bootstrap],
            "samples_topic": "samples",
            "linger_ms": 5,
            "max_buffered": 20,
            "delivery_timeout_ms": 3000,
        },
    )
    assert set(await send(agent, [f"a-{i}" for i in range(20)])) == {200}
    await wait_until(lambda: agent.metrics.group(KafkaMetrics).kafka_produced._value.get() == 20, timeout=15)

    kafka_broker.stop()
    statuses = await send(agent, [f"b-{i}" for i in range(150)], rate=100)
    assert statuses == [200] * 150, "the proxy keeps serving while Kafka is down"
    await wait_until(
        lambda: agent.metrics.group(KafkaMetrics).kafka_dropped.labels(reason="buffer_full")._value.get() > 0,
        timeout=10,
    )
    await wait_until(
        lambda: agent.metrics.group(KafkaMetrics).kafka_dropped.labels(reason="delivery_failed")._value.get() > 0,
        timeout=15,
    )
    metrics = await scrape(agent)
    assert metric(metrics, "llmwatch_kafka_dropped_total") > 0
    assert metric(metrics, "llmwatch_kafka_buffer_depth") <= 20

    kafka_broker.start()  # same port, empty storage: the topic has to be created again
    await asyncio.to_thread(create_topics, [bootstrap], {"samples": 2})
    produced = agent.metrics.group(KafkaMetrics).kafka_produced._value.get()
    ids = [f"c-{i}" for i in range(20)]

    async def resumed() -> bool:
        await send(agent, ids)
        return agent.metrics.group(KafkaMetrics).kafka_produced._value.get() > produced

    deadline = time.monotonic() + 30
    while not await resumed():
        assert time.monotonic() < deadline, "delivery did not resume after the broker came back"
        await asyncio.sleep(0.5)
    arrived = {
        Sample.from_json(r.value).client_request_id for r in await asyncio.to_thread(read_topic, bootstrap, "samples")
    }
    assert arrived & set(ids), "new samples arrive on the topic after the restart"
