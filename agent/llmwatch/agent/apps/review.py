"""`llmwatch review serve`: blind review of exported tasks in the browser, double-scored and arbitrated.

The app reads the tasks file that `llmwatch review export` wrote and never the key: what it
cannot read it cannot show. Each reviewer has a personal link with a random token; the page
shows one task at a time with the two candidates labelled only by position ("Answer 1",
"Answer 2"), in an order drawn per reviewer and task from a hash of both (a reload shows the
same order, two reviewers see different ones). The page posts scores by position; the server
maps positions back to the task's candidate labels (A, B), so neither the labels nor anything
else about the candidates' origin is in any page or request.

Each saved verdict is one line of the reviews file (`--out`) in the format `review import`
reads: `task_id`, `category`, `candidates`, `scores`, `judge`, `blind: true` (plus `preferred`,
`comment`, `saved_at`). The file is append-only: one `write` per line under a lock, then fsync;
mode 0600. A saved verdict is final (import refuses two verdicts of one reviewer on one task).
Progress is the reviews file itself, so it survives a reload and a restart.

A reviewer's page shows only that reviewer's own verdicts. Tasks whose reviews disagree
(`scorers.review.dispute_reasons`, the same rule `review import` applies) are queued for the
arbiters (`/arbitrate/<token>`), who see both reviews without the reviewers' names and record
an arbitrated verdict, in the same format, in `<out stem>.arbitration-verdicts.jsonl` (a round
started before that name keeps its `<out stem>.arbitrated.jsonl`). The arbiter sees each review's
comment with the reviewer's own numbering made explicit: the reviewer saw the answers in their
own order, so "answer 1" in a comment is annotated with the arbiter's number for that answer.

Tokens live in `<out stem>.tokens.json` (mode 0600) next to the reviews, so that a restart keeps
every link. The token is the only credential: on loopback that is enough; anywhere else put the
app behind an authenticating reverse proxy with TLS (docs/design/0023-html-reports-and-the-review-app.md).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import html
import os
import random
import re
import secrets
import socket
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from llmwatch.core.jsonio import atomic_write_bytes, check_schema, make_dirs, open_private, private_path, read_document
from llmwatch.scorers.evaluation.review import (
    LABELS,
    Label,
    Review,
    ReviewError,
    ReviewTask,
    dispute_reasons,
    load_reviews,
    load_tasks,
    preference,
)

log = structlog.get_logger(__name__)

TOKENS_SCHEMA = "llmwatch.review-tokens/v1"
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_COMMENT = 4000
SECURITY_HEADERS = {
    # Scripts only from this app, nothing from anywhere else; no framing; the token in the URL
    # never leaves in a Referer.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _whole(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes '²' and '٣', which int() then refuses (or reads)."""
    return text.isascii() and text.isdigit()


def sibling(out: Path, suffix: str) -> Path:
    """reviews.jsonl -> reviews<suffix> in the same directory."""
    stem = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(stem + suffix)


# Arbitrated verdicts; `review import` writes the disputes themselves to `<stem>.disputes.jsonl`.
VERDICTS_SUFFIX = ".arbitration-verdicts.jsonl"
OLD_VERDICTS_SUFFIX = ".arbitrated.jsonl"  # the earlier name: a round begun with it keeps it


def verdicts_path(out: Path) -> Path:
    """Where the arbitrated verdicts of the round whose reviews are `out` go (and are read from)."""
    new, old = sibling(out, VERDICTS_SUFFIX), sibling(out, OLD_VERDICTS_SUFFIX)
    return old if not new.exists() and (old.exists() or old.is_symlink()) else new


def parse_people(spec: str | None, prefix: str) -> list[str]:
    """`alice,bob` or a count `3` (-> reviewer_01..reviewer_03)."""
    if spec is None or not spec.strip():
        return []
    spec = spec.strip()
    if _whole(spec):
        n = int(spec)
        if not 1 <= n <= 100:
            raise ReviewError(f"--{prefix}s {spec}: give between 1 and 100, or names separated by commas")
        return [f"{prefix}_{i:02d}" for i in range(1, n + 1)]
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for name in names:
        if not NAME.match(name):
            raise ReviewError(
                f"--{prefix}s: {name!r} is not a usable name (letters, digits, '_', '.', '-'; at most 64)"
            )
    if len(set(names)) != len(names):
        raise ReviewError(f"--{prefix}s: a name is given twice in {spec!r}")
    return names


def load_or_make_tokens(path: Path, reviewers: Sequence[str], arbiters: Sequence[str]) -> dict[str, dict[str, str]]:
    """Tokens kept from an earlier run; new names get new tokens; nobody loses one."""
    tokens: dict[str, dict[str, str]] = {"reviewers": {}, "arbiters": {}}
    if path.is_symlink():
        raise ReviewError(
            f"tokens file {path} is a symbolic link; llmwatch never reads or writes tokens through a link"
        )
    if path.exists():
        data = read_document(
            path, what="tokens file", error=ReviewError, fix="restore it, or remove it to issue new links"
        )
        check_schema(
            data, TOKENS_SCHEMA, name=f"tokens file {path}", kind="an llmwatch review tokens file", error=ReviewError
        )
        for role in ("reviewers", "arbiters"):
            tokens[role] = {str(k): str(v) for k, v in (data.get(role) or {}).items()}
    if not tokens["reviewers"] and not reviewers:
        raise ReviewError("no reviewer: pass --reviewers alice,bob (or a count, e.g. 2)")
    # An arbiter who also reviews would settle a dispute over their own review, having seen the
    # other reviewer's: the two roles are for different people, this run's and earlier runs' alike.
    both = sorted((set(tokens["reviewers"]) | set(reviewers)) & (set(tokens["arbiters"]) | set(arbiters)))
    if both:
        raise ReviewError(
            f"{', '.join(both)} would be both reviewer and arbiter: an arbiter must not settle a dispute over their own "
            f"review; give --arbiters people who do not review (tokens file: {path})"
        )
    changed = not path.exists()
    for role, names in (("reviewers", reviewers), ("arbiters", arbiters)):
        for name in names:
            if name not in tokens[role]:
                tokens[role][name] = secrets.token_urlsafe(24)
                changed = True
    if changed:
        atomic_write_bytes(path, orjson.dumps({"schema": TOKENS_SCHEMA, **tokens}, option=orjson.OPT_INDENT_2))
    else:
        private_path(path)
    return tokens


def positions(judge: str, task_id: str) -> list[Label]:
    """The candidate labels in the order this person sees them: position i+1 shows label [i]."""
    order = list(LABELS)
    seed = int.from_bytes(hashlib.sha256(f"{judge}\0{task_id}".encode()).digest()[:8], "big")
    random.Random(seed).shuffle(order)
    return order


class AppendOnly:
    """One JSON line per verdict, all or nothing: appended at a known whole-line end, then fsync.

    A write that fails part-way (a full disk: ENOSPC after some bytes) or an fsync that fails
    cuts the file back to where the line started, and the verdict is reported not saved; the file
    is only ever extended from `size`, the end of its last whole line, so a retry never lands
    glued to a torn fragment. `repair_tail` cuts a torn last line (a process killed mid-write,
    before any verdict was acknowledged) when the app starts.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = asyncio.Lock()
        self.size = 0

    def repair_tail(self) -> None:
        """Make the file end at a whole line: a last line without its newline was never acknowledged
        (a verdict is saved once its line is whole and synced) and is cut, unless it is a complete
        JSON object (a hand-edited file without a final newline), which gets its newline."""
        with open_private(self.path, append=True, buffered=False) as fh:
            fd = fh.fileno()
            with open(f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else self.path, "rb") as reader:
                data = reader.read()  # the very file just opened (no second lookup of the name)
            size = len(data)
            keep = data.rfind(b"\n") + 1
            if keep != size:
                try:
                    whole = isinstance(orjson.loads(data[keep:]), dict)
                except orjson.JSONDecodeError:
                    whole = False
                if whole:
                    os.write(fd, b"\n")
                    keep = size + 1
                else:
                    os.ftruncate(fd, keep)
                    log.warning(
                        "review.torn_line_cut",
                        file=str(self.path),
                        line=data.count(b"\n") + 1,
                        bytes=size - keep,
                        why="a write stopped mid-line (full disk, killed process); that verdict was never saved",
                    )
                os.fsync(fd)
            self.size = keep

    def append(self, record: Mapping[str, Any]) -> None:
        line = orjson.dumps(record) + b"\n"
        with open_private(self.path, append=True, buffered=False) as fh:
            fd = fh.fileno()
            if os.fstat(fd).st_size != self.size:
                os.ftruncate(fd, self.size)  # a cut that failed earlier: start from the last whole line
            try:
                done = 0
                while done < len(line):
                    n = os.write(fd, line[done:])
                    if n <= 0:
                        raise OSError(errno.EIO, "write returned 0 bytes", str(self.path))
                    done += n
                os.fsync(fd)
            except OSError:
                try:
                    os.ftruncate(fd, self.size)
                except OSError:
                    pass  # the next append cuts it (size check above); the start-up repair too
                raise
            self.size += len(line)


@dataclass
class ReviewState:
    tasks: dict[str, ReviewTask]
    order: list[str]
    reviews_out: AppendOnly
    arbitrated_out: AppendOnly
    tokens: dict[str, dict[str, str]]
    reviews: dict[tuple[str, str], Review] = field(default_factory=dict)  # (judge, task_id)
    review_order: list[tuple[str, str]] = field(default_factory=list)
    arbitrated: dict[str, Review] = field(default_factory=dict)  # task_id

    def person(self, role: str, token: str) -> str | None:
        found = None
        for name, known in self.tokens[role].items():
            # Every token compared, in constant time: a response time says nothing about a guess.
            if secrets.compare_digest(known.encode(), token.encode()):
                found = name
        return found

    def task_reviews(self, task_id: str) -> list[Review]:
        return [self.reviews[k] for k in self.review_order if k[1] == task_id]

    def disputes(self) -> dict[str, list[dict[str, Any]]]:
        out = {}
        for task_id in self.order:
            reasons = dispute_reasons(self.task_reviews(task_id), self.tasks[task_id].criteria)
            if reasons:
                out[task_id] = reasons
        return out


def load_state(tasks_path: Path, out_path: Path, reviewers: Sequence[str], arbiters: Sequence[str]) -> ReviewState:
    tasks, _ = load_tasks(tasks_path)
    if not tasks:
        raise ReviewError(f"tasks file {tasks_path} holds no tasks; write some with `llmwatch review export`")
    make_dirs(out_path.parent)
    arbitrated_path = verdicts_path(out_path)
    outs = {"reviews": AppendOnly(out_path), "arbitrated": AppendOnly(arbitrated_path)}
    for out in outs.values():
        if out.path.exists() or out.path.is_symlink():
            private_path(out.path)  # refuses a link (never follows it), before anything is written
            out.repair_tail()
    tokens = load_or_make_tokens(sibling(out_path, ".tokens.json"), reviewers, arbiters)
    state = ReviewState(tasks, list(tasks), outs["reviews"], outs["arbitrated"], tokens)
    for target, out in outs.items():
        if out.path.exists() and out.path.read_bytes().strip():
            for r in load_reviews(out.path, tasks):
                if target == "reviews":
                    state.reviews[(r.judge, r.task_id)] = r
                    state.review_order.append((r.judge, r.task_id))
                else:
                    state.arbitrated[r.task_id] = r
    return state


# --- pages -------------------------------------------------------------------------------------

_e = html.escape

_CSS = """
body { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 0; background: #f4f6f7; color: #1c2833; }
header { background: #1c2833; color: #fff; padding: 10px 24px; display: flex; gap: 18px; align-items: center; flex-wrap: wrap; }
header .title { font-weight: 700; }
.bar { flex: 1; min-width: 160px; height: 8px; background: #566573; border-radius: 4px; overflow: hidden; }
.bar span { display: block; height: 100%; background: #58d68d; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 24px 48px; }
.prompt, .answer, .panel { background: #fff; border: 1px solid #d5d8dc; border-radius: 6px; padding: 10px 14px; margin: 10px 0; }
.msg { margin: 4px 0; } .role { font-weight: 600; color: #566573; font-size: 0.85em; text-transform: uppercase; margin-right: 6px; }
.text { white-space: pre-wrap; line-height: 1.45; }
.answers { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }
.answer h2 { margin: 0 0 6px; font-size: 1.1em; }
table.scores { border-collapse: collapse; margin: 6px 0; }
table.scores th, table.scores td { border: 1px solid #d5d8dc; padding: 4px 10px; text-align: center; }
table.scores td.cell.current, tr.pref.current td { outline: 3px solid #2e86c1; outline-offset: -3px; background: #ebf5fb; }
label.opt { margin: 0 3px; cursor: pointer; white-space: nowrap; }
.saved { background: #e9f7ef; border-left: 6px solid #1e8449; padding: 8px 12px; margin: 8px 0; }
.reason { background: #fef5e7; border-left: 6px solid #b9770e; padding: 6px 12px; margin: 6px 0; }
.error { background: #fdedec; border-left: 6px solid #c0392b; padding: 8px 12px; }
nav { margin: 14px 0; display: flex; gap: 16px; }
.help { color: #566573; font-size: 0.85em; }
kbd { border: 1px solid #aab7b8; border-bottom-width: 2px; border-radius: 3px; padding: 0 4px; font-size: 0.85em; background: #fff; }
button { font-size: 1em; padding: 6px 16px; }
textarea { width: 100%; max-width: 700px; }
.reviews { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }
.their-order { color: #566573; font-size: 0.85em; margin: 4px 0; }
.comment { border-left: 3px solid #aab7b8; padding-left: 8px; }
mark.ref { background: #ebf5fb; color: #1c2833; font-weight: 600; }
/* A phone or a narrow window: one answer above the other, not two unreadable columns. */
@media (max-width: 720px) {
  .answers, .reviews { grid-template-columns: 1fr; }
  main { padding: 10px 10px 40px; }
}
"""


def page(title: str, header: str, body: str) -> web.Response:
    doc = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>{_e(title)}</title><style>{_CSS}</style></head>'
        f'<body><header>{header}</header><main>{body}</main><script src="/static/review.js"></script></body></html>\n'
    )
    return web.Response(text=doc, content_type="text/html", charset="utf-8")


def _messages(messages: Sequence[Mapping[str, str]] | None) -> str:
    return "".join(
        f'<div class="msg"><span class="role">{_e(m.get("role", "user"))}</span><span class="text">{_e(m.get("content", ""))}</span></div>'
        for m in messages or []
    )


def _task_body(task: ReviewTask, order: Sequence[str]) -> str:
    parts = []
    if task.stratum == "spot_check":
        # A judge calibration round: the criteria's meaning matters more than any comparison.
        parts.append(f'<p class="help">{_e(task.instructions)}</p>')
    if task.prompt:
        parts.append(f'<section class="prompt"><h2>Prompt</h2>{_messages(task.prompt)}</section>')
    else:
        parts.append(
            '<p class="help">The two answers replied to different prompts of the same kind; each is shown above its answer.</p>'
        )
    answers = []
    for pos, label in enumerate(order, start=1):
        cand = task.candidates[label]
        prompt = f'<div class="prompt">{_messages(cand.prompt)}</div>' if cand.prompt else ""
        answers.append(
            f'<article class="answer" id="answer-{pos}"><h2>Answer {pos}</h2>{prompt}<div class="text">{_e(cand.answer)}</div></article>'
        )
    parts.append(f'<div class="answers">{"".join(answers)}</div>')
    return "".join(parts)


def _form(task: ReviewTask, order: Sequence[Label], saved: Review | None, action: str) -> str:
    lo, hi = task.scale
    rows = []
    for ci, criterion in enumerate(task.criteria):
        cells = []
        for pos, label in enumerate(order, start=1):
            chosen = saved.scores[label][criterion] if saved is not None else None
            opts = "".join(
                f'<label class="opt"><input type="radio" name="s{pos}_{ci}" value="{v}" required{" checked" if chosen == v else ""}{" disabled" if saved else ""}>{v}</label>'
                for v in range(lo, hi + 1)
            )
            cells.append(f'<td class="cell" data-group="s{pos}_{ci}">{opts}</td>')
        rows.append(f"<tr><th>{_e(criterion)}</th>{''.join(cells)}</tr>")
    pref = saved.preferred if saved is not None else None
    pref_pos = {"tie": "tie"} | {label: str(pos) for pos, label in enumerate(order, start=1)}
    current_pref = pref_pos.get(pref) if pref else ""
    pref_opts = "".join(
        f'<label class="opt"><input type="radio" name="preferred" value="{v}"{" checked" if current_pref == v else ""}{" disabled" if saved else ""}>{_e(text)}</label>'
        for v, text in [(str(p), f"Answer {p}") for p in range(1, len(order) + 1)]
        + [("tie", "tie"), ("", "no preference")]
    )
    head = "".join(f"<th>Answer {p}</th>" for p in range(1, len(order) + 1))
    comment = _e(saved.comment or "") if saved is not None else ""
    button = "" if saved else '<p><button type="submit" id="save">Save verdict <kbd>Enter</kbd></button></p>'
    return (
        # autocomplete off: a reload must not bring back a half-typed verdict the server never saw.
        f'<form method="post" action="{_e(action)}" id="verdict" autocomplete="off" data-lo="{lo}" data-hi="{hi}" data-readonly="{"1" if saved else "0"}">'
        f'<table class="scores"><thead><tr><th>criterion ({lo} worst, {hi} best)</th>{head}</tr></thead><tbody>{"".join(rows)}'
        f'<tr class="pref" data-group="preferred"><th>preferred</th><td colspan="{len(order)}">{pref_opts}</td></tr></tbody></table>'
        f'<p><label>Comment (optional)<br><textarea name="comment" rows="2" maxlength="{MAX_COMMENT}"{" disabled" if saved else ""}>{comment}</textarea></label></p>'
        f"{button}</form>"
    )


def _help(task: ReviewTask) -> str:
    lo, hi = task.scale
    return (
        f'<p class="help">Keys: <kbd>{lo}</kbd>-<kbd>{hi}</kbd> score the highlighted cell and move to the next (row by row); <kbd>&uarr;</kbd>/<kbd>&darr;</kbd> move; '
        "on the preferred row <kbd>1</kbd>/<kbd>2</kbd> choose an answer, <kbd>0</kbd> a tie; <kbd>Enter</kbd> saves; <kbd>n</kbd>/<kbd>p</kbd> next/previous task. "
        "Higher is better on every criterion (for hallucination, the top score means nothing invented). The models behind the answers are hidden on purpose.</p>"
    )


def _header(role: str, name: str, done: int, total: int, where: str = "", word: str = "saved") -> str:
    pct = 100 * done / total if total else 100
    return (
        f'<span class="title">llmwatch blind review</span><span>{_e(role)} {_e(name)}</span><span>{_e(where)}</span>'
        f'<span id="progress">{done} of {total} {word}</span><span class="bar"><span style="width:{pct:.0f}%"></span></span>'
    )


def _parse_verdict(
    task: ReviewTask, order: Sequence[str], form: Mapping[str, str]
) -> tuple[dict[str, dict[str, int]], str | None, str | None]:
    lo, hi = task.scale
    scores: dict[str, dict[str, int]] = {label: {} for label in order}
    for ci, criterion in enumerate(task.criteria):
        for pos, label in enumerate(order, start=1):
            raw = form.get(f"s{pos}_{ci}", "")
            if not _whole(raw) or not lo <= int(raw) <= hi:
                raise ValueError(f"Answer {pos}, {criterion}: choose a score from {lo} to {hi}")
            scores[label][criterion] = int(raw)
    raw_pref = form.get("preferred", "")
    preferred: str | None = None
    if raw_pref == "tie":
        preferred = "tie"
    elif _whole(raw_pref) and 1 <= int(raw_pref) <= len(order):
        preferred = order[int(raw_pref) - 1]
    elif raw_pref:
        raise ValueError("preferred: Answer 1, Answer 2, tie or no preference")
    comment = (form.get("comment") or "").strip()[:MAX_COMMENT] or None
    return scores, preferred, comment


def _record(
    task: ReviewTask,
    judge: str,
    scores: Mapping[str, Mapping[str, int]],
    preferred: str | None,
    comment: str | None,
    **extra: Any,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "task_id": task.task_id,
        "category": task.category,
        "candidates": list(LABELS),
        "scores": {label: dict(scores[label]) for label in LABELS},
        "judge": judge,
        "blind": True,
    }
    if preferred is not None:
        record["preferred"] = preferred
    if comment is not None:
        record["comment"] = comment
    record.update(extra)
    record["saved_at"] = datetime.now(timezone.utc).isoformat()
    Review.model_validate(record)  # the line `review import` will read back, checked before it is written
    return record


# "answer 1", "Answer #2", "response 2", "reply 1" in a reviewer's comment: the reviewer's own numbering.
_ANSWER_REF = re.compile(r"\b(answers?|responses?|repl(?:y|ies)|candidates?)\s*#?\s*([1-9])\b", re.IGNORECASE)


def comment_html(comment: str, theirs: Sequence[str], mine: Sequence[str]) -> str:
    """A reviewer's comment for the arbiter, who sees the answers in another order.

    The reviewer's words are kept as written; every "answer N" in them gets the arbiter's number
    for the answer the reviewer meant (their position N -> candidate label -> the arbiter's
    position), and a line above says how the two numberings correspond, so that a reference the
    pattern does not catch ("the first one", "the left answer") cannot mislead either.
    """
    mine_pos = {label: i for i, label in enumerate(mine, start=1)}
    mapping = "; ".join(f"their Answer {i} is your Answer {mine_pos[label]}" for i, label in enumerate(theirs, start=1))
    same = list(theirs) == list(mine)
    head = (
        "This reviewer saw the answers in the same order as you."
        if same
        else f"This reviewer saw the answers in another order: {mapping}. References below are theirs, with yours in brackets."
    )
    out, last = [], 0
    for m in _ANSWER_REF.finditer(comment):
        n = int(m.group(2))
        out.append(_e(comment[last : m.end()]))
        if not same and 1 <= n <= len(theirs):
            out.append(f' <mark class="ref">[your Answer {mine_pos[theirs[n - 1]]}]</mark>')
        last = m.end()
    out.append(_e(comment[last:]))
    return f'<p class="their-order">{_e(head)}</p><p class="text comment">{"".join(out)}</p>'


def _reason_text(reason: Mapping[str, Any], order: Sequence[str], anon: Mapping[str, str]) -> str:
    if reason["kind"] == "score_gap":
        pos = order.index(reason["candidate"]) + 1
        given = ", ".join(f"{anon[j]} {v}" for j, v in reason["scores"].items())
        return f"Answer {pos}, {reason['criterion']}: scores differ by 2 or more ({given})"
    pos_of = {label: f"Answer {order.index(label) + 1}" for label in LABELS} | {"tie": "tie"}
    return "preferred answers differ: " + ", ".join(f"{anon[j]} {pos_of[p]}" for j, p in reason["preferences"].items())


class ReviewApp:
    def __init__(self, state: ReviewState) -> None:
        self.state = state

    # reviewers ---------------------------------------------------------------------------------

    def _reviewer(self, request: web.Request) -> str:
        name = self.state.person("reviewers", request.match_info["token"])
        if name is None:
            log.info("review.unknown_link", path_kind="reviewer")  # never the token itself
            raise web.HTTPNotFound(text="unknown link: ask for your personal review link")
        return name

    def _task(self, request: web.Request) -> ReviewTask:
        task = self.state.tasks.get(request.match_info["task_id"])
        if task is None:
            raise web.HTTPNotFound(text="no such task")
        return task

    def _done(self, name: str) -> int:
        return sum(1 for t in self.state.order if (name, t) in self.state.reviews)

    def _next_open(self, name: str, after: str | None = None) -> str | None:
        order = self.state.order
        start = order.index(after) + 1 if after in order else 0
        for task_id in order[start:] + order[:start]:
            if (name, task_id) not in self.state.reviews:
                return task_id
        return None

    async def reviewer_home(self, request: web.Request) -> web.StreamResponse:
        name = self._reviewer(request)
        token = request.match_info["token"]
        nxt = self._next_open(name)
        if nxt is not None:
            raise web.HTTPSeeOther(f"/r/{token}/t/{nxt}")
        total = len(self.state.order)
        items = "".join(
            f'<li><a href="/r/{_e(token)}/t/{_e(t)}">task {i}</a></li>' for i, t in enumerate(self.state.order, start=1)
        )
        return page(
            "All tasks reviewed",
            _header("reviewer", name, total, total),
            f'<div class="saved" id="all-done">All {total} tasks reviewed. Thank you.</div><p>Your verdicts, read-only:</p><ol>{items}</ol>',
        )

    async def reviewer_task(self, request: web.Request, error: str | None = None, status: int = 200) -> web.Response:
        name = self._reviewer(request)
        task = self._task(request)
        token = request.match_info["token"]
        order = positions(name, task.task_id)
        saved = self.state.reviews.get((name, task.task_id))
        i = self.state.order.index(task.task_id)
        total = len(self.state.order)
        prev_link = f"/r/{token}/t/{self.state.order[i - 1]}" if i > 0 else ""
        next_link = f"/r/{token}/t/{self.state.order[i + 1]}" if i + 1 < total else f"/r/{token}"
        notice = f'<div class="error" id="error">{_e(error)}</div>' if error else ""
        if saved is not None:
            notice += '<div class="saved" id="saved">Saved. Verdicts are final; this is what you recorded.</div>'
        nav = (
            f"<nav>{f'<a id=prev href={chr(34)}{_e(prev_link)}{chr(34)}>&larr; previous (p)</a>' if prev_link else ''}"
            f'<a id="next" href="{_e(next_link)}">next (n) &rarr;</a><a href="/r/{_e(token)}">first open task</a></nav>'
        )
        body = (
            notice
            + _task_body(task, order)
            + _form(task, order, saved, f"/r/{token}/t/{task.task_id}")
            + nav
            + _help(task)
        )
        resp = page(
            f"Task {i + 1} of {total}",
            _header("reviewer", name, self._done(name), total, f"task {i + 1} of {total}"),
            body,
        )
        resp.set_status(status)
        return resp

    async def reviewer_save(self, request: web.Request) -> web.StreamResponse:
        name = self._reviewer(request)
        task = self._task(request)
        token = request.match_info["token"]
        form = await read_form(request)
        order = positions(name, task.task_id)
        try:
            scores, preferred, comment = _parse_verdict(task, order, form)
        except ValueError as exc:
            return await self.reviewer_task(request, error=f"Not saved: {exc}", status=400)
        out = self.state.reviews_out
        async with out.lock:
            if (name, task.task_id) in self.state.reviews:
                return await self.reviewer_task(
                    request,
                    error="Not saved: you already recorded a verdict for this task (verdicts are final).",
                    status=409,
                )
            record = _record(task, name, scores, preferred, comment)
            try:
                out.append(record)
            except OSError as exc:
                return await self.reviewer_task(request, error=_not_written(exc), status=503)
            review = Review.model_validate(record)
            self.state.reviews[(name, task.task_id)] = review
            self.state.review_order.append((name, task.task_id))
        log.info(
            "review.saved", reviewer=name, task_id=task.task_id, done=self._done(name), total=len(self.state.order)
        )
        nxt = self._next_open(name, after=task.task_id)
        raise web.HTTPSeeOther(f"/r/{token}/t/{nxt}" if nxt else f"/r/{token}")

    # arbiters ----------------------------------------------------------------------------------

    def _arbiter(self, request: web.Request) -> str:
        name = self.state.person("arbiters", request.match_info["token"])
        if name is None:
            log.info("review.unknown_link", path_kind="arbiter")
            raise web.HTTPNotFound(text="unknown link: ask for your arbitration link")
        return name

    async def arbiter_home(self, request: web.Request) -> web.Response:
        name = self._arbiter(request)
        token = request.match_info["token"]
        disputes = self.state.disputes()
        resolved = sum(1 for t in disputes if t in self.state.arbitrated)
        items = "".join(
            f'<li><a class="dispute" href="/arbitrate/{_e(token)}/t/{_e(t)}">task {self.state.order.index(t) + 1}</a> '
            f"({len(reasons)} disagreement(s)){' - resolved' if t in self.state.arbitrated else ''}</li>"
            for t, reasons in disputes.items()
        )
        body = (
            f'<p id="summary">{len(disputes)} disputed task(s), {resolved} resolved.</p><ol>{items}</ol>'
            if disputes
            else '<p id="summary">No disputed task yet: a task is disputed once two reviews of it disagree.</p>'
        )
        return page("Arbitration", _header("arbiter", name, resolved, len(disputes), "arbitration", "resolved"), body)

    async def arbiter_task(self, request: web.Request, error: str | None = None, status: int = 200) -> web.Response:
        name = self._arbiter(request)
        task = self._task(request)
        token = request.match_info["token"]
        reasons = self.state.disputes().get(task.task_id)
        if reasons is None:
            raise web.HTTPNotFound(text="this task is not disputed")
        order = positions(name, task.task_id)
        reviews = self.state.task_reviews(task.task_id)
        # The reviewers stay anonymous to the arbiter: "Review 1", "Review 2", in the order saved.
        anon = {r.judge: f"Review {i}" for i, r in enumerate(reviews, start=1)}
        panels = []
        for r in reviews:
            head = "".join(f"<th>Answer {p}</th>" for p in range(1, len(order) + 1))
            rows = "".join(
                f"<tr><th>{_e(c)}</th>" + "".join(f"<td>{r.scores[label][c]}</td>" for label in order) + "</tr>"
                for c in task.criteria
            )
            pref = preference(r, task.criteria)
            pref_text = "tie" if pref == "tie" else f"Answer {order.index(pref) + 1}"
            comment = comment_html(r.comment, positions(r.judge, task.task_id), order) if r.comment else ""
            panels.append(
                f'<section class="panel review"><h3>{_e(anon[r.judge])}</h3><table class="scores"><tr><th></th>{head}</tr>{rows}'
                f"<tr><th>preferred</th><td colspan={len(order)}>{_e(pref_text)}</td></tr></table>{comment}</section>"
            )
        notice = f'<div class="error" id="error">{_e(error)}</div>' if error else ""
        saved = self.state.arbitrated.get(task.task_id)
        if saved is not None:
            notice += '<div class="saved" id="saved">Arbitrated. This is the recorded verdict.</div>'
        reason_html = "".join(f'<div class="reason">{_e(_reason_text(x, order, anon))}</div>' for x in reasons)
        body = (
            notice
            + reason_html
            + _task_body(task, order)
            + f'<h2>The two reviews</h2><div class="reviews">{"".join(panels)}</div><h2>Your verdict</h2>'
            + _form(task, order, saved, f"/arbitrate/{token}/t/{task.task_id}")
            + f'<nav><a id="next" href="/arbitrate/{_e(token)}">all disputes</a></nav>'
            + _help(task)
        )
        disputes = self.state.disputes()
        resolved = sum(1 for t in disputes if t in self.state.arbitrated)
        resp = page(
            "Arbitration",
            _header(
                "arbiter", name, resolved, len(disputes), f"task {self.state.order.index(task.task_id) + 1}", "resolved"
            ),
            body,
        )
        resp.set_status(status)
        return resp

    async def arbiter_save(self, request: web.Request) -> web.StreamResponse:
        name = self._arbiter(request)
        task = self._task(request)
        token = request.match_info["token"]
        if task.task_id not in self.state.disputes():
            raise web.HTTPNotFound(text="this task is not disputed")
        form = await read_form(request)
        order = positions(name, task.task_id)
        try:
            scores, preferred, comment = _parse_verdict(task, order, form)
        except ValueError as exc:
            return await self.arbiter_task(request, error=f"Not saved: {exc}", status=400)
        out = self.state.arbitrated_out
        async with out.lock:
            if task.task_id in self.state.arbitrated:
                return await self.arbiter_task(request, error="Not saved: this task is already arbitrated.", status=409)
            reviewed_by = [r.judge for r in self.state.task_reviews(task.task_id)]
            record = _record(task, name, scores, preferred, comment, arbitration=True, arbitrates=reviewed_by)
            try:
                out.append(record)
            except OSError as exc:
                return await self.arbiter_task(request, error=_not_written(exc), status=503)
            self.state.arbitrated[task.task_id] = Review.model_validate(record)
        log.info("review.arbitrated", arbiter=name, task_id=task.task_id)
        raise web.HTTPSeeOther(f"/arbitrate/{token}")

    # static ------------------------------------------------------------------------------------

    async def script(self, request: web.Request) -> web.Response:
        return web.Response(text=SCRIPT, content_type="application/javascript", charset="utf-8")

    async def root(self, request: web.Request) -> web.Response:
        return web.Response(
            text="llmwatch review: open your personal link (printed by `llmwatch review serve`)\n",
            content_type="text/plain",
        )

    async def no_icon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)


async def read_form(request: web.Request) -> dict[str, str]:
    """The posted form as text; a body that is not UTF-8 (or not a form) is the client's error: 400, named."""
    try:
        return {k: str(v) for k, v in (await request.post()).items()}
    except UnicodeDecodeError as exc:
        raise web.HTTPBadRequest(
            text=f"Not saved: the form is not valid UTF-8 (byte {exc.start}); send it again from the review page"
        ) from None
    except ValueError as exc:
        raise web.HTTPBadRequest(
            text=f"Not saved: the form cannot be read ({exc}); send it again from the review page"
        ) from None
    except ConnectionResetError:
        # The reviewer's connection went before the whole form came (a closed tab, a lost
        # network, or the app stopping, which reads no more of a body): nothing was saved, and
        # there is nobody left to answer. Not an internal error, so not logged as one.
        log.info("review.form_lost", method=request.method)
        raise web.HTTPBadRequest(text="Not saved: the connection was lost before the whole form arrived") from None


def _not_written(exc: OSError) -> str:
    log.error("review.write_failed", error=exc.strerror or type(exc).__name__, errno=exc.errno)
    why = (
        "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else f"it could not be written ({exc.strerror})"
    )
    return f"Not saved: {why}; nothing of this verdict was recorded. Save it again once the problem is fixed."


async def secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    """SECURITY_HEADERS on every response an app prepares (its on_response_prepare), errors and
    aiohttp's own answers (404, 405, 413, 500) included; the review app and `llmwatch ui` alike."""
    response.headers.update(SECURITY_HEADERS)


def no_tracebacks(event: str, answer: str) -> Middleware:
    """A middleware: a fault of the app is logged as `event` (with the route, never the path: it may
    hold a token) and answered with a plain 500 saying `answer`: never a traceback, and still with
    the security headers (`secure_headers`)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception:
            log.exception(
                event,
                method=request.method,
                route=request.match_info.route.resource.canonical if request.match_info.route.resource else None,
            )
            return web.Response(status=500, text=answer)

    return middleware


def build_app(state: ReviewState) -> web.Application:
    faults = no_tracebacks(
        "review.internal_error", "internal error (logged by the review app); nothing more was saved\n"
    )
    app = web.Application(middlewares=[faults], client_max_size=1 << 20)
    app.on_response_prepare.append(secure_headers)
    handlers = ReviewApp(state)
    app.router.add_get("/", handlers.root)
    app.router.add_get("/favicon.ico", handlers.no_icon)
    app.router.add_get("/static/review.js", handlers.script)
    app.router.add_get("/r/{token}", handlers.reviewer_home)
    app.router.add_get("/r/{token}/t/{task_id}", handlers.reviewer_task)
    app.router.add_post("/r/{token}/t/{task_id}", handlers.reviewer_save)
    app.router.add_get("/arbitrate/{token}", handlers.arbiter_home)
    app.router.add_get("/arbitrate/{token}/t/{task_id}", handlers.arbiter_task)
    app.router.add_post("/arbitrate/{token}/t/{task_id}", handlers.arbiter_save)
    return app


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port_text = listen.rpartition(":")
    if not host or not _whole(port_text) or int(port_text) > 65535:
        raise ReviewError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:8088 (port 0 picks a free one)")
    return host.strip("[]"), int(port_text)


async def serve(
    state: ReviewState, listen: str, public_url: str | None, out: Any = sys.stdout, sock: socket.socket | None = None
) -> int:
    from llmwatch.agent.signals import run_until_stopped, until

    host, _ = parse_listen(listen)
    sock = sock or listen_socket(listen)
    runner = web.AppRunner(build_app(state), access_log=None)  # access lines would carry the tokens
    await runner.setup()

    async def main(stop: asyncio.Event) -> None:
        site = web.SockSite(runner, sock)
        await site.start()
        bound = sock.getsockname()[1]
        base = (public_url or f"http://{host if ':' not in host else f'[{host}]'}:{bound}").rstrip("/")
        if host not in ("127.0.0.1", "localhost", "::1") and not public_url:
            log.warning(
                "review.not_loopback",
                listen=listen,
                advice="the link tokens are the only credential: serve behind an authenticating reverse proxy with TLS",
            )
        lines = [f"review app listening on http://{host}:{bound} ({len(state.order)} tasks)"]
        lines += [f"reviewer {n}: {base}/r/{t}" for n, t in state.tokens["reviewers"].items()]
        lines += [f"arbiter {n}: {base}/arbitrate/{t}" for n, t in state.tokens["arbiters"].items()]
        out.write("\n".join(lines) + "\n")
        out.flush()
        log.info(
            "review.serving",
            port=bound,
            tasks=len(state.order),
            reviewers=len(state.tokens["reviewers"]),
            arbiters=len(state.tokens["arbiters"]),
            saved=len(state.reviews),
        )
        await until(stop)

    async def cleanup() -> None:
        # A verdict being sent as the stop begins is still saved: aiohttp lets the requests in
        # flight finish (its shutdown timeout, a minute) before it closes.
        log.info("review.stopping", saved=len(state.reviews))
        await runner.cleanup()
        log.info("review.stopped", saved=len(state.reviews))

    await run_until_stopped(main, cleanup)
    return 0


def listen_socket(listen: str) -> socket.socket:
    """The bound socket, or the proxy's one-line `ListenError` naming --listen (a port in use, no permission)."""
    from llmwatch.collectors.exporters.prometheus import bind_socket

    return bind_socket(listen, "--listen")


def run(tasks: str, out: str, listen: str, reviewers: str | None, arbiters: str | None, public_url: str | None) -> int:
    parse_listen(listen)  # a bad --listen is refused before any file is written
    state = load_state(Path(tasks), Path(out), parse_people(reviewers, "reviewer"), parse_people(arbiters, "arbiter"))
    # Bound before the event loop and the logs start: a port in use is one line, like the proxy's.
    sock = listen_socket(listen)
    from llmwatch.core.logs import configure_logging

    # Only once the inputs are good: a refused start prints its one line and nothing else.
    configure_logging("info", "json")
    try:
        import uvloop

        return uvloop.run(serve(state, listen, public_url, sock=sock))
    except ImportError:
        return asyncio.run(serve(state, listen, public_url, sock=sock))


__all__ = [
    "run",
    "build_app",
    "comment_html",
    "load_state",
    "positions",
    "parse_people",
    "verdicts_path",
    "ReviewState",
]


# Keyboard scoring: the form works without it (plain radios and a submit button).
SCRIPT = r"""
(function () {
  "use strict";
  var form = document.getElementById("verdict");
  var prev = document.getElementById("prev"), next = document.getElementById("next");
  var rows = form ? Array.prototype.slice.call(form.querySelectorAll("td.cell, tr.pref")) : [];
  var readonly = !form || form.dataset.readonly === "1";
  var lo = form ? parseInt(form.dataset.lo, 10) : 1, hi = form ? parseInt(form.dataset.hi, 10) : 5;
  var current = 0;
  function groupOf(el) { return el.dataset.group; }
  function checked(el) { return form.querySelector('input[name="' + groupOf(el) + '"]:checked'); }
  function show(scroll) {
    rows.forEach(function (el, i) { el.classList.toggle("current", i === current && !readonly); });
    // Only when the reviewer moves: on arrival the answers, not the form, should be in view.
    if (scroll && rows[current] && !readonly) { rows[current].scrollIntoView({block: "nearest"}); }
  }
  function choose(value) {
    var input = form.querySelector('input[name="' + groupOf(rows[current]) + '"][value="' + value + '"]');
    if (!input) { return false; }
    input.checked = true;
    current = Math.min(current + 1, rows.length - 1);
    show(true);
    return true;
  }
  function firstMissing() {
    for (var i = 0; i < rows.length; i++) { if (groupOf(rows[i]) !== "preferred" && !checked(rows[i])) { return i; } }
    return -1;
  }
  if (form && !readonly) {
    var missing = firstMissing();
    current = missing >= 0 ? missing : rows.length - 1;
    rows.forEach(function (el, i) { el.addEventListener("click", function () { current = i; show(); }); });
    show();
  }
  document.addEventListener("keydown", function (ev) {
    var t = ev.target;
    if (t && (t.tagName === "TEXTAREA" || (t.tagName === "INPUT" && t.type === "text"))) { return; }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    if (ev.key === "n" && next) { ev.preventDefault(); window.location.href = next.href; return; }
    if (ev.key === "p" && prev) { ev.preventDefault(); window.location.href = prev.href; return; }
    if (readonly || !form) { return; }
    if (ev.key === "ArrowDown") { ev.preventDefault(); current = Math.min(current + 1, rows.length - 1); show(true); return; }
    if (ev.key === "ArrowUp") { ev.preventDefault(); current = Math.max(current - 1, 0); show(true); return; }
    if (ev.key === "Enter") {
      ev.preventDefault();
      var m = firstMissing();
      if (m >= 0) { current = m; show(true); return; }
      form.submit();
      return;
    }
    if (/^[0-9]$/.test(ev.key)) {
      var d = parseInt(ev.key, 10);
      if (groupOf(rows[current]) === "preferred") {
        ev.preventDefault();
        choose(d === 0 ? "tie" : String(d));
      } else if (d >= lo && d <= hi) {
        ev.preventDefault();
        choose(String(d));
      }
    }
  });
})();
"""
