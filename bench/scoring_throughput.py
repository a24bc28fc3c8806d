"""Scoring throughput, and what saturated scorers cost the proxy.

1. Rule checks alone: samples/s on one core (process CPU time), default rule suite and every rule kind.
2. Embedding checks (answer relevance, all-MiniLM-L6-v2 on the CPU, 2 torch threads) at batch
   sizes 1, 16 and 64: samples/s (wall clock), fp32 and int8-quantized.
3. The proxy's latency while its scorer process is saturated (100% sampling, embeddings on, the
   scorer far behind and dropping), against an idle proxy (scoring off) in the same run,
   alternating, same upstream, same paired delays. Both proxies, and so their scorer
   processes, are pinned to core 1 with the load generator and upstream on core 0: the scorer
   competes with its own proxy for one core, the worst case of a sidecar with a 1-CPU limit.

    python bench/scoring_throughput.py [--samples 3000] [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import BODY, closed_loop, free_port, pinned, wait_ready  # noqa: E402

from llmwatch.core.records import Sample  # noqa: E402
from llmwatch.scorers.checks.config import CheckSpec, ScoringSection  # noqa: E402
from llmwatch.scorers.checks.suite import Suite, build_suite  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ANSWERS = [
    "Roast the chicken at 220 C for about 20 minutes per 500 g plus 20 minutes, until the juices run clear. "
    "Rest it for ten minutes before carving so the meat stays moist. Season the skin generously and dry it first for crispness.",
    '```json\n{"answer": "Lentils are rich in protein and fibre", "nutrients": ["iron", "folate", "potassium"], "confidence": 0.86}\n```',
    "I'm sorry, but I can't help with that.",
    "La mejor época para visitar Japón es la primavera, cuando florecen los cerezos, o el otoño, con temperaturas suaves y colores intensos.",
    "SELECT customer_id, SUM(amount) AS revenue FROM orders GROUP BY customer_id ORDER BY revenue DESC LIMIT 5; "
    "This groups orders by customer, totals the amounts and keeps the five largest totals.",
]
PROMPTS = [
    "How do I roast a chicken?",
    "Give JSON about lentils.",
    "Help me pick a lock.",
    "¿Cuándo visitar Japón?",
    "Top five customers by revenue in SQL?",
]


def samples(n: int) -> list[Sample]:
    out = []
    for i in range(n):
        k = i % len(ANSWERS)
        request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPTS[k]}]}
        if k == 1:
            request["response_format"] = {"type": "json_object"}
        out.append(
            Sample(
                id=f"s{i}",
                timestamp=datetime.now(timezone.utc),
                model="gpt-4o-mini",
                model_version="A",
                status=200,
                latency_ms=900.0 + i % 50,
                ttft_ms=120.0,
                cost_usd=0.0004,
                usage={"input_tokens": 30, "output_tokens": 60},
                request=request,
                response={
                    "choices": [
                        {"message": {"role": "assistant", "content": ANSWERS[k] + f" ({i})"}, "finish_reason": "stop"}
                    ]
                },
            )
        )
    return out


def rule_throughput(items: list[Sample]) -> list[tuple[str, float]]:
    every_kind = [
        CheckSpec(name="json_valid", kind="json_valid", params={"allow_fences": True}),
        CheckSpec(
            name="json_schema",
            kind="json_schema",
            params={"allow_fences": True, "schema": {"type": "object", "properties": {"answer": {"type": "string"}}}},
        ),
        CheckSpec(name="regex", kind="regex", params={"must_not_match": ["(?i)lorem ipsum", "TODO"]}),
        CheckSpec(name="length", kind="length", params={"max_chars": 4000, "max_tokens": 1000}),
        CheckSpec(name="refusal", kind="refusal"),
        CheckSpec(name="not_empty_or_truncated", kind="not_empty_or_truncated"),
        CheckSpec(name="language_match", kind="language_match"),
        CheckSpec(name="latency_budget", kind="latency_budget", params={"max_latency_ms": 2000}),
        CheckSpec(name="cost_budget", kind="cost_budget", params={"max_cost_usd": 0.01}),
        CheckSpec(name="pii_leak", kind="pii_leak"),
    ]
    rows = []
    for label, suite in (
        ("default rule suite (5 checks)", build_suite(ScoringSection(embeddings=False))),
        ("every rule kind (10 checks)", Suite(every_kind)),
    ):
        suite.score(items[:200])
        best = 0.0
        for _ in range(3):
            t = time.process_time()
            suite.score(items)
            best = max(best, len(items) / (time.process_time() - t))
        rows.append((label, best))
    return rows


def embedding_throughput(items: list[Sample], quantize: bool) -> list[tuple[int, float]]:
    from llmwatch.scorers.checks.embeddings import EmbeddingScorer

    rows = []
    scorer = EmbeddingScorer([("answer_relevance", "embedding_relevance", {})], threads=2, quantize=quantize)
    for batch in (1, 16, 64):
        pool = items[:256]
        scorer.score_batch(pool[:batch])
        done, t = 0, time.perf_counter()
        while time.perf_counter() - t < 8.0:
            for i in range(0, len(pool), batch):
                scorer.score_batch(pool[i : i + batch])
                done += len(pool[i : i + batch])
                if time.perf_counter() - t >= 8.0:
                    break
        rows.append((batch, done / (time.perf_counter() - t)))
    return rows


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def proxy_under_saturated_scoring(requests: int, concurrency: int) -> tuple[list[str], dict]:
    up_port = free_port()
    upstream = subprocess.Popen(
        pinned([sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", str(up_port)], "0")
    )
    procs, ports = {}, {}
    data = tempfile.mkdtemp(prefix="llmwatch-bench-")
    for label, scoring in (("idle (scoring off)", "false"), ("saturated scorer", "true")):
        port, mport = free_port(), free_port()
        env = {
            **os.environ,
            "LLMWATCH_LOGGING__LEVEL": "warning",
            "LLMWATCH_SCORING__ENABLED": scoring,
            "LLMWATCH_SAMPLING__RATE": "1.0",
            "LLMWATCH_SCORING__MAX_PENDING": "500",
        }
        procs[label] = subprocess.Popen(
            pinned(
                [
                    sys.executable,
                    "-m",
                    "llmwatch.agent.cli",
                    "proxy",
                    "--upstream",
                    f"http://127.0.0.1:{up_port}",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--metrics-listen",
                    f"127.0.0.1:{mport}",
                    "--data-dir",
                    f"{data}/{scoring}",
                ],
                "1",
            ),
            env=env,
            cwd=ROOT,
        )
        ports[label] = (port, mport)
    if shutil.which("taskset"):
        os.sched_setaffinity(0, {0})
    lat: dict[str, list[np.ndarray]] = {k: [] for k in procs}
    try:
        asyncio.run(wait_ready(f"http://127.0.0.1:{up_port}"))
        for port, _ in ports.values():
            asyncio.run(wait_ready(f"http://127.0.0.1:{port}"))
            asyncio.run(closed_loop(f"http://127.0.0.1:{port}", BODY, 300, 16))
        time.sleep(20)  # let the scorer load its model and fall behind on the warm-up samples
        for _ in range(2):
            for label, (port, _) in ports.items():
                got, _ = asyncio.run(closed_loop(f"http://127.0.0.1:{port}", BODY, requests // 2, concurrency))
                lat[label].append(got)
        mport = ports["saturated scorer"][1]
        state = {
            "scored_check_results": metric(mport, "llmwatch_check_total"),
            "dropped_scoring_queue_full": metric(mport, 'llmwatch_samples_dropped_total{reason="scoring_queue_full"}'),
            "pending": metric(mport, "llmwatch_scoring_pending"),
        }
    finally:
        for p in procs.values():
            p.terminate()
        upstream.terminate()
        for p in [*procs.values(), upstream]:
            p.wait(20)
        shutil.rmtree(data, ignore_errors=True)
    lines = ["| proxy | p50 ms | p99 ms |", "|---|---|---|"]
    stats = {}
    for label, parts in lat.items():
        arr = np.concatenate(parts)
        p50, p99 = np.percentile(arr, [50, 99])
        stats[label] = (p50, p99)
        lines.append(f"| {label} | {p50:.2f} | {p99:.2f} |")
    d50 = stats["saturated scorer"][0] - stats["idle (scoring off)"][0]
    d99 = stats["saturated scorer"][1] - stats["idle (scoring off)"][1]
    lines.append(f"| difference | {d50:+.2f} | {d99:+.2f} |")
    return lines, state


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=3000)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--skip-proxy", action="store_true")
    args = p.parse_args()
    items = samples(args.samples)
    out = [
        f"llmwatch scoring throughput, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores",
        "",
        "| rule checks (1 core) | samples/s |",
        "|---|---|",
    ]
    out += [f"| {label} | {rate:,.0f} |" for label, rate in rule_throughput(items)]
    fp32, int8 = embedding_throughput(items, False), embedding_throughput(items, True)
    out += [
        "",
        "| embedding relevance (2 torch threads), batch size | fp32 samples/s | int8 (`quantize_embeddings`) samples/s |",
        "|---|---|---|",
    ]
    out += [f"| {b} | {r1:,.1f} | {r2:,.1f} |" for (b, r1), (_, r2) in zip(fp32, int8)]
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()
    if not args.skip_proxy:
        lines, state = proxy_under_saturated_scoring(args.requests, args.concurrency)
        sys.stdout.write(
            f"\nproxy latency, {args.requests} requests at {args.concurrency} in flight, upstream 50 ms (paired delays):\n\n"
            + "\n".join(lines)
            + "\n"
        )
        sys.stdout.write(f"\nsaturated scorer state at the end: {state}\n")


if __name__ == "__main__":
    main()
