"""How the offline commands scale: wall time and peak RSS at growing sample counts, with the slope.

Rule checks only (`scoring.embeddings: false`), as a month of a service's sampled traffic would be
read; `--embeddings` turns the embedding checks on (`score` then caches the vectors that `baseline
freeze` and `drift` read). For each size N the samples of two versions (A the first half, B the second) are generated
straight to a JSON Lines file (never held in memory here), then each command runs as a fresh
process under `/usr/bin/time`, which reports its peak resident set:

    llmwatch score --in samples --out scores
    llmwatch baseline freeze --samples --scores --model-version A
    llmwatch drift --baseline --samples --scores --model-version B
    llmwatch report --samples --scores --format json
    llmwatch suite build --samples --scores --similarity text
    llmwatch review export --samples --scores --versions A,B --n 100
    llmwatch shadow report --pairs --format json    (N generated pairs, one candidate)
    llmwatch canary --samples --stable A --canary B --format json
                                          (N generated samples, A and B alternating; scored in the run)

The table gives seconds and peak RSS per command and size, and the slope between the two largest
sizes: log(t2/t1) / log(n2/n1) (1.0 is linear) and MB of peak RSS per 1,000 samples added.

    python bench/offline_scale.py [--sizes 10000,100000,1000000] [--commands score,freeze,drift,report,suite,review,shadow,canary]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
TOPICS = [
    ("code", "Write a Python function that {} and explain it.", "def f(x):\n    return x  # {}"),
    ("json", "Return a JSON object describing {}.", '{{"item": "{}", "ok": true}}'),
    ("support", "My order about {} has not arrived, what can I do?", "Sorry about {}; please check the tracking link."),
    (
        "summary",
        "Summarise the following note about {} in two sentences.",
        "The note is about {}. It asks for a reply.",
    ),
]
WORDS = "apples billing caching dates engines forms graphs hashes invoices joins keys lists maps".split()


def write_samples(path: Path, n: int, seed: int = 7, *, alternating: bool = False) -> None:
    """N samples, versions A then B (or A and B alternating: served side by side, for `canary`), streamed to `path` in chunks."""
    rng = random.Random(seed)
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with open(path, "wb") as out:
        chunk: list[bytes] = []
        for i in range(n):
            version = ("A" if i % 2 == 0 else "B") if alternating else ("A" if i < n // 2 else "B")
            category, prompt, answer = TOPICS[i % len(TOPICS)]
            word = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {i % 997}"
            out_tokens = max(1, int(rng.lognormvariate(4.0 if version == "A" else 3.8, 0.4)))
            record = {
                "schema_version": 1,
                "id": f"s{i}",
                "timestamp": (t0 + timedelta(seconds=6 * i)).isoformat(),
                "route": "/v1/chat/completions",
                "operation": "chat",
                "model": "gpt-4o-mini",
                "model_version": version,
                "status": 200,
                "latency_ms": round(rng.lognormvariate(6.8, 0.3), 3),
                "ttft_ms": round(rng.lognormvariate(5.0, 0.3), 3),
                "usage": {"input_tokens": 20 + i % 40, "output_tokens": out_tokens},
                "cost_usd": 0.0001,
                "metadata": {"category": category},
                "request": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt.format(word)}]},
                "response": {
                    "choices": [
                        {"message": {"role": "assistant", "content": answer.format(word)}, "finish_reason": "stop"}
                    ]
                },
            }
            chunk.append(orjson.dumps(record) + b"\n")
            if len(chunk) >= 10_000:
                out.write(b"".join(chunk))
                chunk.clear()
        out.write(b"".join(chunk))


def write_pairs(path: Path, n: int, seed: int = 11) -> None:
    """N shadow pairs of one candidate (both sides full samples, rule-check verdicts), streamed to `path`."""
    rng = random.Random(seed)
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)

    def side(i: int, ms: float, answer: str, prompt: str) -> dict:
        return {
            "id": f"p{i}-{ms:.0f}",
            "timestamp": (t0 + timedelta(seconds=6 * i)).isoformat(),
            "model": "gpt-4o-mini",
            "status": 200 if rng.random() > 0.01 else 502,
            "latency_ms": round(ms, 3),
            "ttft_ms": round(ms / 6, 3),
            "usage": {"input_tokens": 20 + i % 40, "output_tokens": max(1, int(rng.lognormvariate(4.0, 0.4)))},
            "cost_usd": 0.0001,
            "request": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]},
            "response": {"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]},
        }

    def verdicts(p_pass: float) -> list[dict]:
        return [
            {"check": c, "kind": c, "result": "pass" if rng.random() < p_pass else "fail"}
            for c in ("not_empty_or_truncated", "refusal", "pii_leak", "json_valid")
        ]

    with open(path, "wb") as out:
        chunk: list[bytes] = []
        for i in range(n):
            category, prompt, answer = TOPICS[i % len(TOPICS)]
            word = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {i % 997}"
            record = {
                "schema": "llmwatch.pair/v1",
                "id": f"pair{i}",
                "candidate": "cand",
                "timestamp": (t0 + timedelta(seconds=6 * i)).isoformat(),
                "route": "/v1/chat/completions",
                "category": category,
                "primary": side(i, rng.lognormvariate(6.8, 0.3), answer.format(word), prompt.format(word)),
                "shadow": side(i, rng.lognormvariate(6.75, 0.3), answer.format(word + " too"), prompt.format(word)),
                "primary_scores": verdicts(0.95),
                "shadow_scores": verdicts(0.95),
            }
            chunk.append(orjson.dumps(record) + b"\n")
            if len(chunk) >= 10_000:
                out.write(b"".join(chunk))
                chunk.clear()
        out.write(b"".join(chunk))


def run(args: list[str], env: dict[str, str], *, hash_embedder: bool = False) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of one llmwatch command in a fresh process."""
    cli = [str(ROOT / "bench" / "hash_embedder_cli.py")] if hash_embedder else ["-m", "llmwatch.agent.cli"]
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        cmd = ["/usr/bin/time", "-f", "%e %M", "-o", t.name, sys.executable, *cli, *args]
        proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        fields = t.read().split()
    # 0 and 1 are verdicts; `shadow report` and `canary` say 2 when they cannot decide (not an error).
    if proc.returncode not in (0, 1) and not (args[0] in ("shadow", "canary") and proc.returncode == 2):
        sys.stderr.write(f"llmwatch {args[0]} exited {proc.returncode}: {proc.stderr[-1500:]}\n")
    wall, rss_kb = float(fields[-2]), float(fields[-1])
    return wall, rss_kb / 1024, proc.returncode


def commands(work: Path) -> dict[str, list[str]]:
    s, sc, b = str(work / "samples.jsonl"), str(work / "scores.jsonl"), str(work / "baseline.json")
    return {
        "score": ["score", "--in", s, "--out", sc],
        "freeze": ["baseline", "freeze", "--samples", s, "--scores", sc, "--model-version", "A", "--out", b],
        "drift": ["drift", "--baseline", b, "--samples", s, "--scores", sc, "--model-version", "B"],
        "report": ["report", "--samples", s, "--scores", sc, "--format", "json"],
        "shadow": ["shadow", "report", "--pairs", str(work / "pairs.jsonl"), "--format", "json"],
        # Without --scores: the versions alternate in their own file, scored within the run.
        "canary": [
            "canary",
            "--samples",
            str(work / "canary.jsonl"),
            "--stable",
            "A",
            "--canary",
            "B",
            "--format",
            "json",
        ],
        **offline_selection_commands(work, s, sc),
    }


def offline_selection_commands(work: Path, s: str, sc: str) -> dict[str, list[str]]:
    """`suite build` and `review export`: each picks a bounded number of cases or tasks from the window.

    Text shingles for the near-duplicate rule (`--similarity text`): rules only, as the rest of this
    bench (`auto` would embed every prompt with the embeddings extra when it is installed).
    """
    return {
        "suite": ["suite", "build", "--samples", s, "--scores", sc, "--similarity", "text", "--seed", "1"]
        + ["--out", str(work / "suite.jsonl")],
        "review": ["review", "export", "--samples", s, "--scores", sc, "--versions", "A,B", "--n", "100"]
        + ["--seed", "1", "--out", str(work / "tasks.jsonl")],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="window sizes in samples, comma-separated")
    ap.add_argument(
        "--commands",
        default="score,freeze,drift,report,suite,review",
        help="commands to run: score, freeze, drift, report, suite, review, shadow, canary",
    )
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="give up on a size past this (per command)")
    ap.add_argument(
        "--embeddings",
        action="store_true",
        help="scoring.embeddings: true (needs the embedding model): `score` embeds and caches the vectors, "
        "`freeze` and `drift` read them from that cache",
    )
    ap.add_argument(
        "--hash-embedder",
        action="store_true",
        help="with --embeddings: the model replaced by the tests' hash embedder (bench/hash_embedder_cli.py), "
        "to measure everything around the model at a million samples; the vectors mean nothing",
    )
    args = ap.parse_args()
    if args.hash_embedder and not args.embeddings:
        ap.error("--hash-embedder replaces the embedding model: give --embeddings too")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LLMWATCH_LOGGING__LEVEL": "warning",
        "LLMWATCH_SCORING__EMBEDDINGS": "true" if args.embeddings else "false",
    }
    wanted = [c for c in args.commands.split(",") if c]
    # Every command but `shadow report` and `canary` reads the scores file that `score` writes.
    order = (["score"] if any(c not in ("shadow", "canary") for c in wanted) else []) + [
        c for c in wanted if c != "score"
    ]
    sizes = [int(x) for x in args.sizes.split(",") if x]
    results: dict[tuple[str, int], tuple[float, float, int]] = {}
    load_before = os.getloadavg()[0]
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="llmwatch-scale-") as d:
            work = Path(d)
            started = time.perf_counter()
            write_samples(work / "samples.jsonl", n)
            if "canary" in wanted:
                write_samples(work / "canary.jsonl", n, alternating=True)
            if "shadow" in wanted:
                write_pairs(work / "pairs.jsonl", n)
            print(f"{n:,} samples written in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            every = commands(work)
            for name in order:
                results[(name, n)] = run(every[name], env, hash_embedder=args.hash_embedder)
                wall, rss, code = results[(name, n)]
                print(f"  {name}: {wall:.1f} s, peak RSS {rss:,.0f} MB, exit {code}", file=sys.stderr)
    print(
        f"## Offline commands at scale ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, bench/offline_scale.py)\n\n"
        f"{('Embeddings on (hash embedder, cached by score)' if args.hash_embedder else 'Embeddings on (cached by score)') if args.embeddings else 'Rule checks only'}; {len(os.sched_getaffinity(0))} CPUs; load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after. Seconds / peak RSS of each command as a fresh process.\n"
    )
    print("| command | " + " | ".join(f"{n:,}" for n in sizes) + " | time slope (1 = linear) | MB per 1k samples |")
    print("|---|" + "---|" * len(sizes) + "---|---|")
    for name in order:
        cells = [results.get((name, n)) for n in sizes]
        text = [f"{c[0]:.1f} s / {c[1]:,.0f} MB" + ("" if c[2] in (0, 1, 2) else f" (exit {c[2]})") for c in cells if c]
        slope = mb = "-"
        if len(sizes) >= 2 and cells[-1] and cells[-2]:
            (t1, r1, _), (t2, r2, _) = cells[-2], cells[-1]
            n1, n2 = sizes[-2], sizes[-1]
            slope = f"{math.log(max(t2, 1e-3) / max(t1, 1e-3)) / math.log(n2 / n1):.2f}"
            mb = f"{(r2 - r1) / ((n2 - n1) / 1000):.2f}"
        print(f"| {name} | " + " | ".join(text) + f" | {slope} | {mb} |")


if __name__ == "__main__":
    main()
