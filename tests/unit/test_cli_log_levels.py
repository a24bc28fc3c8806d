"""A command that prints its answer logs only warnings unless asked; a server logs at info.

`llmwatch suite build` printed the embedding model's info line (`embedding_model_loaded`, as JSON)
above its summary: `suite`, `shadow` and `replay` were missing from the quiet commands.
"""

from __future__ import annotations

import argparse

import pytest

from llmwatch.agent.cli import args as cli_args
from llmwatch.agent.cli.main import build_parser

# Long-running processes: their info lines (started, listening, stopped) are what an operator reads.
SERVERS = {"proxy", "simulate", "scorer", "aggregate", "archive", "ingest", "ui"}


def commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


@pytest.mark.parametrize("command", [c for c in commands() if c not in SERVERS])
def test_a_command_that_prints_its_answer_logs_warnings_only_by_default(monkeypatch, command):
    monkeypatch.setattr(cli_args, "configure_logging", lambda *a, **k: None)
    args = argparse.Namespace(command=command, log_level=None, verbose=False)
    assert cli_args.setup_logging(args) == "warning"
    assert cli_args.setup_logging(argparse.Namespace(command=command, log_level=None, verbose=True)) == "info"


@pytest.mark.parametrize("command", sorted(SERVERS))
def test_a_server_logs_at_info_by_default(monkeypatch, command):
    monkeypatch.setattr(cli_args, "configure_logging", lambda *a, **k: None)
    assert command in commands()
    assert cli_args.setup_logging(argparse.Namespace(command=command, log_level=None, verbose=False)) == "info"


def formats(monkeypatch) -> list[str | None]:
    """The formats configure_logging is asked for, with stderr not a terminal (a pipe, a file)."""
    asked: list[str | None] = []
    monkeypatch.setattr(cli_args, "configure_logging", lambda level, fmt=None: asked.append(fmt))
    return asked


def test_the_demo_logs_readable_lines_into_a_pipe_or_a_file(monkeypatch, tmp_path):
    # `llmwatch demo > demo.txt 2>&1` wrote its warnings (a new served version, its baseline) as
    # JSON lines between the summary's lines: the format followed stderr, a pipe, as a server's does.
    asked = formats(monkeypatch)
    monkeypatch.chdir(tmp_path)  # no llmwatch.yaml of the developer's
    monkeypatch.delenv("LLMWATCH_CONFIG", raising=False)
    demo = build_parser().parse_args(["demo"])
    cfg = cli_args.config_from_args(demo)
    assert asked == ["console"]
    # Its scorer and shadow children are handed the same format (they decide by their own stderr otherwise).
    assert cfg.logging.chosen_format() == "console"
    # The proxy and the agent keep JSON lines off a terminal, for a log collector (None: by the terminal) ...
    for server in ("proxy", "scorer"):
        cli_args.setup_logging(argparse.Namespace(command=server, log_level=None, verbose=False))
    # ... and a configured format wins, for the demo too.
    (tmp_path / "llmwatch.yaml").write_text("logging:\n  format: json\n")
    cfg = cli_args.config_from_args(build_parser().parse_args(["demo", "--config", str(tmp_path / "llmwatch.yaml")]))
    assert asked == ["console", None, None, "json"] and cfg.logging.chosen_format() == "json"


def test_the_scorer_child_is_handed_the_chosen_format(monkeypatch):
    from llmwatch.agent.processes.scoring import ScorerProcess

    started: list[tuple] = []

    class Process:
        def __init__(self, target, args, name, daemon):
            started.append(args)

        def start(self):
            pass

    for chosen in ("console", None):
        scorer = ScorerProcess({}, lambda *a: None, max_pending=1, batch_timeout_s=1.0, log_format=chosen)
        monkeypatch.setattr(scorer._ctx, "Process", Process)
        scorer._spawn()
        assert started[-1][-1] == chosen  # _child_main's log_format
