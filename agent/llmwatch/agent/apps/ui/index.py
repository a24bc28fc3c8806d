"""The index behind `llmwatch ui`: a data directory's samples, scores and shadow pairs in DuckDB.

The JSON Lines files are read in bulk by DuckDB's `read_json` (explicit columns, so that a
request or response of any shape is one JSON value, never a guessed schema) into in-memory
tables once at start; `refresh` re-reads only the files that grew, appeared or went away (the
sidecar appends to the newest file and rotates), so a page is a SQL query over the tables, never
a scan of the files. The tables hold what filters and lists need: the call's fields, the prompt
and answer text (for text search and the list's snippets) and each score's verdict and details;
a sample's page reads the whole record back from its file (`read_record`), so the request and
response documents are never held in memory.

A data directory's files are opened without following links (`links.open_inside`, design record
0062) and read through that descriptor: DuckDB is given `/proc/self/fd/N`, which reopens the file
the descriptor holds, never the name; a file swapped for a link after the listing is refused.

Every value from a request reaches DuckDB as a bound parameter; only this module's own SQL text
is ever formatted into a statement.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import urlencode

import duckdb
import orjson
import structlog

from llmwatch.core import parquet
from llmwatch.core.links import open_inside, refuse_link
from llmwatch.core.records import RecordError

log = structlog.get_logger(__name__)

PAGE_SIZE = 50
# A conversation's page shows this many turns at a time (a runaway agent loop can have thousands).
TURNS_PAGE_SIZE = 100
SORTS = ("time", "latency", "ttft", "cost", "tokens")
# The conversations list: worst decay first (pass share of the first sampled turn minus the last's),
# longest first, or most recent first.
CONVERSATION_ORDERS = ("decay", "turns", "recent")
OUTCOMES = ("pass", "fail", "error", "skip")
# The labels of MODES_SQL (scorers/llmwatch/scorers/drift/features.py `failure_mode`), "any" for all but ok.
FAILURE_MODES = (
    "any",
    "error",
    "refusal",
    "invalid_json",
    "tool_calls",
    "truncated",
    "empty",
    "confident_unstable",
    "ok",
)
# What a Grafana variable set to "All" interpolates to (`${version:csv}` with allValue ".*"):
# no filter, not a version named ".*".
ALL_VALUES = frozenset({"", ".*", "$__all", "All", "all"})

# --- SQL fragments (this module's own text only) ------------------------------------------------


def _content_text(c: str) -> str:
    """A message `content`: a string, or the concatenated `text` of its parts (what core.wire does)."""
    return (
        f"(CASE WHEN json_type({c}) = 'VARCHAR' THEN {c}->>'$' "
        f"WHEN json_type({c}) = 'ARRAY' THEN array_to_string(list_filter(list_transform(CAST({c} AS JSON[]), "
        "lambda p: CASE WHEN json_type(p) = 'VARCHAR' THEN p->>'$' WHEN json_type(p->'text') = 'VARCHAR' THEN p->>'text' END), "
        "lambda t: t IS NOT NULL), chr(10)) "
        "ELSE '' END)"
    )


def _prompt_text(r: str) -> str:
    """The last user message, or the prompt/input: llmwatch.core.wire.extract_prompt_text in SQL."""
    last_user = f"list_filter(CAST({r}->'messages' AS JSON[]), lambda m: m->>'role' = 'user')[-1]->'content'"
    return (
        "coalesce(CASE "
        f"WHEN json_type({r}->'messages') = 'ARRAY' THEN {_content_text(last_user)} "
        f"WHEN json_type({r}->'prompt') = 'VARCHAR' THEN {r}->>'prompt' "
        f"WHEN json_type({r}->'prompt') = 'ARRAY' THEN {r}->'prompt'->>0 "
        f"WHEN json_type({r}->'input') = 'VARCHAR' THEN {r}->>'input' "
        f"WHEN json_type({r}) = 'VARCHAR' THEN {r}->>'$' "
        "ELSE '' END, '')"
    )


def _answer_text(r: str) -> str:
    """The first choice's message or text, or the Responses API's output_text: extract_answer_text in SQL."""
    msg = f"{r}->'choices'->0->'message'"
    content = _content_text(msg + "->'content'")
    return (
        "coalesce(CASE "
        f"WHEN json_type({r}->'choices') = 'ARRAY' THEN (CASE WHEN json_type({msg}) = 'OBJECT' "
        f"THEN {content} ELSE {r}->'choices'->0->>'text' END) "
        f"WHEN json_type({r}->'output_text') = 'VARCHAR' THEN {r}->>'output_text' "
        f"WHEN json_type({r}) = 'VARCHAR' THEN {r}->>'$' "
        "ELSE '' END, '')"
    )


def _timestamp(col: str) -> str:
    """ISO 8601, or epoch seconds/milliseconds (what Sample accepts); NULL if neither."""
    return (
        f"(CASE WHEN regexp_full_match({col}, '[0-9]+(\\.[0-9]+)?') THEN "
        f"to_timestamp(CASE WHEN CAST({col} AS DOUBLE) > 1e11 THEN CAST({col} AS DOUBLE) / 1000 ELSE CAST({col} AS DOUBLE) END) "
        f"ELSE TRY_CAST({col} AS TIMESTAMPTZ) END)"
    )


def _columns(spec: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in spec.items()) + "}"


SAMPLE_COLUMNS = _columns(
    {
        "id": "VARCHAR",
        "timestamp": "VARCHAR",
        "route": "VARCHAR",
        "operation": "VARCHAR",
        "model": "VARCHAR",
        "model_version": "VARCHAR",
        "status": "INTEGER",
        "error_type": "VARCHAR",
        "latency_ms": "DOUBLE",
        "ttft_ms": "DOUBLE",
        "usage": "STRUCT(input_tokens BIGINT, output_tokens BIGINT)",
        "finish_reason": "VARCHAR",
        "cost_usd": "DOUBLE",
        "metadata": "JSON",
        "request": "JSON",
        "response": "JSON",
        "conversation_id": "VARCHAR",
        "turn": "BIGINT",
    }
)
SCORE_COLUMNS = _columns(
    {
        "sample_id": "VARCHAR",
        "check": "VARCHAR",
        "kind": "VARCHAR",
        "result": "VARCHAR",
        "value": "DOUBLE",
        "details": "JSON",
        "model_version": "VARCHAR",
    }
)
PAIR_COLUMNS = _columns(
    {
        "id": "VARCHAR",
        "candidate": "VARCHAR",
        "timestamp": "VARCHAR",
        "route": "VARCHAR",
        "category": "VARCHAR",
        "primary": "JSON",
        "shadow": "JSON",
        "primary_scores": "JSON",
        "shadow_scores": "JSON",
    }
)
READ = "format = 'newline_delimited', ignore_errors = true, filename = true, maximum_object_size = 67108864"
# Where DuckDB reopens a descriptor this process holds: the file the descriptor refers to, whatever
# is at its name now (Linux's /proc; /dev/fd elsewhere).
FD_DIR = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"

SAMPLES_SQL = f"""
SELECT filename AS file, id, {_timestamp("timestamp")} AS ts,
       coalesce(route, '/v1/chat/completions') AS route, coalesce(operation, 'chat') AS operation, model,
       coalesce(model_version, 'unknown') AS model_version, status, error_type, latency_ms, ttft_ms,
       usage.input_tokens AS input_tokens, usage.output_tokens AS output_tokens, finish_reason, cost_usd,
       coalesce(metadata->>'category', 'uncategorized') AS category,
       {_prompt_text("request")} AS prompt, {_answer_text("response")} AS answer,
       nullif(conversation_id, '') AS conversation_id, turn
FROM __SOURCE__
WHERE id IS NOT NULL AND id <> ''
"""
SCORES_SQL = """
SELECT filename AS file, sample_id, "check", coalesce(kind, '') AS kind, result, value,
       CAST(details AS VARCHAR) AS details, coalesce(model_version, 'unknown') AS model_version
FROM __SOURCE__
WHERE sample_id IS NOT NULL AND "check" IS NOT NULL AND result IS NOT NULL
"""
PAIRS_SQL = f"""
SELECT filename AS file, id, candidate, {_timestamp("timestamp")} AS ts, route, coalesce(category, '') AS category,
       coalesce("primary"->>'model_version', 'unknown') AS primary_version,
       coalesce(shadow->>'model_version', 'unknown') AS shadow_version,
       {_prompt_text("(" + '"primary"' + "->'request')")} AS prompt,
       len(list_filter(CAST(primary_scores AS JSON[]), lambda s: s->>'result' = 'pass')) AS primary_pass,
       len(list_filter(CAST(primary_scores AS JSON[]), lambda s: s->>'result' IN ('pass', 'fail'))) AS primary_decided,
       len(list_filter(CAST(shadow_scores AS JSON[]), lambda s: s->>'result' = 'pass')) AS shadow_pass,
       len(list_filter(CAST(shadow_scores AS JSON[]), lambda s: s->>'result' IN ('pass', 'fail'))) AS shadow_decided
FROM __SOURCE__
WHERE id IS NOT NULL AND id <> ''
"""

SAMPLES_SELECT = SAMPLES_SQL.replace("__SOURCE__", f"read_json(?, columns = {SAMPLE_COLUMNS}, {READ})")
SCORES_SELECT = SCORES_SQL.replace("__SOURCE__", f"read_json(?, columns = {SCORE_COLUMNS}, {READ})")
PAIRS_SELECT = PAIRS_SQL.replace("__SOURCE__", f"read_json(?, columns = {PAIR_COLUMNS}, {READ})")

# The same SELECTs over one Parquet part file of a dataset (llmwatch.core.parquet, `llmwatch archive`),
# registered as PARQUET_VIEW: its columns mapped to what read_json gives (nested values are JSON
# text columns there; the call's usage two flat columns), the file's name a bound parameter.
# A file written before conversation_id and turn were columns gets them as nulls (`_read_parquet`).
PARQUET_VIEW = "llmwatch_parquet_part"
STAGE = "llmwatch_parquet_stage"  # a temporary table: new part files' rows before they join their table
SAMPLES_PARQUET = SAMPLES_SQL.replace(
    "__SOURCE__",
    f"""(SELECT CAST(? AS VARCHAR) AS filename, id, CAST("timestamp" AS VARCHAR) AS "timestamp", route, operation,
        model, model_version, CAST(status AS INTEGER) AS status, error_type, latency_ms, ttft_ms,
        {{'input_tokens': usage_input_tokens, 'output_tokens': usage_output_tokens}} AS usage, finish_reason, cost_usd,
        CAST(metadata AS JSON) AS metadata, CAST(request AS JSON) AS request, CAST(response AS JSON) AS response,
        conversation_id, CAST(turn AS BIGINT) AS turn FROM {PARQUET_VIEW})""",
)
SCORES_PARQUET = SCORES_SQL.replace(
    "__SOURCE__",
    f"""(SELECT CAST(? AS VARCHAR) AS filename, sample_id, "check", kind, result, value,
        CAST(details AS JSON) AS details, model_version FROM {PARQUET_VIEW})""",
)
PAIRS_PARQUET = PAIRS_SQL.replace(
    "__SOURCE__",
    f"""(SELECT CAST(? AS VARCHAR) AS filename, id, candidate, CAST("timestamp" AS VARCHAR) AS "timestamp", route,
        category, CAST("primary" AS JSON) AS "primary", CAST(shadow AS JSON) AS shadow,
        CAST(primary_scores AS JSON) AS primary_scores, CAST(shadow_scores AS JSON) AS shadow_scores FROM {PARQUET_VIEW})""",
)

# One label per call, first match wins: scorers/llmwatch/scorers/drift/features.py `failure_mode`,
# the labels the drift family `failure_modes` counts.
MODES_SQL = """
CREATE OR REPLACE TABLE modes AS
SELECT s.id,
       CASE
         WHEN s.status >= 400 OR s.error_type IS NOT NULL THEN 'error'
         WHEN bool_or(sc.kind = 'refusal' AND sc.result = 'fail') THEN 'refusal'
         WHEN bool_or(sc.kind = 'json_valid' AND sc.result = 'fail') THEN 'invalid_json'
         WHEN bool_or(sc.kind = 'tool_call' AND sc.result = 'fail') THEN 'tool_calls'
         WHEN s.finish_reason = 'length' THEN 'truncated'
         WHEN bool_or(sc.kind = 'not_empty_or_truncated' AND sc.result = 'fail'
                      AND (sc.details->>'truncated' = 'true' OR sc.details LIKE '%length%')) THEN 'truncated'
         WHEN bool_or(sc.kind = 'not_empty_or_truncated' AND sc.result = 'fail') THEN 'empty'
         WHEN bool_or(sc.kind = 'consistency' AND sc.result = 'fail'
                      AND sc.details->>'confident_unstable' = 'true') THEN 'confident_unstable'
         ELSE 'ok'
       END AS failure_mode,
       string_agg(DISTINCT sc."check", ', ' ORDER BY sc."check") FILTER (WHERE sc.result = 'fail') AS failed
FROM samples s LEFT JOIN scores sc ON sc.sample_id = s.id
GROUP BY s.id, s.status, s.error_type, s.finish_reason
"""

# --- filters -------------------------------------------------------------------------------------


# A call that was answered, the calls whose latency `llmwatch report` gives (decision.cost_latency).
ANSWERED = "s.status > 0 AND s.status < 400"


class FilterError(ValueError):
    """A query parameter that cannot be used; the message names it and says what it takes."""


def _parse_time(name: str, text: str) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if math.isfinite(number):
        # Grafana's ${__from}/${__to} are epoch milliseconds; a person may type seconds.
        seconds = number / 1000.0 if number > 1e11 else number
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise FilterError(f"{name}={text!r}: an epoch time out of range") from None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(
            f"{name}={text!r}: give an ISO 8601 time (2026-12-04T10:00:00Z) or epoch seconds or milliseconds"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _values(text: str | None) -> tuple[str, ...]:
    """`a,b` or repeated parameters: a set of values; Grafana's "All" is no filter."""
    if text is None:
        return ()
    items = [v.strip() for v in text.split(",")]
    if any(v in ALL_VALUES for v in items):
        return ()
    return tuple(dict.fromkeys(v for v in items if v))


# Drift signal -> the samples that carry it (docs/guide/ui.md, "Drift").
def signal_filters(signal: str) -> dict[str, str]:
    if signal.startswith("pass_rate:"):
        return {"check": signal.split(":", 1)[1], "outcome": "fail"}
    if signal.startswith("score:"):
        return {"check": signal.split(":", 1)[1], "sort": "score"}
    if signal == "failure_modes":
        return {"failure_mode": "any"}
    lowered = signal.lower()
    for word, sort in (("ttft", "ttft"), ("first_token", "ttft"), ("latency", "latency"), ("cost", "cost")):
        if word in lowered:
            return {"sort": sort}
    if "token" in lowered:
        return {"sort": "tokens"}
    return {}


@dataclass(frozen=True)
class Filters:
    model_version: tuple[str, ...] = ()
    route: tuple[str, ...] = ()
    operation: tuple[str, ...] = ()
    category: tuple[str, ...] = ()
    check: str = ""
    outcome: str = ""
    failure_mode: str = ""
    conversation: str = ""
    since: datetime | None = None
    until: datetime | None = None
    q: str = ""
    sort: str = "time"
    page: int = 1

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> "Filters":
        def one(name: str) -> str:
            return (query.get(name) or "").strip()

        extra = signal_filters(one("signal")) if one("signal") else {}

        def pick(name: str) -> str:
            return one(name) or extra.get(name, "")

        outcome = pick("outcome")
        if outcome and outcome not in OUTCOMES:
            raise FilterError(f"outcome={outcome!r}: one of {', '.join(OUTCOMES)}")
        mode = pick("failure_mode")
        if mode and mode not in FAILURE_MODES:
            raise FilterError(f"failure_mode={mode!r}: one of {', '.join(FAILURE_MODES)}")
        sort = pick("sort") or "time"
        if sort not in (*SORTS, "score"):
            raise FilterError(f"sort={sort!r}: one of {', '.join(SORTS)}, score")
        page_text = one("page") or "1"
        if not page_text.isdecimal() or not 1 <= int(page_text) <= 100_000:
            raise FilterError(f"page={page_text!r}: a whole number from 1")
        q = one("q")
        if len(q) > 500:
            raise FilterError("q: at most 500 characters")
        check = pick("check")
        conversation = one("conversation")
        if len(conversation) > 128:
            raise FilterError("conversation: at most 128 characters (a sample's conversation_id)")
        return cls(
            model_version=_values(query.get("model_version")),
            route=_values(query.get("route")),
            operation=_values(query.get("operation")),
            category=_values(query.get("category")),
            check="" if check in ALL_VALUES else check,
            outcome=outcome,
            failure_mode=mode,
            conversation=conversation,
            since=_parse_time("since", one("since")),
            until=_parse_time("until", one("until")),
            q=q,
            sort=sort,
            page=int(page_text),
        )

    def query(self, **changes: Any) -> str:
        """This filter as a query string (stable order), with `changes` applied: the page's links."""
        f = replace(self, **changes)
        params: list[tuple[str, str]] = []
        for name in ("model_version", "route", "operation", "category"):
            values = getattr(f, name)
            if values:
                params.append((name, ",".join(values)))
        for name in ("check", "outcome", "failure_mode", "conversation", "q"):
            if getattr(f, name):
                params.append((name, getattr(f, name)))
        for name in ("since", "until"):
            value = getattr(f, name)
            if value is not None:
                params.append((name, value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")))
        if f.sort != "time":
            params.append(("sort", f.sort))
        if f.page != 1:
            params.append(("page", str(f.page)))
        return urlencode(params)

    def where(self) -> tuple[str, list[Any]]:
        """SQL conditions over `samples s` joined with `modes m`, and their parameters."""
        clauses: list[str] = []
        params: list[Any] = []
        for name in ("model_version", "route", "operation", "category"):
            values = getattr(self, name)
            if values:
                clauses.append(f"s.{name} IN ({', '.join('?' for _ in values)})")
                params.extend(values)
        if self.check or self.outcome:
            cond = ["sc.sample_id = s.id"]
            if self.check:
                cond.append('sc."check" = ?')
                params.append(self.check)
            if self.outcome:
                cond.append("sc.result = ?")
                params.append(self.outcome)
            clauses.append(f"EXISTS (SELECT 1 FROM scores sc WHERE {' AND '.join(cond)})")
        if self.failure_mode == "any":
            clauses.append("m.failure_mode <> 'ok'")
        elif self.failure_mode:
            clauses.append("m.failure_mode = ?")
            params.append(self.failure_mode)
        if self.conversation:
            clauses.append("s.conversation_id = ?")
            params.append(self.conversation)
        if self.since is not None:
            clauses.append("s.ts >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append("s.ts <= ?")
            params.append(self.until)
        if self.q:
            clauses.append("(contains(lower(s.prompt), ?) OR contains(lower(s.answer), ?) OR s.id = ?)")
            params.extend([self.q.lower(), self.q.lower(), self.q])
        return (" AND ".join(clauses) or "TRUE"), params

    def order(self) -> str:
        return {
            "time": "s.ts DESC NULLS LAST, s.id",
            "latency": "s.latency_ms DESC NULLS LAST, s.id",
            "ttft": "s.ttft_ms DESC NULLS LAST, s.id",
            "cost": "s.cost_usd DESC NULLS LAST, s.id",
            "tokens": "s.output_tokens DESC NULLS LAST, s.id",
            # Lowest score of the filtered check first: the worst answers of a drifting score.
            "score": "(SELECT min(sc.value) FROM scores sc WHERE sc.sample_id = s.id"
            + (' AND sc."check" = ?' if self.check else "")
            + ") ASC NULLS LAST, s.id",
        }[self.sort]

    def order_params(self) -> list[Any]:
        return [self.check] if self.sort == "score" and self.check else []


# --- the index -----------------------------------------------------------------------------------


@dataclass
class FileState:
    size: int
    mtime_ns: int
    inode: int
    # Bytes up to the end of the last whole line read: where the next read of a grown file starts.
    offset: int = 0

    def same(self, other: "FileState | None") -> bool:
        return other is not None and (self.size, self.mtime_ns, self.inode) == (other.size, other.mtime_ns, other.inode)


@dataclass
class Kind:
    """One kind of JSON Lines file the index reads: its folder, name prefix, table and SELECT."""

    folder: str
    prefix: str
    table: str
    select: str
    # The same SELECT over one Parquet part file (registered as PARQUET_VIEW).
    parquet_select: str
    # The columns that identify a record within one file: a line read twice is inserted once.
    key: str
    files: dict[str, FileState] = field(default_factory=dict)


def _listing(directory: Path, prefix: str) -> list[str]:
    if not directory.is_dir():
        return []
    names = sorted(p for p in os.listdir(directory) if p.endswith(".jsonl"))
    own = [n for n in names if n.startswith(prefix + "-")]
    for name in own or names:
        refuse_link(directory / name, directory)  # the readers' rule (llmwatch.core.links)
    return [str(directory / n) for n in (own or names)]


# A spill folder's name: llmwatch-ui-spill-PID-START-RANDOM, START the process's start time in
# clock ticks since boot (/proc/PID/stat, field 22), "x" where there is no /proc. The PID alone
# cannot tell a dead owner: PIDs are reused, and in a container restarted after an OOM kill (a
# SIGKILL: no finaliser runs) with /tmp on an emptyDir, the new process has the old one's PID.
SPILL_PREFIX = "llmwatch-ui-spill-"
_SPILL_NAME = re.compile(r"llmwatch-ui-spill-([1-9][0-9]{0,9})-([0-9]{1,20}|x)-[A-Za-z0-9_]{1,32}")


# The name before it (commits bebe6e7 to db57e0f): the prefix and mkdtemp's eight random characters,
# no PID. Such a folder is removed only when no live process of this user can have made it:
# `_old_spill_dead`.
_OLD_SPILL_NAME = re.compile(r"llmwatch-ui-spill-[a-z0-9_]{8}")


def _process_start(pid: int) -> tuple[str, str] | None:
    """(state, start time in ticks) of a live process from /proc, None if there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name, in parentheses, may hold spaces
    return fields[0], fields[19]


def spill_prefix() -> str:
    own = _process_start(os.getpid()) if Path("/proc/self/stat").exists() else None
    return f"{SPILL_PREFIX}{os.getpid()}-{own[1] if own else 'x'}-"


def _owner_alive(pid: int, start: str) -> bool:
    if start == "x" or not Path("/proc/self/stat").exists():
        if pid == os.getpid():
            return True  # this process's, or one it cannot tell from it: kept
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's process
        return True
    found = _process_start(pid)
    # Gone, a zombie (it will never use the folder again), or the PID reused by a later process.
    return found is not None and found[0] != "Z" and found[1] == start


@dataclass(frozen=True)
class _Process:
    pid: int
    start_s: float  # wall-clock seconds, never later than the true start (see `_own_processes`)
    command: str


def _own_processes(uid: int) -> list[_Process] | None:
    """Every live process (not a zombie) that has `uid` as its real, effective, saved or filesystem
    uid, but this one; None where there is no /proc to tell.

    A start is the boot time (now less /proc/uptime, less 20 ms for its two decimals cut down)
    plus /proc/PID/stat's start in clock ticks since boot (cut down too): never later than the true
    start, so a process is never taken for younger than it is. (/proc/stat's btime is whole
    seconds: a process would look up to a second older, and a folder made in that second kept.)"""
    try:
        now = time.time()  # before the uptime: a later uptime makes the boot earlier, the safe way
        boot = now - float(Path("/proc/uptime").read_text().split()[0]) - 0.02
        tick = os.sysconf("SC_CLK_TCK")
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except (OSError, ValueError, IndexError):
        return None
    found = []
    for pid in pids:
        if pid == os.getpid():
            continue  # this ui never made a folder of the old name
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
            if str(uid) not in uids:
                continue
            started = _process_start(pid)
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, StopIteration):
            continue  # gone meanwhile (or unreadable: not ours)
        if started is not None and started[0] != "Z":
            found.append(_Process(pid, boot + int(started[1]) / tick, command))
    return found


def _old_spill_dead(changed_s: float, processes: list[_Process] | None) -> bool:
    """Whether the process that made an old-named folder (no PID in it) is provably gone.

    The folder's maker was alive when it was made, so started no later than the folder's ctime
    (which only moves forward: a spilled page made since makes it later, never earlier). If every
    live process of this user started after it, the maker is gone. A live process whose command
    names llmwatch keeps it too: a wall clock stepped forward since (an NTP sync after boot) would
    make an old ui look younger than its folder. Without /proc nothing is proved: kept."""
    if processes is None:
        return False
    return all(p.start_s > changed_s and "llmwatch" not in p.command for p in processes)


def remove_stale_spill_folders(tmp: str | None = None) -> list[str]:
    """Remove this user's spill folders in `tmp` (the temp directory) whose process is gone.

    A `llmwatch ui` ended by SIGKILL (an OOM kill) runs no finaliser: its 0700 folder, and any
    pages it spilled, stay. Only a real directory (not a link) named by `_SPILL_NAME`, owned by
    this user, whose PID and start time no longer name a live process is removed; or one of the
    older name (`_OLD_SPILL_NAME`, left by a version before the PID was in it) that no live process
    of this user can have made (`_old_spill_dead`). Never another user's, a live process's, or a
    folder of another name. Returns the paths removed."""
    tmp = tmp or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return removed
    uid = os.getuid()
    processes: list[_Process] | None = None
    listed = False
    for entry in entries:
        m = _SPILL_NAME.fullmatch(entry.name)
        old = m is None and _OLD_SPILL_NAME.fullmatch(entry.name) is not None
        if m is None and not old:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        if m is not None and _owner_alive(int(m[1]), m[2]):
            continue
        if old:
            if not listed:  # the process table, read once and only when an old-named folder is there
                processes, listed = _own_processes(uid), True
            if not _old_spill_dead(st.st_ctime, processes):
                continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(entry.path)
    if removed:
        log.info("ui.stale_spill_removed", folders=len(removed), tmp=tmp)
    return removed


class Index:
    """The data directory's samples, scores and pairs, in DuckDB; thread-safe (one lock)."""

    def __init__(self, data_dir: str | os.PathLike[str], *, threads: int | None = None) -> None:
        self.data_dir = Path(data_dir)  # a local directory (a URL's Path is unused: see `url`)
        self.lock = threading.Lock()
        # A query over more than the memory limit spills pages of samples (prompts, answers) to
        # `temp_directory`: DuckDB's default for an in-memory database is `.tmp` in the working
        # directory, made with the umask's modes (0755, files 0644 or 0666). A private folder instead
        # (mkdtemp: 0700 whatever the umask), removed on close.
        # Named for this process (spill_prefix), so that a later start can tell a killed one's.
        self._spill = tempfile.mkdtemp(prefix=spill_prefix())
        self._remove_spill = weakref.finalize(self, shutil.rmtree, self._spill, ignore_errors=True)  # or at close
        self.db = duckdb.connect(
            ":memory:",
            config={"threads": threads or min(4, os.cpu_count() or 1), "temp_directory": self._spill},
        )
        self.db.execute("SET TimeZone = 'UTC'")
        self.kinds = [
            Kind("samples", "samples", "samples", SAMPLES_SELECT, SAMPLES_PARQUET, "id"),
            Kind("scores", "scores", "scores", SCORES_SELECT, SCORES_PARQUET, 'sample_id, "check"'),
            Kind("pairs", "pairs", "pairs", PAIRS_SELECT, PAIRS_PARQUET, "id"),
        ]
        # A dataset URL (s3://, gs://, file://): its Parquet part files through a pyarrow filesystem,
        # opened once (an S3 filesystem resolves the bucket's region when made).
        self.url = str(data_dir) if parquet.is_url(data_dir) else None
        self._fs: Any = None
        self._fs_root = ""
        if self.url is not None:
            self._fs, self._fs_root = parquet.filesystem(self.url)
            self._fs_root = self._fs_root.rstrip("/")
        # The local folder a record's file is read back from without following links (read_record).
        self.local_dir: Path | None = None if self.url is not None else self.data_dir
        # A part file's name as shown (and kept in the `file` column) -> its path within `_fs`.
        self._remote: dict[str, str] = {}
        # The tables' shape, from the SELECTs themselves over an empty file (read_json refuses no file).
        with tempfile.TemporaryDirectory(prefix="llmwatch-ui-") as folder:
            empty = os.path.join(folder, "empty.jsonl")
            open(empty, "wb").close()
            for kind in self.kinds:
                self.db.execute(f"CREATE TABLE {kind.table} AS {kind.select} LIMIT 0", [[empty]])
        self.db.execute(MODES_SQL)
        self.loaded_at = 0.0
        self._facets: dict[str, list[str]] | None = None
        self.refreshed_in_s = 0.0

    def refresh(self, *, strict: bool = False) -> bool:
        """Read what changed since the last call: new files, grown or replaced ones, removed ones.

        `strict` (the first round, at start): a local folder that cannot be listed (a symbolic link
        inside it) raises `RecordError`; later rounds log it and keep what was read.

        A file that only grew (same inode, larger; the sidecar appends) is read from where the
        last read stopped: its new whole lines are copied to a private scratch file that DuckDB
        reads, so a live data directory costs each round its new lines, not its files again.
        """
        started = time.perf_counter()
        changed = False
        with self.lock:
            for kind in self.kinds:
                try:
                    current = self._files(kind)
                except RecordError as exc:
                    # A remote listing that failed (the network, the credentials): what was read
                    # stays; the next round lists again. A link in a local folder: refused at start.
                    if strict and self.url is None:
                        raise
                    log.warning("ui.dataset_unlisted", kind=kind.folder, error=str(exc))
                    continue
                gone = [p for p in kind.files if p not in current]
                stale, grown = [], []
                for path, state in current.items():
                    old = kind.files.get(path)
                    if state.same(old):
                        state.offset = old.offset  # type: ignore[union-attr]
                    elif old is not None and old.inode == state.inode and state.size > old.size and old.offset > 0:
                        state.offset = old.offset
                        grown.append(path)
                    else:
                        stale.append(path)
                if not gone and not stale and not grown:
                    continue
                changed = True
                self._stage_parquet(kind, [p for p in stale if p.endswith(".parquet")])
                self.db.execute("BEGIN")
                try:
                    for path in gone + stale:
                        self.db.execute(f"DELETE FROM {kind.table} WHERE file = ?", [path])
                    self._read_whole(kind, stale, current)
                    for path in grown:
                        self._read_tail(kind, path, current[path])
                    self.db.execute("COMMIT")
                except duckdb.Error:
                    self.db.execute("ROLLBACK")
                    raise
                kind.files = current
            if changed:
                self.db.execute(MODES_SQL)
                self._facets = None
                self.loaded_at = time.time()
                counts = self.counts()  # under the lock: the connection is used by one thread at a time
        self.refreshed_in_s = time.perf_counter() - started
        if changed:
            log.info("ui.index_refreshed", seconds=round(self.refreshed_in_s, 3), **counts)
        return changed

    def _read_whole(self, kind: Kind, stale: list[str], current: dict[str, FileState]) -> None:
        """New or replaced files, read whole: JSON Lines files in one read_json, part files one by one."""
        opened = self._open_lines(kind, [p for p in stale if not p.endswith(".parquet")], current)
        try:
            if opened:
                # Whole lines only count as read: a torn last line is read again once whole.
                for path, fd in opened.items():
                    current[path].offset = _last_line_end(fd, current[path].size)
                # One read_json over every changed file (DuckDB reads them in parallel), each through
                # its descriptor; the `file` column names the file, not the descriptor.
                names, fds = list(opened), [f"{FD_DIR}/{fd}" for fd in opened.values()]
                self.db.execute(
                    f"INSERT INTO {kind.table} SELECT * REPLACE "
                    "(list_extract(CAST(? AS VARCHAR[]), list_position(CAST(? AS VARCHAR[]), file)) AS file) "
                    f"FROM ({kind.select}) AS t",
                    [names, fds, fds],
                )
        finally:
            for fd in opened.values():
                os.close(fd)
        if any(p.endswith(".parquet") for p in stale):
            self.db.execute(f"INSERT INTO {kind.table} SELECT * FROM {STAGE}")
            self.db.execute(f"DELETE FROM {STAGE}")

    def _open_lines(self, kind: Kind, paths: list[str], current: dict[str, FileState]) -> dict[str, int]:
        """A descriptor of each JSON Lines file in `paths`, opened from the data directory without
        following links (the listing's rule, at the open too: a file swapped for a link after the
        listing was read through it). One that cannot be opened so is left out of `current` (not
        read, so looked at again next round) with a warning, as an unreadable part file is; its
        state is the descriptor's, so that what is read and what is recorded are the same file."""
        opened: dict[str, int] = {}
        try:
            for path in paths:
                try:
                    fd = open_inside(path, self.data_dir)
                except (RecordError, OSError) as exc:
                    current.pop(path, None)
                    log.warning("ui.file_unreadable", kind=kind.folder, file=path, error=str(exc)[:300])
                    continue
                st = os.fstat(fd)
                current[path] = FileState(st.st_size, st.st_mtime_ns, st.st_ino)
                opened[path] = fd
        except BaseException:
            for fd in opened.values():
                os.close(fd)
            raise
        return opened

    def _files(self, kind: Kind) -> dict[str, FileState]:
        """The kind's files now: its JSON Lines files and its Parquet part files (`<dir>/<kind>/**`,
        what `llmwatch archive` writes), or the part files under a dataset URL. A part file is
        written once and never changed (the archive only adds files), so a new name is all a
        refresh looks for; a local one that did change is read again like a replaced JSONL file."""
        current: dict[str, FileState] = {}
        if self.url is not None:
            paths = parquet.list_files(self._fs, f"{self._fs_root}/{kind.folder}", self.url)
            for path in paths:
                name = parquet.url_of(self.url, self._fs_root, path)
                self._remote[name] = path
                current[name] = FileState(0, 0, 0)
            return current
        folder = self.data_dir / kind.folder
        refuse_link(folder, self.data_dir)
        names = _listing(folder, kind.prefix)
        if folder.is_dir():
            names += [str(p) for p in parquet.dataset_files(folder, kind.folder)]
        for path in names:
            try:
                st = os.stat(path)
            except OSError:
                continue  # removed between the listing and the stat: gone
            current[path] = FileState(st.st_size, st.st_mtime_ns, st.st_ino)
        return current

    def _stage_parquet(self, kind: Kind, names: list[str]) -> None:
        """New part files into the staging table, one statement each and outside the refresh's
        transaction: a file that cannot be read (damaged, not a part file of this kind) is skipped
        with a warning and leaves nothing behind, instead of failing the whole refresh."""
        if not names:
            return
        self.db.execute(f"CREATE OR REPLACE TEMP TABLE {STAGE} AS SELECT * FROM {kind.table} LIMIT 0")
        for name in names:
            try:
                self._read_parquet(kind, name)
            except (RecordError, OSError, ValueError, NotImplementedError, duckdb.Error) as exc:
                log.warning("ui.parquet_unreadable", file=name, error=str(exc)[:300])

    def _read_parquet(self, kind: Kind, name: str) -> None:
        """One Parquet part file into the staging table, streamed in batches through Arrow (a file's
        bodies are never all in memory), local or through the dataset URL's filesystem."""
        fs, path = (self._fs, self._remote[name]) if self.url is not None else (None, name)
        pa = parquet.pyarrow_module()
        # A local part file is opened from the data directory without following links: one swapped
        # in after the listing is refused (a warning, nothing read), as the listing refuses one.
        file = parquet.open_part(fs, path, self.data_dir if fs is None else None)
        try:
            self._stage_part(pa, kind, name, file)
        finally:
            file.close(force=True)

    def _stage_part(self, pa: Any, kind: Kind, name: str, file: Any) -> None:
        found = (file.schema_arrow.metadata or {}).get(b"llmwatch.kind", kind.folder.encode()).decode()
        if found != kind.folder:
            raise RecordError(f"a part file of {found}, not {kind.folder}")
        schema = file.schema_arrow
        # Another tool's file (no llmwatch.kind) under samples/: its missing columns would be filled
        # with nulls below and its rows dropped without a word.
        problem = parquet.not_of_kind(kind.folder, schema.names)
        if problem:
            raise RecordError(problem)
        batches = file.iter_batches(batch_size=parquet.batch_rows(file, 4096))
        # Columns added to the schema after a file was written (optional fields) read as nulls.
        missing = [f for f in parquet.arrow_schema()[kind.folder] if f.name not in schema.names]
        if missing:
            for f in missing:
                schema = schema.append(f)
            batches = (
                pa.RecordBatch.from_arrays(
                    [*b.columns, *(pa.nulls(b.num_rows, f.type) for f in missing)], schema=schema
                )
                for b in batches
            )
        reader = pa.RecordBatchReader.from_batches(schema, batches)
        self.db.register(PARQUET_VIEW, reader)
        try:
            self.db.execute(f"INSERT INTO {STAGE} {kind.parquet_select}", [name])
        finally:
            self.db.unregister(PARQUET_VIEW)

    def _read_tail(self, kind: Kind, path: str, state: FileState) -> None:
        try:
            # Without following links, as a whole read (`_open_lines`).
            with os.fdopen(open_inside(path, self.data_dir), "rb") as fh:
                if os.fstat(fh.fileno()).st_ino != state.inode:
                    return  # replaced since the listing: the next round reads it whole
                fh.seek(state.offset)
                chunk = fh.read(state.size - state.offset)
        except RecordError as exc:
            log.warning("ui.file_unreadable", kind=kind.folder, file=path, error=str(exc)[:300])
            return
        except OSError:
            return  # gone or unreadable now: the next round sees it
        end = chunk.rfind(b"\n") + 1
        if end == 0:
            return  # no whole new line yet
        with tempfile.TemporaryDirectory(prefix="llmwatch-ui-") as folder:  # 0700: the lines hold prompts
            scratch = os.path.join(folder, "tail.jsonl")
            with open(scratch, "wb") as out:
                out.write(chunk[:end])
            # The file column names the real file; a line that a full read caught while it was being
            # appended (the race between stat and read) is not inserted twice.
            self.db.execute(
                f"INSERT INTO {kind.table} SELECT * REPLACE (CAST(? AS VARCHAR) AS file) FROM ({kind.select}) AS t "
                f"WHERE ({kind.key}) NOT IN (SELECT ({kind.key}) FROM {kind.table} WHERE file = ?)",
                [path, [scratch], path],
            )
        state.offset += end

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.lock:
            cur = self.db.execute(sql, list(params))
            names = [d[0] for d in cur.description or ()]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def counts(self) -> dict[str, int]:
        out = {}
        for kind in self.kinds:
            cur = self.db.execute(f"SELECT count(*) FROM {kind.table}")
            row = cur.fetchone()
            out[kind.table] = int(row[0]) if row else 0
        return out

    def totals(self) -> dict[str, int]:
        with self.lock:
            return self.counts()

    def facets(self) -> dict[str, list[str]]:
        """The values each filter can take, for the form's choices (computed once per change of the data)."""
        with self.lock:
            cached = self._facets
        if cached is not None:
            return cached
        out: dict[str, list[str]] = {}
        for name in ("model_version", "route", "operation", "category"):
            out[name] = [r["v"] for r in self._rows(f"SELECT DISTINCT {name} AS v FROM samples ORDER BY v")]
        out["check"] = [r["v"] for r in self._rows('SELECT DISTINCT "check" AS v FROM scores ORDER BY v')]
        with self.lock:
            self._facets = out
        return out

    def search(self, f: Filters, limit: int = PAGE_SIZE) -> tuple[int, list[dict[str, Any]]]:
        where, params = f.where()
        base = f"FROM samples s JOIN modes m ON m.id = s.id WHERE {where}"
        total = self._rows(f"SELECT count(*) AS n {base}", params)[0]["n"]
        rows = self._rows(
            "SELECT s.id, s.ts, s.model_version, s.route, s.operation, s.category, s.status, s.latency_ms, s.ttft_ms, "
            "s.output_tokens, s.cost_usd, m.failure_mode, m.failed, left(s.prompt, 160) AS prompt, left(s.answer, 160) AS answer "
            f"{base} ORDER BY {f.order()} LIMIT ? OFFSET ?",
            [*params, *f.order_params(), limit, (f.page - 1) * limit],
        )
        return int(total), rows

    def sample(self, sample_id: str) -> dict[str, Any] | None:
        rows = self._rows(
            "SELECT s.*, m.failure_mode FROM samples s JOIN modes m ON m.id = s.id WHERE s.id = ? LIMIT 1", [sample_id]
        )
        return rows[0] if rows else None

    def scores_of(self, sample_id: str) -> list[dict[str, Any]]:
        return self._rows(
            'SELECT "check", kind, result, value, details FROM scores WHERE sample_id = ? ORDER BY "check"', [sample_id]
        )

    def conversation(
        self, conversation_id: str, page: int = 1, limit: int = TURNS_PAGE_SIZE
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """One conversation: its summary (None if no sample carries the id) and a page of its sampled
        calls in turn order (then time), each with its user message, answer, pass share and failed checks."""
        summary = self._rows(
            "SELECT count(*) AS calls, min(turn) AS first_turn, max(turn) AS last_turn, min(ts) AS first, max(ts) AS last, "
            "string_agg(DISTINCT model_version, ', ' ORDER BY model_version) AS versions "
            "FROM samples WHERE conversation_id = ?",
            [conversation_id],
        )[0]
        if not summary["calls"]:
            return None, []
        rows = self._rows(
            "SELECT s.id, s.ts, s.turn, s.model_version, s.status, s.latency_ms, s.prompt, s.answer, m.failure_mode, m.failed, "
            "(SELECT count(*) FROM scores sc WHERE sc.sample_id = s.id AND sc.result = 'pass') AS passed, "
            "(SELECT count(*) FROM scores sc WHERE sc.sample_id = s.id AND sc.result IN ('pass', 'fail')) AS decided "
            "FROM samples s JOIN modes m ON m.id = s.id WHERE s.conversation_id = ? "
            "ORDER BY s.turn ASC NULLS LAST, s.ts ASC NULLS LAST, s.id LIMIT ? OFFSET ?",
            [conversation_id, limit, (page - 1) * limit],
        )
        if rows:
            verdicts = self._rows(
                'SELECT sample_id, "check", result FROM scores WHERE sample_id IN '
                f'({", ".join("?" for _ in rows)}) ORDER BY "check"',
                [r["id"] for r in rows],
            )
            by_sample: dict[str, list[tuple[str, str]]] = {}
            for v in verdicts:
                by_sample.setdefault(v["sample_id"], []).append((v["check"], v["result"]))
            for r in rows:
                r["checks"] = by_sample.get(r["id"], [])
        return summary, rows

    def conversation_extent(self, conversation_id: str) -> dict[str, Any]:
        """How many sampled calls carry `conversation_id` and the last turn among them: a sample's "turn k of n"."""
        return self._rows(
            "SELECT count(*) AS calls, max(turn) AS last_turn FROM samples WHERE conversation_id = ?", [conversation_id]
        )[0]

    def conversations(
        self, f: Filters, order: str = "decay", limit: int = PAGE_SIZE
    ) -> tuple[int, list[dict[str, Any]]]:
        """A page of conversations among the samples `f` selects: per conversation its sampled calls,
        last turn, versions, times, and the pass share of its first and last sampled turn (the decay).
        The check, outcome, failure mode and text filters are not applied: they would keep only some of
        a conversation's turns and make its first and last turn other ones (as `versions` does)."""
        where, params = replace(f, check="", outcome="", failure_mode="", q="", conversation="").where()
        per_call = (
            "SELECT s.id, s.conversation_id, coalesce(s.turn, 0) AS turn, s.ts, s.model_version, "
            "count(sc.result) FILTER (WHERE sc.result = 'pass') AS passed, "
            "count(sc.result) FILTER (WHERE sc.result IN ('pass', 'fail')) AS decided "
            "FROM samples s JOIN modes m ON m.id = s.id LEFT JOIN scores sc ON sc.sample_id = s.id "
            f"WHERE s.conversation_id IS NOT NULL AND {where} GROUP BY s.id, s.conversation_id, s.turn, s.ts, s.model_version"
        )
        share = "CASE WHEN decided > 0 THEN passed / decided END"
        grouped = (
            "SELECT conversation_id, count(*) AS calls, max(turn) AS last_turn, min(turn) AS first_turn, "
            "min(ts) AS first, max(ts) AS last, string_agg(DISTINCT model_version, ', ' ORDER BY model_version) AS versions, "
            f"arg_min({share}, {{'t': turn, 'ts': ts, 'id': id}}) AS first_share, "
            f"arg_max({share}, {{'t': turn, 'ts': ts, 'id': id}}) AS last_share, sum(passed) AS passed, sum(decided) AS decided "
            f"FROM ({per_call}) GROUP BY conversation_id"
        )
        total = self._rows(
            f"SELECT count(DISTINCT s.conversation_id) AS n FROM samples s JOIN modes m ON m.id = s.id WHERE s.conversation_id IS NOT NULL AND {where}",
            params,
        )[0]["n"]
        sort = {
            # A decay needs two different turns; a one-turn conversation sorts after every decay.
            "decay": "CASE WHEN last_turn > first_turn THEN first_share - last_share END DESC NULLS LAST, last_turn DESC, conversation_id",
            "turns": "last_turn DESC, calls DESC, conversation_id",
            "recent": "last DESC NULLS LAST, conversation_id",
        }[order]
        rows = self._rows(
            f"SELECT * FROM ({grouped}) ORDER BY {sort} LIMIT ? OFFSET ?",
            [*params, limit, (f.page - 1) * limit],
        )
        return int(total), rows

    def versions(self, f: Filters) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Per version: calls, errors, latency, TTFT, tokens and cost; per version and check: pass and decided counts."""
        where, params = replace(f, check="", outcome="", failure_mode="", q="").where()
        calls = self._rows(
            "SELECT s.model_version, count(*) AS n, count(*) FILTER (WHERE m.failure_mode = 'error') AS errors, "
            # Latency and TTFT of the answered calls (0 < status < 400), as `llmwatch report` gives
            # them: with the errors' times mixed in, the two pages disagreed on one version's p50.
            f"quantile_cont(s.latency_ms, 0.5) FILTER (WHERE {ANSWERED}) AS latency_p50, "
            f"quantile_cont(s.latency_ms, 0.95) FILTER (WHERE {ANSWERED}) AS latency_p95, "
            f"quantile_cont(s.ttft_ms, 0.5) FILTER (WHERE {ANSWERED}) AS ttft_p50, avg(s.output_tokens) AS output_tokens, "
            "avg(s.cost_usd) AS cost_mean, sum(s.cost_usd) AS cost_total, min(s.ts) AS first, max(s.ts) AS last "
            f"FROM samples s JOIN modes m ON m.id = s.id WHERE {where} GROUP BY s.model_version ORDER BY s.model_version",
            params,
        )
        checks = self._rows(
            "SELECT s.model_version, sc.\"check\", count(*) FILTER (WHERE sc.result = 'pass') AS passed, "
            "count(*) FILTER (WHERE sc.result IN ('pass', 'fail')) AS decided, count(*) FILTER (WHERE sc.result = 'error') AS errors "
            f"FROM samples s JOIN modes m ON m.id = s.id JOIN scores sc ON sc.sample_id = s.id WHERE {where} "
            'GROUP BY s.model_version, sc."check" ORDER BY sc."check", s.model_version',
            params,
        )
        return calls, checks

    def file_of(self, table: str, record_id: str) -> str | None:
        rows = self._rows(f"SELECT file FROM {table} WHERE id = ? LIMIT 1", [record_id])
        return rows[0]["file"] if rows else None

    def pairs(self, candidate: str = "", page: int = 1, limit: int = PAGE_SIZE) -> tuple[int, list[dict[str, Any]]]:
        where, params = ("candidate = ?", [candidate]) if candidate else ("TRUE", [])
        total = self._rows(f"SELECT count(*) AS n FROM pairs WHERE {where}", params)[0]["n"]
        rows = self._rows(
            "SELECT id, candidate, ts, route, category, primary_version, shadow_version, left(prompt, 160) AS prompt, "
            f"primary_pass, primary_decided, shadow_pass, shadow_decided FROM pairs WHERE {where} "
            "ORDER BY ts DESC NULLS LAST, id LIMIT ? OFFSET ?",
            [*params, limit, (page - 1) * limit],
        )
        return int(total), rows

    def candidates(self) -> list[dict[str, Any]]:
        return self._rows(
            "SELECT candidate, count(*) AS n, sum(primary_pass) AS primary_pass, sum(primary_decided) AS primary_decided, "
            "sum(shadow_pass) AS shadow_pass, sum(shadow_decided) AS shadow_decided FROM pairs GROUP BY candidate ORDER BY candidate"
        )

    def close(self) -> None:
        with self.lock:
            self.db.close()
            self._remove_spill()


def _last_line_end(fd: int, size: int) -> int:
    """The offset just past the last newline within the first `size` bytes of the open file `fd`
    (0 if none); read with pread, so the descriptor's own offset is left as it was."""
    block = 1 << 16
    try:
        end = size
        while end > 0:
            start = max(0, end - block)
            at = os.pread(fd, end - start, start).rfind(b"\n")
            if at >= 0:
                return start + at + 1
            end = start
    except OSError:
        pass
    return 0


def read_record(path: str, record_id: str, folder: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The whole JSON Lines record whose top-level `id` is `record_id`, read back from `path`.

    The id is looked for as bytes (`"id":"..."`, as llmwatch writes it) and each hit's line parsed
    and checked, so a nested `"id"` (a tool call's) never passes for it; a file written by another
    tool, with other spacing, is parsed line by line.
    """
    if path.endswith(".parquet"):
        return read_parquet_record(path, record_id, folder)
    try:
        # From the data directory without following links, as the index read it (`folder` None: a
        # file named on its own, followed).
        fh = open(path, "rb") if folder is None else os.fdopen(open_inside(path, folder), "rb")
    except RecordError as exc:
        log.warning("ui.record_unreadable", file=path, error=str(exc)[:300])
        return None
    except OSError:
        return None
    with fh:
        try:
            data: Any = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            return None
        try:
            needle = b'"id":' + orjson.dumps(record_id)
            at = data.find(needle)
            while at >= 0:
                start = data.rfind(b"\n", 0, at) + 1
                end = data.find(b"\n", at)
                record = _parse(data[start : end if end >= 0 else len(data)])
                if record is not None and record.get("id") == record_id:
                    return record
                at = data.find(needle, at + 1)
            for line in iter(data.readline, b""):
                if record_id.encode() in line:
                    record = _parse(line)
                    if record is not None and record.get("id") == record_id:
                        return record
            return None
        finally:
            data.close()


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def read_parquet_record(
    path: str, record_id: str, folder: str | os.PathLike[str] | None = None
) -> dict[str, Any] | None:
    """The record whose `id` is `record_id` in one Parquet part file (a local path or a dataset URL's
    file), as the JSON record it stands for: the row validated and dumped as llmwatch writes a line.
    `folder`: the local data directory the file was listed in, opened from it without following
    links (`parquet.open_part`)."""
    try:
        pa = parquet.pyarrow_module()
    except RecordError:
        return None
    import pyarrow.compute as pc

    try:
        fs, opened = parquet.filesystem(path) if parquet.is_url(path) else (None, path)
        file = parquet.open_part(fs, opened, folder if fs is None else None)
        try:
            kind = (file.schema_arrow.metadata or {}).get(b"llmwatch.kind", b"").decode()
            if kind not in ("samples", "pairs"):
                return None
            for batch in file.iter_batches(batch_size=parquet.batch_rows(file, 4096)):
                hits = batch.filter(pc.equal(batch.column("id"), record_id))
                if hits.num_rows:
                    record = parquet.MODELS[kind].model_validate(parquet.from_row(kind, hits.to_pylist()[0]))
                    return record.model_dump(mode="json", by_alias=True)
        finally:
            file.close(force=True)
    except (RecordError, OSError, ValueError, OverflowError, KeyError, pa.ArrowException) as exc:
        # OverflowError: a timestamp past year 9999, which Parquet holds and datetime cannot.
        log.warning("ui.parquet_record_unreadable", file=path, error=str(exc))
    return None
