"""The `llmwatch` command line: one module per group of subcommands."""

from __future__ import annotations

import sys


def run() -> None:
    """The `llmwatch` command, as installed and as `python -m llmwatch.agent.cli`.

    `main` handles Ctrl-C once a command runs; before that the process spends a second or more
    importing the commands' modules (numpy, scipy, pydantic), and a Ctrl-C there raised
    KeyboardInterrupt out of an import, a traceback of library frames and a death by SIGINT.
    The import is made here, inside the same rule: 130 and nothing on stderr."""
    try:
        from llmwatch.agent.cli.main import main

        code = main()
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
