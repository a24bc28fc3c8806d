"""`llmwatch ui` on N generated samples: index build time, page load times, peak RSS.

    python bench/ui.py [--samples 100000] [--conversations 5000] [--data-dir DIR] [--repeat 5]

Generates the data directory (tests/helpers/ui_data.py: real Sample/Score/Pair records, 3 scores
per sample; with --conversations, that many chat conversations of 1-10 turns on top, their lines
shuffled) unless DIR already holds one, starts `llmwatch ui` as a real process on it, times
each page (the whole HTTP response, read to the end) `--repeat` times, then reads the process's
peak resident set (VmHWM from /proc) and the index build time it logged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from helpers.ui_data import conversation_id, generate, generate_conversations  # noqa: E402

PAGES = (
    "/samples",
    "/samples?model_version=B&check=min_length&outcome=fail",
    "/samples?signal=pass_rate:min_length&model_version=B&since=1796083200000&until=1796169600000",
    "/samples?q=parcel%20tracking&sort=latency",
    "/samples?failure_mode=error&category=billing&page=3",
    "/samples/smp-0050001",
    "/versions",
    "/versions?category=shipping",
    "/shadow",
)
# With --conversations: the conversation view (conversation 7 has 8 turns, version B).
CONVERSATION_PAGES = (
    "/samples/cnv-007-05",
    f"/conversations/{conversation_id(7)}",
    "/conversations",
    "/conversations?order=turns&model_version=B",
    "/conversations?order=recent&page=3",
    f"/samples?conversation={conversation_id(7)}",
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--data-dir")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--conversations", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(args.data_dir or tmp)
        if not (data / "samples").is_dir():
            t = time.perf_counter()
            generate(data, args.samples)
            if args.conversations:
                generate_conversations(data, {n: ("AB"[n % 2], 1 + n % 10) for n in range(args.conversations)})
            print(f"generated {args.samples} samples in {time.perf_counter() - t:.1f} s", flush=True)
        size = sum(p.stat().st_size for p in data.rglob("*.jsonl"))
        started = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                "ui",
                "--data-dir",
                str(data),
                "--listen",
                "127.0.0.1:0",
                "--log-level",
                "info",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"LLMWATCH_LOGGING__FORMAT": "json", **__import__("os").environ},
        )
        try:
            line = proc.stdout.readline().decode()  # type: ignore[union-attr]
            ready = time.perf_counter() - started
            port = int(line.split("127.0.0.1:")[1].split(" ")[0])
            times: dict[str, list[float]] = {}
            for _ in range(args.repeat):
                for page in PAGES + (CONVERSATION_PAGES if args.conversations else ()):
                    t = time.perf_counter()
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=60) as resp:
                        resp.read()
                    times.setdefault(page, []).append(time.perf_counter() - t)
            status = Path(f"/proc/{proc.pid}/status").read_text()
            hwm = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM"))
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        index_s = next(
            (
                json.loads(x)["seconds"]
                for x in err.decode().splitlines()
                if x.startswith("{") and "ui.index_refreshed" in x
            ),
            None,
        )
        extra = sum(1 + n % 10 for n in range(args.conversations))
        convs = f" (+{extra} in {args.conversations} conversations)" if args.conversations else ""
        print(f"data: {args.samples} samples{convs}, {size / 1e6:.0f} MB of JSON Lines")
        print(f"start to listening: {ready:.1f} s (index build {index_s} s); peak RSS {hwm / 1024:.0f} MiB")
        print("| page | median | max |\n|---|---|---|")
        for page, ts in times.items():
            print(f"| `{page}` | {statistics.median(ts) * 1000:.0f} ms | {max(ts) * 1000:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
