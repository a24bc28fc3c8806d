"""Real subprocesses for tests, and the ports they report having bound.

    sim = Proc([sys.executable, "-m", "llmwatch.agent.apps.simulator", "--port", "0"])
    url = simulator_url(sim)                      # from its `url=http://127.0.0.1:PORT` line
    proxy = Proc(proxy_argv(url, data_dir), env=agent_env())
    ports = agent_started(proxy)                  # the `agent_started` JSON log record
    ports["proxy_port"], ports["metrics_port"]

End each with `stop()` (it kills only its own PID).

Where a test reads the whole log afterwards (what it must not contain), the proxy writes it into a
file instead:

    proc = proxy_process(cfg, upstream, data_dir, log)      # a plain Popen, output into `log`
    started = (await logged(log, proc, "agent_started"))["agent_started"]
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families


class Proc:
    """A subprocess whose merged output is read by a thread (never blocks it) and searchable."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        self.popen = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        for raw in self.popen.stdout:  # type: ignore[union-attr]
            with self._changed:
                self.lines.append(raw.decode("utf-8", "replace"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match:
        """The first output line matching `pattern`; fails after `timeout` or when the process ends."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no line matching {pattern!r}; output:\n{self.output()}")
                self._changed.wait(min(left, 0.5))

    def events(self, name: str) -> list[dict]:
        """Every JSON log record of the output whose `event` is `name`."""
        out = []
        for line in list(self.lines):
            if line.startswith("{"):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("event") == name:
                    out.append(record)
        return out

    def wait_event(self, name: str, timeout: float = 60.0) -> dict:
        """The first JSON log record whose `event` is `name`."""
        m = self.wait_for(rf'"event": "{re.escape(name)}"', timeout)
        return json.loads(m.string)

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)
        self._reader.join(timeout=5)


def proxy_argv(upstream: str, data_dir: str | os.PathLike[str], *options: str) -> list[str]:
    """`python -m llmwatch.agent.cli proxy` in front of `upstream`, on ports it picks and reports
    (`agent_started`), writing under `data_dir`; `options` (such as --config) follow."""
    return [sys.executable, "-m", "llmwatch.agent.cli", "proxy", "--upstream", upstream,
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", str(data_dir), *options]  # fmt: skip


def proxy_process(cfg: Path, upstream: str, data: Path, log: Path, **env: str) -> subprocess.Popen:
    """`llmwatch proxy --config CFG` in front of `upstream` on ports it picks, its output into `log`."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            proxy_argv(upstream, data, "--config", str(cfg)),
            env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def logged(log: Path, proc: subprocess.Popen, *events: str) -> dict[str, dict]:
    """The log record of each of `events` once `proc` has written them all (fails after 60 s or if it exits)."""
    found: dict[str, dict] = {}
    deadline = time.monotonic() + 60
    while len(found) < len(events) and time.monotonic() < deadline and proc.poll() is None:
        for line in log.read_text().splitlines():
            for event in events:
                if f'"{event}"' in line:
                    found[event] = json.loads(line)
        await asyncio.sleep(0.05)
    assert len(found) == len(events), log.read_text()
    return found


def llmwatch(
    *args: str, cwd: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m llmwatch.agent.cli ARGS` run to its end: its exit code, stdout and stderr as text."""
    return subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def agent_env(**extra: str) -> dict[str, str]:
    """An environment in which `llmwatch` logs JSON at info level, so `agent_started` carries the ports."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "LLMWATCH_LOGGING__FORMAT": "json",
        "LLMWATCH_LOGGING__LEVEL": "info",
        **extra,
    }


def agent_started(proc: Proc, timeout: float = 60.0) -> dict:
    """The `agent_started` log record of an `llmwatch proxy`/`ingest` process (proxy_port, metrics_port, ingest_port)."""
    return proc.wait_event("agent_started", timeout)


def start_configured_proxy(
    tmp_path: Path, config: dict[str, Any], env: dict[str, str] | None = None
) -> tuple[Proc, dict]:
    """`llmwatch proxy --config TMP/llmwatch.yaml`: the sections of `config` (upstream, sampling, ...)
    on loopback ports it picks, data under TMP/data; returns it and its `agent_started` record."""
    path = tmp_path / "llmwatch.yaml"
    doc = {"listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0", "data_dir": str(tmp_path / "data"), **config}
    path.write_text(yaml.safe_dump(doc))
    proxy = Proc(
        [sys.executable, "-m", "llmwatch.agent.cli", "proxy", "--config", str(path)], env=agent_env(**(env or {}))
    )
    try:
        return proxy, agent_started(proxy)
    except BaseException:
        proxy.stop()
        raise


def stop_gracefully(proc: Proc, timeout: float = 60.0) -> None:
    """SIGTERM and wait for the exit (a clean stop drains what the process holds), then `stop()`."""
    if proc.popen.poll() is None:
        proc.popen.send_signal(signal.SIGTERM)
        proc.popen.wait(timeout=timeout)
    proc.stop()


async def scrape_metrics(session: aiohttp.ClientSession, ports: dict) -> dict:
    """GET /metrics of a process's `metrics_port`, every sample by (name, sorted labels)."""
    async with session.get(f"http://127.0.0.1:{ports['metrics_port']}/metrics") as resp:
        text = await resp.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def start_simulator(*args: str) -> Proc:
    """`python -m llmwatch.agent.apps.simulator --port 0 ARGS`; read its URL with `simulator_url`."""
    return Proc([sys.executable, "-m", "llmwatch.agent.apps.simulator", "--port", "0", *args])


def simulator_url(proc: Proc, timeout: float = 60.0) -> str:
    """The `http://127.0.0.1:PORT` the simulator printed once it had bound."""
    return proc.wait_for(r"url=(http://127\.0\.0\.1:\d+)", timeout).group(1)
