"""`llmwatch ui`: from a metric or an alert to the samples behind it, in the browser.

A local web app over one data directory (what the sidecar writes: `samples/`, `scores/`,
`pairs/`, plus drift reports in `drift/` and regression suites in `suites/` or given with
`--suite`). Pages are server-rendered HTML with no script and nothing from elsewhere; every
page is a stable URL whose query parameters are the filters, so a Grafana data link or an alert
annotation can point at exactly the samples behind a panel (docs/guide/ui.md).

Security, as in `review serve` (agent/llmwatch/agent/apps/review.py), whose headers and fault
handling this reuses: every response carries the same Content-Security-Policy (no script but
the app's own, which it has none of; nothing from elsewhere), no-store and no-referrer; every
piece of record text is escaped (prompts and answers are hostile); a fault is a plain 500, never
a traceback. Access: on a loopback address anyone on the machine may read the pages (like the
sidecar's own /metrics), under a loopback Host only (a rebound DNS name gets 421); on any other address a token is required (`--auth token`, the default
there), given once as `?token=` (it is then kept in an HttpOnly cookie and dropped from the
URL) or as `Authorization: Bearer`. Put it behind an authenticating reverse proxy with TLS
for anything beyond a team's private network.
"""

from __future__ import annotations

import asyncio
import html
import math
import re
import secrets
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence
from urllib.parse import quote, urlencode, urlsplit

import orjson
import structlog
from aiohttp import web

from llmwatch.agent.apps.review import no_tracebacks, secure_headers
from llmwatch.agent.apps.ui.given_files import check_given
from llmwatch.agent.apps.ui.index import (
    CONVERSATION_ORDERS,
    FAILURE_MODES,
    OUTCOMES,
    PAGE_SIZE,
    SORTS,
    TURNS_PAGE_SIZE,
    FilterError,
    Filters,
    Index,
    read_record,
    remove_stale_spill_folders,
)
from llmwatch.core import parquet
from llmwatch.core.config import ConfigError
from llmwatch.core.jsonio import atomic_write_bytes, private_path
from llmwatch.core.records import RecordError
from llmwatch.core.wire import content_to_text, extract_answer_text
from llmwatch.scorers.stats.proportions import wilson_interval

log = structlog.get_logger(__name__)

COOKIE = "llmwatch_ui_token"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Redaction placeholders as the pipeline writes them ([EMAIL], [CARD], [SECRET], [REDACTED] ...: pii.PLACEHOLDERS).
REDACTION_MARK = re.compile(r"\[[A-Z][A-Z0-9_]{1,40}\]")


class UiError(ConfigError):
    """`llmwatch ui` cannot start as asked (bad --listen, a data dir that is not one); the message says the fix."""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _text(value: Any) -> str:
    """Record text, escaped, with the redaction placeholders marked so that a reader sees what was cut."""
    return REDACTION_MARK.sub(lambda m: f'<mark class="redacted">{m.group(0)}</mark>', _e(value))


def _ms(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):,.0f} ms"


def _usd(value: Any) -> str:
    return "" if value is None else f"${float(value):.6f}"


def _num(value: Any, digits: int = 0) -> str:
    return "" if value is None else f"{float(value):,.{digits}f}"


def _time(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return _e(value)


def _rate(passed: int, decided: int) -> str:
    if not decided:
        return '<span class="help">no verdict</span>'
    lo, hi = wilson_interval(passed, decided)
    return f'{100 * passed / decided:.1f}% <span class="ci">[{100 * lo:.1f}, {100 * hi:.1f}]</span> <span class="help">n={decided}</span>'


_CSS = """
body { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 0; background: #f4f6f7; color: #1c2833; }
header { background: #1c2833; color: #fff; padding: 10px 24px; display: flex; gap: 22px; align-items: center; flex-wrap: wrap; }
header a { color: #d6eaf8; text-decoration: none; } header a.here { color: #fff; font-weight: 700; border-bottom: 2px solid #58d68d; }
header .title { font-weight: 700; margin-right: 12px; }
main { max-width: 1400px; margin: 0 auto; padding: 16px 24px 48px; }
.panel { background: #fff; border: 1px solid #d5d8dc; border-radius: 6px; padding: 10px 14px; margin: 10px 0; }
form.filters { display: flex; flex-wrap: wrap; gap: 8px 14px; align-items: end; }
form.filters label { display: flex; flex-direction: column; font-size: 0.8em; color: #566573; }
form.filters input, form.filters select { font-size: 1em; padding: 3px 4px; min-width: 120px; }
table.list { border-collapse: collapse; width: 100%; background: #fff; font-size: 0.9em; }
table.list th, table.list td { border-bottom: 1px solid #e5e8e8; padding: 5px 8px; text-align: left; vertical-align: top; }
table.list th { background: #eaeded; position: sticky; top: 0; }
td.num, th.num { text-align: right; white-space: nowrap; }
.snippet { color: #34495e; max-width: 420px; overflow-wrap: anywhere; }
.text { white-space: pre-wrap; line-height: 1.45; overflow-wrap: anywhere; }
.msg { margin: 6px 0; } .role { font-weight: 600; color: #566573; font-size: 0.8em; text-transform: uppercase; margin-right: 6px; }
mark.redacted { background: #fdebd0; color: #873600; border: 1px solid #e59866; border-radius: 3px; padding: 0 2px; }
.pass { color: #1e8449; font-weight: 600; } .fail { color: #c0392b; font-weight: 600; } .error, .skip { color: #7d6608; font-weight: 600; }
.mode-ok { color: #1e8449; } .mode-bad { color: #c0392b; font-weight: 600; }
.ci { color: #566573; font-size: 0.85em; } .help { color: #566573; font-size: 0.85em; }
.problem { background: #fdedec; border-left: 6px solid #c0392b; padding: 8px 12px; }
.grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; margin: 0; }
dl.facts dt { color: #566573; } dl.facts dd { margin: 0; }
nav.pages { margin: 12px 0; display: flex; gap: 16px; }
.drift { color: #c0392b; font-weight: 700; } .stable { color: #1e8449; font-weight: 700; }
.undecided { color: #9a6700; font-weight: 700; }
/* A phone: a wide table scrolls inside itself instead of pushing the page past the screen
   (the drift table's verdict column was off a 390 px screen, the header and text were not). */
@media (max-width: 700px) { table.list { display: block; overflow-x: auto; } main { padding: 12px 12px 40px; } }
"""

# Drift verdicts that mean "moved" (red, listed first) and one that means "could not tell": green
# was given to everything but `drift`, so an `insufficient` report read as a healthy one.
MOVED = ("drift", "shifted", "changed")


def _verdict_class(verdict: Any) -> str:
    if verdict in MOVED:
        return "drift"
    return "stable" if verdict == "stable" else "undecided"


NAV = (("samples", "/samples", "Samples"), ("conversations", "/conversations", "Conversations"),
       ("versions", "/versions", "Versions"), ("drift", "/drift", "Drift"),
       ("shadow", "/shadow", "Shadow pairs"), ("suites", "/suites", "Suites"))  # fmt: skip


def page(title: str, here: str, body: str, status: int = 200) -> web.Response:
    links = "".join(
        f'<a href="{href}"{" class=here" if key == here else ""} id="nav-{key}">{label}</a>' for key, href, label in NAV
    )
    doc = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>{_e(title)} - llmwatch</title><style>{_CSS}</style></head>'
        f'<body><header><span class="title">llmwatch</span>{links}</header><main><h1>{_e(title)}</h1>{body}</main></body></html>\n'
    )
    return web.Response(text=doc, content_type="text/html", charset="utf-8", status=status)


def _pages(
    number: int,
    total: int,
    href: Callable[[int], str],
    *,
    size: int = PAGE_SIZE,
    earlier: str = "previous",
    later: str = "next",
) -> str:
    """The page links under a list: #prev while there is a page before `number`, #next while rows remain
    after it; `href(n)` is page n's address (escaped here)."""
    links = []
    if number > 1:
        links.append(f'<a id="prev" href="{_e(href(number - 1))}">{earlier}</a>')
    if number * size < total:
        links.append(f'<a id="next" href="{_e(href(number + 1))}">{later}</a>')
    return f'<nav class="pages">{"".join(links)}</nav>'


def _problem(message: str) -> str:
    return f'<div class="problem" id="problem">{_e(message)}</div>'


def _select(name: str, label: str, options: Sequence[str], chosen: str) -> str:
    opts = [f'<option value=""{" selected" if not chosen else ""}>all</option>']
    values = list(options) + ([chosen] if chosen and chosen not in options else [])
    opts += [f'<option value="{_e(v)}"{" selected" if v == chosen else ""}>{_e(v)}</option>' for v in values]
    return f'<label>{_e(label)}<select name="{name}" id="f-{name}">{"".join(opts)}</select></label>'


def _input(name: str, label: str, value: str, placeholder: str = "") -> str:
    return (
        f'<label>{_e(label)}<input type="text" name="{name}" id="f-{name}" value="{_e(value)}" '
        f'placeholder="{_e(placeholder)}"></label>'
    )


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _filter_form(action: str, f: Filters, facets: Mapping[str, list[str]], full: bool = True, extra: str = "") -> str:
    fields = [
        _select("model_version", "model version", facets["model_version"], ",".join(f.model_version)),
        _select("route", "route", facets["route"], ",".join(f.route)),
        _select("operation", "operation", facets["operation"], ",".join(f.operation)),
        _select("category", "category", facets["category"], ",".join(f.category)),
    ]
    if full:
        fields += [
            _select("check", "check", facets["check"], f.check),
            _select("outcome", "check outcome", OUTCOMES, f.outcome),
            _select("failure_mode", "failure mode", FAILURE_MODES, f.failure_mode),
        ]
    fields += [
        _input("since", "since (UTC)", _iso(f.since), "2026-12-04T10:00:00Z"),
        _input("until", "until (UTC)", _iso(f.until), "epoch ms or ISO"),
    ]
    if full:
        fields += [
            _input("q", "text (prompt, answer or id)", f.q),
            _input("conversation", "conversation id", f.conversation),
            _select("sort", "sort by", SORTS + ("score",), f.sort),
        ]
    return (
        f'<form class="filters panel" method="get" action="{action}" id="filters">{"".join(fields)}{extra}'
        '<button type="submit" id="apply">Apply</button></form>'
    )


@dataclass
class UiState:
    index: Index
    data_dir: Path
    suites: list[Path] = field(default_factory=list)
    drift_reports: list[Path] = field(default_factory=list)
    token: str | None = None
    # --data-dir as given, for the start line: a URL through Path loses a slash (file:/tmp/ds).
    source: str = ""
    # Tokenless on loopback: the Host names that may read the pages (see `_gate`); None: any.
    hosts: frozenset[str] | None = None
    # Served under an https:// --public-url: the token cookie is Secure, never sent over plain http.
    secure_cookie: bool = False


def _drift_files(state: UiState) -> list[Path]:
    folder = state.data_dir / "drift"
    found = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return list(dict.fromkeys([*state.drift_reports, *found]))


def _drift_pages(state: UiState) -> list[Path]:
    """`llmwatch drift --format html` pages saved in <data-dir>/drift/: self-contained (PNG plots as
    data: URLs, no script), so they are served as they are, under the app's CSP."""
    folder = state.data_dir / "drift"
    return sorted(p for p in folder.glob("*.html") if p.is_file()) if folder.is_dir() else []


def _suite_files(state: UiState) -> list[Path]:
    folder = state.data_dir / "suites"
    found = sorted(p for p in folder.glob("*.jsonl")) if folder.is_dir() else []
    return list(dict.fromkeys([*state.suites, *found]))


class UiApp:
    def __init__(self, state: UiState) -> None:
        self.state = state
        self.index = state.index

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        # DuckDB and file reads off the event loop: a slow query never stalls other requests.
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # samples -------------------------------------------------------------------------------------

    async def samples(self, request: web.Request) -> web.Response:
        try:
            f = Filters.from_query(request.query)
        except FilterError as exc:
            facets = await self._run(self.index.facets)
            return page("Samples", "samples", _problem(str(exc)) + _filter_form("/samples", Filters(), facets), 400)
        facets = await self._run(self.index.facets)
        total, rows = await self._run(self.index.search, f)
        body = [_filter_form("/samples", f, facets)]
        first = (f.page - 1) * 50 + 1 if rows else 0
        body.append(
            f'<p id="count"><strong>{total:,}</strong> sample(s) match; showing {first:,}-{(f.page - 1) * 50 + len(rows):,}. '
            f'<a href="/samples?{_e(f.query(page=1))}" id="permalink">link to this view</a></p>'
        )
        if rows:
            head = (
                "<tr><th>time</th><th>version</th><th>route</th><th>category</th><th class=num>status</th>"
                "<th class=num>latency</th><th class=num>TTFT</th><th class=num>out tokens</th><th class=num>cost</th>"
                "<th>failure mode</th><th>failed checks</th><th>prompt</th></tr>"
            )
            trs = []
            for r in rows:
                mode = r["failure_mode"]
                trs.append(
                    f'<tr class="sample"><td><a class="sample-link" href="/samples/{quote(r["id"], safe="")}">{_time(r["ts"])}</a></td>'
                    f"<td>{_e(r['model_version'])}</td><td>{_e(r['route'])}</td><td>{_e(r['category'])}</td>"
                    f"<td class=num>{_e(r['status'])}</td><td class=num>{_ms(r['latency_ms'])}</td><td class=num>{_ms(r['ttft_ms'])}</td>"
                    f"<td class=num>{_num(r['output_tokens'])}</td><td class=num>{_usd(r['cost_usd'])}</td>"
                    f'<td class="{"mode-ok" if mode == "ok" else "mode-bad"}">{_e(mode)}</td><td>{_e(r["failed"] or "")}</td>'
                    f'<td class="snippet">{_text(r["prompt"])}</td></tr>'
                )
            body.append(f'<table class="list" id="samples"><thead>{head}</thead><tbody>{"".join(trs)}</tbody></table>')
        body.append(_pages(f.page, total, lambda n: f"/samples?{f.query(page=n)}"))
        return page("Samples", "samples", "".join(body))

    async def sample(self, request: web.Request) -> web.Response:
        sample_id = request.match_info["sample_id"]
        row = await self._run(self.index.sample, sample_id)
        if row is None:
            raise web.HTTPNotFound(text="no sample with this id in the data directory (it may have been removed)")
        record = await self._run(read_record, row["file"], sample_id, self.index.local_dir) or {}
        scores = await self._run(self.index.scores_of, sample_id)
        request_doc = record.get("request")
        messages = request_doc.get("messages") if isinstance(request_doc, dict) else None
        if isinstance(messages, list) and messages:
            prompt = "".join(
                f'<div class="msg"><span class="role">{_e(m.get("role", "") if isinstance(m, dict) else "")}</span>'
                f'<span class="text">{_text(content_to_text(m.get("content")) if isinstance(m, dict) else m)}</span></div>'
                for m in messages
            )
        else:
            prompt = f'<div class="text">{_text(row["prompt"])}</div>'
        answer = extract_answer_text(record.get("response")) if record else row["answer"]
        version = row["model_version"]
        facts = [
            ("id", _e(sample_id)),
            ("time", _time(row["ts"])),
            ("model", _e(row["model"])),
            ("model version", f'<a href="/samples?{_e(urlencode({"model_version": version}))}">{_e(version)}</a>'),
            ("route", _e(row["route"])),
            ("operation", _e(row["operation"])),
            ("category", _e(row["category"])),
            ("status", _e(row["status"]) + (f" ({_e(row['error_type'])})" if row["error_type"] else "")),
            ("finish reason", _e(row["finish_reason"])),
            ("failure mode", _e(row["failure_mode"])),
            ("latency", _ms(row["latency_ms"])),
            ("time to first token", _ms(row["ttft_ms"]) or "not streamed"),
            ("input tokens", _num(row["input_tokens"])),
            ("output tokens", _num(row["output_tokens"])),
            ("cost", _usd(row["cost_usd"]) or "no price known"),
            ("sampled because", _e(record.get("sample_reason", ""))),
            ("redacted", "yes" if record.get("redacted") else "no"),
        ]
        conversation_id = row.get("conversation_id")
        if conversation_id:
            extent = await self._run(self.index.conversation_extent, conversation_id)
            turn = row.get("turn")
            where = (
                f"turn {_e(turn)} of {_e(extent['last_turn'])}"
                if turn is not None and extent["last_turn"]
                else "turn unknown"
            )
            facts.append(
                (
                    "conversation",
                    f'<a id="conversation-link" href="/conversations/{quote(conversation_id, safe="")}">{_e(conversation_id)}</a>, '
                    f'{where} <span class="help">({extent["calls"]:,} sampled call(s) of it)</span>',
                )
            )
        notes = record.get("capture_notes") or []
        if notes:
            facts.append(("capture notes", _e(", ".join(str(n) for n in notes))))
        checks = []
        for sc in scores:
            details = _details(sc["details"])
            checks.append(
                f'<tr class="check"><td>{_e(sc["check"])}</td><td>{_e(sc["kind"])}</td>'
                f'<td class="{_e(sc["result"])}">{_e(sc["result"])}</td><td class=num>{_num(sc["value"], 3)}</td>'
                f'<td class="text">{details}</td>'
                f'<td><a href="/samples?{_e(urlencode({"model_version": version, "check": sc["check"], "outcome": sc["result"]}))}">'
                f"same verdict, same version</a></td></tr>"
            )
        check_table = (
            '<table class="list" id="checks"><thead><tr><th>check</th><th>kind</th><th>verdict</th><th class=num>value</th>'
            f"<th>reason</th><th></th></tr></thead><tbody>{''.join(checks)}</tbody></table>"
            if checks
            else '<p class="help" id="checks">No score for this sample (not scored yet, or scoring is off).</p>'
        )
        body = (
            f'<div class="panel"><dl class="facts" id="facts">{"".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)}</dl></div>'
            f'<div class="grid2"><section class="panel" id="prompt"><h2>Prompt</h2>{prompt}</section>'
            f'<section class="panel" id="answer"><h2>Answer</h2><div class="text">{_text(answer)}</div></section></div>'
            f"<h2>Checks</h2>{check_table}"
        )
        return page(f"Sample {sample_id}", "samples", body)

    # conversations -------------------------------------------------------------------------------

    async def conversations(self, request: web.Request) -> web.Response:
        order = (request.query.get("order") or "decay").strip()
        try:
            if order not in CONVERSATION_ORDERS:
                raise FilterError(f"order={order!r}: one of {', '.join(CONVERSATION_ORDERS)}")
            f = Filters.from_query(request.query)
        except FilterError as exc:
            return page("Conversations", "conversations", _problem(str(exc)), 400)
        facets = await self._run(self.index.facets)
        total, rows = await self._run(self.index.conversations, f, order)

        def link(**changes: Any) -> str:
            query = f.query(**changes)
            extra = urlencode({"order": order}) if order != "decay" else ""
            return "/conversations?" + "&".join(q for q in (query, extra) if q)

        choice = _select("order", "sort by", CONVERSATION_ORDERS, order).replace('<option value="">all</option>', "")
        body = [_filter_form("/conversations", f, facets, full=False, extra=choice)]
        body.append(
            f'<p id="count"><strong>{total:,}</strong> conversation(s) among the matching samples. '
            '<span class="help">Decay: the pass share of its first sampled turn minus its last\'s '
            "(every check that passed or failed); only sampled calls are counted.</span></p>"
        )
        if rows:

            def share(value: Any) -> str:
                return "" if value is None else f"{100 * float(value):.0f}%"

            trs = []
            for r in rows:
                decay = (
                    f"{100 * (float(r['first_share']) - float(r['last_share'])):+.0f} pts"
                    if r["last_turn"] > r["first_turn"] and r["first_share"] is not None and r["last_share"] is not None
                    else ""
                )
                trs.append(
                    f'<tr class="conversation"><td><a class="conversation-link" href="/conversations/{quote(r["conversation_id"], safe="")}">'
                    f"{_e(r['conversation_id'])}</a></td><td>{_e(r['versions'])}</td>"
                    f"<td class=num>{r['calls']:,}</td><td class=num>{_e(r['first_turn'] or '')}-{_e(r['last_turn'] or '')}</td>"
                    f"<td class=num>{share(r['first_share'])}</td><td class=num>{share(r['last_share'])}</td><td class=num>{decay}</td>"
                    f"<td>{_time(r['first'])}</td><td>{_time(r['last'])}</td></tr>"
                )
            body.append(
                '<table class="list" id="conversations"><thead><tr><th>conversation</th><th>versions</th>'
                "<th class=num>sampled calls</th><th class=num>turns</th><th class=num>first turn passed</th>"
                "<th class=num>last turn passed</th><th class=num>decay</th><th>first call</th><th>last call</th></tr></thead>"
                f"<tbody>{''.join(trs)}</tbody></table>"
            )
        body.append(_pages(f.page, total, lambda n: link(page=n)))
        return page("Conversations", "conversations", "".join(body))

    async def conversation(self, request: web.Request) -> web.Response:
        conversation_id = request.match_info["conversation_id"]
        number = request.query.get("page", "1")
        # isdecimal, not isdigit: "²" is a digit that int() refuses (a 500); "٢" is a decimal it reads.
        if not number.isdecimal() or not 1 <= int(number) <= 100_000:
            return page("Conversation", "conversations", _problem(f"page={number!r}: a whole number from 1"), 400)
        summary, rows = await self._run(self.index.conversation, conversation_id, int(number))
        if summary is None:
            raise web.HTTPNotFound(
                text="no sample in the data directory carries this conversation id "
                "(see /conversations for the ones it holds; its samples may have been removed)"
            )
        first, last = summary["first_turn"], summary["last_turn"]
        facts = [
            ("id", _e(conversation_id)),
            ("model versions", _e(summary["versions"])),
            ("sampled calls", f"{summary['calls']:,}"),
            ("turns", f"{_e(first)} to {_e(last)}" if first is not None else "unknown"),
            ("first call", _time(summary["first"])),
            ("last call", _time(summary["last"])),
            (
                "as a list",
                f'<a href="/samples?{_e(urlencode({"conversation": conversation_id}))}">its samples in the samples list</a>',
            ),
        ]
        turns = []
        for r in rows:
            mode = r["failure_mode"]
            verdicts = ", ".join(f'{_e(c)}: <span class="{_e(v)}">{_e(v)}</span>' for c, v in r["checks"])
            turns.append(
                f'<tr class="turn" id="turn-{_e(r["id"])}"><td class=num>{_e(r["turn"] if r["turn"] is not None else "?")}</td>'
                f'<td><a class="sample-link" href="/samples/{quote(r["id"], safe="")}">{_time(r["ts"])}</a></td>'
                f"<td>{_e(r['model_version'])}</td>"
                f'<td class="text user-message">{_text(r["prompt"])}</td><td class="text answer">{_text(r["answer"])}</td>'
                f'<td class="checks">{verdicts or "<span class=help>not scored</span>"}</td>'
                f"<td class=num>{_rate(int(r['passed']), int(r['decided']))}</td>"
                f'<td class="{"mode-ok" if mode == "ok" else "mode-bad"}">{_e(mode)}</td></tr>'
            )
        body = [
            f'<div class="panel"><dl class="facts" id="facts">{"".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)}</dl></div>',
            '<p class="help">Every sampled call of this conversation in turn order: the user message of that turn, '
            "the answer, each check's verdict and the share that passed (with its Wilson 95% interval). "
            "Turns not sampled are absent.</p>",
            '<table class="list" id="turns"><thead><tr><th class=num>turn</th><th>time</th><th>version</th>'
            "<th>user message</th><th>answer</th><th>checks</th><th class=num>passed</th><th>failure mode</th></tr></thead>"
            f"<tbody>{''.join(turns)}</tbody></table>",
        ]
        here = f"/conversations/{quote(conversation_id, safe='')}"
        body.append(
            _pages(
                int(number),
                summary["calls"],
                lambda n: f"{here}?page={n}",
                size=TURNS_PAGE_SIZE,
                earlier="earlier turns",
                later="later turns",
            )
        )
        return page(f"Conversation {conversation_id}", "conversations", "".join(body))

    # versions ------------------------------------------------------------------------------------

    async def versions(self, request: web.Request) -> web.Response:
        try:
            f = Filters.from_query(request.query)
        except FilterError as exc:
            return page("Versions side by side", "versions", _problem(str(exc)), 400)
        facets = await self._run(self.index.facets)
        calls, checks = await self._run(self.index.versions, f)
        versions = [c["model_version"] for c in calls]
        body = [_filter_form("/versions", f, facets, full=False)]
        if not calls:
            body.append('<p id="empty">No samples match.</p>')
            return page("Versions side by side", "versions", "".join(body))
        head = "".join(f'<th class="num">{_e(v)}</th>' for v in versions)

        def row(label: str, cells: Sequence[str]) -> str:
            return f"<tr><th>{label}</th>{''.join(f'<td class=num>{c}</td>' for c in cells)}</tr>"

        by_v = {c["model_version"]: c for c in calls}
        call_rows = [
            row(
                "samples",
                [f'<a href="/samples?{_e(f.query(model_version=(v,)))}">{by_v[v]["n"]:,}</a>' for v in versions],
            ),
            row(
                "errors",
                [
                    f'<a href="/samples?{_e(f.query(model_version=(v,), failure_mode="error"))}">{by_v[v]["errors"]:,}</a>'
                    for v in versions
                ],
            ),
            row("latency p50 (answered)", [_ms(by_v[v]["latency_p50"]) for v in versions]),
            row("latency p95 (answered)", [_ms(by_v[v]["latency_p95"]) for v in versions]),
            row("TTFT p50 (answered)", [_ms(by_v[v]["ttft_p50"]) or "-" for v in versions]),
            row("output tokens (mean)", [_num(by_v[v]["output_tokens"], 1) for v in versions]),
            row("cost per call (mean)", [_usd(by_v[v]["cost_mean"]) or "-" for v in versions]),
            row("cost (total)", [_usd(by_v[v]["cost_total"]) or "-" for v in versions]),
        ]
        body.append(
            f'<h2>Calls</h2><table class="list" id="calls"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(call_rows)}</tbody></table>'
        )
        table: dict[str, dict[str, dict[str, Any]]] = {}
        for c in checks:
            table.setdefault(c["check"], {})[c["model_version"]] = c
        check_rows = []
        for check, per in table.items():
            cells = []
            for v in versions:
                c = per.get(v)
                if c is None:
                    cells.append('<span class="help">-</span>')
                    continue
                link = f.query(model_version=(v,), check=check, outcome="fail")
                failed = int(c["decided"]) - int(c["passed"])
                cells.append(
                    f"{_rate(int(c['passed']), int(c['decided']))}<br>"
                    f'<a class="failures" href="/samples?{_e(link)}">{failed:,} failed</a>'
                )
            check_rows.append(row(_e(check), cells))
        body.append(
            "<h2>Pass rate per check</h2>"
            '<p class="help">pass / (pass + fail), with a Wilson 95% interval; errors and skips are left out.</p>'
            f'<table class="list" id="pass-rates"><thead><tr><th>check</th>{head}</tr></thead><tbody>{"".join(check_rows)}</tbody></table>'
        )
        return page("Versions side by side", "versions", "".join(body))

    # drift ---------------------------------------------------------------------------------------

    async def drift(self, request: web.Request) -> web.Response:
        files = _drift_files(self.state)
        pages = _drift_pages(self.state)
        baselines = sorted(self.state.data_dir.glob("baseline-*.json"))
        items = "".join(
            f'<li><a class="report" href="/drift/{i}">{_e(p.name)}</a> <span class="help">{_e(p.parent)}</span></li>'
            for i, p in enumerate(files)
        ) + "".join(
            f'<li><a class="report-page" href="/drift/page/{i}">{_e(p.name)}</a> <span class="help">the HTML report, with its plots</span></li>'
            for i, p in enumerate(pages)
        )
        body = (
            (f'<ul id="reports">{items}</ul>' if files or pages else '<p id="reports">No drift report yet.</p>')
            + '<p class="help">A drift report is the JSON of <code>llmwatch drift --format json</code>; save it under '
            f"<code>{_e(self.state.data_dir / 'drift')}/</code> (or pass <code>--drift-report FILE</code>) to see it here, "
            "each drifted signal linked to the samples that carry it.</p>"
        )
        if baselines:
            body += (
                "<h2>Baselines in the data directory</h2><ul>"
                + "".join(f"<li>{_e(b.name)}</li>" for b in baselines)
                + "</ul>"
            )
        return page("Drift", "drift", body)

    async def drift_page(self, request: web.Request) -> web.Response:
        pages = _drift_pages(self.state)
        n = request.match_info["n"]
        if not n.isdecimal() or int(n) >= len(pages):
            raise web.HTTPNotFound(text="no such drift report page")
        try:
            text = await self._run(pages[int(n)].read_bytes)
        except OSError:
            raise web.HTTPNotFound(text="that drift report page cannot be read now") from None
        return web.Response(body=text, content_type="text/html", charset="utf-8")

    async def drift_report(self, request: web.Request) -> web.Response:
        files = _drift_files(self.state)
        n = request.match_info["n"]
        if not n.isdecimal() or int(n) >= len(files):
            raise web.HTTPNotFound(text="no such drift report")
        path = files[int(n)]
        try:
            report = orjson.loads(await self._run(path.read_bytes))
            signals = report["signals"]
            if not isinstance(signals, list):
                raise TypeError
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            return page(
                "Drift report",
                "drift",
                _problem(f"{path}: not a drift report from `llmwatch drift --format json` ({type(exc).__name__})"),
                422,
            )
        versions = [str(v) for v in report.get("current_versions") or []]
        verdict = str(report.get("verdict", ""))
        rows = []
        for sig in signals:
            if not isinstance(sig, dict):
                continue
            name = str(sig.get("name", ""))
            query: dict[str, str] = {"signal": name}
            if versions:
                query["model_version"] = ",".join(versions)
            route = str(sig.get("route") or "")
            if route and route.startswith("/"):
                query["route"] = route
            drifted = sig.get("verdict") in MOVED
            link = f'<a class="signal-samples" href="/samples?{_e(urlencode(query))}">samples</a>'
            rows.append(
                f'<tr class="{"drifted" if drifted else ""}"><td class="{_verdict_class(sig.get("verdict"))}">{_e(sig.get("verdict"))}</td>'
                f"<td>{_e(sig.get('family'))}</td><td>{_e(name)}</td><td>{_e(route)}</td><td>{_e(sig.get('direction'))}</td>"
                f"<td class=num>{_num(sig.get('effect_size'), 3)}</td><td class=num>{_e(_p(sig.get('p_adjusted')))}</td>"
                f"<td class=num>{_e(sig.get('n_baseline'))} / {_e(sig.get('n_current'))}</td><td>{_e(sig.get('stratum'))}</td>"
                f"<td>{link}</td></tr>"
            )
        rows.sort(key=lambda r: 'class="drifted"' not in r)
        body = (
            f'<p id="verdict">Verdict <span class="{_verdict_class(verdict)}">{_e(verdict)}</span>: '
            f"versions {_e(', '.join(versions))} against the baseline of {_e(report.get('baseline_version'))} "
            f"({_e(report.get('n_current'))} samples). <span class=help>{_e(path)}</span></p>"
            '<table class="list" id="signals"><thead><tr><th>verdict</th><th>family</th><th>signal</th><th>route</th><th>direction</th>'
            "<th class=num>effect</th><th class=num>adjusted p</th><th class=num>n baseline / current</th><th>stratum</th><th></th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
        return page(f"Drift report {path.name}", "drift", body)

    # shadow pairs --------------------------------------------------------------------------------

    async def shadow(self, request: web.Request) -> web.Response:
        candidate = request.query.get("candidate", "")
        page_text = request.query.get("page", "1")
        number = int(page_text) if page_text.isdecimal() and int(page_text) >= 1 else 1
        cands = await self._run(self.index.candidates)
        total, rows = await self._run(self.index.pairs, candidate, number)
        summary = "".join(
            f'<tr><td><a href="/shadow?{_e(urlencode({"candidate": c["candidate"]}))}">{_e(c["candidate"])}</a></td>'
            f"<td class=num>{c['n']:,}</td><td class=num>{_rate(int(c['primary_pass'] or 0), int(c['primary_decided'] or 0))}</td>"
            f"<td class=num>{_rate(int(c['shadow_pass'] or 0), int(c['shadow_decided'] or 0))}</td></tr>"
            for c in cands
        )
        body = [
            '<p class="help">Pooled check verdicts of each side (not the paired test: <code>llmwatch shadow report</code> gives the verdict with intervals and margins).</p>'
            '<table class="list" id="candidates"><thead><tr><th>candidate</th><th class=num>pairs</th><th class=num>primary pass rate</th>'
            f"<th class=num>candidate pass rate</th></tr></thead><tbody>{summary}</tbody></table>"
            if cands
            else f'<p id="candidates">No shadow pair in {_e(self.state.data_dir / "pairs")}.</p>'
        ]
        if rows:
            trs = "".join(
                f'<tr><td><a class="pair-link" href="/shadow/{quote(r["id"], safe="")}">{_time(r["ts"])}</a></td><td>{_e(r["candidate"])}</td>'
                f"<td>{_e(r['primary_version'])} / {_e(r['shadow_version'])}</td><td>{_e(r['category'])}</td>"
                f"<td class=num>{r['primary_pass']}/{r['primary_decided']}</td><td class=num>{r['shadow_pass']}/{r['shadow_decided']}</td>"
                f'<td class="snippet">{_text(r["prompt"])}</td></tr>'
                for r in rows
            )
            body.append(
                f"<h2>Pairs{' of ' + _e(candidate) if candidate else ''} ({total:,})</h2>"
                '<table class="list" id="pairs"><thead><tr><th>time</th><th>candidate</th><th>versions (primary / candidate)</th><th>category</th>'
                f"<th class=num>primary checks passed</th><th class=num>candidate checks passed</th><th>prompt</th></tr></thead><tbody>{trs}</tbody></table>"
            )
            nav = []
            if number > 1:
                nav.append(
                    f'<a href="/shadow?{_e(urlencode({"candidate": candidate, "page": number - 1}))}">previous</a>'
                )
            if number * 50 < total:
                nav.append(f'<a href="/shadow?{_e(urlencode({"candidate": candidate, "page": number + 1}))}">next</a>')
            body.append(f'<nav class="pages">{"".join(nav)}</nav>')
        return page("Shadow pairs", "shadow", "".join(body))

    async def pair(self, request: web.Request) -> web.Response:
        pair_id = request.match_info["pair_id"]
        path = await self._run(self.index.file_of, "pairs", pair_id)
        record = await self._run(read_record, path, pair_id, self.index.local_dir) if path else None
        if record is None:
            raise web.HTTPNotFound(text="no shadow pair with this id in the data directory")
        primary = record.get("primary") if isinstance(record.get("primary"), dict) else {}
        shadow = record.get("shadow") if isinstance(record.get("shadow"), dict) else {}
        req = primary.get("request")
        messages = req.get("messages") if isinstance(req, dict) else None
        prompt = "".join(
            f'<div class="msg"><span class="role">{_e(m.get("role", ""))}</span><span class="text">{_text(content_to_text(m.get("content")))}</span></div>'
            for m in (messages if isinstance(messages, list) else [])
            if isinstance(m, dict)
        )

        def side(title: str, ident: str, s: Mapping[str, Any], scores: Any) -> str:
            found = s.get("usage")
            usage: Mapping[str, Any] = found if isinstance(found, dict) else {}
            verdicts = "".join(
                f'<tr><td>{_e(x.get("check"))}</td><td class="{_e(x.get("result"))}">{_e(x.get("result"))}</td></tr>'
                for x in (scores if isinstance(scores, list) else [])
                if isinstance(x, dict)
            )
            return (
                f'<section class="panel" id="{ident}"><h2>{_e(title)}: {_e(s.get("model_version"))}</h2>'
                f'<div class="text">{_text(extract_answer_text(s.get("response")))}</div>'
                f'<p class="help">latency {_ms(s.get("latency_ms"))}, TTFT {_ms(s.get("ttft_ms")) or "-"}, '
                f"{_e(usage.get('output_tokens'))} output tokens, cost {_usd(s.get('cost_usd')) or '-'}</p>"
                f'<table class="list"><tbody>{verdicts}</tbody></table></section>'
            )

        body = (
            f"<p>Candidate <strong>{_e(record.get('candidate'))}</strong>, {_e(record.get('route'))}, category {_e(record.get('category') or '-')}, "
            f"{_e(record.get('timestamp'))}</p>"
            f'<section class="panel" id="prompt"><h2>Prompt</h2>{prompt or _text(content_to_text(req))}</section>'
            f'<div class="grid2">{side("Primary", "primary", primary, record.get("primary_scores"))}'
            f"{side('Candidate', 'candidate', shadow, record.get('shadow_scores'))}</div>"
        )
        return page(f"Shadow pair {pair_id}", "shadow", body)

    # suites --------------------------------------------------------------------------------------

    async def suites(self, request: web.Request) -> web.Response:
        files = _suite_files(self.state)
        items = "".join(
            f'<li><a class="suite" href="/suites/{i}">{_e(p.name)}</a> <span class="help">{_e(p)}</span></li>'
            for i, p in enumerate(files)
        )
        body = (
            f'<ul id="suites">{items}</ul>'
            if files
            else f'<p id="suites">No regression suite: pass <code>--suite FILE</code> or keep suites in <code>{_e(self.state.data_dir / "suites")}/</code>.</p>'
        )
        return page("Regression suites", "suites", body)

    async def suite(self, request: web.Request) -> web.Response:
        from llmwatch.scorers.evaluation.regress import RegressError, load_suite

        files = _suite_files(self.state)
        n = request.match_info["n"]
        if not n.isdecimal() or int(n) >= len(files):
            raise web.HTTPNotFound(text="no such suite")
        try:
            suite = await self._run(load_suite, files[int(n)])
        except RegressError as exc:
            return page("Regression suite", "suites", _problem(str(exc)), 422)
        rows = []
        for case in suite.cases:
            prompt = case.input if isinstance(case.input, str) else content_to_text(case.messages()[-1].get("content"))
            checks = ", ".join(
                [*(["expected"] if case.expected is not None else []), *((c.name or c.kind) for c in case.checks)]
            )
            rows.append(
                f'<tr class="case"><td>{_e(case.id)}</td><td>{_e(case.category)}</td><td class="snippet">{_text(prompt)}</td>'
                f"<td class=snippet>{_text(case.expected or '')} <span class=help>{_e(case.expected_match) if case.expected else ''}</span></td>"
                f"<td>{_e(checks)}</td></tr>"
            )
        body = (
            f'<p>{len(suite.cases)} case(s), checksum sha256:{_e(suite.checksum[:12])}. <span class="help">{_e(suite.path)}</span></p>'
            '<table class="list" id="cases"><thead><tr><th>case</th><th>category</th><th>input</th><th>expected</th><th>checks</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
        return page(f"Suite {files[int(n)].name}", "suites", body)

    # misc ----------------------------------------------------------------------------------------

    async def root(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther("/samples")

    async def no_icon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response(await self._run(self.index.totals))


def _p(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    return "" if math.isnan(number) else f"{number:.2g}"


def _details(raw: Any) -> str:
    """A score's details (its reason): `key: value` lines, escaped."""
    try:
        data = orjson.loads(raw) if isinstance(raw, str) else raw
    except orjson.JSONDecodeError:
        return _text(raw)
    if not isinstance(data, dict) or not data:
        return ""
    return "<br>".join(
        f"{_e(k)}: {_text(v if isinstance(v, str) else orjson.dumps(v).decode())}" for k, v in data.items()
    )


# --- access ----------------------------------------------------------------------------------------


def host_name(host: str) -> str:
    """The name of a Host header, without its port: `[::1]:8090` -> `::1`, `Localhost.:80` -> `localhost`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rpartition(":")[0].rstrip(".") if ":" in host else host.rstrip(".")


def _gate(
    token: str | None, hosts: frozenset[str] | None = None, secure: bool = False
) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def gate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if (
            token is None
            and hosts is not None
            and request.path != "/healthz"
            and host_name(request.headers.get("Host", "")) not in hosts
        ):
            # Without a token the loopback address is the only guard, and a web page under a name
            # that resolves to 127.0.0.1 (DNS rebinding) is the same origin as the UI to the browser:
            # it could read every sample. Such a request carries that name, not a loopback one.
            log.info("ui.foreign_host")
            raise web.HTTPMisdirectedRequest(
                text="this llmwatch ui answers only to a loopback Host (127.0.0.1, localhost, [::1]); "
                "behind a reverse proxy, give --public-url or use --auth token\n"
            )
        if token is None or request.path == "/favicon.ico":
            return await handler(request)
        given = request.query.get("token")
        if given is not None:
            if secrets.compare_digest(given.encode(), token.encode()):
                # Keep it in a cookie and take it out of the address bar, the history and any copied link.
                rest = urlencode([(k, v) for k, v in request.query.items() if k != "token"])
                resp = web.HTTPSeeOther(request.path + (f"?{rest}" if rest else ""))
                # Lax, not Strict: a Grafana data link is a cross-site top-level navigation, and
                # every page is a GET that changes nothing.
                resp.set_cookie(COOKIE, token, httponly=True, samesite="Lax", path="/", secure=secure or None)
                raise resp
            log.info("ui.bad_token")
            raise web.HTTPUnauthorized(text="wrong token: open the link `llmwatch ui` printed at start")
        auth = request.headers.get("Authorization", "")
        cookie = request.cookies.get(COOKIE, "")
        offered = auth[7:] if auth.startswith("Bearer ") else cookie
        if offered and secrets.compare_digest(offered.encode(), token.encode()):
            return await handler(request)
        raise web.HTTPUnauthorized(
            text="this llmwatch ui needs its token: open the link `llmwatch ui` printed at start (it ends in ?token=...)"
        )

    return gate


def build_app(state: UiState) -> web.Application:
    faults = no_tracebacks("ui.internal_error", "internal error (logged by llmwatch ui)\n")
    app = web.Application(
        middlewares=[faults, _gate(state.token, state.hosts, state.secure_cookie)], client_max_size=64 * 1024
    )
    app.on_response_prepare.append(secure_headers)
    h = UiApp(state)
    app.router.add_get("/", h.root)
    app.router.add_get("/favicon.ico", h.no_icon)
    app.router.add_get("/healthz", h.healthz)
    app.router.add_get("/samples", h.samples)
    app.router.add_get("/samples/{sample_id}", h.sample)
    app.router.add_get("/conversations", h.conversations)
    app.router.add_get("/conversations/{conversation_id}", h.conversation)
    app.router.add_get("/versions", h.versions)
    app.router.add_get("/drift", h.drift)
    app.router.add_get("/drift/{n}", h.drift_report)
    app.router.add_get("/drift/page/{n}", h.drift_page)
    app.router.add_get("/shadow", h.shadow)
    app.router.add_get("/shadow/{pair_id}", h.pair)
    app.router.add_get("/suites", h.suites)
    app.router.add_get("/suites/{n}", h.suite)
    return app


# --- the command -----------------------------------------------------------------------------------


def resolve_token(auth: str, host: str, token_file: str | None) -> str | None:
    """None (no token: loopback, or `--auth none`), else the token from --token-file or a new one."""
    mode = auth if auth != "auto" else ("none" if host in LOOPBACK else "token")
    if mode == "none":
        return None
    if token_file:
        path = Path(token_file)
        if path.exists():
            private_path(path)  # refuses a link, narrows the mode
            token = path.read_text(encoding="utf-8").strip()
            if len(token) < 16:
                raise UiError(
                    f"--token-file {path}: holds fewer than 16 characters; remove it to have a new token made"
                )
            return token
        token = secrets.token_urlsafe(24)
        atomic_write_bytes(path, (token + "\n").encode())
        return token
    return secrets.token_urlsafe(24)


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdecimal() or int(port_text) > 65535:
        raise UiError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:8090 (port 0 picks a free one)")
    return host.strip("[]"), int(port_text)


async def _refresher(state: UiState, every: float) -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(every)
        try:
            await loop.run_in_executor(None, state.index.refresh)
        except Exception as exc:  # a file being rotated or removed mid-read: the next round reads it
            log.warning("ui.refresh_failed", error=str(exc)[:300])


async def serve(state: UiState, listen: str, public_url: str | None, refresh_s: float, out: Any = sys.stdout) -> int:
    from llmwatch.agent.signals import run_until_stopped, until
    from llmwatch.collectors.exporters.prometheus import serve_app

    app = build_app(state)
    # A port in use is a ListenError naming --listen (exit 2, one line), as for every llmwatch server.
    runner, bound = await serve_app(
        app, listen, web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0), setting="--listen"
    )
    refresher = asyncio.create_task(_refresher(state, refresh_s))

    async def main(stop: asyncio.Event) -> None:
        host, _ = parse_listen(listen)
        base = (public_url or f"http://{host if ':' not in host else f'[{host}]'}:{bound}").rstrip("/")
        counts = state.index.totals()
        lines = [
            f"llmwatch ui listening on http://{host}:{bound} ({counts['samples']} samples, {counts['scores']} scores, "
            f"{counts['pairs']} pairs from {state.source or state.data_dir})"
        ]
        lines.append(f"open: {base}/samples" + (f"?token={state.token}" if state.token else ""))
        out.write("\n".join(lines) + "\n")
        out.flush()
        log.info("ui.serving", port=bound, token=state.token is not None, **counts)
        await until(stop)

    async def cleanup() -> None:
        log.info("ui.stopping")
        refresher.cancel()
        await runner.cleanup()
        log.info("ui.stopped")

    await run_until_stopped(main, cleanup)
    return 0


def run(
    data_dir: str,
    listen: str,
    *,
    auth: str = "auto",
    token_file: str | None = None,
    suites: Sequence[str] = (),
    drift_reports: Sequence[str] = (),
    public_url: str | None = None,
    refresh_s: float = 5.0,
) -> int:
    host, _ = parse_listen(listen)
    folder = Path(data_dir)
    if parquet.is_url(data_dir):
        # A Parquet dataset under a URL (s3://, gs://, file://): its filesystem and listing checked here.
        try:
            found = any(
                parquet.is_dataset(f"{data_dir.rstrip('/')}/{kind}", kind) for kind in ("samples", "scores", "pairs")
            )
        except RecordError as exc:
            raise UiError(f"--data-dir {exc}") from None
        if not found:
            raise UiError(
                f"--data-dir {data_dir}: no Parquet files under its samples/, scores/ or pairs/; give the root `llmwatch archive` wrote"
            )
    elif not folder.is_dir():
        problem = "is a file, not a directory" if folder.exists() else "no such directory"
        raise UiError(
            f"--data-dir {data_dir}: {problem}; give the sidecar's data directory (data_dir, default ./llmwatch-data)"
        )
    elif not any((folder / sub).is_dir() for sub in ("samples", "scores", "pairs")):
        raise UiError(
            f"--data-dir {data_dir}: holds no samples/, scores/ or pairs/ folder; give the directory the sidecar writes to (its data_dir)"
        )
    for name, paths in (("--suite", suites), ("--drift-report", drift_reports)):
        for p in paths:
            if not Path(p).is_file():
                problem = "is a directory, not a file" if Path(p).is_dir() else "no such file"
                what = "a suite .jsonl" if name == "--suite" else "a `llmwatch drift --format json` report"
                raise UiError(f"{name} {p}: {problem}; give {what}")
            check_given(name, p, UiError)
    token = resolve_token(auth, host, token_file)
    if token is None and host not in LOOPBACK:
        log.warning(
            "ui.no_token_off_loopback",
            listen=listen,
            advice="anyone who reaches this address reads the samples: serve behind an authenticating reverse proxy",
        )
    try:
        index = Index(data_dir if parquet.is_url(data_dir) else folder)
        index.refresh(strict=True)
    except RecordError as exc:
        raise UiError(f"--data-dir {exc}") from None
    # Spill folders of a `llmwatch ui` that was killed (SIGKILL runs no clean-up) stay in the temp
    # directory with what they spilled: this user's whose process is gone go at each start. Once
    # the data directory is accepted: a start refused for bad input changes nothing and says one line.
    remove_stale_spill_folders()
    state = UiState(index, folder, [Path(s) for s in suites], [Path(d) for d in drift_reports], token, data_dir)
    state.secure_cookie = bool(public_url and public_url.lower().startswith("https://"))
    if token is None and host in LOOPBACK:
        # The public URL's name too: a reverse proxy on this machine may pass it on as the Host.
        public = host_name(urlsplit(public_url).netloc) if public_url else ""
        state.hosts = frozenset({*LOOPBACK, public} - {""})
    try:
        import uvloop

        runner: Callable[[Any], int] = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        return runner(serve(state, listen, public_url, refresh_s))
    finally:
        index.close()


__all__ = ["run", "build_app", "UiState", "UiError", "resolve_token"]
