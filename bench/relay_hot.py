"""The relay core's own CPU per plain call, hot and in-process: no sockets, no kernel, no other tenant.

The relay's protocols (collectors/llmwatch/collectors/receivers/proxy/relay.py) run on a uvloop
loop with transports that only keep what is written; the benchmark's request (bench/common.py
BODY, with the headers aiohttp sends) goes into the client side and bench/upstream.py's answer
(the same head and size) into the upstream side, `--calls` times per repeat, nothing captured
(the relay alone). Thread CPU (`time.thread_time_ns`), median (min-max) of the repeats.

In the running proxy every figure here costs 5-10 times as much (cold caches between calls; see
docs/design/0065-relay-third-pass.md, fourth pass), so this is for comparing two versions of the
relay, interleaved, not for the proxy's figure:

    python bench/relay_hot.py --relay /work/main/collectors/llmwatch/collectors/receivers/proxy/relay.py --relay .
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import uvloop
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BODY  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RELAY = Path("collectors/llmwatch/collectors/receivers/proxy/relay.py")
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer sk-bench\r\nx-bench-delay-ms: 50\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
    b"User-Agent: Python/3.11 aiohttp/3.14.5\r\nContent-Length: %d\r\n\r\n%b" % (len(BODY), BODY)
)
ANSWER = b'{"id":"chatcmpl-bench"' + b"x" * 857
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nx-model-version: bench-1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
    b"Date: Sat, 05 Dec 2026 01:53:28 GMT\r\nServer: Python/3.11 aiohttp/3.14.5\r\n\r\n%b" % (len(ANSWER), ANSWER)
)


class _Transport:
    """Keeps what is written; never pauses, never closes by itself."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, *args: Any) -> None:
        return None


def _proxy() -> Any:
    """What the relay core reads of `Proxy` (handler.py), with the proxy section's defaults."""
    section = types.SimpleNamespace(
        max_header_bytes=65_536,
        max_headers=256,
        header_timeout_s=60.0,
        body_timeout_s=60.0,
        shutdown_timeout_s=5.0,
        max_connections=100,
        connect_timeout_s=5.0,
        read_timeout_s=300.0,
        preserve_host=False,
    )
    counter = types.SimpleNamespace(labels=lambda **_: types.SimpleNamespace(inc=lambda: None))
    return types.SimpleNamespace(
        cfg=types.SimpleNamespace(proxy=section),
        metrics=types.SimpleNamespace(proxy_errors=counter),
        upstream=URL("http://127.0.0.1:9999"),
        upstream_authorization=None,
        capture_routes=frozenset(),
        exchange_headers=frozenset(),
        wanted_headers=frozenset({"content-type"}),
        relay_error_body=lambda message: b"{}",
    )


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"relay_under_test_{abs(hash(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _measure(relay: Any, calls: int, repeats: int) -> list[float]:
    server = relay.RelayServer(_proxy())
    client = relay._Client(server)
    to_client = _Transport()
    client.connection_made(to_client)
    up = relay._Upstream(server.pool)
    to_upstream = _Transport()
    up.connection_made(to_upstream)
    server.pool.count = 1
    up.idle_since = server.loop.time()
    server.pool.idle.append(up)
    client.data_received(REQUEST)
    up.data_received(RESPONSE)
    # The relay did its work: the request went upstream under the upstream's Host, the answer back whole.
    assert to_upstream.out[-1].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:9999\r\n")
    assert b"".join(to_client.out).endswith(ANSWER) and server.pool.idle == [up]
    per_call = []
    feed_client, feed_upstream = client.data_received, up.data_received
    for _ in range(repeats):
        start = time.thread_time_ns()
        for _ in range(calls):
            feed_client(REQUEST)
            feed_upstream(RESPONSE)
        per_call.append((time.thread_time_ns() - start) / calls / 1000)
        to_client.out.clear()
        to_upstream.out.clear()
    return per_call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--relay",
        action="append",
        default=[],
        help="a relay.py, or a checkout holding one (repeatable; default: this checkout's); run interleaved",
    )
    ap.add_argument("--calls", type=int, default=5000, help="calls per repeat (default 5000)")
    ap.add_argument("--repeats", type=int, default=15, help="repeats per round (default 15)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = ap.parse_args()
    paths = [Path(p) / RELAY if Path(p).is_dir() else Path(p) for p in (args.relay or [str(ROOT)])]
    modules = [_load(p) for p in paths]
    results: dict[Path, list[float]] = {p: [] for p in paths}
    for rnd in range(args.rounds):
        for path, module in zip(paths, modules):
            got = uvloop.run(_measure(module, args.calls, args.repeats))
            results[path].append(statistics.median(got))
            print(f"round {rnd + 1}/{args.rounds} {path}: {statistics.median(got):.2f} µs per call", file=sys.stderr)
    print("\nthe relay alone, plain call, hot: median (min-max) over rounds of the repeats' medians, µs of thread CPU")
    for path, rows in results.items():
        print(f"{path}: {statistics.median(rows):.2f} ({min(rows):.2f}-{max(rows):.2f})")


if __name__ == "__main__":
    main()
