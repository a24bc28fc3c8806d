"""What the sidecar costs: added latency, throughput ratio and CPU per request, direct vs proxied.

Three processes, so that the figure is the proxy's and not CPU contention inside one process:
this script (the load generator) and `bench/upstream.py` share core 0, `llmwatch proxy` runs
alone on core 1 (`taskset`, where available). Direct and proxied runs alternate in the same run.

  1. Closed loop: N requests at fixed concurrency, non-streaming and streaming: added p50/p99
     and the throughput ratio proxied/direct.
  2. Open loop: fixed arrival rates (default 100, 500, 1000 req/s), latency measured from each
     request's scheduled time (no coordinated omission): added p50/p99 at each rate.
  3. The proxy's own CPU per request (process CPU seconds / requests) and what that means as
     saturation throughput per core; these do not depend on the load generator.

The proxy runs with capture, sampling (10%), redaction, sample files and metrics on; scoring is
off here (bench/scoring_throughput.py measures the proxy beside a saturated scorer).

    python bench/proxy_overhead.py [--requests 2000] [--concurrency 32] [--rates 100,500,1000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BODY, ROOT, STREAM_BODY, cpu_seconds, delays, free_port, open_loop_checked, pinned, wait_ready  # noqa: E402,F401  (re-exported for the other benches)


async def one(session: aiohttp.ClientSession, url: str, body: bytes, delay_ms: str) -> None:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench", "x-bench-delay-ms": delay_ms}
    async with session.post(url, data=body, headers=headers) as r:
        async for _ in r.content.iter_any():
            pass
        if r.status != 200:
            raise RuntimeError(f"status {r.status}")


async def closed_loop(
    base: str, body: bytes, n: int, concurrency: int, median_ms: float = 50.0
) -> tuple[np.ndarray, float]:
    url = base + "/v1/chat/completions"
    latencies: list[float] = []
    todo = iter(delays(n, median_ms))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def worker() -> None:
            for delay_ms in todo:
                t = time.perf_counter()
                await one(session, url, body, delay_ms)
                latencies.append(time.perf_counter() - t)

        start = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        elapsed = time.perf_counter() - start
    return np.array(latencies) * 1000.0, elapsed


async def open_loop(
    base: str, body: bytes, rate: float, seconds: float, median_ms: float = 50.0
) -> tuple[np.ndarray, int]:
    """Fixed arrival rate, latency from each request's scheduled time: common.open_loop_checked without the byte check."""
    out = await open_loop_checked(
        base + "/v1/chat/completions", body, rate, seconds, expected=None, median_ms=median_ms
    )
    return np.array(out.latency_ms), out.failures


@dataclass
class Row:
    label: str
    direct_p50: float
    direct_p99: float
    proxied_p50: float
    proxied_p99: float
    ratio: float | None = None
    cpu_us: float | None = None

    def cells(self) -> list[str]:
        added50 = self.proxied_p50 - self.direct_p50
        added99 = self.proxied_p99 - self.direct_p99
        return [
            self.label,
            f"{self.direct_p50:.2f} / {self.direct_p99:.2f}",
            f"{self.proxied_p50:.2f} / {self.proxied_p99:.2f}",
            f"{added50:+.2f} / {added99:+.2f}",
            "" if self.ratio is None else f"{self.ratio:.3f}",
            "" if self.cpu_us is None else f"{self.cpu_us:.0f}",
        ]


def table(rows: list[Row]) -> str:
    head = [
        "load",
        "direct p50 / p99 ms",
        "proxied p50 / p99 ms",
        "added p50 / p99 ms",
        "throughput proxied/direct",
        "proxy CPU us/req",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


async def run(args: argparse.Namespace, direct: str, proxied: str, proxy_pid: int) -> list[Row]:
    rows: list[Row] = []
    for name, body in (("closed loop, non-streaming", BODY), ("closed loop, streaming", STREAM_BODY)):
        d_lat, p_lat, d_time, p_time, cpu, count = [], [], 0.0, 0.0, 0.0, 0
        half = args.requests // 2
        for _ in range(2):  # alternate, so that drift of the machine hits both sides
            lat, el = await closed_loop(direct, body, half, args.concurrency, args.latency_ms)
            d_lat.append(lat)
            d_time += el
            c0 = cpu_seconds(proxy_pid)
            lat, el = await closed_loop(proxied, body, half, args.concurrency, args.latency_ms)
            cpu += cpu_seconds(proxy_pid) - c0
            count += half
            p_lat.append(lat)
            p_time += el
        d, p = np.concatenate(d_lat), np.concatenate(p_lat)
        rows.append(
            Row(
                f"{name}, {args.requests} req, {args.concurrency} in flight",
                *np.percentile(d, [50, 99]),
                *np.percentile(p, [50, 99]),
                ratio=(len(p) / p_time) / (len(d) / d_time),
                cpu_us=cpu / count * 1e6,
            )
        )
    for rate in args.rates:
        for name, body in (("non-streaming", BODY), ("streaming", STREAM_BODY)):
            d_lat, p_lat, cpu, count, fails = [], [], 0.0, 0, 0
            for _ in range(2):
                lat, f = await open_loop(direct, body, rate, args.seconds / 2, args.latency_ms)
                d_lat.append(lat)
                fails += f
                c0 = cpu_seconds(proxy_pid)
                lat, f = await open_loop(proxied, body, rate, args.seconds / 2, args.latency_ms)
                cpu += cpu_seconds(proxy_pid) - c0
                count += len(lat) + f
                p_lat.append(lat)
                fails += f
            d, p = np.concatenate(d_lat), np.concatenate(p_lat)
            label = f"open loop {rate:g} req/s, {name}" + (f" ({fails} failed)" if fails else "")
            rows.append(
                Row(label, *np.percentile(d, [50, 99]), *np.percentile(p, [50, 99]), cpu_us=cpu / max(count, 1) * 1e6)
            )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rates", default="100,500,1000")
    p.add_argument(
        "--seconds",
        type=float,
        default=6.0,
        help="seconds of open-loop load per rate and mode (split over 2 alternations)",
    )
    p.add_argument("--latency-ms", type=float, default=50.0, help="upstream latency for non-streaming calls")
    p.add_argument("--out", default=str(ROOT / ".bench" / "proxy_overhead.json"))
    args = p.parse_args()
    args.rates = [float(r) for r in args.rates.split(",") if r]

    up_port, proxy_port, metrics_port = free_port(), free_port(), free_port()
    data_dir = tempfile.mkdtemp(prefix="llmwatch-bench-")
    upstream = subprocess.Popen(
        pinned(
            [
                sys.executable,
                str(ROOT / "bench" / "upstream.py"),
                "--port",
                str(up_port),
                "--latency-ms",
                str(args.latency_ms),
            ],
            "0",
        )
    )
    # The proxy itself; what a saturated scorer costs it is bench/scoring_throughput.py.
    env = {**os.environ, "LLMWATCH_LOGGING__LEVEL": "warning", "LLMWATCH_SCORING__ENABLED": "false"}
    proxy = subprocess.Popen(
        pinned(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                "proxy",
                "--upstream",
                f"http://127.0.0.1:{up_port}",
                "--listen",
                f"127.0.0.1:{proxy_port}",
                "--metrics-listen",
                f"127.0.0.1:{metrics_port}",
                "--data-dir",
                data_dir,
            ],
            "1",
        ),
        env=env,
        cwd=ROOT,
    )
    if shutil.which("taskset"):
        os.sched_setaffinity(0, {0})
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    direct, proxied = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{proxy_port}"
    try:
        asyncio.run(wait_ready(direct))
        asyncio.run(wait_ready(proxied))
        # Warm both paths (connection pools, code paths) before measuring.
        asyncio.run(closed_loop(direct, BODY, 200, 16))
        asyncio.run(closed_loop(proxied, BODY, 200, 16))
        rows = asyncio.run(run(args, direct, proxied, proxy.pid))
    finally:
        proxy.terminate()
        upstream.terminate()
        proxy.wait(30)
        upstream.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)
    out = table(rows)
    cpu = [r.cpu_us for r in rows if r.cpu_us]
    header = (
        f"llmwatch proxy overhead, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, upstream {args.latency_ms:g} ms "
        f"(lognormal, paired; streams: 30 ms TTFT + 30 chunks 3 ms apart); capture, 10% sampling, redaction, files and metrics on, scoring off"
    )
    sys.stdout.write(header + "\n\n" + out + "\n\n")
    sys.stdout.write(
        f"proxy CPU per request: {min(cpu):.0f}-{max(cpu):.0f} us => saturation ~{1e6 / max(cpu):.0f}-{1e6 / min(cpu):.0f} req/s per core\n"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"header": header, "rows": [r.__dict__ for r in rows]}, indent=2))


if __name__ == "__main__":
    main()
