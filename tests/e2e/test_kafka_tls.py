"""Kafka over TLS, end to end, against a real broker.

tansu (tests/helpers/kafka_broker.py) speaks plaintext only, so a small TLS terminator stands in
front of it: an asyncio server with a certificate signed by a throwaway CA (made here with the
`openssl` CLI) that forwards bytes to the broker. tansu is started with its advertised listener
set to the terminator's port, so the metadata it returns sends every follow-up connection (the
partition leader's, the group coordinator's) through TLS as well: the client is never given the
plaintext port.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import orjson
import pytest
import structlog
from helpers.kafka_broker import Broker, broker_binary
from helpers.kafka_topics import read_topic

from llmwatch.agent.components import load_config
from llmwatch.agent.processes.kafka_scorer import run_scorer
from llmwatch.collectors.exporters.kafka import (
    KafkaMetrics,
    KafkaSampleSink,
    KafkaSection,
    connection_settings,
    create_topics,
)
from llmwatch.core.metrics import Metrics
from llmwatch.core.records import Sample


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key)."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", key.name, "-out", cert.name, "-days", "1", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip
    return cert, key


def make_server_cert(folder: Path, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 signed by `ca`: (certificate, key)."""
    (folder / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
        cwd=folder,
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", ca[0].name, "-CAkey", ca[1].name, "-CAcreateserial",
        "-out", "server.pem", "-days", "1", "-extfile", "server.ext",
        cwd=folder,
    )  # fmt: skip
    return folder / "server.pem", folder / "server.key"


class TlsTerminator:
    """TLS in front of a plaintext port: an asyncio server on its own thread and loop."""

    def __init__(self, cert: Path, key: Path, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.sessions = 0  # TLS handshakes completed (asyncio calls the handler after the handshake)
        self._tasks: set[asyncio.Task] = set()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-terminator", daemon=True)
        self._thread.start()
        start = asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=context)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.sessions += 1
        try:
            broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._pipe(client_r, broker_w), self._pipe(broker_r, client_w))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[tuple[Broker, TlsTerminator, Path]]:
    """tansu behind a TLS terminator; yields (broker, terminator, the CA's certificate)."""
    certs = tmp_path / "certs"
    certs.mkdir()
    ca = make_ca(certs, "ca")
    server = make_server_cert(certs, ca)
    broker = Broker(broker_binary(), tmp_path)
    terminator = TlsTerminator(*server, upstream_port=broker.port)
    broker.advertised_port = terminator.port  # metadata sends clients back through TLS
    try:
        broker.start()
        yield broker, terminator, ca[0]
    finally:
        broker.stop()
        terminator.close()


def sample(i: int) -> Sample:
    return Sample(
        id=f"tls-{i}",
        timestamp=time.time(),
        model="m",
        status=200,
        latency_ms=3.0,
        request={"messages": [{"role": "user", "content": f"q{i}"}]},
        response={"choices": [{"message": {"content": f"a{i}"}}]},
    )


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.02)


def test_samples_go_through_the_sink_over_tls_and_read_back(tls_broker) -> None:
    _, terminator, ca = tls_broker
    cfg = KafkaSection(
        bootstrap_servers=[f"127.0.0.1:{terminator.port}"],
        samples_topic="samples",
        security_protocol="SSL",
        ssl_cafile=ca,
        linger_ms=5,
    )
    create_topics(cfg, {"samples": 2})  # the topic admin, over TLS too
    assert terminator.sessions >= 1
    metrics = Metrics()
    sink = KafkaSampleSink(cfg, metrics)
    sent = [sample(i) for i in range(50)]
    try:
        assert sink.write(sent) == 0
        wait_for(lambda: sink.outstanding == 0, 30, "every sample acknowledged")
    finally:
        sink.close()
    kafka = metrics.group(KafkaMetrics)
    assert kafka.kafka_produced._value.get() == len(sent)
    records = read_topic("", "samples", expect=len(sent), connection=connection_settings(cfg))
    assert sorted(Sample.from_json(r.value).id for r in records) == sorted(s.id for s in sent)


def test_a_scorer_worker_consumes_in_its_group_and_publishes_scores_over_tls(tls_broker) -> None:
    # A consumer group adds the coordinator connection (FindCoordinator, JoinGroup, commits): it
    # too comes from the broker's metadata, hence through the terminator.
    _, terminator, ca = tls_broker
    tls = {"security_protocol": "SSL", "ssl_cafile": str(ca), "bootstrap_servers": [f"127.0.0.1:{terminator.port}"]}
    cfg = load_config(
        None,
        overrides={
            "metrics_listen": "127.0.0.1:0",
            "scoring": {"embeddings": False},
            "kafka": {**tls, "samples_topic": "in", "scores_topic": "out", "group_id": "tls-group"},
        },
        environ={},
    )
    create_topics(cfg.kafka, {"in": 1, "out": 1})
    sink = KafkaSampleSink(cfg.kafka, Metrics())
    try:
        sink.write([sample(i) for i in range(5)])
        wait_for(lambda: sink.outstanding == 0, 30, "every sample acknowledged")
    finally:
        sink.close()
    stop = threading.Event()
    worker = threading.Thread(target=run_scorer, args=(cfg,), kwargs={"stop": stop, "worker_id": "w-tls"}, daemon=True)
    worker.start()
    try:
        scores = read_topic("", "out", timeout=30, idle=2.0, connection=connection_settings(cfg.kafka))
    finally:
        stop.set()
        worker.join(15)
    assert not worker.is_alive(), "the worker stops when asked"
    assert {orjson.loads(r.value)["sample_id"] for r in scores} == {f"tls-{i}" for i in range(5)}


def test_a_broker_whose_certificate_the_ca_does_not_sign_costs_counted_samples_never_the_caller(
    tls_broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, terminator, _ = tls_broker
    other = tmp_path / "other-ca"
    other.mkdir()
    wrong_ca, _ = make_ca(other, "other-ca")
    cfg = KafkaSection(
        bootstrap_servers=[f"127.0.0.1:{terminator.port}"],
        samples_topic="samples",
        security_protocol="SSL",
        ssl_cafile=wrong_ca,
        delivery_timeout_ms=1000,
        max_buffered=20,
    )
    metrics = Metrics()
    kafka = metrics.group(KafkaMetrics)
    with structlog.testing.capture_logs() as logs:
        sink = KafkaSampleSink(cfg, metrics)
        try:
            # The caller (the proxy's pipeline) only appends to a bounded buffer: nothing refused
            # but what exceeds it, and the connection is attempted on the sink's own thread.
            assert sink.write([sample(i) for i in range(25)]) == 5
            assert kafka.kafka_dropped.labels(reason="buffer_full")._value.get() == 5
            wait_for(
                lambda: kafka.kafka_dropped.labels(reason="delivery_timeout")._value.get() == 20,
                60,
                "the buffered samples given up after delivery_timeout_ms",
            )
            assert sink.outstanding == 0
            assert not sink.connected
            assert terminator.sessions == 0, "no TLS session was ever established"
        finally:
            sink.close(timeout=1)
    assert kafka.kafka_produced._value.get() == 0
    unreachable = [e for e in logs if e["event"] == "kafka_unreachable"]
    assert unreachable and unreachable[0]["security_protocol"] == "SSL"
    # Logged once, then at most once per 10 s while it keeps failing: bounded, not once per attempt.
    assert len(unreachable) <= 2
    # kafka-python's own (rate-limited) record says why: the certificate, not the network.
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
