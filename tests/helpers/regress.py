"""A regression suite on disk and `llmwatch regress` run in process, for the regress tests."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson

from llmwatch.agent.cli.main import main


def write_suite(path: Path, cases: Iterable[dict]) -> str:
    """`cases` as a suite file, one JSON case a line; returns its path as `--suite` takes it."""
    path.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in cases))
    return str(path)


def regress_cli(suite: str, upstream: str, *options: str, model: str = "sim-gpt-4o-mini") -> int:
    """`llmwatch regress --suite SUITE --upstream UPSTREAM --model MODEL OPTIONS` in process: its exit code."""
    return main(["regress", "--suite", suite, "--upstream", upstream, "--model", model, *options])
