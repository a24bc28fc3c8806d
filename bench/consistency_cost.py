"""What the `consistency:` probe costs: CPU per re-asked call, extra upstream calls, and USD.

A real `llmwatch simulate` upstream (answering at once, `--latency-scale 0`) and a real
`llmwatch proxy` in front of it, run twice with the same paced loop of N chat calls (each a
different question): once with the probe off, once on at `--rate` (default 1.0, so that every call
is re-asked and the per-re-ask figure stands out of the noise). Both runs capture every call
(`sampling.rate: 1.0`, which the probe needs: it re-asks captured calls) with scoring off, so the
difference between them is the probe's. Measured from /proc, utime + stime per process:

* the proxy process (all its threads: the event loop's offer to the mirror's bounded queue, the
  hand-off thread, the pair lines and scores coming back): on minus off, per re-ask;
* the probe's child process (`shadow_mirror_ready`'s pid: the re-ask's HTTP call, the pair, the
  comparison, the pair file), whole, per re-ask.

Extra upstream calls per client call: `llmwatch_shadow_mirrored_total{candidate="consistency"}`
over the calls sent (the simulator answers every one, so it is also the upstream's extra load).
USD: a re-ask costs what the call cost, so the probe costs `rate x` the price of a call; the
token counts are the simulator's `usage` of the client calls, priced with llmwatch/core/prices.json
for `--model` (sent as the request's model, so the proxy's own
`llmwatch_shadow_spend_usd_total{candidate="consistency"}` prices it too: printed beside it).

    python bench/consistency_cost.py [--calls 1200] [--per-s 300] [--rate 1.0] [--rounds 3] [--model gpt-4o-mini]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from common import cpu_seconds  # noqa: E402
from helpers.procs import Proc, agent_env, agent_started, simulator_url  # noqa: E402

from llmwatch.core.pricing import PriceTable  # noqa: E402

TOPICS = [
    "store fresh basil", "learn Python for data analysis", "train for a half marathon", "improve my sleep",
    "pack for a week of hiking", "keep a sourdough starter alive", "start a personal budget", "repot a houseplant",
    "clean a cast iron pan", "pick a first telescope", "brew pour-over coffee", "prepare for a job interview",
]  # fmt: skip


def question(i: int) -> str:
    return f"How should I {TOPICS[i % len(TOPICS)]}? Question number {i}, please keep it practical."


def scrape(metrics_port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(values: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in values.items() if n == name and want <= ls)


async def paced_loop(
    base: str, calls: int, concurrency: int, model: str, offset: int, per_s: float
) -> list[tuple[int, int]]:
    """`calls` chat calls, call i not before `i / per_s` s, at most `concurrency` at a time (a pace the
    probe's child keeps up with, so no re-ask is skipped for its concurrency cap); the (prompt,
    completion) tokens of each answer."""
    usage: list[tuple[int, int]] = []
    todo = iter(range(offset, offset + calls))
    start = time.monotonic()

    async def worker(session: aiohttp.ClientSession) -> None:
        for i in todo:
            wait = start + (i - offset) / per_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            body = {"model": model, "messages": [{"role": "user", "content": question(i)}], "seed": i}
            async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
                data = await resp.json()
                if resp.status != 200:
                    raise SystemExit(f"call {i}: HTTP {resp.status}: {data}")
            u = data.get("usage") or {}
            usage.append((int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0))))

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return usage


def settle(pids: list[int], metrics_port: int, probe: bool, limit_s: float = 60.0) -> dict:
    """Every re-ask sent has been compared or failed, and the processes stopped using CPU."""
    deadline = time.monotonic() + limit_s
    while True:
        values = scrape(metrics_port)
        sent = total(values, "llmwatch_shadow_mirrored_total", candidate="consistency")
        done = total(values, "llmwatch_consistency_pairs_total") + total(
            values, "llmwatch_shadow_candidate_errors_total", candidate="consistency"
        )
        if not probe or done >= sent:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"re-asks not settled: sent {sent}, compared or failed {done}")
        time.sleep(0.1)
    last = sum(cpu_seconds(p) for p in pids)
    while time.monotonic() < deadline:  # the pair files and the scores sent back belong to the re-asks
        time.sleep(0.3)
        now = sum(cpu_seconds(p) for p in pids)
        if now - last < 0.005:
            break
        last = now
    return scrape(metrics_port)


def one_run(upstream: str, args: argparse.Namespace, probe: bool, offset: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="llmwatch-consistency-cost-"))
    env = {
        "LLMWATCH_SAMPLING__RATE": "1.0",
        "LLMWATCH_SCORING__ENABLED": "false",
        "LLMWATCH_LOGGING__LEVEL": "info",
    }
    if probe:
        env |= {
            "LLMWATCH_CONSISTENCY__ENABLED": "true",
            "LLMWATCH_CONSISTENCY__RATE": str(args.rate),
            "LLMWATCH_CONSISTENCY__MAX_REQUESTS_PER_MINUTE": "1000000",
            "LLMWATCH_CONSISTENCY__MAX_CONCURRENCY": "1024",
            "LLMWATCH_CONSISTENCY__MAX_QUEUE": "10000",
        }
    argv = [sys.executable, "-m", "llmwatch.agent.cli", "proxy", "--upstream", upstream, "--listen", "127.0.0.1:0"]
    argv += ["--metrics-listen", "127.0.0.1:0", "--data-dir", str(work / "data")]
    proxy = Proc(argv, env=agent_env(**env))
    try:
        ports = agent_started(proxy)
        child = proxy.wait_event("shadow_mirror_ready", 120)["pid"] if probe else None
        base = f"http://127.0.0.1:{ports['proxy_port']}"
        asyncio.run(paced_loop(base, 20, args.concurrency, args.model, offset + 10_000, args.per_s))  # warm-up
        pids = [proxy.pid] + ([child] if child else [])
        settle(pids, ports["metrics_port"], probe)
        before = scrape(ports["metrics_port"])
        cpu0 = {p: cpu_seconds(p) for p in pids}
        wall0 = time.monotonic()
        usage = asyncio.run(paced_loop(base, args.calls, args.concurrency, args.model, offset, args.per_s))
        wall = time.monotonic() - wall0
        after = settle(pids, ports["metrics_port"], probe)
        cpu = {p: cpu_seconds(p) - cpu0[p] for p in pids}

        def delta(name: str, **labels: str) -> float:
            return total(after, name, **labels) - total(before, name, **labels)

        out = {
            "calls": len(usage),
            "wall_s": wall,
            "usage": usage,
            "proxy_cpu_s": cpu[proxy.pid],
            "child_cpu_s": cpu[child] if child else 0.0,
            "reasks": delta("llmwatch_shadow_mirrored_total", candidate="consistency"),
            "skipped": delta("llmwatch_shadow_skipped_total", candidate="consistency"),
            "skipped_by": {
                dict(ls)["reason"]: v - before.get((name, ls), 0.0)
                for (name, ls), v in after.items()
                if name == "llmwatch_shadow_skipped_total"
                and dict(ls).get("candidate") == "consistency"
                and v > before.get((name, ls), 0.0)
            },
            "compared": delta("llmwatch_consistency_pairs_total"),
            "spend_usd": delta("llmwatch_shadow_spend_usd_total", candidate="consistency"),
        }
        proxy.popen.send_signal(signal.SIGTERM)
        proxy.popen.wait(timeout=60)
        return out
    finally:
        proxy.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1200, help="client calls per run (probe off, then on)")
    ap.add_argument("--per-s", type=float, default=300.0, help="client calls a second at most")
    ap.add_argument("--rounds", type=int, default=3, help="off/on pairs, alternating; the median is printed")
    ap.add_argument("--rate", type=float, default=1.0, help="consistency.rate of the probe-on run")
    ap.add_argument("--model", default="gpt-4o-mini", help="the model the calls name; priced from prices.json")
    ap.add_argument("--concurrency", type=int, default=8, help="client calls in flight at most")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    sim = Proc([sys.executable, "-m", "llmwatch.agent.cli", "simulate", "--port", "0", "--latency-scale", "0"])
    try:
        upstream = simulator_url(sim)
        runs = [(one_run(upstream, args, False, 0), one_run(upstream, args, True, 0)) for _ in range(args.rounds)]
    finally:
        sim.stop()
    # The round whose probe-on proxy CPU is the median (a busy shared machine: the others are printed too).
    runs.sort(key=lambda r: r[1]["proxy_cpu_s"] - r[0]["proxy_cpu_s"])
    off, on = runs[len(runs) // 2]

    n = on["calls"]
    reasks = on["reasks"]
    load = os.getloadavg()
    print(
        f"consistency probe cost, {n} client calls per run at {args.per_s:.0f}/s, {args.concurrency} at most at a time, simulator upstream "
        f"answering at once; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load[0]:.1f} {load[1]:.1f}"
    )
    print(f"  probe off: proxy {off['proxy_cpu_s'] * 1e6 / off['calls']:.0f} us CPU a call, {off['wall_s']:.1f} s wall")
    print(
        f"  probe on (rate {args.rate}): proxy {on['proxy_cpu_s'] * 1e6 / n:.0f} us CPU a call, {on['wall_s']:.1f} s wall; "
        f"{reasks:.0f} re-asks sent, {on['skipped']:.0f} skipped {on['skipped_by']}, {on['compared']:.0f} compared"
    )
    if reasks <= 0:
        raise SystemExit("no re-ask was sent: nothing to measure")
    extra_proxy = (on["proxy_cpu_s"] - off["proxy_cpu_s"] * n / off["calls"]) / reasks
    child = on["child_cpu_s"] / reasks
    print(
        f"  CPU per re-asked call: proxy process +{extra_proxy * 1e6:.0f} us (on minus off), probe child {child * 1e3:.2f} ms"
    )
    if len(runs) > 1:
        each = ", ".join(
            f"+{(b['proxy_cpu_s'] - a['proxy_cpu_s'] * b['calls'] / a['calls']) / max(b['reasks'], 1) * 1e6:.0f} us / "
            f"{b['child_cpu_s'] / max(b['reasks'], 1) * 1e3:.2f} ms"
            for a, b in runs
        )
        print(f"  every round (proxy / child per re-ask): {each}")
    print(f"  extra upstream calls per client call: {reasks / n:.3f} (at consistency.rate {args.rate})")
    prices = PriceTable()
    tokens_in = sum(u[0] for u in on["usage"]) / n
    tokens_out = sum(u[1] for u in on["usage"]) / n
    per_call = prices.cost(args.model, round(tokens_in), round(tokens_out))
    if per_call is None:
        print(f"  USD: {args.model} is not in the price table")
        return
    print(
        f"  USD ({args.model}: ${prices.cost(args.model, 1_000_000, 0):.2f} in / ${prices.cost(args.model, 0, 1_000_000):.2f} "
        f"out per 1M tokens; simulator usage {tokens_in:.0f} in + {tokens_out:.0f} out a call): "
        f"${per_call * 1000:.4f} per 1,000 calls, so the probe adds rate x that = "
        f"${args.rate * per_call * 1000:.4f} per 1,000 client calls at rate {args.rate}, "
        f"${0.02 * per_call * 1000:.5f} at the default 0.02"
    )
    print(
        f"  the proxy's own llmwatch_shadow_spend_usd_total{{candidate=consistency}}: ${on['spend_usd']:.4f} for {reasks:.0f} re-asks"
    )


if __name__ == "__main__":
    main()
