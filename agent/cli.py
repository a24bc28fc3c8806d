"""`llmwatch` command line. Each subcommand is a thin shell over a module that does the work.

Exit codes: 0 success, 1 the command ran and found a problem (e.g. drift), 2 bad usage,
bad config or unreadable input (the message says which field or line and how to fix it).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any, Awaitable, Callable, Sequence

import structlog

from agent import __version__
from agent.config import Config, ConfigError, load_config
from agent.logs import configure_logging
from agent.records import RecordError

log = structlog.get_logger(__name__)


def run_async(main: Callable[[], Awaitable[int]]) -> int:
    try:
        import uvloop  # type: ignore[import-not-found]

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())


async def wait_for_signal(duration: float | None = None) -> None:
    """Sleep until SIGINT/SIGTERM (or `duration` seconds), so that shutdown is always clean."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await asyncio.wait_for(stop.wait(), timeout=duration)
    except asyncio.TimeoutError:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                pass


def _config_from_args(args: argparse.Namespace, **extra: Any) -> Config:
    overrides = {
        "upstream": getattr(args, "upstream", None),
        "listen": getattr(args, "listen", None),
        "metrics_listen": getattr(args, "metrics_listen", None),
        "data_dir": getattr(args, "data_dir", None),
        **extra,
    }
    cfg = load_config(args.config, overrides=overrides)
    configure_logging(cfg.logging.level, cfg.logging.format)
    return cfg


def cmd_proxy(args: argparse.Namespace) -> int:
    cfg = _config_from_args(args)
    if not cfg.upstream:
        raise ConfigError("upstream: not set; pass --upstream http://HOST:PORT (the LLM service) or set `upstream:` in the config")
    from agent.runtime import Agent

    async def main() -> int:
        agent = Agent(cfg)
        await agent.start()
        try:
            await wait_for_signal()
        finally:
            await agent.stop()
        return 0

    return run_async(main)


def cmd_demo(args: argparse.Namespace) -> int:
    from agent.demo import run_demo

    cfg = _config_from_args(args)
    return run_async(lambda: run_demo(cfg, duration=args.duration, rate=args.rate, concurrency=args.concurrency, out=sys.stdout))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmwatch", description="Production traffic observability for OpenAI-compatible LLM services.")
    parser.add_argument("--version", action="version", version=f"llmwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="YAML config file (env LLMWATCH_CONFIG); env LLMWATCH_<SECTION>__<FIELD> overrides it")

    p = sub.add_parser("proxy", help="run the sidecar proxy in front of an LLM service")
    common(p)
    p.add_argument("--upstream", help="the LLM service's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--listen", help="HOST:PORT to accept client traffic on (default 127.0.0.1:8080)")
    p.add_argument("--metrics-listen", help="HOST:PORT for /metrics, /healthz, /readyz (default 127.0.0.1:9464)")
    p.add_argument("--data-dir", help="where samples are written (default ./llmwatch-data)")
    p.set_defaults(func=cmd_proxy)

    p = sub.add_parser("demo", help="run a simulator, the proxy in front of it, and traffic through it; print a summary")
    common(p)
    p.add_argument("--duration", type=float, default=30.0, help="seconds of traffic (default 30)")
    p.add_argument("--rate", type=float, default=20.0, help="requests per second offered (default 20)")
    p.add_argument("--concurrency", type=int, default=64, help="most requests in flight (default 64)")
    p.add_argument("--listen", help="proxy HOST:PORT (default 127.0.0.1:8080)")
    p.add_argument("--metrics-listen", help="metrics HOST:PORT (default 127.0.0.1:9464)")
    p.add_argument("--data-dir", help="where samples are written (default ./llmwatch-data)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        sys.stderr.write(f"llmwatch: {exc}\n")
        return 2
    except RecordError as exc:
        sys.stderr.write(f"llmwatch: bad input: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        # Typically a port already in use or an unwritable data directory.
        sys.stderr.write(f"llmwatch: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
