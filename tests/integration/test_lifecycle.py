"""The scorer never stops silently and shutdown is bounded: real processes, real signals, a real full disk.

Each process test starts `llmwatch proxy` (and the simulator upstream) as subprocesses on port 0,
reads the ports they bound from their logs, and signals only the PIDs it started (or, for the
scorer child, the PID the proxy started for it).
"""

from __future__ import annotations

import concurrent.futures
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai SDK ships with
import orjson
import pytest
import structlog.testing
from helpers.agents import metric, proxy_url, scrape, wait_until
from helpers.ports import dead_address
from helpers.procs import Proc, agent_started, proxy_argv, simulator_url, start_simulator
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmwatch.collectors.exporters.kafka import KafkaMetrics
from llmwatch.core.jsonio import JsonlWriteError, JsonlWriter, iter_jsonl
from llmwatch.core.records import RecordError, Sample

RULES_ONLY = {"LLMWATCH_SCORING__ENABLED": "true", "LLMWATCH_SCORING__EMBEDDINGS": "false"}


# --- helpers: processes that report what they bound ----------------------------------------


def children(pid: int) -> dict[int, str]:
    """{pid: command line} of the live processes whose parent is `pid` (a /proc scan)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found[int(entry)] = cmdline
    return found


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_for(predicate, timeout: float, what: str, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(poll)


def scorer_child(proxy: Proc, timeout: float = 30.0) -> int:
    """The PID of the scorer process the proxy spawned (not multiprocessing's resource tracker)."""
    found: list[int] = []

    def look() -> bool:
        found[:] = [pid for pid, cmd in children(proxy.pid).items() if "spawn_main" in cmd]
        return bool(found)

    wait_for(look, timeout, "the proxy's scorer child process", poll=0.005)
    return found[0]


@pytest.fixture
def simulator():
    sim = start_simulator("--latency-scale", "0.01", "--seed", "1")
    try:
        yield simulator_url(sim)
    finally:
        if sim.popen.poll() is None:
            os.kill(sim.pid, signal.SIGTERM)
        sim.stop()


@pytest.fixture
def start_proxy(tmp_path: Path):
    started: list[Proc] = []

    def start(upstream: str, data_dir: Path | None = None, **env: str) -> tuple[Proc, str, str]:
        full_env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "LLMWATCH_SAMPLING__RATE": "1.0",
            "LLMWATCH_LOGGING__LEVEL": "info",
            **RULES_ONLY,
            **env,
        }
        proc = Proc(proxy_argv(upstream, data_dir or tmp_path / "data"), env=full_env)
        started.append(proc)
        return proc, *_ports(proc)

    yield start
    for proc in started:
        proc.stop()


def _ports(proc: Proc) -> tuple[str, str]:
    record = agent_started(proc)
    return f"http://127.0.0.1:{record['proxy_port']}", f"http://127.0.0.1:{record['metrics_port']}"


def chat(proxy: str, text: str = "How do I bake bread?", seed: int = 0) -> None:
    body = {"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": text}], "seed": seed}
    r = httpx.post(
        f"{proxy}/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-lifecycle-test"}, timeout=30
    )
    assert r.status_code == 200, r.text


def scrape_url(metrics_url: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(httpx.get(f"{metrics_url}/metrics", timeout=5).text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def wait_metric(metrics_url: str, name: str, at_least: float, timeout: float = 30.0, **labels: str) -> dict:
    last: dict = {}

    def reached() -> bool:
        nonlocal last
        last = scrape_url(metrics_url)
        return metric(last, name, **labels) >= at_least

    wait_for(reached, timeout, f"{name}{labels} >= {at_least} (last {metric(last, name, **labels)})", poll=0.1)
    return last


def records(directory: Path) -> list[dict]:
    """Every record of every .jsonl file, read strictly: any incomplete line fails the test."""
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), f"{path} ends with a torn line"
        out.extend(orjson.loads(line) for line in data.splitlines() if line.strip())
    return out


# --- writers and readers ---------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    """An 8 MiB tmpfs: a disk that really fills up, without touching the real one."""
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Write a filler file until the disk is full; deleting it gives the space back."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as fh:
        for _ in range(8 * 1024 * 1024 // len(chunk) + 16):
            try:
                fh.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        else:
            raise AssertionError("the 8 MiB disk never filled up")
        # Whatever is left is smaller than a chunk: take that too, byte by page.
        for _ in range(64):
            try:
                fh.write(b"\0" * 4096)
            except OSError:
                break
    return filler


def line(i: int, size: int = 2000) -> bytes:
    return orjson.dumps({"i": i, "pad": "x" * size})


def test_a_writer_on_a_full_disk_keeps_whole_lines_counts_the_loss_and_resumes_when_space_returns(small_disk: Path):
    writer = JsonlWriter(small_disk / "scores", "scores")
    assert writer.write_lines(line(i) for i in range(3)) == 3
    filler = fill(small_disk)
    with pytest.raises(JsonlWriteError) as err:
        writer.write_lines(line(i) for i in range(3, 13))
    assert err.value.errno == errno.ENOSPC
    assert err.value.written + err.value.lost == 10 and err.value.lost > 0
    kept = records(small_disk / "scores")
    assert [r["i"] for r in kept] == list(range(3 + err.value.written)), "only whole lines, in order"
    filler.unlink()
    assert writer.write_lines(line(i) for i in range(100, 105)) == 5
    writer.close()
    assert [r["i"] for r in records(small_disk / "scores")][-5:] == list(range(100, 105))


def test_a_torn_last_line_is_skipped_with_a_warning_but_a_torn_line_in_the_middle_is_refused(tmp_path: Path):
    good = Sample(
        timestamp=datetime.now(timezone.utc), request={"model": "m"}, response={}, model="m", status=200, latency_ms=1.0
    ).to_json()
    torn_at_end = tmp_path / "end.jsonl"
    torn_at_end.write_bytes(good + b"\n" + good[: len(good) // 2])
    with structlog.testing.capture_logs() as logs:
        assert len(list(iter_jsonl(str(torn_at_end)))) == 1
    assert [(e["event"], e["file"], e["line"]) for e in logs] == [("torn_last_line_skipped", str(torn_at_end), 2)]
    torn_in_middle = tmp_path / "middle.jsonl"
    torn_in_middle.write_bytes(good + b"\n" + good[: len(good) // 2] + b"\n" + good + b"\n")
    with pytest.raises(RecordError, match=r"middle\.jsonl:2: not valid JSON"):
        list(iter_jsonl(str(torn_in_middle)))


# --- the scorer process: signals, parent death, shutdown -------------------------------------


def test_sigkill_of_the_proxy_takes_the_scorer_child_and_the_resource_tracker_with_it(simulator, start_proxy):
    proxy, _, _ = start_proxy(simulator)
    proxy.wait_for(r'"event": "scorer_ready"')
    family = children(proxy.pid)
    scorer = scorer_child(proxy)
    assert scorer in family and any("resource_tracker" in cmd for cmd in family.values()), family
    try:
        os.kill(proxy.pid, signal.SIGKILL)
        proxy.popen.wait(timeout=10)
        wait_for(
            lambda: not any(running(pid) for pid in family),
            15,
            f"the proxy's children {sorted(family)} exit after it was killed",
        )
    finally:
        for pid in family:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_while_the_scorer_is_behind_stops_in_bounded_time_and_records_the_backlog_as_errors(
    simulator, start_proxy, tmp_path: Path
):
    proxy, proxy_base, metrics_url = start_proxy(simulator, LLMWATCH_SCORING__SHUTDOWN_TIMEOUT_S="1")
    proxy.wait_for(r'"event": "scorer_ready"')
    scorer = scorer_child(proxy)
    # A scorer that reads nothing: its inbox pipe (64 KiB) fills up, as with a scorer far behind.
    os.kill(scorer, signal.SIGSTOP)
    try:
        n = 24
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: chat(proxy_base, "Summarise this. " + "lorem ipsum " * 800, seed=i), range(n)))
        wait_metric(metrics_url, "llmwatch_scoring_pending", n)
        os.kill(proxy.pid, signal.SIGTERM)
        assert proxy.popen.wait(timeout=30) == 0, proxy.output()
    finally:
        if running(scorer):
            os.kill(scorer, signal.SIGKILL)
    assert not running(scorer), "the stopped scorer was killed, not left behind"
    assert proxy.events("scorer_draining")[0]["samples"] == n
    assert proxy.events("scorer_unscored")[0] == {
        **proxy.events("scorer_unscored")[0],
        "samples": n,
        "reason": "shutdown",
    }
    scores = records(tmp_path / "data" / "scores")
    # One error per sample and per check the scorer had loaded.
    assert len(scores) == n * len(proxy.events("scorer_ready")[0]["checks"])
    assert {(s["result"], s["details"]["exception"]) for s in scores} == {("error", "shutdown")}
    assert len({s["sample_id"] for s in scores}) == n
    assert "Traceback" not in proxy.output()
    assert "sk-lifecycle-test" not in proxy.output() + json.dumps(scores), "no secret in logs or error scores"


def test_ctrl_c_while_the_model_loads_stops_at_once_and_records_the_waiting_samples_as_errors(
    simulator, start_proxy, tmp_path: Path
):
    proxy, proxy_base, metrics_url = start_proxy(simulator)
    # Stopped before it could say it is ready: a scorer still loading its model, for as long as we like.
    scorer = scorer_child(proxy)
    os.kill(scorer, signal.SIGSTOP)
    try:
        assert not proxy.events("scorer_ready"), "the scorer was stopped only after it had loaded"
        for i in range(3):
            chat(proxy_base, seed=i)
        wait_metric(metrics_url, "llmwatch_scoring_pending", 3)
        os.kill(proxy.pid, signal.SIGINT)
        proxy.wait_for(r'"event": "agent_stopping"', timeout=10)
        assert proxy.popen.wait(timeout=15) == 0, proxy.output()
    finally:
        if running(scorer):
            os.kill(scorer, signal.SIGKILL)
    assert not proxy.events("scorer_draining"), "nothing to wait for: the model was not loaded"
    assert proxy.events("scorer_stopping")[0]["model_loaded"] is False
    assert proxy.events("scorer_unscored")[0]["samples"] == 3
    scores = records(tmp_path / "data" / "scores")
    # Check names come from the child once loaded; before that each sample gets one `scorer` error.
    assert [(s["check"], s["result"], s["details"]["exception"]) for s in scores] == [
        ("scorer", "error", "shutdown")
    ] * 3
    assert "Traceback" not in proxy.output()


async def test_scorer_sink_counts_only_what_the_scorer_accepted_and_shutdown_counts_the_unscored(sim, make_agent):
    agent = await make_agent(
        sim.url,
        sampling={"rate": 1.0},
        scoring={"enabled": True, "embeddings": False, "max_pending": 2, "shutdown_timeout_s": 0.5},
    )
    await wait_until(lambda: agent.scorer.ready.is_set(), timeout=60)
    os.kill(agent.scorer._proc.pid, signal.SIGSTOP)
    client = httpx.AsyncClient(timeout=30)
    n = 5
    for i in range(n):
        r = await client.post(
            proxy_url(agent) + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": i},
        )
        assert r.status_code == 200
        await wait_until(lambda i=i: agent.pipeline.processed >= i + 1)
    await client.aclose()
    samples = await scrape(agent)
    written = metric(samples, "llmwatch_samples_written_total", sink="scorer")
    refused = metric(samples, "llmwatch_samples_dropped_total", reason="scoring_queue_full")
    assert (written, refused) == (2, 3), "selected = written + dropped for the scorer sink"
    assert metric(samples, "llmwatch_samples_written_total", sink="files") == n
    await agent.stop()
    assert metric(await _registry(agent), "llmwatch_samples_unscored_total", reason="shutdown") == 2
    assert not agent.scorer.alive


async def _registry(agent) -> dict:
    """The agent's metrics read from its registry: after `stop` its /metrics port is closed."""
    out = {}
    for family in text_string_to_metric_families(generate_latest(agent.metrics.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_full_disk_costs_counted_samples_and_scores_then_writing_and_scoring_resume(
    simulator, start_proxy, small_disk: Path
):
    proxy, proxy_base, metrics_url = start_proxy(simulator, data_dir=small_disk)
    proxy.wait_for(r'"event": "scorer_ready"')
    per_sample = 4  # the built-in rule checks of a plain (not JSON-mode) chat answer
    for i in range(3):
        chat(proxy_base, seed=i)
    wait_metric(metrics_url, "llmwatch_samples_written_total", 3, sink="files")
    base_scores = metric(wait_metric(metrics_url, "llmwatch_check_total", 3 * per_sample), "llmwatch_check_total")

    filler = fill(small_disk)
    # Samples larger than a page: a file's last, partly used page cannot take one (tmpfs allocates pages).
    big = 5
    for i in range(3, 3 + big):
        chat(proxy_base, "Summarise this. " + "lorem ipsum " * 500, seed=i)
    samples = wait_metric(metrics_url, "llmwatch_samples_dropped_total", big, reason="write_error")
    assert metric(samples, "llmwatch_samples_written_total", sink="files") == 3
    assert metric(samples, "llmwatch_samples_total") == metric(
        samples, "llmwatch_samples_written_total", sink="files"
    ) + metric(samples, "llmwatch_samples_dropped_total")
    # Scores go on being counted in the metrics; the scores file lost some (what fit in its last page stayed), and says so.
    wait_metric(metrics_url, "llmwatch_check_total", base_scores + big * per_sample)
    wait_metric(metrics_url, "llmwatch_scores_dropped_total", 1, reason="write_error")
    ready = httpx.get(f"{metrics_url}/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json()["checks"]["scorer_alive"] is True, ready.text

    filler.unlink()
    for i in range(8, 10):
        chat(proxy_base, seed=i)
    wait_metric(metrics_url, "llmwatch_samples_written_total", 5, sink="files")
    samples = wait_metric(metrics_url, "llmwatch_check_total", base_scores + (big + 2) * per_sample)
    lost_scores = metric(samples, "llmwatch_scores_dropped_total", reason="write_error")
    os.kill(proxy.pid, signal.SIGTERM)
    assert proxy.popen.wait(timeout=30) == 0, proxy.output()

    # Whole lines only, and exactly what the counters say was written.
    stored = records(small_disk / "samples")
    assert len(stored) == 5
    scores = records(small_disk / "scores")
    assert len(scores) == metric(samples, "llmwatch_check_total") - lost_scores
    assert {s["sample_id"] for s in scores} >= {s["id"] for s in stored}, (
        "scoring resumed: the samples stored after the disk freed up are scored"
    )
    assert len(proxy.events("samples_write_failed")) <= 2, "a repeating failure is logged at a bounded rate"
    # The commands that read these files accept them.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmwatch.agent.cli",
            "score",
            "--in",
            str(small_disk / "samples"),
            "--out",
            str(small_disk / "rescored.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **RULES_ONLY},
    )
    assert out.returncode == 0, out.stderr


# --- Kafka with no broker --------------------------------------------------------------------


def test_kafka_sink_with_no_broker_expires_samples_after_the_delivery_timeout_and_logs_at_a_bounded_rate():
    from llmwatch.collectors.exporters.kafka import KafkaSampleSink, KafkaSection
    from llmwatch.core.metrics import Metrics

    dead = dead_address()  # nothing listens there (no broker): connections are refused at once
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.name.startswith("kafka") and record.levelno >= logging.WARNING:
                seen.append(record)

    handler = Keep()
    logging.getLogger().addHandler(handler)
    metrics = Metrics()
    started = time.monotonic()
    sink = KafkaSampleSink(KafkaSection(bootstrap_servers=[dead], delivery_timeout_ms=1000, max_buffered=10), metrics)
    try:
        batch = [
            Sample(
                id=f"s{i}",
                timestamp=datetime.now(timezone.utc),
                request={},
                response={},
                model="m",
                status=200,
                latency_ms=1.0,
            )
            for i in range(12)
        ]
        # The sink tells the pipeline what it refused, so that samples_written{sink="kafka"} counts only what it took.
        assert sink.write(batch) == 2
        assert metrics.group(KafkaMetrics).kafka_dropped.labels(reason="buffer_full")._value.get() == 2
        expired = metrics.group(KafkaMetrics).kafka_dropped.labels(reason="delivery_timeout")
        wait_for(lambda: expired._value.get() == 10, 30, "the 10 buffered samples expire")
        assert sink.outstanding == 0
        # Let kafka-python go on failing a while: its lines stay at one per logger per 10 s.
        wait_for(lambda: time.monotonic() - started > 4, 10, "a few seconds of failed connection attempts", poll=0.2)
        elapsed = time.monotonic() - started
        per_logger: dict[str, int] = {}
        for record in seen:
            per_logger[record.name] = per_logger.get(record.name, 0) + 1
        assert per_logger, "kafka-python did report the refused connections"
        assert max(per_logger.values()) <= 1 + elapsed // 10, per_logger
    finally:
        logging.getLogger().removeHandler(handler)
        sink.close(timeout=1.0)
    assert metrics.group(KafkaMetrics).kafka_dropped.labels(reason="closed")._value.get() == 0, (
        "nothing left to lose at close"
    )


async def test_readyz_turns_not_ready_when_the_scorer_cannot_start(sim, tmp_path: Path):
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from synthetic import Behaviour, window

    from llmwatch.agent.components import load_config
    from llmwatch.agent.runtime import Agent
    from llmwatch.scorers.drift.baseline import freeze, write_baseline

    samples, scores, emb = window(np.random.default_rng(1), 100, Behaviour(), version="A", prefix="base")
    baseline = write_baseline(freeze(samples, scores, emb, model_version="A"), tmp_path / "baseline.json")
    overrides = {
        "upstream": sim.url,
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "data_dir": str(tmp_path / "data"),
        "scoring": {"enabled": True, "embeddings": False},
        "drift": {"baseline": str(baseline)},
    }
    agent = Agent(load_config(None, overrides=overrides, environ={}))  # checks the baseline in this process
    baseline.write_text("{}")  # ... which the scorer child then cannot load: it fails to start
    await agent.start()
    try:
        await wait_until(lambda: agent.scorer.fatal is not None, timeout=60)
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{agent.metrics_port}/readyz")
        assert r.status_code == 503 and r.json()["checks"] == {
            **r.json()["checks"],
            "scorer_alive": False,
            "pipeline_alive": True,
        }
    finally:
        await agent.stop()


def test_sigterm_with_a_call_still_open_cuts_it_after_the_proxy_shutdown_timeout(start_proxy, tmp_path: Path):
    # An upstream that takes the request and never answers: the call stays open until cut.
    listener = socket.create_server(("127.0.0.1", 0))
    got_request = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        conn, _ = listener.accept()
        held.append(conn)
        conn.recv(65536)
        got_request.set()

    threading.Thread(target=accept, daemon=True).start()
    upstream = f"http://127.0.0.1:{listener.getsockname()[1]}"
    proxy, proxy_base, _ = start_proxy(
        upstream, LLMWATCH_SCORING__ENABLED="false", LLMWATCH_PROXY__SHUTDOWN_TIMEOUT_S="1"
    )
    client_result: list[object] = []

    def call() -> None:
        try:
            client_result.append(
                httpx.post(
                    f"{proxy_base}/v1/chat/completions", json={"model": "m", "messages": []}, timeout=120
                ).status_code
            )
        except httpx.HTTPError as exc:
            client_result.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        assert got_request.wait(30), "the upstream never saw the call"
        os.kill(proxy.pid, signal.SIGTERM)
        # aiohttp's own default would wait 60 s for the open call; the configured second applies.
        assert proxy.popen.wait(timeout=30) == 0, proxy.output()
        caller.join(30)
        assert client_result, "the client's call ended when the proxy stopped"
        assert "Traceback" not in proxy.output()
    finally:
        for conn in held:
            conn.close()
        listener.close()


def test_a_second_sigterm_during_the_stop_lets_the_stop_finish(simulator, start_proxy, tmp_path: Path):
    # A supervisor that signals the process and then its group sends SIGTERM twice. The second
    # one arrives while the stop waits for the scorer: it was the default action there and killed
    # the proxy midway through its stop (exit -15, the backlog never recorded).
    proxy, proxy_base, metrics_url = start_proxy(simulator, LLMWATCH_SCORING__SHUTDOWN_TIMEOUT_S="3")
    proxy.wait_for(r'"event": "scorer_ready"')
    scorer = scorer_child(proxy)
    os.kill(scorer, signal.SIGSTOP)  # a scorer far behind: the stop waits on it for the shutdown timeout
    try:
        n = 4
        for i in range(n):
            chat(proxy_base, "Summarise this. " + "lorem ipsum " * 800, seed=i)
        wait_metric(metrics_url, "llmwatch_scoring_pending", n)
        os.kill(proxy.pid, signal.SIGTERM)
        proxy.wait_for(r'"event": "scorer_draining"')  # the stop is under way, waiting on the scorer
        os.kill(proxy.pid, signal.SIGTERM)
        assert proxy.popen.wait(timeout=30) == 0, proxy.output()
    finally:
        if running(scorer):
            os.kill(scorer, signal.SIGKILL)
    assert proxy.events("scorer_unscored")[0]["samples"] == n, "the stop ran to its end"
    assert proxy.events("agent_stopped")
    assert "Traceback" not in proxy.output()


def test_a_second_ctrl_c_ends_a_stop_held_by_a_stuck_scorer_at_once(simulator, start_proxy, tmp_path: Path):
    # An operator who presses Ctrl-C again while the stop waits on a scorer that does not answer:
    # the stop is given up (exit 130) and the scorer child is killed. The second Ctrl-C only
    # cancelled the main task, which the scorer's drain (a blocking wait) did not see for its whole
    # minute; a third interrupted it and left the child alive (multiprocessing's exit handler then
    # waited on it for ever).
    proxy, proxy_base, metrics_url = start_proxy(simulator, LLMWATCH_SCORING__SHUTDOWN_TIMEOUT_S="60")
    proxy.wait_for(r'"event": "scorer_ready"')
    scorer = scorer_child(proxy)
    os.kill(scorer, signal.SIGSTOP)  # a scorer that does not answer: the stop would wait its full minute
    try:
        n = 4
        for i in range(n):
            chat(proxy_base, "Summarise this. " + "lorem ipsum " * 800, seed=i)
        wait_metric(metrics_url, "llmwatch_scoring_pending", n)
        os.kill(proxy.pid, signal.SIGINT)
        proxy.wait_for(r'"event": "scorer_draining"')  # the stop is under way, waiting on the scorer
        os.kill(proxy.pid, signal.SIGINT)
        assert proxy.popen.wait(timeout=30) == 130, proxy.output()
        gone = time.monotonic() + 10
        while running(scorer):  # killed by the proxy, then reaped by init
            assert time.monotonic() < gone, "the scorer child was left behind"
            time.sleep(0.05)  # poll interval of a bounded wait
    finally:
        if running(scorer):
            os.kill(scorer, signal.SIGKILL)
    assert "Traceback" not in proxy.output()
