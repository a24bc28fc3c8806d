"""A soak with injected faults: mixed traffic through a real `llmwatch proxy` while things break.

The upstream is the built-in simulator (its own process). The proxy runs with the scorer child
(rule checks), the mirror child (shadow evaluation of one candidate), the file sink on a small tmpfs
of its own and the Kafka sink on the tansu broker. Traffic: plain chat, streamed chat and embedding
calls, each sent both directly to the simulator and through the proxy with the same seed, so the
direct answer is what the proxy's must be. Meanwhile, on a schedule over the run:

- the upstream resets mid-stream (simulator fault `cut_after`) and stalls past the proxy's
  `read_timeout_s` (fault `slow_ms`): documented outcome 504 where the direct call waited it out;
- clients send a request head and then stall their body;
- the data directory fills up (the tmpfs, filled to the last byte, then freed);
- the scorer child and the mirror child are killed (SIGKILL, by PID);
- the Kafka broker is stopped and started again.

Decided on what the soak is about, not on timing: every client call is answered as the direct call
was (same status, same bytes; a reset stream cut at the same byte) or with the documented 504; the
counters add up (calls seen by the proxy = the client's calls; samples selected = written to files +
dropped by reason); file descriptors and RSS of the proxy do not grow. The table is printed.

    python bench/soak.py --duration 1800     # 30 minutes (needs root for the tmpfs)
    tests/e2e/test_soak.py runs it for 180 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The proxy's silence limit, and how long a stalled upstream stays silent past it: 3 s of margin
# either side, so that a loaded machine neither turns an ordinary call into a 504 nor a stall into an answer.
READ_TIMEOUT_S = 5.0
STALL_S = READ_TIMEOUT_S + 3.0
CHAT_MODEL = "sim-gpt-4o-mini"
EMBED_MODEL = "sim-text-embedding-3-small"
PROMPTS = [
    "How do I roast a chicken?",
    "Explain kubernetes pods in two sentences.",
    "What is a good running plan for a beginner?",
    "Tips for learning python",
    "Summarise the plot of Hamlet.",
]


# --- processes ---------------------------------------------------------------------------------


class Child:
    """A subprocess whose output goes to a file; its JSON lines can be searched."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._fh = open(log, "wb")
        self.popen = subprocess.Popen(
            argv, stdout=self._fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 90.0) -> re.Match:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = list(rx.finditer(self.text()))
            if found:
                return found[-1]
            if self.popen.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in {self.log}:\n{self.text()[-3000:]}")

    def events(self, name: str) -> list[dict]:
        out = []
        for line in self.text().splitlines():
            if line.startswith("{") and f'"event": "{name}"' in line:
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()  # our own child, by its handle
                self.popen.wait(10)
        self._fh.close()
        return self.popen.returncode


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise PermissionError(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    path = disk / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 64, 1):
            block = b"\0" * size
            while True:
                try:
                    if os.write(fd, block) < size:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path


def children(pid: int) -> dict[int, str]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found[int(entry)] = cmd
    return found


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- traffic -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: int | None
    body: bytes
    error: str | None  # the client's error: the connection closed early, a timeout


async def call(session: aiohttp.ClientSession, url: str, body: dict, headers: dict[str, str]) -> Outcome:
    chunks: list[bytes] = []
    try:
        async with session.post(url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=60)) as r:
            try:
                async for chunk in r.content.iter_any():
                    chunks.append(chunk)
            except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                return Outcome(r.status, b"".join(chunks), type(exc).__name__)
            return Outcome(r.status, b"".join(chunks), None)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return Outcome(None, b"".join(chunks), type(exc).__name__)


@dataclass
class Tally:
    calls: Counter = field(default_factory=Counter)  # kind -> calls
    outcomes: Counter = field(default_factory=Counter)  # outcome -> calls
    mismatches: list[str] = field(default_factory=list)
    stalled_bodies: int = 0
    stalled_answers: Counter = field(default_factory=Counter)


def plan(rng: random.Random, i: int) -> tuple[str, str, dict, dict[str, str]]:
    """(kind, path, body, headers) of call i: ~45 % plain, ~40 % streamed, ~15 % embeddings; some with faults."""
    roll = rng.random()
    prompt = f"{rng.choice(PROMPTS)} ({i})"
    headers: dict[str, str] = {"x-request-id": f"soak-{i}"}
    if roll < 0.15:
        return "embedding", "/v1/embeddings", {"model": EMBED_MODEL, "input": [prompt]}, headers
    stream = roll < 0.55
    body: dict[str, Any] = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "seed": i,
        "max_tokens": 48,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    fault = rng.random()
    if stream and fault < 0.08:
        headers["x-llmwatch-sim-fault"] = f"cut_after={rng.randint(1, 6)}"
        return "stream_reset", "/v1/chat/completions", body, headers
    if fault < 0.11:
        headers["x-llmwatch-sim-fault"] = f"slow_ms={int(STALL_S * 1000)}"
        return "upstream_stall", "/v1/chat/completions", body, headers
    return ("stream" if stream else "plain"), "/v1/chat/completions", body, headers


def judge(kind: str, direct: Outcome, proxied: Outcome) -> str | None:
    """The outcome's name when the proxied answer is the direct one or a documented answer; None otherwise."""
    if (
        proxied.status == direct.status
        and proxied.body == direct.body
        and (proxied.error is None) == (direct.error is None)
    ):
        return "as_direct" if direct.error is None else "as_direct_cut"
    if kind == "upstream_stall" and proxied.status == 504:
        return "documented_504"
    if (
        kind == "stream_reset"
        and direct.error is not None
        and proxied.error is not None
        and proxied.body == direct.body
    ):
        return "as_direct_cut"
    return None


async def stalled_body(port: int, tally: Tally, hold_s: float) -> None:
    """A client that sends a head promising a body and then stalls; it gives up after hold_s."""
    tally.stalled_bodies += 1
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        tally.stalled_answers["connect_failed"] += 1
        return
    writer.write(
        b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"model": '
    )
    await writer.drain()
    try:
        head = await asyncio.wait_for(reader.readline(), hold_s)
        tally.stalled_answers[head.split(b" ")[1].decode() if head.count(b" ") >= 1 else "closed"] += 1
    except asyncio.TimeoutError:
        tally.stalled_answers["held_by_client"] += 1
    except OSError:
        tally.stalled_answers["reset"] += 1
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def traffic(
    proxy: str, upstream: str, proxy_port: int, until: float, rate: float, tally: Tally, seed: int
) -> None:
    rng = random.Random(seed)
    sem = asyncio.Semaphore(8)
    tasks: set[asyncio.Task] = set()
    connector = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:

        async def one(i: int) -> None:
            async with sem:
                kind, path, body, headers = plan(rng, i)
                direct, proxied = await asyncio.gather(
                    call(session, upstream + path, body, headers), call(session, proxy + path, body, headers)
                )
                tally.calls[kind] += 1
                verdict = judge(kind, direct, proxied)
                if verdict is None:
                    tally.outcomes["mismatch"] += 1
                    if len(tally.mismatches) < 20:
                        tally.mismatches.append(
                            f"{kind} #{i}: direct {direct.status} {len(direct.body)} B {direct.error} / proxied {proxied.status} {len(proxied.body)} B {proxied.error}"
                        )
                else:
                    tally.outcomes[verdict] += 1

        i = 0
        next_stall = time.monotonic() + 5.0
        while time.monotonic() < until:
            task = asyncio.create_task(one(i))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
            if time.monotonic() >= next_stall:
                stall = asyncio.create_task(stalled_body(proxy_port, tally, hold_s=8.0))
                tasks.add(stall)
                stall.add_done_callback(tasks.discard)
                next_stall += 10.0
            await asyncio.sleep(1.0 / rate)
        if tasks:
            await asyncio.wait(tasks, timeout=120)


# --- the run -----------------------------------------------------------------------------------


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def total(m: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in m.items() if n == name and all(dict(ls).get(k) == x for k, x in labels.items()))


@dataclass
class Report:
    duration_s: float
    tally: Tally
    metrics: dict
    fds: tuple[int, int]
    rss: tuple[float, float]
    cpu_s: float
    faults: list[str]
    proxy_exit: int | None

    def counters(self) -> dict[str, float]:
        m = self.metrics
        dropped = {dict(ls)["reason"]: v for (n, ls), v in m.items() if n == "llmwatch_samples_dropped_total"}
        return {
            "calls_client": float(sum(self.tally.calls.values())),
            "calls_proxy": total(m, "gen_ai_client_operation_duration_seconds_count"),
            "sampled": total(m, "llmwatch_samples_total"),
            "written_files": total(m, "llmwatch_samples_written_total", sink="files"),
            "written_scorer": total(m, "llmwatch_samples_written_total", sink="scorer"),
            "written_kafka": total(m, "llmwatch_samples_written_total", sink="kafka"),
            **{f"dropped_{k}": v for k, v in sorted(dropped.items())},
            "kafka_produced": total(m, "llmwatch_kafka_produced_total"),
            "kafka_dropped": total(m, "llmwatch_kafka_dropped_total"),
            "kafka_buffered": total(m, "llmwatch_kafka_buffer_depth"),
            "shadow_mirrored": total(m, "llmwatch_shadow_mirrored_total"),
            "shadow_pairs": total(m, "llmwatch_shadow_pairs_total"),
            "shadow_pairs_dropped": total(m, "llmwatch_shadow_pairs_dropped_total"),
        }

    def table(self) -> str:
        c = self.counters()
        lines = [
            f"soak: {self.duration_s:.0f} s of traffic, faults: {', '.join(self.faults)}",
            "",
            "| calls | n |",
            "|---|---:|",
        ]
        lines += [f"| {k} | {v} |" for k, v in sorted(self.tally.calls.items())]
        lines += ["", "| outcome | n |", "|---|---:|"] + [
            f"| {k} | {v} |" for k, v in sorted(self.tally.outcomes.items())
        ]
        lines += [f"| stalled request bodies | {self.tally.stalled_bodies} ({dict(self.tally.stalled_answers)}) |"]
        lines += ["", "| counter | value |", "|---|---:|"] + [f"| {k} | {v:g} |" for k, v in c.items()]
        not_sampled = c["calls_proxy"] - c["sampled"]
        lines += [
            f"| not sampled (calls - sampled) | {not_sampled:g} |",
            "",
            "| proxy process | start | end |",
            "|---|---:|---:|",
            f"| open fds | {self.fds[0]} | {self.fds[1]} |",
            f"| RSS MiB | {self.rss[0]:.1f} | {self.rss[1]:.1f} |",
            f"| CPU s (whole run) | | {self.cpu_s:.1f} |",
        ]
        for mismatch in self.tally.mismatches:
            lines.append(f"MISMATCH {mismatch}")
        return "\n".join(lines)

    def problems(self) -> list[str]:
        """What breaks a promise; empty when the soak passed."""
        c = self.counters()
        out = []
        if self.tally.outcomes["mismatch"]:
            out.append(f"{self.tally.outcomes['mismatch']} calls answered otherwise than direct or documented")
        # The proxy also counts the stalled request bodies it answered (a 504 once read_timeout_s passed).
        if not c["calls_client"] <= c["calls_proxy"] <= c["calls_client"] + self.tally.stalled_bodies:
            out.append(f"the proxy counted {c['calls_proxy']:g} calls, the client made {c['calls_client']:g}")
        before_sinks = c["sampled"] - c.get("dropped_queue_full", 0.0) - c.get("dropped_build_error", 0.0)
        files = c["written_files"] + c.get("dropped_write_error", 0.0)
        if before_sinks != files:
            out.append(f"files: {before_sinks:g} samples reached the sinks, {files:g} written + dropped (write_error)")
        scorer = c["written_scorer"] + sum(v for k, v in c.items() if k.startswith(("dropped_scor", "dropped_scoring")))
        if before_sinks != scorer:
            out.append(f"scorer: {before_sinks:g} samples reached the sinks, {scorer:g} handed over + dropped")
        kafka = c["kafka_produced"] + c["kafka_dropped"] + c["kafka_buffered"]
        if before_sinks != kafka:
            out.append(f"kafka: {before_sinks:g} samples reached the sinks, {kafka:g} produced + dropped + buffered")
        if c["shadow_mirrored"] != c["shadow_pairs"] + c["shadow_pairs_dropped"]:
            out.append(
                f"shadow: {c['shadow_mirrored']:g} mirrored, {c['shadow_pairs'] + c['shadow_pairs_dropped']:g} paired + dropped"
            )
        if (
            c.get("dropped_sink_error", 0.0)
            or c.get("dropped_pipeline_error", 0.0)
            or c.get("dropped_build_error", 0.0)
        ):
            out.append("a sink or the pipeline raised (sink_error / pipeline_error / build_error)")
        if c["sampled"] <= 0 or c["written_files"] <= 0 or c["shadow_pairs"] <= 0:
            out.append("nothing was sampled, written or mirrored: the soak did not exercise the pipeline")
        if "disk_full" in self.faults and c.get("dropped_write_error", 0.0) <= 0:
            out.append("the full disk dropped nothing: the fault did not happen")
        if self.fds[1] > self.fds[0] + 16:
            out.append(f"file descriptors grew {self.fds[0]} -> {self.fds[1]}")
        if self.rss[1] > self.rss[0] + 64:
            out.append(f"RSS grew {self.rss[0]:.0f} -> {self.rss[1]:.0f} MiB")
        if self.proxy_exit != 0:
            out.append(f"the proxy exited {self.proxy_exit} at SIGTERM")
        return out


def _config(tmp: Path, upstream: str, data: Path, bootstrap: str) -> Path:
    cfg = {
        "upstream": upstream,
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "data_dir": str(data),
        "proxy": {"read_timeout_s": READ_TIMEOUT_S},
        "sampling": {"rate": 0.5},
        "scoring": {"enabled": True, "embeddings": False, "nice": 10},
        "kafka": {"enabled": True, "bootstrap_servers": [bootstrap], "delivery_timeout_ms": 5000, "max_buffered": 2000},
        "shadow": {
            "enabled": True,
            "candidates": [{"name": "cand", "upstream": upstream, "rate": 0.3, "max_concurrency": 2}],
        },
        "logging": {"format": "json", "level": "info"},
    }
    path = tmp / "llmwatch.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _broker(tmp: Path) -> Any:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.kafka_broker import Broker, broker_binary

    return Broker(broker_binary(), tmp)


def _kill_child(proxy: Child, which: str) -> int:
    """SIGKILL the scorer or the mirror child of the proxy, by PID; returns the PID."""
    mirror = proxy.events("shadow_mirror_ready")[-1]["pid"]
    spawned = [pid for pid, cmd in children(proxy.pid).items() if "spawn_main" in cmd]
    target = mirror if which == "mirror" else next(p for p in spawned if p != mirror)
    os.kill(target, signal.SIGKILL)
    return target


async def run_soak(
    duration_s: float, *, rate: float = 6.0, workdir: Path | None = None, seed: int = 1, out: Any = sys.stdout
) -> Report:
    tmp = Path(workdir or tempfile.mkdtemp(prefix="llmwatch-soak-"))
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    broker = _broker(tmp)
    broker.start()
    sim = Child(
        [
            sys.executable,
            "-m",
            "llmwatch.agent.apps.simulator",
            "--port",
            "0",
            "--latency-scale",
            "0.05",
            "--seed",
            "1",
        ],
        tmp / "sim.log",
        env,
    )
    faults: list[str] = []
    proxy: Child | None = None
    try:
        upstream = sim.wait_for(r"url=(http://127\.0\.0\.1:\d+)").group(1)
        with small_tmpfs(tmp / "data", "4m") as data:
            proxy = Child(
                [
                    sys.executable,
                    "-m",
                    "llmwatch.agent.cli",
                    "proxy",
                    "--config",
                    str(_config(tmp, upstream, data, broker.bootstrap)),
                ],
                tmp / "proxy.log",
                env,
            )
            proxy.wait_for(r'"event": "agent_started"')
            ports = proxy.events("agent_started")[0]
            proxy.wait_for(r'"event": "scorer_ready"')
            proxy.wait_for(r'"event": "shadow_mirror_ready"')
            base = f"http://127.0.0.1:{ports['proxy_port']}"
            metrics_url = f"http://127.0.0.1:{ports['metrics_port']}/metrics"
            tally = Tally()
            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            until = t0 + duration_s
            warm = asyncio.create_task(
                traffic(base, upstream, ports["proxy_port"], t0 + min(10.0, duration_s * 0.05), rate, tally, seed)
            )
            await warm
            fds0, rss0, cpu0 = fds(proxy.pid), rss_mib(proxy.pid), cpu_s(proxy.pid)
            main = asyncio.create_task(traffic(base, upstream, ports["proxy_port"], until, rate, tally, seed + 1))

            async def at(fraction: float) -> None:
                await asyncio.sleep(max(0.0, t0 + duration_s * fraction - time.monotonic()))

            await at(0.15)
            filler = fill(data)
            faults.append("disk_full")
            await at(0.25)
            filler.unlink()
            await at(0.32)
            pid = await loop.run_in_executor(None, _kill_child, proxy, "scorer")
            faults.append(f"scorer_killed(pid {pid})")
            await at(0.45)
            pid = await loop.run_in_executor(None, _kill_child, proxy, "mirror")
            faults.append(f"mirror_killed(pid {pid})")
            await at(0.58)
            broker.stop()
            faults.append("kafka_stopped")
            await at(0.66)
            await loop.run_in_executor(None, broker.start)
            faults.append("kafka_started")
            await main
            # Let the pipeline drain what the last calls queued before counting.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                m = scrape(metrics_url)
                if total(m, "llmwatch_queue_depth") == 0 and total(m, "llmwatch_shadow_mirrored_total") <= total(
                    m, "llmwatch_shadow_pairs_total"
                ) + total(m, "llmwatch_shadow_pairs_dropped_total"):
                    break
                await asyncio.sleep(0.5)
            fds1, rss1, cpu1 = fds(proxy.pid), rss_mib(proxy.pid), cpu_s(proxy.pid)
            metrics = scrape(metrics_url)
            code = proxy.stop()
            report = Report(
                time.monotonic() - t0, tally, metrics, (fds0, fds1), (rss0, rss1), cpu1 - cpu0, faults, code
            )
    finally:
        if proxy is not None:
            proxy.stop(signal.SIGKILL)
        sim.stop()
        broker.stop()
    print(report.table(), file=out)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds of traffic (default 1800)")
    parser.add_argument(
        "--rate", type=float, default=6.0, help="calls per second, each sent direct and through the proxy"
    )
    parser.add_argument("--workdir", help="keep logs here (default: a new temporary directory)")
    args = parser.parse_args()
    workdir = Path(args.workdir) if args.workdir else None
    report = asyncio.run(run_soak(args.duration, rate=args.rate, workdir=workdir))
    problems = report.problems()
    for p in problems:
        print(f"PROBLEM: {p}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
