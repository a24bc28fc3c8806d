"""What every `llmwatch` subcommand does with its parsed arguments before its own work.

Shared by agent/cli.py and agent/cli_eval.py; it lives apart from both so that neither has to
import the other (cli.py registers cli_eval's subcommands, so the import runs one way only).
"""

from __future__ import annotations

import argparse
from typing import Any

from llmwatch.core.config import Config, load_config
from llmwatch.core.jsonio import set_file_mode
from llmwatch.core.logs import configure_logging


def config_from_args(args: argparse.Namespace, **extra: Any) -> Config:
    """The config file (`--config`) with the command-line overrides applied, logging set up from it."""
    overrides = {
        "upstream": getattr(args, "upstream", None),
        "listen": getattr(args, "listen", None),
        "metrics_listen": getattr(args, "metrics_listen", None),
        "data_dir": getattr(args, "data_dir", None),
        **extra,
    }
    cfg = load_config(args.config, overrides=overrides)
    configure_logging(cfg.logging.level, cfg.logging.format)
    # Every data file this process creates (samples, scores, baselines, reports) gets this mode.
    set_file_mode(cfg.files.mode_bits)
    return cfg
