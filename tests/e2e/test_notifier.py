"""WebhookNotifier against a real local HTTP receiver, and against a real Alertmanager's webhook."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from helpers.ports import dead_address, free_port
from helpers.upstreams import serve

from llmwatch.collectors.exporters.webhook import AlertSpec, WebhookNotifier, alert_key, fingerprint

TOP_LEVEL_KEYS = {
    "version",
    "groupKey",
    "status",
    "receiver",
    "groupLabels",
    "commonLabels",
    "commonAnnotations",
    "externalURL",
    "alerts",
}
ALERT_KEYS = {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
ZERO_TIME = "0001-01-01T00:00:00Z"


class Receiver:
    """Records every POST; can be told to answer the next N with an error status."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.attempts: list[float] = []
        self.fail_next = 0
        self.fail_status = 503
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.attempts.append(time.monotonic())
        if self.fail_next > 0:
            self.fail_next -= 1
            return web.Response(status=self.fail_status, text="try later")
        self.payloads.append(body)
        return web.Response(status=200)

    async def wait_for(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.payloads) < n:
            assert time.monotonic() < deadline, f"receiver got {len(self.payloads)} payloads, expected {n}"
            await asyncio.sleep(0.01)
        return self.payloads


@pytest.fixture
async def receiver():
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/hook", rec.handle)
    runner, url = await serve(app)
    rec.url = f"{url}/hook"
    yield rec
    await runner.cleanup()


@pytest.fixture
async def make_notifier():
    made: list[WebhookNotifier] = []

    def factory(url: str, **kwargs: Any) -> WebhookNotifier:
        kwargs.setdefault("backoff_s", 0.01)
        n = WebhookNotifier(url, **kwargs)
        made.append(n)
        return n

    yield factory
    for n in made:
        await n.close(timeout_s=1.0)


def drift_alert(version: str = "B", signal: str = "latency_ms", p: str = "0.0012") -> AlertSpec:
    labels = {"alertname": "LLMWatchDriftDetected", "severity": "warning", "signal": signal, "model_version": version}
    annotations = {
        "summary": f"Drift on {signal} for model_version {version}",
        "description": f"Holm-adjusted p-value {p}",
        "runbook_url": "https://github.com/llmwatch/llmwatch/blob/main/docs/runbooks.md#llmwatchdriftdetected",
    }
    return AlertSpec(labels=labels, annotations=annotations)


def active(*specs: AlertSpec) -> dict[tuple, AlertSpec]:
    return {alert_key(s.labels): s for s in specs}


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def assert_webhook_shape(payload: dict[str, Any]) -> None:
    assert TOP_LEVEL_KEYS <= payload.keys()
    assert payload["version"] == "4"
    assert payload["status"] in ("firing", "resolved")
    assert isinstance(payload["groupKey"], str) and payload["groupKey"]
    for key in ("groupLabels", "commonLabels", "commonAnnotations"):
        assert isinstance(payload[key], dict)
    assert isinstance(payload["alerts"], list) and payload["alerts"]
    for alert in payload["alerts"]:
        assert ALERT_KEYS <= alert.keys()
        assert alert["status"] in ("firing", "resolved")
        assert alert["labels"]["alertname"]
        assert len(alert["fingerprint"]) == 16 and int(alert["fingerprint"], 16) >= 0
        parse_time(alert["startsAt"])
        if alert["status"] == "firing":
            assert alert["endsAt"] == ZERO_TIME
        else:
            assert parse_time(alert["endsAt"]) >= parse_time(alert["startsAt"])


async def test_payload_is_an_alertmanager_webhook(receiver, make_notifier):
    n = make_notifier(receiver.url, generator_url="http://llmwatch:9464/metrics", external_url="http://llmwatch:9464")
    spec = drift_alert()
    before = datetime.now(timezone.utc)
    await n.update(active(spec))
    (payload,) = await receiver.wait_for(1)
    assert_webhook_shape(payload)
    assert payload["status"] == "firing"
    assert payload["receiver"] == "llmwatch"
    assert payload["externalURL"] == "http://llmwatch:9464"
    assert payload["groupKey"] == '{}:{alertname="LLMWatchDriftDetected"}'
    assert payload["groupLabels"] == {"alertname": "LLMWatchDriftDetected"}
    assert payload["commonLabels"] == dict(spec.labels)
    assert payload["commonAnnotations"] == dict(spec.annotations)
    (alert,) = payload["alerts"]
    assert alert["labels"] == dict(spec.labels) and alert["annotations"] == dict(spec.annotations)
    assert alert["generatorURL"] == "http://llmwatch:9464/metrics"
    assert alert["fingerprint"] == fingerprint(spec.labels)
    assert before - timedelta(seconds=1) <= parse_time(alert["startsAt"]) <= datetime.now(timezone.utc)
    assert n.stats.sent == 1 and n.stats.failed == 0


async def test_common_labels_are_those_all_alerts_share(receiver, make_notifier):
    n = make_notifier(receiver.url)
    await n.update(active(drift_alert("B", "latency_ms"), drift_alert("B", "ttft_ms", p="0.03")))
    (payload,) = await receiver.wait_for(1)
    assert len(payload["alerts"]) == 2
    assert payload["commonLabels"] == {
        "alertname": "LLMWatchDriftDetected",
        "severity": "warning",
        "model_version": "B",
    }
    assert set(payload["commonAnnotations"]) == {"runbook_url"}
    assert len({a["fingerprint"] for a in payload["alerts"]}) == 2


async def test_firing_then_resolved(receiver, make_notifier):
    n = make_notifier(receiver.url)
    spec = drift_alert()
    await n.update(active(spec))
    await receiver.wait_for(1)
    await n.update({})
    firing, resolved = await receiver.wait_for(2)
    assert_webhook_shape(resolved)
    assert resolved["status"] == "resolved"
    (fa,), (ra,) = firing["alerts"], resolved["alerts"]
    assert ra["status"] == "resolved"
    assert ra["fingerprint"] == fa["fingerprint"] and ra["startsAt"] == fa["startsAt"]
    assert parse_time(ra["endsAt"]) >= parse_time(fa["startsAt"])
    # Nothing left to say: more empty updates send nothing.
    await n.update({})
    assert await n.flush()
    assert len(receiver.payloads) == 2


async def test_unchanged_set_is_not_resent_within_the_repeat_interval(receiver, make_notifier):
    n = make_notifier(receiver.url, repeat_interval_s=3600)
    await n.update(active(drift_alert()))
    await receiver.wait_for(1)
    for p in ("0.0011", "0.0009", "0.0010"):
        # A refreshed annotation alone is no reason to notify again.
        await n.update(active(drift_alert(p=p)))
    assert await n.flush()
    assert len(receiver.payloads) == 1


async def test_only_the_new_alert_is_sent_when_one_joins(receiver, make_notifier):
    n = make_notifier(receiver.url)
    a, b = drift_alert("B", "latency_ms"), drift_alert("B", "cost_usd")
    await n.update(active(a))
    await receiver.wait_for(1)
    await n.update(active(a, b))
    second = (await receiver.wait_for(2))[1]
    assert [x["labels"]["signal"] for x in second["alerts"]] == ["cost_usd"]


async def test_still_firing_alerts_are_resent_after_the_repeat_interval(receiver, make_notifier):
    n = make_notifier(receiver.url, repeat_interval_s=0.3)
    spec = drift_alert()
    await n.update(active(spec))
    await receiver.wait_for(1)
    await n.update(active(spec))
    assert await n.flush()
    assert len(receiver.payloads) == 1
    await asyncio.sleep(0.35)
    await n.update(active(spec))
    first, again = await receiver.wait_for(2)
    assert again["status"] == "firing"
    assert again["alerts"][0]["startsAt"] == first["alerts"][0]["startsAt"]
    await n.update(active(spec))
    assert await n.flush()
    assert len(receiver.payloads) == 2


@pytest.mark.parametrize("status", [503, 429, 500])
async def test_retries_with_backoff_then_succeeds(receiver, make_notifier, status):
    receiver.fail_next, receiver.fail_status = 2, status
    events: list[str] = []
    n = make_notifier(receiver.url, max_retries=5, backoff_s=0.05, on_event=events.append)
    await n.update(active(drift_alert()))
    (payload,) = await receiver.wait_for(1)
    assert_webhook_shape(payload)
    assert len(receiver.attempts) == 3
    gaps = [b - a for a, b in zip(receiver.attempts, receiver.attempts[1:])]
    # Equal jitter: each wait is at least half of 0.05 s, then of 0.1 s.
    assert gaps[0] >= 0.025 and gaps[1] >= 0.05, gaps
    assert (n.stats.sent, n.stats.retries, n.stats.failed) == (1, 2, 0)
    assert events == ["retries", "retries", "sent"]


async def test_gives_up_after_max_retries_counts_it_and_tries_again_later(receiver, make_notifier):
    receiver.fail_next = 1000
    events: list[str] = []
    n = make_notifier(receiver.url, max_retries=2, on_event=events.append)
    spec = drift_alert()
    await n.update(active(spec))
    assert await n.flush()
    assert len(receiver.attempts) == 3 and receiver.payloads == []
    assert (n.stats.sent, n.stats.retries, n.stats.failed) == (0, 2, 1)
    assert events[-1] == "failed"
    assert n.stats.last_error == "HTTP 503"
    # Not delivered, so still due: the next update tries again instead of waiting an hour.
    receiver.fail_next = 0
    await n.update(active(spec))
    (payload,) = await receiver.wait_for(1)
    assert payload["alerts"][0]["labels"] == dict(spec.labels)
    assert n.stats.sent == 1


async def test_a_client_error_is_not_retried(receiver, make_notifier):
    receiver.fail_next, receiver.fail_status = 1, 400
    n = make_notifier(receiver.url, max_retries=5)
    await n.update(active(drift_alert()))
    assert await n.flush()
    assert len(receiver.attempts) == 1
    assert (n.stats.retries, n.stats.failed) == (0, 1)


async def test_receiver_down_neither_raises_nor_blocks(make_notifier):
    # Backoff waits alone add up to at least 0.1 + 0.2 + 0.4 s, far above what update may take.
    n = make_notifier(f"http://{dead_address()}/hook", max_retries=3, backoff_s=0.2)
    firing = active(*(drift_alert(signal=s) for s in ("latency_ms", "ttft_ms", "cost_usd")))
    for _ in range(3):
        await n.update(firing)
    # Delivery (three attempts, 0.7 s of backoff) runs aside: nothing of it had concluded when the
    # updates returned, which they could not have done had they waited for it.
    assert (n.stats.sent, n.stats.failed, n.stats.retries) == (0, 0, 0)
    assert await n.flush(timeout_s=10)
    assert n.stats.sent == 0 and n.stats.failed == 1
    assert n.stats.retries == 3
    assert "Connect" in (n.stats.last_error or "")


async def test_hanging_receiver_times_out_and_close_does_not_wait_forever(make_notifier):
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accept, read nothing, answer nothing

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        n = make_notifier(f"http://127.0.0.1:{port}/hook", timeout_s=0.4, max_retries=10)
        await n.update(active(drift_alert()))
        assert (n.stats.retries, n.stats.sent) == (0, 0), "update() did not wait for the first attempt's 0.4 s timeout"
        deadline = time.monotonic() + 10
        while not (n.stats.retries >= 1 and "Timeout" in (n.stats.last_error or "")):  # the first attempt timed out
            assert time.monotonic() < deadline, f"no timed-out attempt: {n.stats}"
            await asyncio.sleep(0.02)
        # Bounded by its timeout: a close that waited for the hanging receiver would hit this deadline.
        await asyncio.wait_for(n.close(timeout_s=0.1), 30)
        assert n.stats.dropped == 1 and n.stats.sent == 0
        # Closed: later updates are ignored, quietly.
        await n.update(active(drift_alert(signal="ttft_ms")))
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()


async def test_bad_input_never_raises(receiver, make_notifier):
    n = make_notifier(receiver.url)
    no_name = AlertSpec(labels={"severity": "warning"})
    await n.update({("x",): no_name})
    await n.update(None)  # type: ignore[arg-type]
    await n.update(active(drift_alert()))
    (payload,) = await receiver.wait_for(1)
    assert [a["labels"]["alertname"] for a in payload["alerts"]] == ["LLMWatchDriftDetected"]


def test_fingerprint_is_stable_and_order_independent():
    a = fingerprint({"alertname": "X", "model_version": "B", "signal": "latency_ms"})
    b = fingerprint({"signal": "latency_ms", "alertname": "X", "model_version": "B"})
    assert a == b and len(a) == 16
    assert a != fingerprint({"alertname": "X", "model_version": "C", "signal": "latency_ms"})


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        WebhookNotifier("http://127.0.0.1:1/", repeat_interval_s=0)
    with pytest.raises(ValueError):
        WebhookNotifier("http://127.0.0.1:1/", max_retries=-1)


# ------------------------------------------------------------------------ real Alertmanager


def alertmanager_binary() -> str:
    path = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if path is None:
        pytest.fail("Alertmanager is not installed (prometheus-alertmanager package); run `bash tests/services.sh`")
    return path


@pytest.fixture
async def alertmanager(tmp_path: Path, receiver: Receiver):
    port = free_port()  # Alertmanager cannot bind port 0 and report it
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        f"""
route:
  receiver: hook
  group_by: [alertname]
  group_wait: 50ms
  group_interval: 500ms
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {receiver.url}
        send_resolved: true
"""
    )
    log = (tmp_path / "alertmanager.log").open("w")
    proc = subprocess.Popen(
        [
            alertmanager_binary(),
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 20
            while True:
                assert proc.poll() is None, f"alertmanager exited: {(tmp_path / 'alertmanager.log').read_text()}"
                try:
                    async with session.get(f"{base}/-/ready") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert time.monotonic() < deadline, "alertmanager did not become ready"
                await asyncio.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def test_payload_matches_what_alertmanager_sends(alertmanager, receiver, make_notifier):
    spec = drift_alert()
    starts = datetime.now(timezone.utc).replace(microsecond=0)
    am_alert = {
        "labels": dict(spec.labels),
        "annotations": dict(spec.annotations),
        "startsAt": starts.isoformat().replace("+00:00", "Z"),
        "generatorURL": "http://llmwatch:9464/metrics",
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{alertmanager}/api/v2/alerts", json=[am_alert]) as resp:
            assert resp.status == 200, await resp.text()
        (am_firing,) = await receiver.wait_for(1, timeout=15)
        ended = dict(am_alert, endsAt=datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"))
        async with session.post(f"{alertmanager}/api/v2/alerts", json=[ended]) as resp:
            assert resp.status == 200, await resp.text()
        am_resolved = (await receiver.wait_for(2, timeout=15))[1]

    n = make_notifier(receiver.url, generator_url="http://llmwatch:9464/metrics")
    await n.update(active(spec))
    ours_firing = (await receiver.wait_for(3))[2]
    await n.update({})
    ours_resolved = (await receiver.wait_for(4))[3]

    for am, ours, status in ((am_firing, ours_firing, "firing"), (am_resolved, ours_resolved, "resolved")):
        assert_webhook_shape(am)
        assert_webhook_shape(ours)
        assert set(ours) == set(am), (sorted(ours), sorted(am))
        assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in am.items()}
        assert am["status"] == ours["status"] == status
        (am_a,), (our_a,) = am["alerts"], ours["alerts"]
        assert set(our_a) == set(am_a), (sorted(our_a), sorted(am_a))
        assert {k: type(v) for k, v in our_a.items()} == {k: type(v) for k, v in am_a.items()}
        # Same labels, same identity, same grouping: a receiver cannot tell us apart.
        assert our_a["fingerprint"] == am_a["fingerprint"]
        assert ours["groupKey"] == am["groupKey"]
        assert ours["version"] == am["version"]
        assert our_a["labels"] == am_a["labels"] and our_a["annotations"] == am_a["annotations"]
        assert ours["groupLabels"] == am["groupLabels"] and ours["commonLabels"] == am["commonLabels"]
    assert am_firing["alerts"][0]["endsAt"] == ours_firing["alerts"][0]["endsAt"] == ZERO_TIME


async def test_the_urls_secret_path_is_in_no_error_or_log_line_when_redirects_loop(make_notifier, monkeypatch):
    # A chat hook's URL is its secret (https://hooks.example/services/T0/B0/<token>): logs show
    # `scheme://host/…`. aiohttp's TooManyRedirects reads "..., url='<the whole URL>'", and that
    # text went into stats.last_error and the webhook_attempt_failed / webhook_gave_up lines.
    from helpers.loglines import LogLines

    from llmwatch.collectors.exporters import webhook

    lines = LogLines()
    monkeypatch.setattr(webhook, "log", lines)
    secret = "T0ZZ-B0QQ-Xtok3n-9f8e7d"

    async def loop_back(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(str(request.rel_url))

    app = web.Application()
    app.router.add_post("/services/{rest:.*}", loop_back)
    runner, url = await serve(app)
    try:
        n = make_notifier(f"{url}/services/{secret}?key={secret}", max_retries=1)
        await n.update(active(drift_alert()))
        assert await n.flush(timeout_s=10)
    finally:
        await runner.cleanup()
    assert n.stats.failed == 1
    assert "TooManyRedirects" in (n.stats.last_error or ""), n.stats.last_error
    assert secret not in (n.stats.last_error or "")
    assert {"webhook_attempt_failed", "webhook_gave_up"} <= set(lines.events)
    assert secret not in repr(lines.lines)
