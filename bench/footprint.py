"""What a sidecar costs to carry: installed size and resident memory, slim install against full.

Builds (once, under .bench/) two virtual environments from this checkout: the slim base install
(`pip install .`) and the full one (`pip install '.[all]'`, CPU torch first), then for each starts
`llmwatch proxy` in front of bench/upstream.py and reads the RSS of the proxy's whole process tree
(the scorer child included) from /proc: idle once ready (and, with scoring, once the scorer has
loaded its checks), then after a load of plain calls.

  slim: scoring on with the rule checks only (scoring.embeddings: false), the base install.
  full: the shipped defaults (rule and embedding checks in the scorer child).

    python bench/footprint.py [--requests 2000] [--venvs .bench/footprint]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import socket
import subprocess
import sys
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
        if extras:
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


def tree_rss_mb(pid: int) -> float:
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
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


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
            return json.loads(line)
    raise RuntimeError(f"no {needle!r} within {timeout} s")


async def load(url: str, n: int) -> None:
    async with aiohttp.ClientSession() as http:
        sem = asyncio.Semaphore(16)

        async def one() -> None:
            async with (
                sem,
                http.post(url + "/v1/chat/completions", data=BODY, headers={"Content-Type": "application/json"}) as r,
            ):
                await r.read()

        await asyncio.gather(*(one() for _ in range(n)))


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="plain calls sent before the loaded reading")
    parser.add_argument(
        "--venvs", type=Path, default=ROOT / ".bench" / "footprint", help="where the two virtual environments are built"
    )
    args = parser.parse_args()
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
