"""The files given to `llmwatch ui --suite` and `--drift-report`, checked before the UI starts.

A samples file given as `--suite samples.jsonl` (or a baseline as `--drift-report`) started the UI,
whose suite page then said "field 'id': Field required" of line 1 and whose drift page "not a drift
report (KeyError)": nothing said what the file was or which flag takes it. Each file is read once
at start: one that is another kind of llmwatch file is named as that kind, with the flag that takes
it; a suite that does not load, or a document that is no drift report, is refused with the
reader's own message (file, line, field). Exit 2 (`UiError`), no traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import orjson

from llmwatch.core.jsonio import read_document
from llmwatch.core.pairs import PAIR_SCHEMA
from llmwatch.core.records import SAMPLE_SCHEMA
from llmwatch.core.scores import SCORE_SCHEMA

# The first line read to tell a JSON Lines file's kind: a samples file may be gigabytes, and its
# first record is enough (a record this long is not a suite case either).
FIRST_LINE_BYTES = 1 << 20

SUITE = "a regression suite"
DRIFT_REPORT = "a drift report"

# What each kind is and where it goes, for "<flag> <file>: <what>, not <wanted>; <where>".
_WHERE = {
    "samples": "samples go to --samples of the offline commands; this UI reads them from --data-dir (the folder holding samples/)",
    "scores": "scores go to --scores of the offline commands; this UI reads them from --data-dir (the folder holding scores/)",
    "pairs": "shadow pairs go to `llmwatch shadow report --pairs`; this UI reads them from --data-dir (the folder holding pairs/)",
    SUITE: "give it as --suite",
    DRIFT_REPORT: "give it as --drift-report",
    "baseline": "a baseline goes to `llmwatch drift --baseline`; this UI lists the baseline-*.json files of --data-dir on its drift page",
    "parquet": "a Parquet dataset (`llmwatch archive`) goes to --data-dir, as its root folder",
}
_WANTED = {
    "--suite": (SUITE, "--suite takes a suite .jsonl (`llmwatch suite build --out FILE` writes one)"),
    "--drift-report": (DRIFT_REPORT, "--drift-report takes the JSON of `llmwatch drift --format json --out FILE`"),
}


_JSON_TYPES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


def _keys(data: dict[str, Any], names: tuple[str, ...]) -> str:
    return "/".join(n for n in names if n in data)


def kind_of_record(data: Any) -> tuple[str, str] | None:
    """(kind, what it looks like) of one parsed JSON value, by its `schema` or its fields; None
    when it is none of llmwatch's files."""
    if not isinstance(data, dict):
        return None
    schema = data.get("schema")
    if schema == SAMPLE_SCHEMA or {"request", "response"} <= data.keys():
        return "samples", f"a samples file: its first record has {_keys(data, ('schema', 'id', 'request', 'response'))}"
    if schema == SCORE_SCHEMA or {"sample_id", "check", "result"} <= data.keys():
        return (
            "scores",
            f"a scores file: its first record has {_keys(data, ('schema', 'sample_id', 'check', 'result'))}",
        )
    if schema == PAIR_SCHEMA or {"primary", "shadow"} <= data.keys():
        return (
            "pairs",
            f"a shadow pairs file: its first record has {_keys(data, ('schema', 'candidate', 'primary', 'shadow'))}",
        )
    if isinstance(schema, str) and schema.startswith("llmwatch.baseline/"):
        return "baseline", f"a frozen baseline (`llmwatch baseline freeze`, schema {schema})"
    if isinstance(data.get("signals"), list):
        return DRIFT_REPORT, "a drift report (`llmwatch drift --format json`: a list of signals)"
    if {"id", "input"} <= data.keys():
        return SUITE, "a regression suite: its first record has id/input"
    return None


def kind_of_file(path: Path) -> tuple[str, str] | None:
    """(kind, what it looks like) of a file, from its first line (a JSON Lines record, or a whole
    document written on one line) or, when that is not JSON, the whole file as one document."""
    try:
        with open(path, "rb") as fh:
            head = fh.readline(FIRST_LINE_BYTES)
            if head.startswith(b"PAR1"):
                return "parquet", "a Parquet file"
            try:
                return kind_of_record(orjson.loads(head))
            except orjson.JSONDecodeError:
                pass
            if os.fstat(fh.fileno()).st_size > 64 * FIRST_LINE_BYTES:
                return None  # not a document anyone wrote by hand or by llmwatch: the reader says what is wrong
            fh.seek(0)
            return kind_of_record(orjson.loads(fh.read()))
    except (OSError, orjson.JSONDecodeError):
        return None


def check_given(flag: str, path: str, error: Callable[[str], Exception]) -> None:
    """Refuse `path` given as `flag` (--suite, --drift-report) unless it is what that flag shows:
    `error(message)` naming the file, what it is and which flag (or command) takes it."""
    from llmwatch.scorers.evaluation.regress import RegressError, load_suite

    wanted, takes = _WANTED[flag]
    found = kind_of_file(Path(path))
    if found is not None and found[0] != wanted:
        kind, looks = found
        raise error(f"{flag} {path}: {looks}, not {wanted}; {_WHERE[kind]}. {takes}")
    if flag == "--suite":
        try:
            load_suite(path)
        except RegressError as exc:
            raise error(f"{flag} {exc}") from None
        return
    report = read_document(path, what=flag, error=error, fix=takes)
    if not (isinstance(report, dict) and isinstance(report.get("signals"), list)):
        if isinstance(report, dict) and report:
            names = sorted(report)
            shape = f"its keys are {', '.join(n[:40] for n in names[:8])}" + (
                f" and {len(names) - 8} more" if len(names) > 8 else ""
            )
        else:
            shape = f"it holds {_JSON_TYPES.get(type(report), 'an empty object')}"
        raise error(f"{flag} {path}: not a drift report (no list of signals; {shape}). {takes}")
