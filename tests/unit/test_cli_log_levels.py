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
