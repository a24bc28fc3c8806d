"""The Kafka consumer workers' shared shutdown (`llmwatch scorer`, `aggregate`, `archive`): `close_worker`."""

from __future__ import annotations

import signal
import threading

import structlog

from llmwatch.collectors.exporters.kafka import close_worker


class Closing:
    def __init__(self, name: str, order: list[str], fail: bool = False) -> None:
        self.name, self.order, self.fail = name, order, fail

    def close(self) -> None:
        self.order.append(self.name)
        if self.fail:
            raise ConnectionError("broker gone")


def test_everything_closes_in_order_even_when_the_consumer_and_producer_fail(monkeypatch) -> None:
    order: list[str] = []
    ready = threading.Event()
    ready.set()
    mine = lambda *_: None  # noqa: E731 - the handler the worker put in place
    before = signal.signal(signal.SIGUSR1, mine)
    try:
        previous = {signal.SIGUSR1: before}
        with structlog.testing.capture_logs() as logs:
            close_worker(
                ready,
                Closing("consumer", order, fail=True),
                Closing("server", order),
                previous,
                also=[("producer", Closing("producer", order, fail=True).close)],
            )
        assert order == ["consumer", "producer", "server"]  # LeaveGroup first, the metrics port last
        assert not ready.is_set()
        assert signal.getsignal(signal.SIGUSR1) is before  # the worker's handler is gone
        assert [e["event"] for e in logs] == ["consumer_close_failed", "producer_close_failed"]
        assert all("broker gone" in e["error"] for e in logs)
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_a_worker_that_never_connected_still_frees_its_port() -> None:
    order: list[str] = []
    close_worker(threading.Event(), None, Closing("server", order), {})
    assert order == ["server"]


def test_a_metrics_server_that_fails_to_close_still_gives_the_signal_handlers_back(monkeypatch) -> None:
    order: list[str] = []
    ready = threading.Event()
    before = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        with structlog.testing.capture_logs() as logs:
            close_worker(
                ready, Closing("consumer", order), Closing("server", order, fail=True), {signal.SIGUSR1: before}
            )
        assert order == ["consumer", "server"]
        assert signal.getsignal(signal.SIGUSR1) is before
        assert [e["event"] for e in logs] == ["metrics_server_close_failed"]
    finally:
        signal.signal(signal.SIGUSR1, before)
