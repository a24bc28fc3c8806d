"""Pieces shared by `llmwatch`'s command modules (agent/llmwatch/agent/cli/main.py, agent/llmwatch/agent/cli/evaluate.py), so that
neither imports the other: option groups, the usage fallback, and the input checks run before
anything heavy is imported.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import orjson

from llmwatch.core.records import RecordError


def log_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="log level on stderr (default: info for servers; warning for commands that print a summary, as config logging.level)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at info level (same as --log-level info)")


def show_usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """A command given without its subcommand: the list of what it takes, and exit 2 (bad usage)."""

    def show(_: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return show


def print_result(
    fmt: str, *, data: Callable[[], Any], text: Callable[[], str], out: str | None = None, wrote: str = ""
) -> None:
    """A command's summary on stdout: with --format json only the document `data()` makes (so a script can
    parse stdout whole); otherwise `text()` for people and, where it wrote --out, the line `wrote` names it
    with (a template whose `{}` is the path). Both are made only for the format asked for."""
    if fmt == "json":
        sys.stdout.write(orjson.dumps(data(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    sys.stdout.write(text() + "\n")
    if out and wrote:
        sys.stdout.write(wrote.format(out) + "\n")


# The offline commands load the embedding model (20-40 s) and scipy before they read a line, so
# the mistakes a person makes at the prompt (a typo in a path, an empty export, an existing
# baseline) are checked first, here, with nothing heavier than the core imported.


def require_records(source: str, flag: str, what: str = "samples") -> None:
    """`source` (a file or a directory of .jsonl) exists and holds at least one record."""
    from llmwatch.core import parquet
    from llmwatch.core.jsonio import jsonl_paths

    if parquet.is_url(source):
        # A dataset URL: its filesystem and listing are checked here (a clear error, exit 2).
        try:
            found = parquet.is_dataset(source, what)
        except RecordError as exc:
            raise RecordError(f"{flag} {exc}") from None
        if not found:
            raise RecordError(f"{flag} {source}: no {what} Parquet files under this URL (nor under {what}/ in it)")
        return
    if parquet.is_parquet_file(source) or (
        Path(source).is_dir() and not any(Path(source).glob("*.jsonl")) and parquet.is_dataset(source, what)
    ):
        # A Parquet dataset (`llmwatch archive`'s output): the reader checks its rows.
        return
    try:
        paths = jsonl_paths(source, what)
    except RecordError as exc:
        raise RecordError(f"{flag} {exc}") from None
    for path in paths:
        try:
            with open(path, "rb") as fh:
                if any(line.strip() for line in fh):
                    return
        except OSError as exc:
            raise RecordError(f"{flag} {path}: cannot be read: {exc.strerror or exc}") from None
    raise RecordError(
        f"{flag} {source} holds no {what} (empty file{'s' if len(paths) > 1 else ''}); export some traffic first, e.g. with `llmwatch proxy` or `llmwatch demo`"
    )


def require_file(path: str, flag: str, hint: str) -> None:
    if Path(path).is_file():
        return
    if Path(path).is_dir():
        raise RecordError(f"{flag} {path} is a directory; {hint}")
    if os.path.exists(path):
        # `--baseline <(cat b.json)` or a FIFO was "does not exist"; reading one without a writer hangs.
        raise RecordError(
            f"{flag} {path} is not a regular file (a pipe or a device); save it to a file first and give that"
        )
    raise RecordError(f"{flag} {path} does not exist; {hint}")


# The options that name a file a command reads, by their argparse dest.
_INPUTS = {
    "input": "--in",
    "samples": "--samples",
    "scores": "--scores",
    "pairs": "--pairs",
    "baseline": "--baseline",
    "consistency": "--consistency",
}


# Options that take one file or directory: argparse keeps the last of several and drops the rest.
_ONE_PATH = ("--in", "--samples", "--scores", "--pairs", "--baseline", "--consistency", "--out")


def require_each_path_once(argv: Sequence[str]) -> None:
    """None of `_ONE_PATH` is given twice: `report --samples day1.jsonl --samples day2.jsonl` read day 2
    alone, exit 0, day 1 dropped without a word."""
    seen: dict[str, int] = {}
    for word in argv:
        if word == "--":
            break
        flag = word.split("=", 1)[0]
        if flag in _ONE_PATH:
            seen[flag] = seen.get(flag, 0) + 1
    for flag, times in seen.items():
        if times > 1:
            raise RecordError(
                f"{flag} given {times} times; it takes one file or directory, and only the last would be "
                f"read: put the files in one directory and give {flag} that directory"
            )


def require_output_not_an_input(args: argparse.Namespace) -> None:
    """The file `--out` names is none of the files the command reads.

    `score --in s.jsonl --out s.jsonl` (or `report --samples`, `suite build --samples` the same)
    read the samples, then the atomic writer renamed its output over them: the input was gone,
    exit 0. A second name of the same file (a hard link, `./s.jsonl`) counts; a symlink at `--out` does
    not, since the writer replaces the link, not its target. (`report --compare r.json --out r.json`
    stays allowed: it updates a report in place, on purpose.)"""
    out = getattr(args, "output", None) or getattr(args, "out", None)
    if not isinstance(out, str) or not os.path.isfile(out) or os.path.islink(out):
        return
    for dest, flag in _INPUTS.items():
        value = getattr(args, dest, None)
        for source in value if isinstance(value, list) else [value]:
            if isinstance(source, str) and os.path.isfile(source) and os.path.samefile(source, out):
                raise RecordError(
                    f"--out {out} is the file {flag} reads ({source}): writing it would replace that input; "
                    "give --out another file name"
                )


def require_writable(path: str, flag: str, *, must_not_exist: str | None = None, example: str = "out.jsonl") -> None:
    """`path` can be created: not a directory, (if asked) not already there, its folder writable.

    Checked before the command's work: a report computed for minutes and then refused at its
    write said only `[Errno 21] Is a directory: '.x.partial' -> 'x'` (the atomic writer's file).
    `example` is the file name suggested inside a directory given by mistake.
    """
    target = Path(path)
    if target.is_dir():
        raise RecordError(f"{flag} {path} is a directory; give a file name inside it, e.g. {target / example}")
    if must_not_exist and target.exists():
        raise RecordError(f"{flag} {path} already exists; {must_not_exist}")
    folder = target.parent.resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise RecordError(f"{flag} {path}: cannot write there ({folder} is not a writable directory)")
