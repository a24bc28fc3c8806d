"""CPU per proxied call of each thread of `llmwatch proxy`, from /proc: where the proxy's CPU goes.

`bench/peers.py` gives a proxy's whole CPU per call beside nginx's; this splits llmwatch's own by
thread (the event loop, which is the process's first thread, and the rest: the sample pipeline,
the scorer's or the mirror's hand-off threads when they exist), for one configuration or several
side by side. The upstream is `bench/upstream.py` on core 0 with the load generator; the proxy's
threads are pinned to core 1 once it is up, as in peers.py.

    python bench/proxy_threads.py --rate 200 --mode plain --seconds 15 --rounds 3 \\
        --config default= --config no-sampling=LLMWATCH_SAMPLING__RATE=0
    python bench/proxy_threads.py --config new= --tree /work/main --config old=   # this tree against another checkout

A `--config NAME=KEY=VALUE[,KEY=VALUE...]` adds environment settings (any LLMWATCH_* key); the
configurations run in alternating rounds, so that drift of the machine falls on all of them.
`--tree DIR` runs the configurations named after it from another checkout (with this venv), so
one run can compare two trees side by side; configurations before any `--tree` run this one.
`--shadow-rate R` mirrors that share of calls to a second upstream (0: shadow off).
`--floor` runs the configurations named after it on `bench/relay_floor.py` instead of the proxy: a
Python relay on uvloop that parses nothing (or, with `RELAY_FLOOR_PARSE=1`, only parses both heads),
the floor under the relay core's figure:

    python bench/proxy_threads.py --config relay=LLMWATCH_CAPTURE__ROUTES=[] \\
        --floor --config floor= --config floor-parse=RELAY_FLOOR_PARSE=1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BODY, STREAM_BODY, can_pin, editable_launcher, free_port, open_loop_checked, pinned, wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def thread_ticks(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of `pid`: the scheduler's own sum (ns) where /proc shows it
    (`sched`, kernels with scheduler debug), else utime + stime in clock ticks (10 ms each: at
    2,000 calls a tick is 5 µs per call, as coarse as the differences measured here)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/sched") as fh:
                for line in fh:
                    if line.startswith("se.sum_exec_runtime"):
                        out[int(tid)] = float(line.split(":")[1]) / 1e3  # ms -> s
                        break
            if int(tid) in out:
                continue
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def one_run(tree: Path | None, env_extra: dict[str, str], args: argparse.Namespace) -> tuple[float, float]:
    """(event loop, other threads) CPU in µs per call for one fresh proxy (tree None: the floor)."""
    work = Path(tempfile.mkdtemp(prefix="llmwatch-threads-"))
    procs = []
    try:
        up_port = free_port()
        procs.append(
            subprocess.Popen(pinned([sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", str(up_port)], "0"))
        )
        asyncio.run(wait_ready(f"http://127.0.0.1:{up_port}"))
        env = {**os.environ, "LLMWATCH_LOGGING__LEVEL": "warning", "LLMWATCH_SCORING__ENABLED": "false", **env_extra}
        if args.shadow_rate > 0:
            shadow_port = free_port()
            procs.append(
                subprocess.Popen(
                    pinned([sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", str(shadow_port)], "0")
                )
            )
            asyncio.run(wait_ready(f"http://127.0.0.1:{shadow_port}"))
            env.update(
                {
                    "LLMWATCH_SHADOW__ENABLED": "true",
                    "LLMWATCH_SHADOW__CPU_AFFINITY": "0",
                    "LLMWATCH_SHADOW__CANDIDATES": json.dumps(
                        [
                            {
                                "name": "bench",
                                "upstream": f"http://127.0.0.1:{shadow_port}",
                                "rate": args.shadow_rate,
                                "max_concurrency": 256,
                            }
                        ]
                    ),
                }
            )
        port, metrics_port = free_port(), free_port()
        # Another checkout runs with this venv through its editable finder (cwd alone would mix trees).
        if tree is None:
            base = [sys.executable, str(ROOT / "bench" / "relay_floor.py")]
        elif tree.resolve() == ROOT:
            base = [sys.executable, "-m", "llmwatch.agent.cli"]
        else:
            base = editable_launcher(tree)
        proxy = subprocess.Popen(
            pinned(
                [
                    *base,
                    "proxy",
                    "--upstream",
                    f"http://127.0.0.1:{up_port}",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--metrics-listen",
                    f"127.0.0.1:{metrics_port}",
                    "--data-dir",
                    str(work / "data"),
                ],
                "0,1",
            ),
            env=env,
            cwd=tree or ROOT,
            stdout=subprocess.DEVNULL,
        )
        procs.append(proxy)
        url = f"http://127.0.0.1:{port}"
        asyncio.run(wait_ready(url))
        if can_pin():
            subprocess.run(["taskset", "-a", "-p", "-c", "1", str(proxy.pid)], check=False, stdout=subprocess.DEVNULL)
        body = BODY if args.mode == "plain" else STREAM_BODY
        asyncio.run(open_loop_checked(url + "/v1/chat/completions", body, args.rate, 2.0, expected=None))  # warm-up
        before = thread_ticks(proxy.pid)
        out = asyncio.run(open_loop_checked(url + "/v1/chat/completions", body, args.rate, args.seconds, expected=None))
        after = thread_ticks(proxy.pid)
        calls = max(len(out.latency_ms), 1)
        scale = 1e6 / calls  # seconds -> µs per call
        loop = (after.get(proxy.pid, 0) - before.get(proxy.pid, 0)) * scale
        others = sum(after[t] - before.get(t, 0) for t in after if t != proxy.pid) * scale
        return loop, others
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def parse_config(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition("=")
    env = dict(item.split("=", 1) for item in rest.split(",") if item)
    return name, env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=200.0, help="calls per second, open loop (default 200)")
    ap.add_argument("--mode", choices=("plain", "stream"), default="plain", help="plain calls or 30-chunk streams")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run (default 15)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument(
        "--config",
        action="append",
        dest="order",
        type=lambda text: ("config", text),
        default=[],
        help="NAME=KEY=VALUE[,KEY=VALUE]: a configuration by its LLMWATCH_* settings (repeatable; default: the shipped defaults)",
    )
    ap.add_argument(
        "--tree",
        action="append",
        dest="order",
        type=lambda text: ("tree", text),
        help="checkout that runs the configurations named after it (default: this one)",
    )
    ap.add_argument(
        "--floor",
        action="append_const",
        dest="order",
        const=("floor", ""),
        help="the configurations named after it run bench/relay_floor.py, not the proxy",
    )
    ap.add_argument(
        "--shadow-rate",
        type=float,
        default=0.0,
        help="share of calls mirrored to a second upstream (default 0: shadow off)",
    )
    args = ap.parse_args()
    configs: list[tuple[str, dict[str, str], Path | None]] = []
    tree: Path | None = ROOT
    for kind, text in args.order:
        if kind == "floor":
            tree = None
        elif kind == "tree":
            tree = Path(text)
        else:
            configs.append((*parse_config(text), tree))
    if not configs:
        configs = [("default", {}, tree)]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in configs}
    for rnd in range(args.rounds):
        for name, env, tree in configs:
            loop, others = one_run(tree, env, args)
            results[name].append((loop, others))
            print(
                f"round {rnd + 1}/{args.rounds} {name}: event loop {loop:,.0f} µs, other threads {others:,.0f} µs per call",
                file=sys.stderr,
            )
    print(
        f"\n{args.mode} calls at {args.rate:g}/s, {args.seconds:g} s per run, {args.rounds} alternating rounds; median (min-max) µs of CPU per call\n"
    )
    print("| configuration | event-loop thread | other threads | total |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        cols = [[r[0] for r in rows], [r[1] for r in rows], [r[0] + r[1] for r in rows]]
        cells = [f"{statistics.median(c):,.0f} ({min(c):,.0f}-{max(c):,.0f})" for c in cols]
        print(f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} |")


if __name__ == "__main__":
    main()
