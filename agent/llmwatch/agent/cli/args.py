"""What every `llmwatch` subcommand does with its parsed arguments before its own work.

Shared by agent/llmwatch/agent/cli/main.py and agent/llmwatch/agent/cli/evaluate.py; it lives apart from both so that neither has to
import the other (cli.py registers cli_eval's subcommands, so the import runs one way only).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable
from urllib.parse import urlsplit

from llmwatch.agent.components import Config, load_config
from llmwatch.core.config import ConfigError
from llmwatch.core.jsonio import set_file_mode
from llmwatch.core.logs import configure_logging
from llmwatch.scorers.drift.model import FAMILIES

# Commands whose output a person reads (summaries, tables, reports): their logs stay below
# warning unless asked for, so that the output is not interleaved with log lines.
QUIET_COMMANDS = frozenset(
    {
        "demo",
        "score",
        "baseline",
        "drift",
        "canary",
        "report",
        "regress",
        "review",
        "judge",
        "suite",
        "shadow",
        "replay",
    }
)

# Commands a person watches even when their output goes to a file or a pipe (`llmwatch demo |
# tee demo.txt`): their logs are readable lines whatever stderr is, unless logging.format is
# configured. Elsewhere stderr decides: JSON lines off a terminal, for a log collector (the proxy,
# the agent); the other summary commands log warnings only, and are run from scripts and CI too.
CONSOLE_LOG_COMMANDS = frozenset({"demo"})

# Where an override's flag is not `--<field>`, for errors that blame the flag the user typed.
FLAGS = {
    "otel.ingest_listen": "--listen",
    "kafka.bootstrap_servers": "--kafka",
    "kafka.samples_topic": "--topic",
    "kafka.group_id": "--group",
    "kafka.scores_topic": "--scores-topic",
    "drift.baseline": "--baseline",
    "logging.level": "--log-level/--verbose",
    # shadow report's flags: a bad value was blamed on the config file, which does not have it.
    "shadow.margins.pass_rate_points": "--margin-pass-rate",
    "shadow.margins.p95_latency_ratio": "--margin-latency",
    "shadow.alpha": "--alpha",
}


def requested_level(args: argparse.Namespace) -> str | None:
    if getattr(args, "log_level", None):
        return args.log_level
    return "info" if getattr(args, "verbose", False) else None


def setup_logging(args: argparse.Namespace, cfg: Config | None = None) -> str:
    """Logs always go to stderr: console lines on a terminal, JSON lines otherwise (or as configured).

    The level: --log-level/--verbose, else a configured logging.level, else warning for the
    commands in QUIET_COMMANDS and info for the servers. Returns the level set.
    """
    command = getattr(args, "command", None)
    level = requested_level(args)
    if level is None and cfg is not None and ("level" in cfg.logging.model_fields_set or command not in QUIET_COMMANDS):
        level = cfg.logging.level
    if level is None:
        level = "warning" if command in QUIET_COMMANDS else "info"
    configure_logging(level, log_format(args, cfg))
    return level


def log_format(args: argparse.Namespace, cfg: Config | None = None) -> str | None:
    """The configured logging.format; else console lines for CONSOLE_LOG_COMMANDS; else None (by the terminal)."""
    configured = cfg.logging.chosen_format() if cfg is not None else None
    if configured is None and getattr(args, "command", None) in CONSOLE_LOG_COMMANDS:
        return "console"
    return configured


def config_from_args(args: argparse.Namespace, **extra: Any) -> Config:
    """The config file (`--config`) with the command-line overrides applied, logging set up from it."""
    level = requested_level(args)
    overrides = {
        "upstream": getattr(args, "upstream", None),
        "listen": getattr(args, "listen", None),
        "metrics_listen": getattr(args, "metrics_listen", None),
        "data_dir": getattr(args, "data_dir", None),
        "logging": {"level": level} if level else None,
        **extra,
    }
    cfg = load_config(getattr(args, "config", None), overrides=overrides, flags=FLAGS)
    effective = setup_logging(args, cfg)
    fmt = log_format(args, cfg)
    if effective != cfg.logging.level or fmt != cfg.logging.chosen_format():
        # Processes started from here (the demo's scorer and shadow children) log at the same level,
        # in the same format.
        update: dict[str, Any] = {"level": effective} if fmt is None else {"level": effective, "format": fmt}
        cfg = cfg.model_copy(update={"logging": cfg.logging.model_copy(update=update)})
    # Every data file this process creates (samples, scores, baselines, reports) gets this mode.
    set_file_mode(cfg.files.mode_bits)
    return cfg


def add_report_format(p: argparse.ArgumentParser) -> None:
    """--format of the commands that can write an HTML report (`report`, `drift`, `canary`)."""
    p.add_argument(
        "--format",
        choices=["text", "json", "html"],
        default="text",
        help="html: a self-contained page with plots, written to --out (extra: reports)",
    )


def probability(text: str) -> float:
    """An argparse type: a level strictly between 0 and 1. `--alpha 2` or `--alpha nan` ran the tests
    at that level and answered "stable" (nan compares false), exit 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a level between 0 and 1, e.g. 0.05") from None
    if not 0.0 < value < 1.0:  # false for nan too
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1 (exclusive); give e.g. 0.05")
    return value


def finite(example: str) -> Callable[[str], float]:
    """An argparse type: a finite number (`example` is the fix a refusal offers). `shadow report
    --margin-latency inf` was taken as a margin nothing exceeds: every candidate "not worse" on p95
    latency however slow, exit 0. The range is the config field's to check (it names the flag)."""

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; give e.g. {example}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number; give e.g. {example}")
        return value

    return number


def public_url(text: str) -> str:
    """An argparse type: the base URL people open, behind a reverse proxy. `notaurl` started the
    server and printed links such as `notaurl/?token=...` that open nothing."""
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) base URL; give the address people open, e.g. https://llmwatch.example.com/ui"
        )
    return text


# The largest whole number an option takes: what a 64-bit integer holds, so what the JSON reports,
# numpy and Parquet that carry the value can hold too.
MOST = 2**63 - 1


def whole_number(text: str) -> int:
    """An argparse type: a whole number that fits in 64 bits. `--seed 99999999999999999999999` (or
    `--size`, `--min-samples` as large) was taken, the work done, and then the output's write ended
    in a traceback (orjson: "Integer exceeds 64-bit range"), no file written."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not -MOST <= value <= MOST:
        raise argparse.ArgumentTypeError(f"{text} is too large; give a whole number of at most {MOST}")
    return value


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of 1 or more (`--min-samples -1` ended in a numpy traceback)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1; give 1 or more")
    if value > MOST:
        raise argparse.ArgumentTypeError(f"{text} is too large; give a whole number from 1 to {MOST}")
    return value


def fail_on_families(text: str | None) -> tuple[str, ...] | None:
    """`--fail-on` of `drift` and `canary`: the families named, or None when the flag is absent.

    Given but naming none (`""`, `" , "`) is refused like a misspelt family: read as absent, it made
    every family fail the run. Checked before any window is read (minutes with embeddings)."""
    if text is None:
        return None
    families = tuple(f.strip() for f in text.split(",") if f.strip())
    if not families or set(families) - set(FAMILIES):
        raise ConfigError(
            f"--fail-on {text!r}: name families from inputs, behaviour, performance, comma-separated (e.g. --fail-on behaviour,performance)"
        )
    return families


def add_comparison_options(p: argparse.ArgumentParser, *, min_samples_help: str, fail_on_help: str) -> None:
    """The options `drift` and `canary` share: report format, the family-wise alpha, minimum samples, failing families."""
    add_report_format(p)
    p.add_argument(
        "--out",
        help="also write the JSON report to this file (with text or json); with --format html, the HTML page",
    )
    p.add_argument("--alpha", type=probability, default=0.05, help="family-wise false alarm rate (default 0.05)")
    p.add_argument("--min-samples", type=at_least_one, default=30, help=min_samples_help)
    p.add_argument("--fail-on", help=fail_on_help)
