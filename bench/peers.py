"""llmwatch beside its peers, in one interleaved run: direct, nginx, the LiteLLM proxy, the Portkey gateway, llmwatch.

What a platform team compares a sidecar with (issue 13). One upstream (`bench/upstream.py`,
answering after about 50 ms; streams of 30 chunks 3 ms apart, then usage and [DONE]); the load
generator (this script) and the upstream pinned to core 0 with `taskset`, each proxy to core 1.
Open-loop rates (default 50/200/500 req/s), plain and streaming, in rounds whose peer order
rotates, so that whatever else the machine does hits every peer alike. For each peer:

- CPU per call: utime+stime of the proxy's whole process tree (nginx's workers, llmwatch's scorer
  child) from /proc, counted until the tree is idle again; `1e6 / CPU` is its saturation per core.
- Added latency (p50/p99 from each request's scheduled time) and, for streams, time to first
  chunk and reads per stream (fewer reads than direct = chunks merged), against direct.
- Every body compared byte for byte with the upstream's own (LiteLLM rewrites bodies: counted).
- RSS of the tree at the end.

Peers:
  direct             the upstream itself
  nginx              Debian's nginx (`apt-get install -y nginx-light`), started here with its own
                     config: 1 worker, proxy_buffering off, upstream keepalive, access log off
  nginx-log          the same nginx writing the access log a default install writes (`combined`,
                     one line per call, unbuffered): what nginx costs when it records every call,
                     as llmwatch does; context beside `nginx`, not the reference the ratios use
  litellm            `litellm[proxy]` in its own venv (.bench/litellm-venv, made on first use with
                     pip; --no-install to skip), offline, 1 worker, a master key; measured at
                     --litellm-rates only (it saturates near 70 req/s on one core)
  portkey            the Portkey AI gateway (npm `@portkey-ai/gateway`, Node; installed on first use into
                     .bench/portkey with npm; --no-install to skip), forwarding to the upstream as a
                     custom OpenAI host (`x-portkey-provider: openai`, `x-portkey-custom-host`); it
                     re-serialises bodies, so they are not byte-identical by design; measured at
                     --portkey-rates only
  relay-floor        bench/relay_floor.py with both heads parsed (RELAY_FLOOR_PARSE=1): a Python relay on
                     uvloop that forwards bytes and decides nothing; the floor under llmwatch's relay,
                     measured in the same run (not a product: one request at a time per connection)
  native-floor       bench/native_floor.c (built by bench/native_floor.py with gcc and the llhttp that httptools
                     vendors): the same floor in C on raw epoll, both heads parsed with llhttp; what a
                     data plane outside the interpreter would start from (design record 0065)
  llmwatch-off       llmwatch proxy, scoring off (capture, 10% sampling, redaction, files, metrics on),
                     its engine as shipped (proxy.engine auto: the C data plane where the package was
                     built with a compiler, as here, design record 0067; the engine is printed)
  llmwatch-python    llmwatch-off with proxy.engine python: the Python relay alone
  llmwatch-native    llmwatch-off with proxy.engine native: C forwards plain calls itself and its ring
                     hands each to the same bookkeeping (metrics, sampling, files)
  llmwatch-front     llmwatch-native with DATAPLANE_FORWARD=0: C only accepts and reads each
                     connection's first head, the Python relay answers every call
  llmwatch-defaults  shipped defaults: scorer child with the embedding checks, on the proxy's core
  llmwatch-isolated  defaults, the scorer child pinned to core 0 (scoring.cpu_affinity), the proxy to core 1
  llmwatch-shadow    llmwatch-off plus shadow evaluation: calls mirrored (--shadow-rate, default 1.0: every call) to a second
                     bench/upstream.py on core 0; the mirror child pinned to core 0 (shadow.cpu_affinity),
                     the proxy to core 1. The report adds shadow on minus llmwatch-off, same run.
  llmwatch-off-b     a second llmwatch-off, started the same way: the A/A control. The shadow table
                     adds llmwatch-off-b minus llmwatch-off, what two identical proxies differ by in
                     the same run (the noise the shadow figures are read against).
  --baseline-src DIR adds `llmwatch-off@DIR`: another checkout (e.g. /work/main) run with this venv,
                     for old-versus-new in the same run

    python bench/peers.py [--peers direct,nginx,litellm,llmwatch-off,...] [--rates 50,200,500]
                          [--seconds 10] [--rounds 2] [--baseline-src ../main]

A peer that cannot be installed or started here is reported and left out; the run goes on.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    BODY,
    HEADERS,
    ROOT,
    STREAM_BODY,
    Outcome,
    can_pin,
    cpu_seconds,
    editable_launcher,
    free_port,
    open_loop_checked,
    pinned,
    tree_cpu_seconds,
    tree_rss_mb,
    tree_user_seconds,
    wait_idle,
    wait_ready,
)

ALL_PEERS = (
    "direct",
    "nginx",
    "nginx-log",
    "litellm",
    "portkey",
    "relay-floor",
    "native-floor",
    "llmwatch-off",
    "llmwatch-python",
    "llmwatch-native",
    "llmwatch-front",
    "llmwatch-defaults",
    "llmwatch-isolated",
    "llmwatch-shadow",
    "llmwatch-off-b",
)
LITELLM_KEY = "sk-bench-master"
PORTKEY_VERSION = "1.15.2"


@dataclass
class Peer:
    name: str
    url: str
    proc: subprocess.Popen | None = None
    headers: dict[str, str] = field(default_factory=dict)
    max_rate: float | None = None
    only_rates: list[float] | None = None  # a slow peer is offered these rates only
    cleanup: list[Path] = field(default_factory=list)
    # mode -> totals over every cell
    cpu: dict[str, float] = field(default_factory=dict)
    proxy_cpu: dict[str, float] = field(default_factory=dict)  # the proxy process alone (no children)
    user_cpu: dict[str, float] = field(default_factory=dict)  # of `cpu`, user space (utime)
    calls: dict[str, int] = field(default_factory=dict)
    not_idle: bool = False  # the tree was still busy when a cell's count stopped: CPU is a lower bound
    cells: dict[tuple[float, str], list[Outcome]] = field(default_factory=dict)
    cell_cpu: dict[tuple[float, str], float] = field(default_factory=dict)
    cell_proxy_cpu: dict[tuple[float, str], float] = field(default_factory=dict)  # the proxy process alone
    rss_mb: float | None = None
    metrics_url: str | None = None
    engine: str = ""  # a llmwatch peer: the engine it served with (llmwatch_proxy_engine_info)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid


# --- starting the peers ---------------------------------------------------------------------


def start_nginx(up_port: int, work: Path, name: str = "nginx", access_log: bool = False) -> Peer | None:
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if binary is None:
        print("nginx: not installed (apt-get install -y nginx-light); left out", file=sys.stderr)
        return None
    port = free_port()
    conf_dir = work / name
    conf_dir.mkdir()
    log_line = f"access_log {conf_dir}/access.log combined;" if access_log else "access_log off;"
    user = "user root root;\n" if os.geteuid() == 0 else ""
    (conf_dir / "nginx.conf").write_text(
        f"""{user}worker_processes 1;
daemon off;
master_process on;
pid {conf_dir}/nginx.pid;
error_log {conf_dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    {log_line}
    client_body_temp_path {conf_dir}/body;
    proxy_temp_path {conf_dir}/proxy;
    fastcgi_temp_path {conf_dir}/fastcgi;
    uwsgi_temp_path {conf_dir}/uwsgi;
    scgi_temp_path {conf_dir}/scgi;
    upstream llm {{ server 127.0.0.1:{up_port}; keepalive 256; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://llm;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""
    )
    proc = subprocess.Popen(
        pinned([binary, "-c", str(conf_dir / "nginx.conf"), "-p", str(conf_dir)], "1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return Peer(name, f"http://127.0.0.1:{port}", proc)


def ensure_litellm(venv: Path, install: bool) -> Path | None:
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe
    if not install:
        print(f"litellm: {exe} missing and --no-install given; left out", file=sys.stderr)
        return None
    print(f"litellm: installing litellm[proxy] into {venv} (pip, once)", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "litellm[proxy]"], check=True, timeout=1800)
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"litellm: could not be installed here ({type(exc).__name__}: {exc}); left out", file=sys.stderr)
        return None
    return exe if exe.exists() else None


def start_litellm(up_port: int, work: Path, args: argparse.Namespace) -> Peer | None:
    exe = ensure_litellm(Path(args.litellm_venv), not args.no_install)
    if exe is None:
        return None
    port = free_port()
    cfg = work / "litellm.yaml"
    cfg.write_text(
        f"""model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: http://127.0.0.1:{up_port}/v1
      api_key: sk-bench
general_settings:
  master_key: {LITELLM_KEY}
litellm_settings:
  telemetry: false
"""
    )
    # Offline: the model cost map shipped in the package, no telemetry, no update checks.
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "DISABLE_SCHEMA_UPDATE": "True",
    }
    log_file = open(work / "litellm.log", "wb")
    proc = subprocess.Popen(
        pinned([str(exe), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"], "1"),
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    return Peer(
        "litellm",
        f"http://127.0.0.1:{port}",
        proc,
        headers={"Authorization": f"Bearer {LITELLM_KEY}"},
        max_rate=max(args.litellm_rates),
        only_rates=args.litellm_rates,
    )


def ensure_portkey(folder: Path, install: bool) -> Path | None:
    script = folder / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if script.exists():
        return script
    if not install or shutil.which("npm") is None or shutil.which("node") is None:
        print(f"portkey: {script} missing (and --no-install given, or no node/npm); left out", file=sys.stderr)
        return None
    print(f"portkey: installing @portkey-ai/gateway@{PORTKEY_VERSION} into {folder} (npm, once)", file=sys.stderr)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", f"@portkey-ai/gateway@{PORTKEY_VERSION}"],
            cwd=folder,
            check=True,
            timeout=900,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"portkey: could not be installed here ({type(exc).__name__}: {exc}); left out", file=sys.stderr)
        return None
    return script if script.exists() else None


def start_portkey(up_port: int, work: Path, args: argparse.Namespace) -> Peer | None:
    script = ensure_portkey(Path(args.portkey_dir), not args.no_install)
    if script is None:
        return None
    port = free_port()
    log_file = open(work / "portkey.log", "wb")
    proc = subprocess.Popen(
        pinned(["node", str(script), f"--port={port}", "--headless"], "1"),
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    return Peer(
        "portkey",
        f"http://127.0.0.1:{port}",
        proc,
        headers={
            "x-portkey-provider": "openai",
            "x-portkey-custom-host": f"http://127.0.0.1:{up_port}/v1",
            "Authorization": "Bearer sk-bench",
        },
        max_rate=max(args.portkey_rates),
        only_rates=args.portkey_rates,
    )


def start_relay_floor(up_port: int, work: Path) -> Peer:
    port = free_port()
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "relay_floor.py"),
        "proxy",
        "--upstream",
        f"http://127.0.0.1:{up_port}",
        "--listen",
        f"127.0.0.1:{port}",
    ]
    proc = subprocess.Popen(
        pinned(cmd, "1"),
        env={**os.environ, "RELAY_FLOOR_PARSE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=open(work / "relay-floor.log", "wb"),
    )
    return Peer("relay-floor", f"http://127.0.0.1:{port}", proc)


def start_native_floor(up_port: int, work: Path) -> tuple[Peer | None, str]:
    """bench/native_floor.c: the same floor in C on raw epoll with llhttp (built on first use)."""
    from native_floor import build

    binary, why = build()
    if binary is None:
        return None, why
    port = free_port()
    cmd = [str(binary), "proxy", "--upstream", f"http://127.0.0.1:{up_port}", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(pinned(cmd, "1"), stdout=subprocess.DEVNULL, stderr=open(work / "native-floor.log", "wb"))
    return Peer("native-floor", f"http://127.0.0.1:{port}", proc), ""


def start_llmwatch(
    name: str,
    up_port: int,
    work: Path,
    *,
    scoring: bool,
    isolated: bool,
    src: str | None = None,
    shadow_port: int | None = None,
    shadow_rate: float = 1.0,
    engine: str | None = None,
    forward: bool = True,
) -> Peer:
    port, metrics_port = free_port(), free_port()
    data_dir = work / f"data-{name.replace('@', '-').replace('/', '_')}"
    env = {
        **os.environ,
        "LLMWATCH_LOGGING__LEVEL": "warning",
        "LLMWATCH_SCORING__ENABLED": "true" if scoring else "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    if engine is not None:
        # Set only when asked: an older checkout (--baseline-src) refuses engines it does not have.
        env["LLMWATCH_PROXY__ENGINE"] = engine
    if not forward:
        env["DATAPLANE_FORWARD"] = "0"
    if isolated:
        env["LLMWATCH_SCORING__CPU_AFFINITY"] = "0"
    if shadow_port is not None:
        # Every call mirrored; concurrency room for the rates here (50 ms upstream x 500 req/s).
        env["LLMWATCH_SHADOW__ENABLED"] = "true"
        env["LLMWATCH_SHADOW__CPU_AFFINITY"] = "0"
        env["LLMWATCH_SHADOW__CANDIDATES"] = json.dumps(
            [
                {
                    "name": "bench",
                    "upstream": f"http://127.0.0.1:{shadow_port}",
                    "rate": shadow_rate,
                    "max_concurrency": 256,
                }
            ]
        )
    base = editable_launcher(src) if src else [sys.executable, "-m", "llmwatch.agent.cli"]
    cmd = [
        *base,
        "proxy",
        "--upstream",
        f"http://127.0.0.1:{up_port}",
        "--listen",
        f"127.0.0.1:{port}",
        "--metrics-listen",
        f"127.0.0.1:{metrics_port}",
        "--data-dir",
        str(data_dir),
    ]
    # Isolated: the scorer child must be allowed core 0 to be pinned there; the proxy's own
    # threads are moved to core 1 once it is up (`taskset -a -p`).
    # Run from the tree it runs: from ROOT, `import llmwatch` would find this checkout first (cwd is on sys.path).
    proc = subprocess.Popen(
        pinned(cmd, "0,1" if isolated or shadow_port is not None else "1"),
        env=env,
        cwd=src or ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(work / f"{name.replace('/', '_')}.log", "wb"),
    )
    return Peer(name, f"http://127.0.0.1:{port}", proc, metrics_url=f"http://127.0.0.1:{metrics_port}/metrics")


def scraped(peer: Peer) -> list[Any]:
    """Every sample on the peer's /metrics now (raises OSError when it does not answer)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    assert peer.metrics_url is not None
    text = urllib.request.urlopen(peer.metrics_url, timeout=5).read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def engine_serving(peer: Peer) -> str:
    """The engine a llmwatch peer served with, from its llmwatch_proxy_engine_info (design record
    0067): `native (C forwards)`, `native (front door)` or `python`; "" for a build without the gauge."""
    try:
        samples = scraped(peer)
    except OSError:
        return ""
    for sample in samples:
        if sample.name == "llmwatch_proxy_engine_info" and sample.value == 1:
            engine = sample.labels.get("engine", "")
            if engine == "native":
                return "native (C forwards)" if sample.labels.get("forwarding") == "true" else "native (front door)"
            return str(engine)
    return ""


def shadow_counts(peer: Peer) -> str:
    """What the mirror did (mirrored, skipped by reason, candidate errors), from the peer's /metrics."""
    try:
        samples = scraped(peer)
    except OSError as exc:
        return f"metrics not read ({exc})"
    wanted = (
        "llmwatch_shadow_mirrored_total",
        "llmwatch_shadow_skipped_total",
        "llmwatch_shadow_candidate_errors_total",
        "llmwatch_shadow_pairs_total",
    )
    out = []
    for sample in samples:
        if sample.name in wanted and sample.value:
            extra = ",".join(f"{k}={v}" for k, v in sample.labels.items() if k != "candidate")
            out.append(
                f"{sample.name.removeprefix('llmwatch_shadow_')}{'{' + extra + '}' if extra else ''} {sample.value:,.0f}"
            )
    return "; ".join(out) or "nothing mirrored"


def shadow_added(peers: list[Peer], args: argparse.Namespace) -> list[str]:
    """Shadow on (llmwatch-shadow) minus off (llmwatch-off), same run: latency and the proxy's own CPU;
    with llmwatch-off-b, the same difference between two identical proxies (A/A) as the noise floor."""
    on = next((p for p in peers if p.name == "llmwatch-shadow"), None)
    off = next((p for p in peers if p.name == "llmwatch-off"), None)
    control = next((p for p in peers if p.name == "llmwatch-off-b"), None)
    if on is None or off is None:
        return []
    lines = [
        "",
        "Shadow evaluation on minus off (llmwatch-shadow minus llmwatch-off, interleaved in the same run; target: p99 added < 0.5 ms)"
        + ("; A/A rows: llmwatch-off-b minus llmwatch-off, two identical proxies:" if control is not None else ":"),
        "",
        "| rate | plain p50 / p99 added | stream p50 / p99 added | first chunk p50 / p99 added | proxy process CPU per call, off / on (plain) | off / on (stream) |",
        "|---|---|---|---|---|---|",
    ]
    lines += _difference_rows(on, off, args, "")
    if control is not None:
        lines += _difference_rows(control, off, args, " A/A")
    lines += ["", f"Mirror of llmwatch-shadow over the run: {shadow_counts(on)}."]
    return lines


def _difference_rows(on: Peer, off: Peer, args: argparse.Namespace, tag: str) -> list[str]:
    lines = []
    for rate in args.rates:
        cells = []
        for mode, attr in (("plain", "latency_ms"), ("stream", "latency_ms"), ("stream", "first_chunk_ms")):
            a, b = on.cells.get((rate, mode)), off.cells.get((rate, mode))
            if not a or not b:
                cells.append("-")
                continue
            x, y = getattr(merged(a), attr), getattr(merged(b), attr)
            cells.append(f"{pct(x, 50) - pct(y, 50):+.2f} / {pct(x, 99) - pct(y, 99):+.2f} ms")
        cpu = []
        for mode in ("plain", "stream"):
            both = []
            for p in (off, on):
                n = sum(o.count for o in p.cells.get((rate, mode), []))
                c = p.cell_proxy_cpu.get((rate, mode))
                both.append(f"{c / n * 1e6:,.0f}" if c is not None and n else "-")
            cpu.append(" / ".join(both) + " µs")
        lines.append(f"| {rate:g}{tag} | {cells[0]} | {cells[1]} | {cells[2]} | {cpu[0]} | {cpu[1]} |")
    return lines


# --- measuring ------------------------------------------------------------------------------


async def fetch(url: str, body: bytes, headers: dict[str, str]) -> bytes:
    import aiohttp

    async with aiohttp.ClientSession(auto_decompress=False) as s:
        async with s.post(
            url + "/v1/chat/completions", data=body, headers={**HEADERS, **headers, "x-bench-delay-ms": "1"}
        ) as r:
            return await r.read()


def measure(peer: Peer, mode: str, rate: float, seconds: float, expected: bytes, cpu_rates: list[float]) -> None:
    body = BODY if mode == "plain" else STREAM_BODY
    c0 = tree_cpu_seconds(peer.pid) if peer.pid else 0.0
    u0 = tree_user_seconds(peer.pid) if peer.pid else 0.0
    p0 = cpu_seconds(peer.pid) if peer.pid else 0.0
    out = asyncio.run(
        open_loop_checked(
            peer.url + "/v1/chat/completions", body, rate, seconds, expected=expected, headers=peer.headers
        )
    )
    if peer.pid:
        t0 = time.monotonic()
        c1 = wait_idle(peer.pid)
        if time.monotonic() - t0 >= 9.5:
            peer.not_idle = True
        peer.cell_cpu[(rate, mode)] = peer.cell_cpu.get((rate, mode), 0.0) + c1 - c0
        peer.cell_proxy_cpu[(rate, mode)] = peer.cell_proxy_cpu.get((rate, mode), 0.0) + cpu_seconds(peer.pid) - p0
        if rate in cpu_rates:
            peer.cpu[mode] = peer.cpu.get(mode, 0.0) + c1 - c0
            peer.user_cpu[mode] = peer.user_cpu.get(mode, 0.0) + tree_user_seconds(peer.pid) - u0
            peer.proxy_cpu[mode] = peer.proxy_cpu.get(mode, 0.0) + cpu_seconds(peer.pid) - p0
    if rate in cpu_rates:
        peer.calls[mode] = peer.calls.get(mode, 0) + out.count
    peer.cells.setdefault((rate, mode), []).append(out)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def merged(outcomes: list[Outcome]) -> Outcome:
    m = Outcome()
    for o in outcomes:
        m.latency_ms += o.latency_ms
        m.first_chunk_ms += o.first_chunk_ms
        m.reads += o.reads
        m.failures += o.failures
        m.mismatched += o.mismatched
    return m


def cell_us(peer: Peer, rate: float, mode: str, outcome: Outcome) -> str:
    if (rate, mode) not in peer.cell_cpu or not outcome.count:
        return "-"
    return f"{peer.cell_cpu[(rate, mode)] / outcome.count * 1e6:,.0f} µs"


def report(peers: list[Peer], args: argparse.Namespace, notes: list[str]) -> str:
    direct = next((p for p in peers if p.name == "direct"), None)
    lines = [
        f"## Peers side by side ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, bench/peers.py)",
        "",
        f"Upstream {args.latency_ms:g} ms (streams: {args.ttft_ms:g} ms to the first event, 30 chunks {args.gap_ms:g} ms apart); "
        f"open loop at {', '.join(f'{r:g}' for r in args.rates)} req/s, {args.rounds} rounds of {args.seconds:g} s per cell, peer order rotating; "
        f"{'load generator and upstream on core 0, each proxy on core 1 (taskset)' if can_pin() else 'no pinning (taskset or a second core missing)'}; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        f"CPU per call from the cells at {', '.join(f'{r:g}' for r in args.cpu_rates)} req/s (a saturated core merges chunks and lowers it; per rate below).",
        "",
        "| proxy | CPU per plain call | CPU per 30-chunk stream | x nginx (plain / stream) | of which user space (plain / stream) | saturation per core (plain / stream) | RSS | bodies byte-identical |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def per_call(p: Peer) -> list[float]:
        return [
            p.cpu.get(mode, 0.0) / p.calls[mode] * 1e6 if p.calls.get(mode) else float("nan")
            for mode in ("plain", "stream")
        ]

    # The ratios are to nginx with its access log off, measured in the same run: the reference the
    # proxy's CPU targets are stated against (nginx-log is context, not the reference).
    reference = next((per_call(p) for p in peers if p.name == "nginx"), None)
    for p in peers:
        if p.name == "direct":
            continue
        cells = per_call(p)
        # A reference that read no CPU at all (a run shorter than the clock's tick) gives no ratio.
        ratio = (
            "-"
            if reference is None
            else " / ".join(f"{mine / ref:.2f}x" if ref > 0 else "-" for mine, ref in zip(cells, reference))
        )
        bound = ">= " if p.not_idle else ""
        own = ""
        if p.name.startswith("llmwatch") and p.proxy_cpu and p.calls.get("plain"):
            own = f" (proxy process alone {p.proxy_cpu['plain'] / p.calls['plain'] * 1e6:,.0f} / {p.proxy_cpu['stream'] / p.calls['stream'] * 1e6:,.0f} µs)"
        total = sum(len(o.latency_ms) for outs in p.cells.values() for o in outs)
        bad = sum(o.mismatched for outs in p.cells.values() for o in outs)
        user = " / ".join(
            f"{p.user_cpu[mode] / p.calls[mode] * 1e6:,.0f} µs" if p.calls.get(mode) and mode in p.user_cpu else "-"
            for mode in ("plain", "stream")
        )
        saturation = " / ".join(f"{1e6 / c:,.0f}" if c > 0 else "-" for c in cells)
        lines.append(
            f"| {p.name}{f' [{p.engine}]' if p.engine else ''}{own} | {bound}{cells[0]:,.0f} µs | {bound}{cells[1]:,.0f} µs | {ratio} | {user} | {saturation} req/s | {p.rss_mb or 0:,.0f} MB | {total - bad}/{total} |"
        )
    lines += [
        "",
        "| proxy | rate | plain p50 / p99 (added) | stream p50 / p99 (added) | first chunk p50 / p99 (added) | reads per stream | CPU per call plain / stream | failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in peers:
        for rate in args.rates:
            plain, stream = p.cells.get((rate, "plain")), p.cells.get((rate, "stream"))
            if not plain or not stream:
                continue
            a, s = merged(plain), merged(stream)
            if direct is not None and p is not direct:
                da, ds = merged(direct.cells[(rate, "plain")]), merged(direct.cells[(rate, "stream")])

                def added(x: list[float], d: list[float]) -> str:
                    return f" ({pct(x, 50) - pct(d, 50):+.1f} / {pct(x, 99) - pct(d, 99):+.1f})"
            else:
                da = ds = None

                def added(x: list[float], d: list[float]) -> str:
                    return ""

            lines.append(
                f"| {p.name} | {rate:g} | {pct(a.latency_ms, 50):.1f} / {pct(a.latency_ms, 99):.1f}{added(a.latency_ms, da.latency_ms if da else [])} "
                f"| {pct(s.latency_ms, 50):.1f} / {pct(s.latency_ms, 99):.1f}{added(s.latency_ms, ds.latency_ms if ds else [])} "
                f"| {pct(s.first_chunk_ms, 50):.1f} / {pct(s.first_chunk_ms, 99):.1f}{added(s.first_chunk_ms, ds.first_chunk_ms if ds else [])} "
                f"| {np.mean(s.reads) if s.reads else float('nan'):.1f} "
                f"| {cell_us(p, rate, 'plain', a)} / {cell_us(p, rate, 'stream', s)} | {a.failures + s.failures} |"
            )
    lines += getattr(args, "shadow_lines", [])
    lines += ["", "Latencies in ms from each request's scheduled time; added = peer minus direct in the same run."]
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines)


def main() -> None:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default=",".join(ALL_PEERS))
    ap.add_argument("--rates", default="50,200,500")
    ap.add_argument("--litellm-rates", default="50", help="the rates LiteLLM is offered (it saturates near 70 req/s)")
    ap.add_argument(
        "--cpu-rates",
        default="50,200",
        help="the rates whose cells make the CPU-per-call headline: at a rate that saturates a core, chunks merge and CPU per call drops",
    )
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds per cell and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--shadow-rate",
        type=float,
        default=1.0,
        help="llmwatch-shadow: share of calls mirrored (default 1.0, every call)",
    )
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--gap-ms", type=float, default=3.0)
    ap.add_argument("--baseline-src", help="another llmwatch checkout to run as llmwatch-off@DIR, with this venv")
    ap.add_argument("--litellm-venv", default=str(ROOT / ".bench" / "litellm-venv"))
    ap.add_argument("--portkey-dir", default=str(ROOT / ".bench" / "portkey"))
    ap.add_argument("--portkey-rates", default="50,200", help="the rates the Portkey gateway is offered")
    ap.add_argument(
        "--no-install", action="store_true", help="never pip install LiteLLM; leave it out when its venv is missing"
    )
    ap.add_argument("--out", default=str(ROOT / ".bench" / "peers.md"))
    args = ap.parse_args()
    args.rates = [float(r) for r in args.rates.split(",") if r]
    args.litellm_rates = [float(r) for r in args.litellm_rates.split(",") if r]
    args.portkey_rates = [float(r) for r in args.portkey_rates.split(",") if r]
    args.cpu_rates = [float(r) for r in args.cpu_rates.split(",") if r]
    wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in ALL_PEERS]
    if unknown:
        ap.error(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(ALL_PEERS)}")

    work = Path(tempfile.mkdtemp(prefix="llmwatch-peers-"))
    up_port = free_port()
    upstream = subprocess.Popen(
        pinned(
            [
                sys.executable,
                str(ROOT / "bench" / "upstream.py"),
                "--port",
                str(up_port),
                "--latency-ms",
                str(args.latency_ms),
                "--ttft-ms",
                str(args.ttft_ms),
                "--gap-ms",
                str(args.gap_ms),
            ],
            "0",
        )
    )
    candidate = None
    if "llmwatch-shadow" in wanted:
        # The shadow candidate: a second upstream like the first, on the same core.
        shadow_port = free_port()
        candidate = subprocess.Popen(
            pinned(
                [
                    sys.executable,
                    str(ROOT / "bench" / "upstream.py"),
                    "--port",
                    str(shadow_port),
                    "--latency-ms",
                    str(args.latency_ms),
                    "--ttft-ms",
                    str(args.ttft_ms),
                    "--gap-ms",
                    str(args.gap_ms),
                ],
                "0",
            )
        )
    if can_pin():
        os.sched_setaffinity(0, {0})
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    notes: list[str] = []
    shadow_lines: list[str] = []
    peers: list[Peer] = []
    try:
        direct_url = f"http://127.0.0.1:{up_port}"
        asyncio.run(wait_ready(direct_url))
        expected = {
            "plain": asyncio.run(fetch(direct_url, BODY, {})),
            "stream": asyncio.run(fetch(direct_url, STREAM_BODY, {})),
        }
        for name in wanted:
            if name == "direct":
                peers.append(Peer("direct", direct_url))
            elif name in ("nginx", "nginx-log"):
                peer = start_nginx(up_port, work, name, access_log=name == "nginx-log")
                if peer is None:
                    notes.append(f"{name}: nginx not installed: left out")
                else:
                    peers.append(peer)
            elif name == "litellm":
                peer = start_litellm(up_port, work, args)
                if peer is None:
                    notes.append("LiteLLM could not be installed here: left out")
                else:
                    peers.append(peer)
            elif name == "portkey":
                peer = start_portkey(up_port, work, args)
                if peer is None:
                    notes.append("the Portkey gateway could not be installed here: left out")
                else:
                    peers.append(peer)
            elif name == "relay-floor":
                peers.append(start_relay_floor(up_port, work))
            elif name == "native-floor":
                native, why = start_native_floor(up_port, work)
                if native is None:
                    notes.append(f"the native floor could not be built here ({why}): left out")
                else:
                    peers.append(native)
            elif name == "llmwatch-shadow":
                asyncio.run(wait_ready(f"http://127.0.0.1:{shadow_port}"))
                peers.append(
                    start_llmwatch(
                        name,
                        up_port,
                        work,
                        scoring=False,
                        isolated=False,
                        shadow_port=shadow_port,
                        shadow_rate=args.shadow_rate,
                    )
                )
            elif name in ("llmwatch-python", "llmwatch-native", "llmwatch-front"):
                engine = "python" if name == "llmwatch-python" else "native"
                forward = name != "llmwatch-front"
                peers.append(
                    start_llmwatch(name, up_port, work, scoring=False, isolated=False, engine=engine, forward=forward)
                )
            else:
                peers.append(
                    start_llmwatch(
                        name,
                        up_port,
                        work,
                        scoring=not name.startswith("llmwatch-off"),
                        isolated=name == "llmwatch-isolated",
                    )
                )
        if args.baseline_src:
            peers.append(
                start_llmwatch(
                    f"llmwatch-off@{args.baseline_src}",
                    up_port,
                    work,
                    scoring=False,
                    isolated=False,
                    src=args.baseline_src,
                )
            )
        ready = []
        for peer in peers:
            try:
                asyncio.run(wait_ready(peer.url, headers=peer.headers))
                # Warm the connection pools and code paths before anything counts.
                for mode in ("plain", "stream"):
                    asyncio.run(
                        open_loop_checked(
                            peer.url + "/v1/chat/completions",
                            BODY if mode == "plain" else STREAM_BODY,
                            20,
                            1.0,
                            expected=None,
                            headers=peer.headers,
                        )
                    )
                ready.append(peer)
            except RuntimeError:
                notes.append(f"{peer.name} did not start (see {work}): left out")
                print(f"{peer.name}: did not come up; left out", file=sys.stderr)
        peers = ready
        # A scorer child loads its model after the proxy answers: nothing counts until every
        # tree is quiet, or that start-up would land on whichever peer runs first.
        for peer in peers:
            if peer.pid:
                wait_idle(peer.pid, quiet_s=1.0, limit_s=300.0)
        for peer in peers:
            if peer.name in ("llmwatch-isolated", "llmwatch-shadow") and peer.pid and can_pin():
                subprocess.run(
                    ["taskset", "-a", "-p", "-c", "1", str(peer.pid)], check=False, stdout=subprocess.DEVNULL
                )
        for rnd in range(args.rounds):
            for rate in args.rates:
                for mode in ("plain", "stream"):
                    shift = (rnd + args.rates.index(rate)) % max(len(peers), 1)
                    for peer in peers[shift:] + peers[:shift]:
                        if peer.only_rates is not None and rate not in peer.only_rates:
                            continue
                        print(f"round {rnd + 1}/{args.rounds}: {peer.name} {mode} {rate:g} req/s", file=sys.stderr)
                        measure(
                            peer,
                            mode,
                            rate,
                            args.seconds,
                            expected[mode],
                            args.cpu_rates if peer.max_rate is None else [peer.max_rate],
                        )
        for peer in peers:
            if peer.pid:
                peer.rss_mb = tree_rss_mb(peer.pid)
        # Read now, while the proxy still answers /metrics.
        shadow_lines = shadow_added(peers, args)
        for peer in peers:
            if peer.metrics_url and peer.name.startswith("llmwatch"):
                peer.engine = engine_serving(peer)
    finally:
        for peer in peers:
            if peer.proc is not None:
                peer.proc.terminate()
        for peer in peers:
            if peer.proc is not None:
                try:
                    peer.proc.wait(30)
                except subprocess.TimeoutExpired:
                    peer.proc.kill()
        for up in (upstream, candidate):
            if up is not None:
                up.terminate()
                up.wait(30)
    if any(p.name == "litellm" for p in peers):
        notes.append(
            "LiteLLM rewrites response bodies (ids, timestamps, fields), so its bodies are not byte-identical by design; it is offered only "
            + ", ".join(f"{r:g}" for r in args.litellm_rates)
            + " req/s"
        )
    if any(p.name == "portkey" for p in peers):
        notes.append(
            "The Portkey gateway re-serialises response bodies, so its bodies are not byte-identical by design; it is offered only "
            + ", ".join(f"{r:g}" for r in args.portkey_rates)
            + " req/s. Seen with 1.15.2 here (Node 20 and 22): streams forwarded to a custom host are answered 500 "
            "(its own `TypeError: immutable` while adding headers to the upstream's response), so its stream cells count failures"
        )
    args.shadow_lines = shadow_lines
    text = report(peers, args, notes)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    Path(args.out).with_suffix(".json").write_text(
        json.dumps(
            {
                p.name: {
                    "cpu_s": p.cpu,
                    "proxy_cpu_s": p.proxy_cpu,
                    "calls": p.calls,
                    "rss_mb": p.rss_mb,
                    "not_idle": p.not_idle,
                }
                for p in peers
            },
            indent=2,
        )
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
