"""Pieces the proxy benchmarks share: request bodies, ports, pinning, /proc CPU and RSS, load.

Scripts in bench/ run as `python bench/NAME.py`, so they import this as `common`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BODY = json.dumps(
    {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a helpful cooking assistant."},
            {
                "role": "user",
                "content": "How long should I roast a whole chicken, and at what temperature? My email is a@b.co.",
            },
        ],
        "max_tokens": 200,
    }
).encode()
STREAM_BODY = json.dumps({**json.loads(BODY), "stream": True, "stream_options": {"include_usage": True}}).encode()
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def can_pin() -> bool:
    return bool(shutil.which("taskset")) and (os.cpu_count() or 1) >= 2


def pinned(cmd: list[str], cpus: str) -> list[str]:
    if can_pin():
        return ["taskset", "-c", cpus, *cmd]
    return cmd


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_pids(pid: int) -> list[int]:
    """`pid` and every live descendant (nginx workers, the scorer child, multiprocessing helpers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(_stat(int(entry))[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _tree_ticks(pid: int, fields: tuple[int, ...]) -> float:
    """Seconds in the /proc/PID/stat `fields` (clock ticks), summed over the whole tree."""
    total = 0
    for p in tree_pids(pid):
        try:
            f = _stat(p)
        except OSError:
            continue
        total += sum(int(f[i]) for i in fields)
    return total / os.sysconf("SC_CLK_TCK")


def tree_user_seconds(pid: int) -> float:
    """User-space CPU of the whole tree (utime + cutime): the part a proxy's own code spends, where
    the rest (stime) is mostly the kernel's loopback reads, writes and waits, alike for every peer."""
    return _tree_ticks(pid, (11, 13))


def tree_cpu_seconds(pid: int) -> float:
    """CPU of the whole tree: live processes plus what reaped children left in cutime/cstime."""
    return _tree_ticks(pid, (11, 12, 13, 14))


def tree_rss_mb(pid: int) -> float:
    total = 0
    for p in tree_pids(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024.0


def wait_idle(pid: int, *, quiet_s: float = 0.3, limit_s: float = 10.0) -> float:
    """The tree's CPU once it stopped using any for `quiet_s` (or after `limit_s`): work the last
    requests left behind (analysis, sample files, scoring) belongs to them."""
    deadline = time.monotonic() + limit_s
    last = tree_cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = tree_cpu_seconds(pid)
        if now - last < 0.005:
            return now
        last = now
    return last


async def wait_ready(url: str, *, headers: dict[str, str] | None = None, tries: int = 600) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(tries):
            try:
                async with s.post(
                    url + "/v1/chat/completions",
                    data=BODY,
                    headers={**HEADERS, **(headers or {}), "x-bench-delay-ms": "1"},
                ) as r:
                    await r.read()
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def delays(n: int, median_ms: float, sigma: float = 0.25, seed: int = 11) -> list[str]:
    """The same upstream delays for the direct and the proxied run (paired comparison)."""
    rng = np.random.default_rng(seed)
    return [f"{d:.3f}" for d in median_ms * rng.lognormal(0.0, sigma, n)]


@dataclass
class Outcome:
    """One open-loop cell: latencies from each request's scheduled time, first chunk, reads."""

    latency_ms: list[float] = field(default_factory=list)
    first_chunk_ms: list[float] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    failures: int = 0
    mismatched: int = 0  # bodies not byte-identical to what the upstream sends directly

    @property
    def count(self) -> int:
        return len(self.latency_ms) + self.failures


async def open_loop_checked(
    url: str,
    body: bytes,
    rate: float,
    seconds: float,
    *,
    expected: bytes | None,
    headers: dict[str, str] | None = None,
    median_ms: float = 50.0,
) -> Outcome:
    """Requests at a fixed rate (open loop, no coordinated omission), every body compared to `expected`."""
    clock = time.perf_counter  # not loop.time(): uvloop's clock ticks in whole milliseconds
    out = Outcome()
    all_headers = {**HEADERS, **(headers or {})}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False) as session:

        async def scheduled(at: float, delay_ms: str) -> None:
            try:
                async with session.post(url, data=body, headers={**all_headers, "x-bench-delay-ms": delay_ms}) as r:
                    parts, first = [], None
                    async for chunk in r.content.iter_any():
                        if first is None:
                            first = clock()
                        parts.append(chunk)
                    done = clock()
                    if r.status != 200:
                        out.failures += 1
                        return
                got = b"".join(parts)
                if expected is not None and got != expected:
                    out.mismatched += 1
                out.latency_ms.append((done - at) * 1000.0)
                out.first_chunk_ms.append(((first or done) - at) * 1000.0)
                out.reads.append(len(parts))
            except Exception:
                out.failures += 1

        tasks = []
        start = clock() + 0.05
        total = int(rate * seconds)
        plan = delays(total, median_ms)
        for i in range(total):
            at = start + i / rate
            wait = at - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(scheduled(at, plan[i])))
        await asyncio.gather(*tasks)
    return out


def editable_launcher(src: str | os.PathLike[str]) -> list[str]:
    """A command that runs `llmwatch` from another checkout (e.g. main) with this venv: the
    editable install's finder is pointed at that tree's folders before anything imports llmwatch.
    An install by path (a `.pth` naming this tree's folders, as `pip install -e` writes here) has
    no finder to point: that tree's folders go first on `sys.path` instead, and the current
    directory (`-c` puts it first) is dropped, else the portions would still load from this tree."""
    code = (
        "import sys, runpy\n"
        f"src = {str(Path(src).resolve())!r}\n"
        "sys.path[:] = [src, src + '/agent', src + '/collectors', src + '/scorers'] + [p for p in sys.path if p not in ('', '.')]\n"
        "for name, mod in list(sys.modules.items()):\n"
        "    if name.startswith('__editable___llmwatch') and hasattr(mod, 'MAPPING'):\n"
        "        mod.MAPPING.update({'llmwatch': src + '/llmwatch', 'llmwatch.agent': src + '/agent', 'llmwatch.collectors': src + '/collectors', 'llmwatch.scorers': src + '/scorers'})\n"
        "sys.argv[0] = 'llmwatch'\n"
        "runpy.run_module('llmwatch.agent.cli.main', run_name='__main__', alter_sys=True)\n"
    )
    return [sys.executable, "-c", code]
