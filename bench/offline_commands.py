"""Wall-clock time of the offline commands on N samples with real answer texts, end to end.

    llmwatch score --in samples.jsonl --out scores.jsonl      (checks; answer vectors cached beside)
    llmwatch baseline freeze --samples ... --scores ...        (reads the cached vectors)
    llmwatch drift --baseline ... --samples ... --scores ...   (reads the cached vectors)
    llmwatch drift --baseline ... --samples ...                (scores now, embeds each answer once)

Each command is a fresh process (model load included), as a user runs it.

    python bench/offline_commands.py [--samples 1000,10000] [--threads auto]

`--threads auto` leaves scoring.torch_threads unset: the commands then use every CPU they may.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scoring_throughput import samples as make_samples  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


CPU_TIMES: list[float] = []


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and exit code; the command's CPU seconds (user + system) go to CPU_TIMES.

    On a shared machine the wall time depends on the neighbours, the CPU time much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", *cmd],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_TIMES.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if result.returncode not in (0, 1):
        sys.stderr.write(result.stderr[-2000:])
    return elapsed, result.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", default="1000,10000")
    ap.add_argument(
        "--threads", default="auto", help="scoring.torch_threads, or auto (default: the commands' own choice)"
    )
    args = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LLMWATCH_LOGGING__LEVEL": "warning"}
    env.pop("LLMWATCH_SCORING__TORCH_THREADS", None)
    if args.threads != "auto":
        env["LLMWATCH_SCORING__TORCH_THREADS"] = str(int(args.threads))
    load_before = os.getloadavg()[0]
    rows = []
    for n in [int(x) for x in args.samples.split(",") if x]:
        with tempfile.TemporaryDirectory(prefix="llmwatch-offline-") as d:
            work = Path(d)
            samples = work / "samples.jsonl"
            samples.write_bytes(b"".join(s.to_json() + b"\n" for s in make_samples(n)))
            scores = work / "scores.jsonl"
            t_score, _ = timed(["score", "--in", str(samples), "--out", str(scores)], env)
            t_freeze, _ = timed(
                [
                    "baseline",
                    "freeze",
                    "--samples",
                    str(samples),
                    "--scores",
                    str(scores),
                    "--model-version",
                    "A",
                    "--out",
                    str(work / "baseline.json"),
                ],
                env,
            )
            t_drift, code = timed(
                [
                    "drift",
                    "--baseline",
                    str(work / "baseline.json"),
                    "--samples",
                    str(samples),
                    "--scores",
                    str(scores),
                ],
                env,
            )
            t_drift_now, _ = timed(["drift", "--baseline", str(work / "baseline.json"), "--samples", str(samples)], env)
            cpu = CPU_TIMES[-4:]
            rows.append((n, (t_score, t_freeze, t_drift, t_drift_now), cpu))
            print(
                f"{n} samples: score {t_score:.1f} s, freeze {t_freeze:.1f} s, drift {t_drift:.1f} s (exit {code}), drift scoring now {t_drift_now:.1f} s; CPU {' / '.join(f'{c:.1f}' for c in cpu)} s",
                file=sys.stderr,
            )
    print(
        f"offline commands, {time.strftime('%Y-%m-%d %H:%M')}, {len(os.sched_getaffinity(0))} CPUs, torch_threads {args.threads}, load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print("wall clock (CPU time, user + system, in brackets)")
    print()
    print(
        "| samples | score | baseline freeze --scores | drift --scores | score + freeze + drift | drift without --scores |"
    )
    print("|---|---|---|---|---|---|")
    for n, (a, b, c, d), (ca, cb, cc, cd) in rows:
        print(
            f"| {n:,} | {a:.1f} s ({ca:.1f}) | {b:.1f} s ({cb:.1f}) | {c:.1f} s ({cc:.1f}) | {a + b + c:.1f} s ({ca + cb + cc:.1f}) | {d:.1f} s ({cd:.1f}) |"
        )


if __name__ == "__main__":
    main()
