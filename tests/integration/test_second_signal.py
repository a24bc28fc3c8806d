"""A second stop signal while a long-running command cleans up, as real processes on loopback.

The first SIGINT/SIGTERM starts the stop; a second SIGTERM during the cleanup (a supervisor that
signals the process and then its group, a wrapper forwarding SIGTERM after a Ctrl-C) is logged
(`stop_signal_again`) and the cleanup runs to its end (exit 0); a second Ctrl-C gives the cleanup
up at once (exit 130). Never a traceback, never the default action's kill (exit -15) midway.
`llmwatch proxy` has had this since 0.x (tests/integration/test_lifecycle.py); these are `review
serve` and `simulate`, which put their handlers back before their cleanup (same helper now:
llmwatch.agent.signals.run_until_stopped, which `llmwatch ui` and `llmwatch demo` use too; they
have no process test here: nothing holds the ui's stop for long enough to signal it again on cue,
and the demo's needs the embedding model loaded). A second Ctrl-C cancels the cleanup where it
waits (logged `stop_given_up`); raised as KeyboardInterrupt wherever the process was, it left
aiohttp's stop and its handlers to be cancelled together and gave a traceback about 1 run in 20.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import orjson
import pytest
from helpers.procs import Proc, agent_env
from helpers.reviews import export_args, live_traffic, write_config, write_samples

CLI = [sys.executable, "-m", "llmwatch.agent.cli"]


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    samples = write_samples(tmp_path, live_traffic())
    config = write_config(tmp_path / "llmwatch.yaml")
    out = tmp_path / "round1" / "tasks.jsonl"
    done = subprocess.run(
        [*CLI, *export_args(samples, config, out, "--n", "2", "--seed", "11")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out


class VerdictOnItsWay:
    """A reviewer's verdict on its way: headers sent and the server's handler running (it answered
    `Expect: 100-continue`), the rest of the form not sent. It holds review serve's stop: aiohttp
    waits for the requests in flight (a minute at most), and once the stop has begun it reads no
    more of their bodies, so the handler ends when the reviewer gives up (`close`)."""

    def __init__(self, link: str, task: dict) -> None:
        url = urllib.parse.urlsplit(link)
        lo, _ = task.get("scale") or [1, 5]
        fields = {f"s{pos}_{ci}": str(lo + 2) for ci in range(len(task["criteria"])) for pos in (1, 2)}
        body = urllib.parse.urlencode({**fields, "preferred": "tie"}).encode()
        self.sock = socket.create_connection((url.hostname, url.port), timeout=30)
        self.sock.sendall(
            f"POST {url.path}/t/{task['task_id']} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nExpect: 100-continue\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:5]
        )
        interim = self.sock.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue"), interim

    def close(self) -> None:
        self.sock.close()


def review_serve(tasks: Path, out: Path) -> tuple[Proc, str]:
    proc = Proc(
        [*CLI, "review", "serve", "--tasks", str(tasks), "--out", str(out), "--reviewers", "alice",
         "--listen", "127.0.0.1:0"],
        env=agent_env(),
    )  # fmt: skip
    try:
        link = proc.wait_for(r"^reviewer alice: (\S+)").group(1)
    except BaseException:
        proc.stop()
        raise
    return proc, link


def test_a_second_sigterm_while_review_serve_stops_is_logged_and_the_stop_runs_to_its_end(tasks: Path, tmp_path: Path):
    proc, link = review_serve(tasks, tmp_path / "round1" / "reviews.jsonl")
    try:
        reviewer = VerdictOnItsWay(link, orjson.loads(tasks.read_bytes().splitlines()[0]))
        proc.popen.send_signal(signal.SIGTERM)
        proc.wait_event("review.stopping")  # the stop waits for the request in flight
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.wait_event("stop_signal_again")["signal"] == "SIGTERM"
        reviewer.close()
        assert proc.popen.wait(timeout=60) == 0, proc.output()
    finally:
        proc.stop()
    assert proc.events("review.stopped"), "the stop ran to its end"
    assert proc.events("review.form_lost"), "the verdict that did not arrive is said to be lost"
    assert not proc.events("review.internal_error")
    assert "Traceback" not in proc.output()


def test_a_second_ctrl_c_while_review_serve_stops_gives_the_stop_up(tasks: Path, tmp_path: Path):
    proc, link = review_serve(tasks, tmp_path / "round1" / "reviews.jsonl")
    try:
        task = orjson.loads(tasks.read_bytes().splitlines()[0])
        reviewer = VerdictOnItsWay(link, task)  # holds the stop (a minute at most) until the Ctrl-C
        proc.popen.send_signal(signal.SIGINT)
        proc.wait_event("review.stopping")
        proc.popen.send_signal(signal.SIGINT)
        assert proc.popen.wait(timeout=60) == 130, proc.output()
        reviewer.close()
    finally:
        proc.stop()
    assert not proc.events("review.stopped"), "the stop was given up"
    assert proc.events("stop_given_up")
    assert "Traceback" not in proc.output()


def test_a_second_sigterm_while_the_simulator_stops_lets_its_stop_finish(tmp_path: Path):
    # A slow stream holds the simulator's stop (its shutdown timeout is longer than the test) until
    # the test closes it: the second SIGTERM lands during the stop whatever the machine's pace.
    proc = Proc(
        [*CLI, "simulate", "--port", "0", "--latency-scale", "10", "--shutdown-timeout", "120"], env=agent_env()
    )
    try:
        url = urllib.parse.urlsplit(proc.wait_for(r"url=(http://127\.0\.0\.1:\d+)").group(1))
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        body = {
            "model": "m",
            "stream": True,
            "max_tokens": 400,
            "messages": [{"role": "user", "content": "Tell a long story."}],
        }
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        stream = conn.getresponse()
        assert stream.status == 200
        assert stream.readline().startswith(b"data: "), "the stream is under way"
        proc.popen.send_signal(signal.SIGTERM)
        proc.wait_event("simulator.stopping")
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.wait_event("stop_signal_again")["signal"] == "SIGTERM"
        conn.close()
        assert proc.popen.wait(timeout=60) == 0, proc.output()
    finally:
        proc.stop()
    assert proc.events("simulator.stopped")
    assert "Traceback" not in proc.output()
