"""The relay core of the proxy: raw asyncio Protocols, bytes forwarded as they arrive. Every call
the C data plane does not forward itself (design record 0067) is answered here.

Why it exists: on aiohttp, a plain call cost about 800 µs of CPU, most of it aiohttp's own
server-request and client-request machinery (web.Request, ClientRequest, ClientResponse, header
multidicts, a handler task) before a line of llmwatch ran (docs/design/0010-relay-core.md). This core parses
only what a proxy must: the request head (httptools, the llhttp parser uvicorn uses), and the
response head plus enough of the body to know where the response ends. Everything else is
`transport.write` of the bytes received:

- a response body of known length is forwarded chunk by chunk as read, counted down to its end;
- a chunked response is forwarded with its own chunk framing (the upstream's bytes, unchanged) to
  an HTTP/1.1 client, and de-chunked only for an HTTP/1.0 client, which cannot read chunks;
- a response delimited by the upstream closing its connection is forwarded until the close, and
  the client's connection closes after it.

A request's body is read before an upstream connection is taken (up to 1 MiB; a bigger one streams
on from there) within `proxy.body_timeout_s`, as nginx reads it first: a client that stalls its
body holds no upstream connection. The head and body then leave together (a chunked upload keeps
chunked framing, its content unchanged). A chunked response's framing is read here (a step per
chunk) so that not one byte past its end is relayed; llhttp reads heads only. Flow control works both
ways: a client that reads slowly pauses reading from its upstream connection, and an upstream that
reads slowly pauses reading from the client (asyncio's write-buffer high-water mark).

Capture is a copy aside: for a route in `capture.routes` the request body and the response's
payload (de-chunked by the parser, which reads the chunks anyway) are appended to the `Exchange`
up to `capture.max_body_bytes`, with each piece's arrival time for TTFT; the analysis, metrics and
sampling are the proxy's `_finish`, unchanged, after the last byte has gone to the client.

Behaviours the tests specify (kept from the aiohttp core this replaced): `Expect: 100-continue` answered by
the proxy and not forwarded; 1xx interim responses not relayed; hop-by-hop headers dropped both
ways; no header added to a relayed response (except `Connection: close` when this connection
closes after it, as aiohttp does); upstream credentials as Basic auth only when the client sent no
Authorization; a head deadline (`proxy.header_timeout_s`); header limits (400 to clients, 502 for
upstreams); absolute-form targets refused with 400; a client that leaves closes its upstream
connection; 502/504 in fixed words; a bounded shutdown (`proxy.shutdown_timeout_s`).
Pipelined requests are answered one at a time, in order. A pooled connection its server has
closed is passed over before a call is sent on it; one that ends after a call was sent and before
any answer has the call sent again on a new connection only when that is safe (an idempotent
method without a body; docs/design/0010-relay-core.md).
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import socket
import ssl
import struct
import time
from time import perf_counter
from typing import Any, Callable
from urllib.parse import unquote, unquote_to_bytes

import httptools
import structlog

from llmwatch.collectors.receivers.proxy.capture import Exchange, stream_ended

log = structlog.get_logger(__name__)

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
_MAX_CLIENT_ID = 128
# aiohttp's server default: an idle keep-alive client connection is closed after this long.
_CLIENT_KEEPALIVE_S = 75.0
# How long a connection closed with its request body unread keeps reading (and dropping) it.
_LINGER_S = 5.0
# An idle upstream connection older than this is not reused: servers close idle connections
# (uvicorn after 5 s), and a request sent as they do fails for nothing.
_UPSTREAM_IDLE_S = 4.0
# Request body bytes held while the upstream connection is being made; above it the client waits.
_PENDING_LIMIT = 1 << 20
# Methods whose request, without a body, is sent again on a new connection when a reused one ends
# before any byte of an answer (RFC 9110 §9.2.2 idempotent methods; see `_Upstream.connection_lost`).
_REPLAYABLE = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})
# TCP_INFO's first byte is the connection's state (Linux); 1 is TCP_ESTABLISHED. Elsewhere: None,
# and `peer_closed` peeks instead (`_peek_closed`).
_TCP_INFO = getattr(socket, "TCP_INFO", None)
_TCP_ESTABLISHED = 1
# A one-byte look that leaves the byte where it is and never waits (the socket is non-blocking
# anyway; MSG_DONTWAIT where the platform has it, so that this holds whatever its mode).
_PEEK = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)
# An idle upstream connection at least this old is asked whether its server has closed it before a
# call is sent on it (`_Upstream.peer_closed`, 2.2 µs on uvloop). Servers close idle connections
# after a second or more (gunicorn 2 s, uvicorn 5 s, nginx 75 s); a connection reused sooner, as
# under load, is not asked.
_PEER_CHECK_IDLE_S = 1.0
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# SO_LINGER on, 0 s: closing the socket then resets the connection (RST) instead of ending it (FIN).
_RESET = struct.pack("ii", 1, 0)
_REASONS = {
    400: b"Bad Request",
    404: b"Not Found",
    408: b"Request Timeout",
    501: b"Not Implemented",
    502: b"Bad Gateway",
    504: b"Gateway Timeout",
}
_TE_501 = "llmwatch proxy: Transfer-Encoding other than a single `chunked` is not supported"
BODY_TIMEOUT = "llmwatch proxy: the request body did not arrive in time (proxy.body_timeout_s)"
# A Transfer-Encoding header line whose value is not a lone `chunked` (looked for after a parse error).
_TE_LINE = re.compile(rb"(?im)^transfer-encoding[ \t]*:(?![ \t]*chunked[ \t]*\r?$)")
# A whole head (request or response) is at most this, whatever max_header_bytes * max_headers
# allows (16.8 MB by default): nginx reads upstream heads into 4-8 kB, request heads into 32 kB.
_MAX_HEAD = 1 << 20
# A line ending in a bare LF (nginx and h11 read them; llhttp does not): made CRLF before parsing.
_BARE_LF = re.compile(rb"(?<!\r)\n")
# What a reason phrase must not hold (RFC 9112 §4: HTAB, SP, VCHAR and obs-text only).
_BAD_REASON = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# A chunk-size line (without its LF): hex digits, optional extensions (ignored, as every server
# does), CR. As strict as h11: the relay forwards these bytes as they are, and a client must be
# able to read them (a bare LF here would leave a strict client waiting for the chunk's end).
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\n]*?)?[ \t]*\r")
# A trailer line (without its LF) as h11 reads one: a token, a colon, a value of HTAB, SP, VCHAR and
# obs-text, then CR (or a bare LF). Anything looser is relayed to a client that cannot read it.
_TRAILER = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*\r?")
# A Host value (RFC 9112 §3.2: uri-host [":" port]): checked where it is forwarded (proxy.preserve_host).
_HOST_VALUE = re.compile(rb"(?:\[[0-9A-Fa-f:.]+\]|[-A-Za-z0-9._~%!$&'()*+,;=]*)(?::[0-9]*)?")
# Longest chunk-size or trailer line read from an upstream.
_MAX_CHUNK_LINE = 8192


# What `RelayServer.new_call` does with a request header, by its lower-case name.
_PLAIN, _HOP, _TE, _HOST, _EXPECT, _AUTH, _LENGTH = range(7)
_REQUEST_KINDS = {
    **{name: _HOP for name in _HOP_BY_HOP},
    b"transfer-encoding": _TE,
    b"host": _HOST,
    b"expect": _EXPECT,
    b"authorization": _AUTH,
    b"content-length": _LENGTH,
}
# The same for a response header, in `_Upstream._respond`.
_RESPONSE_KINDS = {**{name: _HOP for name in _HOP_BY_HOP}, b"transfer-encoding": _TE, b"content-length": _LENGTH}
# Header spellings remembered (per server, per pool): clients and upstreams send the same few names
# on every call, so a name is lowered and classified once, not once per call. Bounded: past this
# many names, or for a name longer than this many bytes (a peer inventing names), the rest are
# lowered each time and not remembered.
_MAX_HEADER_KINDS = 512
_MAX_KIND_NAME = 64


def _header_kind(
    kinds: dict[bytes, tuple[bytes, int]], name: bytes, table: dict[bytes, int] = _REQUEST_KINDS
) -> tuple[bytes, int]:
    """(lower-case name, kind) of a header name by `table`; remembered in `kinds` within its bounds."""
    lower = name.lower()
    known = (lower, table.get(lower, _PLAIN))
    if len(kinds) < _MAX_HEADER_KINDS and len(name) <= _MAX_KIND_NAME:
        kinds[name] = known
    return known


def head_limit(max_header_bytes: int, max_headers: int) -> int:
    """Most bytes of one head: every line at its limit, but no more than _MAX_HEAD (or two lines)."""
    return min(max_header_bytes * (max_headers + 1), max(_MAX_HEAD, 2 * max_header_bytes))


def head_end(buf: bytes | bytearray, start: int) -> int:
    """Offset just past the empty line that ends a head, or -1; lines end in CRLF or a bare LF.

    Searches from `start` only: a caller that accumulates a head passes where its last search
    stopped (less two bytes of overlap), so each byte is searched once, not once per read.
    """
    crlf = buf.find(b"\n\r\n", start)
    lf = buf.find(b"\n\n", start, crlf + 1 if crlf >= 0 else len(buf))
    if lf >= 0:
        return lf + 2
    return crlf + 3 if crlf >= 0 else -1


def error_answer(status: int, body: bytes, *, close: bool) -> bytes:
    """The proxy's own answer (400, 408, 502, 504...) as it goes out; the C data plane is given its
    502/504/408 in this form (`RelayServer.error_answers`) and adds `Connection: close` where this does."""
    return b"HTTP/1.1 %d %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%b\r\n%b" % (
        status,
        _REASONS.get(status, b"Error"),
        len(body),
        b"Connection: close\r\n" if close else b"",
        body,
    )


def climbs_above_root(path: bytes) -> bool:
    """Whether the path's dot segments (also percent-encoded, also with backslashes or an
    encoded slash as separators) would climb above its first segment: forwarded under the
    upstream's path prefix, a server that resolves them would serve what lies outside it."""
    for _ in range(3):  # double and triple encoding, as a gateway that decodes again would read it
        if b"%" not in path:
            break
        decoded = unquote_to_bytes(path)
        if decoded == path:
            break
        path = decoded
    if b".." not in path:
        return False
    depth = 0
    for segment in path.replace(b"\\", b"/").split(b"/"):
        # A segment's parameters (`..;x`, RFC 3986 §3.3) are cut off before it is resolved by
        # servlet containers (Tomcat, Jetty): `..;` is `..` there.
        segment = segment.split(b";", 1)[0]
        if segment == b"..":
            depth -= 1
            if depth < 0:
                return True
        elif segment and segment != b".":
            depth += 1
    return False


# What went wrong with the upstream, in the fixed words of 502 bodies (never its bytes).
UNREACHABLE = "is unreachable: the connection could not be made"
CLOSED = "closed the connection without a complete response"
INVALID = (
    "sent a response that is not valid HTTP or exceeds the header limits (proxy.max_header_bytes, proxy.max_headers)"
)


class _LimitExceeded(Exception):
    """A head over `proxy.max_header_bytes` / `proxy.max_headers` (raised inside a parser callback)."""


class _Call:
    """One request on a client connection, from its complete head to the last byte of its response."""

    __slots__ = (
        "client",
        "head",
        "is_head",
        "chunked",
        "body_done",
        "pending",
        "pending_size",
        "up",
        "ex",
        "req_buf",
        "keep_alive",
        "http10",
        "local",
        "connecting",
        "wait_timer",
        "started",
        "finished",
        "path",
        "sent_head",
        "held",
        "expect",
        "replay",
    )

    def __init__(self, client: "_Client") -> None:
        self.client = client
        self.head = b""
        self.is_head = False
        self.chunked = False
        self.body_done = False
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.up: _Upstream | None = None
        self.ex: Exchange | None = None
        self.req_buf: bytes | bytearray | None = None  # a captured request body so far
        self.keep_alive = True
        self.http10 = False
        self.local: tuple[int, bytes] | None = None  # an answer of the proxy's own (400, 404)
        self.connecting: asyncio.Task | None = None
        self.wait_timer: asyncio.TimerHandle | None = None
        self.started = False
        self.finished = False
        self.path = ""
        self.sent_head = False  # the response head went to the client
        # Waiting for its body before it takes an upstream connection (see `_Client._start`).
        self.held = False
        self.expect = False  # sent `Expect: 100-continue`: the 100 goes out when the call starts
        # Safe to send again (an idempotent method, no body) if a reused connection ends unanswered.
        self.replay = False

    # --- request body, from the client's parser ---------------------------------------------------

    def body(self, data: bytes) -> None:
        buf = self.req_buf
        if buf is not None:
            if not buf:
                # The first piece is kept as it came: a body in one read (most) is never copied
                # (`body_end`'s bytes() of it is the same object).
                buf = self.req_buf = data
            else:
                if type(buf) is bytes:
                    buf = self.req_buf = bytearray(buf)  # more pieces: one buffer, linear in the body
                buf += data
            ex = self.ex
            if len(buf) > ex.max_body_bytes:  # type: ignore[union-attr]
                ex.notes.append("request_too_large")  # type: ignore[union-attr]
                self.req_buf = None
        if self.local is not None:
            return  # answered by the proxy: the body goes nowhere
        if self.chunked:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        up = self.up
        if up is not None and not self.client.feeding:
            up.send(data)
        else:
            if up is not None:
                self.client.flush = self  # sent when the parse of this read returns
            self.pending.append(data)
            self.pending_size += len(data)
            if self.pending_size > _PENDING_LIMIT:
                if self.held:
                    # A body bigger than the buffer streams on: it takes its connection now (the
                    # body deadline still bounds how long it can hold it).
                    self.held = False
                    self.client.server.pool.acquire(self)
                else:
                    self.client.pause("pending")

    def body_end(self) -> None:
        self.body_done = True
        buf = self.req_buf
        if buf is not None:
            self.ex.request_body = bytes(buf)  # type: ignore[union-attr]
            self.req_buf = None
        if self.local is None and self.chunked:
            # Trailers are not forwarded; the body's content is.
            if self.up is not None and not self.client.feeding:
                self.up.send(b"0\r\n\r\n")
            else:
                if self.up is not None:
                    self.client.flush = self
                self.pending.append(b"0\r\n\r\n")
        if self.client.body_timer is not None:
            self.client.body_complete(self)
        if self.local is not None and self.started and not self.finished:
            self.client.answer_local(self)
        elif self.held:
            self.held = False
            self.client.server.pool.acquire(self)


class _Upstream(asyncio.Protocol):
    """One keep-alive connection to the upstream; carries one call at a time."""

    def __init__(self, pool: "_Pool") -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.call: _Call | None = None
        self.idle_since = 0.0
        self.paused = False
        # The read deadline's timer outlives the call it was armed for (see `attach`).
        self.timer: asyncio.TimerHandle | None = None
        self.sock: Any = None  # the connection's socket, for `peer_closed` (set once connected)
        # Has carried a call before: a server may have closed it idle as the next call was sent.
        self.reused = False
        self._reset()

    def _reset(self) -> None:
        self.state = 0  # 0 head, 1 body of known length, 2 chunked body, 3 body until close, 4 done
        self.head_buf: bytearray | None = None
        # The chunked body's framing, read here (not by llhttp) so that its end is known to the byte:
        # 0 size line, 1 chunk data, 2 the CRLF after the data, 3 trailer lines.
        self.cstate = 0
        self.chunk_left = 0
        self.line_buf = b""
        self.parser: Any = None
        self.status = 0
        # The status line after its version (code, then SP and reason if sent, then CRLF), as received.
        self.status_rest = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.interim = False
        self.keep_alive = False
        self.remaining = 0
        self.dechunk = False
        self.reusable = True
        self.last_read = 0.0
        self.heard = False  # a byte of this call's answer came

    # --- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pause_writing(self) -> None:
        # The upstream reads the request body more slowly than the client sends it.
        call = self.call
        if call is not None:
            call.client.pause("upstream")

    def resume_writing(self) -> None:
        call = self.call
        if call is not None:
            call.client.resume("upstream")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._cancel_timer()
        call = self.call
        if call is None:
            self.pool.lost(self)
            return
        self.call = None
        call.up = None
        if not call.sent_head and self.reused and not self.heard and call.replay and not call.finished:
            # A kept-alive connection that ended (closed or reset) before a byte of the answer:
            # the server most likely closed it idle as this call was sent. Sent again, once, on a
            # new connection, only if that is safe whether or not the server had read it (an
            # idempotent method without a body), as nginx's `proxy_next_upstream error` would;
            # anything else gets the 502 (docs/design/0010-relay-core.md). The new connection
            # takes this one's pool slot: freed, it went to a call waiting behind this one.
            call.replay = False
            self.pool.retry(self, call)
            return
        self.pool.lost(self)
        if self.state == 3 and exc is None:
            self._finished(call)  # the close is the end of this response
        elif not call.sent_head:
            call.client.upstream_failed(call, CLOSED, timeout=False)
        else:
            self._cut(call)  # in state 3: reset, not closed, so the body is cut short (RFC 9112 §8)

    def data_received(self, data: bytes) -> None:
        call = self.call
        if call is None:
            # Bytes nobody asked for on an idle connection: it can no longer be trusted.
            self.transport.close()  # type: ignore[union-attr]
            return
        self.last_read = self.pool.loop.time()
        state = self.state
        if state == 1:
            self._length_body(call, data)
        elif state == 2:
            self._chunked_body(call, data)
        elif state == 3:
            self._capture(call, data)
            call.client.write(data)
        elif state == 0:
            self._head(call, data)
        else:
            self.reusable = False  # bytes after the end of the response

    # --- the response head --------------------------------------------------------------------------

    def _head(self, call: _Call, data: bytes) -> None:
        self.heard = True
        held = self.head_buf
        if held is not None:
            # Only the new bytes are searched (with two of overlap): a head that arrives in many
            # reads costs time linear in its size, not quadratic.
            start = max(len(held) - 2, 0)
            held += data
            buf: bytes | bytearray = held
        else:
            start = 0
            buf = data
        limit = self.pool.max_head
        while True:
            end = head_end(buf, start)
            if end < 0 or end > limit:
                if len(buf) > limit or end > limit:
                    self._invalid(call)
                elif held is None:
                    self.head_buf = bytearray(buf)
                return
            head = bytes(buf[:end])
            if head[:1] in (b"\r", b"\n"):
                # An empty line before a status line: llhttp skips it, h11 refuses it. Strict here:
                # an upstream that sends one is out of step with its own framing.
                self._invalid(call)
                return
            if head.count(b"\n") != head.count(b"\r\n"):
                head = _BARE_LF.sub(b"\r\n", head)  # read as nginx reads it
            try:
                self.parser.feed_data(head)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade, _LimitExceeded):
                # HttpParserUpgrade (not an HttpParserError): a 101 to a request that asked for no
                # upgrade (the relay forwards none); let out, asyncio logged a traceback.
                self._invalid(call)
                return
            buf = buf[end:]
            start = 0
            if not self.interim:
                break
            # 1xx (103 Early Hints): not relayed; the final response follows on the same connection.
            self.parser = httptools.HttpResponseParser(self)
            self.headers = []
            self.interim = False
            held = None
        self.head_buf = None
        if self.status == 0:
            self._invalid(call)  # a head the parser did not complete
            return
        # Copied, not rebuilt from the parsed code and reason: llhttp does not say whether an SP
        # followed the code (`HTTP/1.1 200` and `HTTP/1.1 200 ` read alike), and a rebuilt line
        # added one. llhttp took exactly one SP after the version and three digits after it.
        eol = head.find(b"\r\n")
        self.status_rest = head[head.find(b" ", 0, eol) + 1 : eol + 2]
        self._respond(call, bytes(buf))

    def on_status(self, reason: bytes) -> None:
        if reason != b"OK" and _BAD_REASON.search(reason):
            raise _LimitExceeded  # llhttp reads control bytes in a reason phrase; h11 and RFC 9112 do not

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self.headers
        if len(name) + len(value) + 2 > self.pool.max_line or len(headers) >= self.pool.max_headers:
            raise _LimitExceeded
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 100:
            # llhttp reads any three digits; `099` would go out as `99`, a code no client reads
            # (h11 refuses it, RFC 9110 §15 has 100-599): not relayed as another code, a 502.
            raise _LimitExceeded
        if 100 <= status < 200:
            self.interim = True
            return
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()

    def _respond(self, call: _Call, rest: bytes) -> None:  # noqa: C901
        ex = call.ex
        wanted = self.pool.wanted if ex is not None else None
        captured: dict[str, str] = {}
        lines = [b"HTTP/1.0 " if call.http10 else b"HTTP/1.1 ", self.status_rest]
        te = cl = None
        kinds = self.pool.header_kinds
        for name, value in self.headers:
            known = kinds.get(name)
            if known is None:
                known = _header_kind(kinds, name, _RESPONSE_KINDS)
            lower, kind = known
            if kind != _PLAIN:
                if kind == _TE:
                    if te is not None or value.strip().lower() != b"chunked":
                        # Only a lone `chunked` frames a body the relay can end exactly (nginx: 502).
                        self._invalid(call)
                        return
                    te = value
                    if call.http10:
                        # De-chunked for an HTTP/1.0 client, which reads no transfer-coding (RFC 9112 §6.1).
                        continue
                    # Kept where and as the upstream wrote it, also on a HEAD, 304 or 204 answer,
                    # whose framing is the status (nothing is read or sent after such a head).
                    lines += (name, b": ", value, b"\r\n")
                    continue
                if kind == _HOP:
                    continue
                if not value.isdigit() and not value.rstrip(b" \t").isdigit():  # _LENGTH
                    # Trailing whitespace (OWS, which llhttp leaves in the value) is allowed.
                    self._invalid(call)
                    return
                cl = value
            lines += (name, b": ", value, b"\r\n")
            if wanted is not None and lower in wanted:
                key = lower.decode("latin-1")
                if key not in captured:
                    captured[key] = value.decode("latin-1")
        status = self.status
        if call.is_head or status in (204, 304):
            state = 4
            if not self.keep_alive and call.is_head:
                # llhttp, which does not know the request was HEAD, reads an answer without
                # Content-Length or Transfer-Encoding as a body delimited by the close, and says
                # not to keep the connection; a HEAD answer has no body (RFC 9112 §6.3), so its
                # version and Connection header decide, as for any other answer.
                self.keep_alive = _keeps_alive(self.parser.get_http_version(), self.headers)
            if rest:
                self.reusable = False  # bytes after a response without a body: not to be trusted
        elif te is not None:
            state = 2
            if call.http10:
                self.dechunk = True
                call.keep_alive = False  # an HTTP/1.0 client reads the body until the close
        elif cl is not None:
            state = 1
            self.remaining = int(cl)
        else:
            state = 3
            self.keep_alive = False
            call.keep_alive = False
        if call.client.server.closing:
            call.keep_alive = False
        if not call.keep_alive:
            if not call.http10:
                lines.append(b"Connection: close\r\n")
        elif call.http10:
            lines.append(b"Connection: keep-alive\r\n")
        lines.append(b"\r\n")
        if ex is not None:
            ex.status = status
            ex.response_headers = captured
        self.state = state
        head = b"".join(lines)
        call.sent_head = True
        client = call.client
        if state == 1:
            # A body of known length goes out with the head in one write (one syscall, one packet).
            self._length_body(call, rest, head)
        elif state == 2:
            self._chunked_body(call, rest, head)
        elif state == 3:
            client.write(head + rest)
            if rest:
                self._capture(call, rest)
        else:
            client.write(head)
            self._finished(call)

    # --- the response body ----------------------------------------------------------------------------

    def _length_body(self, call: _Call, data: bytes, head: bytes = b"") -> None:
        remaining = self.remaining
        size = len(data)
        if size >= remaining:
            if size > remaining:
                data = data[:remaining]  # bytes past the end of the response: not this client's
                self.reusable = False
            self.remaining = 0
            if data and call.ex is not None:
                self._capture(call, data)
            transport = call.client.transport
            if transport is not None:
                transport.write(head + data if head else data)
            self._finished(call)
            return
        self.remaining = remaining - size
        if data and call.ex is not None:
            self._capture(call, data)
        call.client.write(head + data if head else data)

    def _chunked_body(self, call: _Call, data: bytes, head: bytes = b"") -> None:  # noqa: C901
        """Bytes of a chunked body: framing read here, a step per chunk (never per byte), so that
        not one byte past the terminal chunk and its trailers is written on. The chunks' content
        is captured, and written on alone (de-chunked) to an HTTP/1.0 client; an HTTP/1.1 client
        gets the upstream's bytes, framing included. The hot path (a stream's events, a chunk or a
        few per read) is a find, an int and two slices per chunk; a read of exactly one whole chunk
        (a stream's usual read) is checked and passed on before the loop."""
        if not self.cstate and not self.dechunk and not self.line_buf:
            # A stream's usual read: exactly one whole chunk, its size line bare hex (checked as the
            # loop below checks it). Anything else (several chunks, a part, extensions, the
            # terminal chunk, a bad size) falls through to the loop, which reads it from the start.
            newline = data.find(b"\r\n", 0, 18)  # at most 16 digits: a bounded look
            digits = data[:newline] if newline > 0 else b""
            if digits.isalnum() and digits[1:2] not in (b"x", b"X"):
                try:
                    stop = newline + 2 + int(digits, 16)
                except ValueError:
                    stop = 0
                if stop > newline + 2 and len(data) == stop + 2 and data[stop] == 13 and data[stop + 1] == 10:
                    if call.ex is not None:
                        # One call per read here (the loop below inlines it: a call per chunk).
                        self._capture(call, data[newline + 2 : stop])
                    transport = call.client.transport
                    if transport is not None:
                        transport.write(head + data if head else data)
                    return
        pos = 0
        size = len(data)
        dechunk = self.dechunk
        client = call.client
        ex = call.ex
        find = data.find
        end = -1
        if dechunk and head:
            client.write(head)
            head = b""
        cstate = self.cstate
        while pos < size:
            if cstate == 1:
                left = self.chunk_left
                stop = pos + left
                if stop <= size - 2 and data[stop : stop + 2] == b"\r\n":
                    # The whole rest of the chunk and its CRLF are here (the usual case).
                    piece = data[pos:stop]
                    pos = stop + 2
                    cstate = 0
                else:
                    piece = data[pos:stop]
                    taken = len(piece)
                    pos += taken
                    self.chunk_left = left - taken
                    if taken == left:
                        cstate = 2
                if ex is not None:
                    # `_capture`, inline: a stream's every chunk passes here (one call fewer per chunk).
                    captured = ex.captured_bytes
                    if captured <= ex.max_body_bytes:
                        captured += len(piece)
                        ex.response_chunks.append(piece)
                        ex.chunk_ends.append(captured)
                        ex.chunk_times.append(perf_counter())
                        ex.captured_bytes = captured
                        if captured > ex.max_body_bytes:
                            ex.response_truncated = True
                    else:
                        ex.response_tail = _tail(ex.response_tail, piece)
                if dechunk:
                    client.write(piece)
                continue
            newline = find(b"\n", pos)
            if newline < 0:
                line_buf = self.line_buf + data[pos:]
                if len(line_buf) > _MAX_CHUNK_LINE:
                    self._bad_chunk(call, head)
                    return
                self.line_buf = line_buf
                break
            line = data[pos:newline]
            if self.line_buf:
                line = self.line_buf + line
                self.line_buf = b""
            pos = newline + 1
            if cstate == 0:
                digits = line[:-1]
                if line[-1:] == b"\r" and digits.isalnum() and digits[1:2] not in (b"x", b"X"):
                    try:
                        chunk = int(digits, 16)  # hex digits only: isalnum, no 0x prefix (any length: stricter is fine)
                    except ValueError:
                        self._bad_chunk(call, head)
                        return
                else:
                    match = _CHUNK_SIZE.fullmatch(line)  # extensions, trailing whitespace
                    if match is None:
                        self._bad_chunk(call, head)
                        return
                    chunk = int(match.group(1), 16)
                if chunk:
                    self.chunk_left = chunk
                    cstate = 1
                else:
                    cstate = 3
            elif cstate == 2:
                if line != b"\r":
                    self._bad_chunk(call, head)  # chunk data longer than its size said
                    return
                cstate = 0
            elif line in (b"", b"\r"):
                end = pos  # the empty line after the terminal chunk (and any trailers)
                break
            elif len(line) > _MAX_CHUNK_LINE or _TRAILER.fullmatch(line) is None:
                self._bad_chunk(call, head)
                return
        self.cstate = cstate
        if end >= 0 and end < size:
            self.reusable = False  # bytes past the end of the response: never the client's
        if not dechunk:
            out = data if end < 0 or end == size else data[:end]
            if head:
                client.write(head + out)
            elif out:
                client.write(out)
        if end >= 0:
            self._finished(call)

    def _bad_chunk(self, call: _Call, head: bytes) -> None:
        if head:
            # The head has not gone out yet (the fault came in its read): a clean 502 instead.
            call.sent_head = False
            self._invalid(call)
        else:
            self._broken(call)

    def _capture(self, call: _Call, data: bytes) -> None:
        # Also written out inline in `_chunked_body`'s framing loop: keep the two alike.
        ex = call.ex
        if ex is None:
            return
        size = ex.captured_bytes
        if size <= ex.max_body_bytes:
            size += len(data)
            ex.response_chunks.append(data)
            ex.chunk_ends.append(size)
            ex.chunk_times.append(perf_counter())
            ex.captured_bytes = size
            if size > ex.max_body_bytes:
                ex.response_truncated = True
        else:
            ex.response_tail = _tail(ex.response_tail, data)

    def _finished(self, call: _Call) -> None:
        self.state = 4
        # The read timer stays armed: it finds no call and stops, or the next call's reads moved
        # its due time (`_check_read`); cancelling and re-arming it per call cost more.
        self.call = None
        call.up = None
        if self.transport is not None:
            if self.paused:
                self.paused = False
                self.transport.resume_reading()
            self.pool.release(self, self.keep_alive and self.reusable and call.body_done)
        client = call.client
        if client.paused:
            # An upstream that answered before it had read the whole body may have paused the client.
            client.resume("upstream")
        client.response_done(call)

    # --- failures --------------------------------------------------------------------------------------

    def _invalid(self, call: _Call) -> None:
        self._drop(call)
        call.client.upstream_failed(call, INVALID, timeout=False)

    def _broken(self, call: _Call) -> None:
        # The head went out already: break the client's response too, as a direct connection would.
        self._drop(call)
        self._cut(call)

    def _cut(self, call: _Call) -> None:
        # Where the client's body ends with the close (the upstream's did, or it is read
        # de-chunked by an HTTP/1.0 client), a plain close would read as the end of a whole body:
        # the client's connection is reset instead, as a direct one would be.
        call.client.interrupted(call, reset=self.state == 3 or self.dechunk)

    def _drop(self, call: _Call) -> None:
        self.call = None
        call.up = None
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()

    def abort(self) -> None:
        """The call's client went away: close this connection, so the upstream stops working for nobody."""
        self.call = None
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()

    # --- sending and timing ----------------------------------------------------------------------------

    def attach(self, call: _Call) -> None:
        self._reset()
        self.call = call
        call.up = self
        self.parser = httptools.HttpResponseParser(self)
        loop = self.pool.loop
        self.last_read = loop.time()
        if self.timer is None:
            self.timer = loop.call_at(self.last_read + self.pool.read_timeout, self._check_read)
        client = call.client
        if client.feeding:
            # Attached while the client's bytes are being parsed: the head, and the body bytes
            # that follow in the same read, leave in one write when the parse returns.
            call.pending.insert(0, call.head)
            client.flush = call
        else:
            if call.pending:
                data = call.head + b"".join(call.pending)
                call.pending = []
                if call.pending_size > _PENDING_LIMIT:
                    client.resume("pending")
                call.pending_size = 0
            else:
                data = call.head
            self.transport.write(data)  # type: ignore[union-attr]
        if client.writing_paused:
            self.pause_client_reads()  # the client is not reading yet what the last call sent

    def send(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None:
            transport.write(data)
            # The upstream is waiting for this body, not silent: its read deadline starts anew.
            self.last_read = self.pool.loop.time()

    def _check_read(self) -> None:
        # One timer per connection, moved lazily: a stamp per read is cheaper than a timer per
        # read, and a timer left armed across calls cheaper than one armed and cancelled per call.
        # It may have been armed for an earlier call: `last_read` is this call's, set by `attach`.
        self.timer = None
        call = self.call
        if call is None:
            return  # idle: the next `attach` arms it again
        loop = self.pool.loop
        due = self.last_read + self.pool.read_timeout
        if loop.time() < due:
            self.timer = loop.call_at(due, self._check_read)
            return
        self._drop(call)
        if call.sent_head:
            self._cut(call)
        else:
            call.client.upstream_failed(call, "", timeout=True)

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def pause_client_reads(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume_client_reads(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def peer_closed(self) -> bool:
        """Whether the upstream has closed (or reset) this idle connection, though the loop has not
        read its FIN yet: it came in the same turn as the call about to be sent on it."""
        sock = self.sock
        if sock is None:
            return False
        if _TCP_INFO is None:
            return _peek_closed(sock)
        try:
            return bool(sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 1)[0] != _TCP_ESTABLISHED)
        except OSError:
            return True


def choose_engine(setting: str, *, https: bool, host: str) -> tuple[str, str]:
    """(the engine that serves, why): `proxy.engine` as set, or for `auto` the C data plane where it
    can serve this configuration as the relay would (design record 0067)."""
    if setting != "auto":
        return setting, "set in proxy.engine"
    from llmwatch.collectors.receivers.proxy import native

    extension, why = native.load()
    if extension is None:
        return "python", why
    if https:
        return "python", "the upstream is https: TLS is the relay's"
    if not _address_literal(host):
        # C resolves the upstream once, at start-up, and connects to the first address (its thread
        # never blocks on DNS); the relay resolves on every new connection and tries each address,
        # so a name whose addresses move or differ keeps working.
        return "python", (
            f"the upstream is a name ({host}), not an IP address: set the address, or proxy.engine "
            "native to resolve it once at start-up"
        )
    return "native", "the C extension is built and the upstream is plain HTTP at an IP address"


def _address_literal(host: str) -> bool:
    """Whether `host` is an IPv4 or IPv6 address. Not even `localhost`: it names 127.0.0.1 and ::1,
    and the relay tries each in turn where C connects to the first only."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host.strip("[]"))
        except OSError:
            continue
        return True
    return False


def _peek_closed(sock: Any) -> bool:
    """`peer_closed` without TCP_INFO (macOS, the BSDs): a non-blocking peek of one byte. b'' is
    the server's FIN, an error its reset; nothing to read (EAGAIN) is an open connection. A byte
    is also a no: an idle connection that has bytes nobody asked for is not to be trusted (read,
    they would close it, `data_received`; under TLS, a close_notify). The peek goes through a
    socket object made on the connection's descriptor and detached after, never closing it:
    `sock` is the loop's stand-in (asyncio's TransportSocket, uvloop's), which has no recv."""
    try:
        peeker = socket.socket(fileno=sock.fileno())
    except OSError:
        return True
    try:
        peeker.recv(1, _PEEK)  # b'' (closed) or a byte: either way not to be used
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        peeker.detach()


def _keeps_alive(version: str, headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether an answer's version and Connection tokens keep its connection open (RFC 9112 §9.3),
    whatever its framing: HTTP/1.1 unless `close`, HTTP/1.0 only with `keep-alive`."""
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(token.strip().lower() for token in value.split(b","))
    if b"close" in tokens:
        return False
    return version == "1.1" or b"keep-alive" in tokens


def _tail(kept: bytes, data: bytes) -> bytes:
    """The last 64 bytes of a body past its capture cap (`stream_ended` reads them): a long
    stream's `[DONE]`. Only past the cap: below it the captured chunks hold the end."""
    return data[-64:] if len(data) >= 64 else (kept + data)[-64:]


class _Pool:
    """Keep-alive connections to the one upstream, at most `proxy.max_connections` of them."""

    def __init__(self, proxy: Any, loop: asyncio.AbstractEventLoop) -> None:
        p = proxy.cfg.proxy
        url = proxy.upstream
        self.loop = loop
        self.host = url.raw_host or ""
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if url.scheme == "https" else None
        self.limit = p.max_connections
        self.connect_timeout = p.connect_timeout_s
        self.read_timeout = p.read_timeout_s
        self.max_line = p.max_header_bytes
        self.max_headers = p.max_headers
        self.max_head = head_limit(p.max_header_bytes, p.max_headers)
        self.wanted = frozenset(h.encode("latin-1") for h in proxy.wanted_headers)
        # Response header names as upstreams spell them -> (lower case, what `_respond` does with it).
        self.header_kinds: dict[bytes, tuple[bytes, int]] = {}
        self.idle: list[_Upstream] = []
        self.count = 0  # this pool's own connections, open or being opened
        # With C forwarding beside the relay (`share`), proxy.max_connections bounds both engines'
        # connections together: the slots are `dataplane.Front`'s (design record 0067).
        self.shared: Any = None
        self.told = False  # the front was told that calls wait here (a failed take_slot tells it)
        self.waiters: collections.deque[_Call] = collections.deque()
        self.connecting: set[asyncio.Task] = set()
        self.closed = False

    def share(self, front: Any) -> None:
        """Take and give slots through the C front's one count of upstream connections, so that the
        two engines together open at most `limit` (a check-and-increment under its mutex)."""
        for _ in range(self.count):  # the connections this pool holds already (none when it serves)
            front.take_slot()
        self.shared = front

    def slots_taken(self) -> int:
        """Upstream connections open or being opened, both engines' where C forwards."""
        return int(self.shared.stats()["upstreams_open"]) if self.shared is not None else self.count

    def _take(self) -> bool:
        if self.shared is not None:
            if not self.shared.take_slot():
                self.told = True  # C now opens none, hands its idle connections here, wakes us on a free slot
                return False
        elif self.count >= self.limit:
            return False
        self.count += 1
        return True

    def _give(self) -> None:
        self.count -= 1
        if self.shared is not None:
            self.shared.give_slot()

    def _settled(self) -> None:
        # No call waits here any more: C may open connections again.
        if self.told and not self.waiters:
            self.told = False
            self.shared.relay_served()

    def adopt(self, sock: socket.socket) -> None:
        """An idle keep-alive connection C hands over with its slot while calls wait here."""
        self.count += 1  # the slot came with it (the shared count is unchanged)
        task = self.loop.create_task(self._adopt(sock))
        self.connecting.add(task)
        task.add_done_callback(self.connecting.discard)

    async def _adopt(self, sock: socket.socket) -> None:
        try:
            _, up = await self.loop.create_connection(lambda: _Upstream(self), sock=sock)
        except asyncio.CancelledError:  # the pool closes
            sock.close()
            self._give()
            raise
        except OSError:
            sock.close()
            self._give()
            self._next_waiter()
            return
        up.sock = sock
        self.release(up, True)
        self._settled()

    def slot_freed(self) -> None:
        """C gave a slot back while calls wait here (its eventfd): the next one may take it."""
        if self.waiters:
            self._next_waiter()

    def acquire(self, call: _Call) -> None:
        idle = self.idle
        if idle:
            now = self.loop.time()
            while idle:
                up = idle.pop()
                if up.transport is None or up.transport.is_closing():
                    continue
                idle_for = now - up.idle_since
                if idle_for >= _PEER_CHECK_IDLE_S and (idle_for > _UPSTREAM_IDLE_S or up.peer_closed()):
                    # Not sent on a connection its server has closed, or may close as it is used:
                    # nothing of the call has gone anywhere yet, so any method can go on a new one.
                    up.transport.close()
                    continue
                up.attach(call)
                return
        self._new(call)

    def retry(self, up: _Upstream, call: _Call) -> None:
        """A call whose reused connection `up` ended before any answer: sent again on a new
        connection, which takes `up`'s slot in the pool. Queued as a new call, it lost the slot to
        a call that came after it, and waited behind that call's whole answer (504 after
        `proxy.connect_timeout_s` where that took longer)."""
        log.info("upstream_connection_closed_call_resent", path=call.path)
        if self.closed:
            self.lost(up)
            call.client.upstream_failed(call, CLOSED, timeout=False)
            return
        self._connect(call, counted=True)

    def _new(self, call: _Call) -> None:
        if self._take():
            self._connect(call, counted=True)
        else:
            # Waiting for a free connection counts against the connect timeout, as in aiohttp.
            self.waiters.append(call)
            call.wait_timer = self.loop.call_later(self.connect_timeout, self._wait_expired, call)

    def _connect(self, call: _Call, counted: bool = False) -> None:
        if not counted:  # `counted`: the slot is one this call holds already (`retry`)
            self.count += 1
        task = self.loop.create_task(self._open(call))
        call.connecting = task
        self.connecting.add(task)
        task.add_done_callback(self.connecting.discard)

    async def _open(self, call: _Call) -> None:
        try:
            _, up = await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: _Upstream(self),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                ),
                self.connect_timeout,
            )
        except asyncio.CancelledError:
            # Its client left (`forget`) or the pool closes: the slot goes to the next waiter, as
            # on any other end of a connect (else a waiter sat out its connect timeout: 504).
            self._give()
            self._next_waiter()
            raise
        except asyncio.TimeoutError:
            self._give()
            call.connecting = None
            call.client.upstream_failed(call, "", timeout=True)
            self._next_waiter()
            return
        except OSError:
            self._give()
            call.connecting = None
            call.client.upstream_failed(call, UNREACHABLE, timeout=False)
            self._next_waiter()
            return
        call.connecting = None
        sock = up.sock = up.transport.get_extra_info("socket")  # type: ignore[union-attr]
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if call.finished or self.closed:
            self.release(up, not self.closed)
            return
        up.attach(call)

    def release(self, up: _Upstream, reusable: bool) -> None:
        if not reusable or self.closed:
            if up.transport is not None:
                up.transport.close()
            return
        up.reused = True
        while self.waiters:
            call = self.waiters.popleft()
            if call.wait_timer is not None:
                call.wait_timer.cancel()
                call.wait_timer = None
            if not call.finished:
                up.attach(call)
                self._settled()
                return
        self._settled()
        up.idle_since = self.loop.time()
        self.idle.append(up)

    def lost(self, up: _Upstream) -> None:
        self._give()
        try:
            self.idle.remove(up)
        except ValueError:
            pass
        self._next_waiter()

    def _next_waiter(self) -> None:
        while self.waiters and not self.closed:
            call = self.waiters[0]
            if not call.finished and not self._take():
                break  # a shared pool wakes us (`slot_freed`) when C gives a slot back
            self.waiters.popleft()
            if call.wait_timer is not None:
                call.wait_timer.cancel()
                call.wait_timer = None
            if not call.finished:
                self._connect(call, counted=True)
        self._settled()

    def _wait_expired(self, call: _Call) -> None:
        call.wait_timer = None
        try:
            self.waiters.remove(call)
        except ValueError:
            return
        self._settled()
        call.client.upstream_failed(call, "", timeout=True)

    def forget(self, call: _Call) -> None:
        """A call whose client left before it had an upstream connection."""
        if call.wait_timer is not None:
            call.wait_timer.cancel()
            call.wait_timer = None
            try:
                self.waiters.remove(call)
            except ValueError:
                pass
            self._settled()
        if call.connecting is not None:
            call.connecting.cancel()
            call.connecting = None

    def close(self) -> None:
        self.closed = True
        for task in list(self.connecting):
            task.cancel()
        for call in self.waiters:
            if call.wait_timer is not None:
                call.wait_timer.cancel()
        self.waiters.clear()
        for up in self.idle:
            if up.transport is not None:
                up.transport.close()
        self.idle.clear()


class _Client(asyncio.Protocol):
    """One client connection: parses request heads, forwards, answers calls one at a time."""

    def __init__(self, server: "RelayServer") -> None:
        self.server = server
        self.proxy = server.proxy
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.max_value = server.max_line - 2
        self.max_headers = server.max_headers
        self.current: _Call | None = None  # the call being answered
        self.latest: _Call | None = None  # the call whose head was parsed last
        self.parsing: _Call | None = None  # the call whose request is being read
        self.queued: collections.deque[_Call] = collections.deque()
        self.in_head = False
        self.head_bytes = 0
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.deadline: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None  # the current call's body deadline
        self.paused: set[str] = set()
        self.writing_paused = False
        self.idle_since = 0.0
        self.closing = False
        self.feeding = False  # inside parser.feed_data: upstream writes wait for its end
        self.flush: _Call | None = None
        self.lingering = False  # answered with its request's body unread: reading only to drop it

    # --- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.clients.add(self)
        self.idle_since = self.server.loop.time()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._disarm()
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None
        server = self.server
        server.clients.discard(self)
        if not server.clients and server.drained is not None:
            server.drained.set()
        call = self.current
        self.current = None
        self.queued.clear()
        if call is not None and not call.finished:
            self._client_gone(call)

    def pause_writing(self) -> None:
        # The client reads more slowly than the upstream answers: stop reading the upstream.
        self.writing_paused = True
        call = self.current
        if call is not None and call.up is not None:
            call.up.pause_client_reads()

    def resume_writing(self) -> None:
        self.writing_paused = False
        call = self.current
        if call is not None and call.up is not None:
            call.up.resume_client_reads()

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # the rest of a body whose call is answered (see `_linger`)
        if self.in_head:
            self.head_bytes += len(data)
        self.feeding = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # llhttp completed the request, then stopped at the switch: that request is the one refused.
            self.parsing = self.latest
            self._reject(400, "llmwatch proxy: protocol upgrades (Upgrade / CONNECT) are not relayed")
            return
        except (httptools.HttpParserError, _LimitExceeded) as exc:
            cause = exc.__context__
            if isinstance(exc, httptools.HttpParserCallbackError) and not isinstance(cause, _LimitExceeded):
                # A fault of the relay's own, not of the request: say so, and still answer.
                self.proxy.metrics.internal_errors.labels(stage="relay").inc()
                log.error("relay_internal_error", error=type(cause).__name__)
            if self.parsing is None and _TE_LINE.search(data):
                # llhttp refuses some codings (`chunked, chunked`) inside the header's value.
                self._reject(501, _TE_501)
                return
            self._reject(
                400,
                "llmwatch proxy: the request is not valid HTTP/1.1 or its head exceeds proxy.max_header_bytes / proxy.max_headers",
            )
            return
        finally:
            self.feeding = False
        call = self.flush
        if call is not None:
            self.flush = None
            self._flush(call)
        call = self.current
        if call is not None and not call.body_done and self.body_timer is None and not call.finished:
            self._arm_body()  # a body that did not come whole with its head
        if self.in_head:
            if self.head_bytes > self.server.max_head:
                self._reject(400, "llmwatch proxy: the request head exceeds proxy.max_header_bytes / proxy.max_headers")
                return
            if self.deadline is None:
                self._arm()  # idle, and bytes of a new request head came in

    def _flush(self, call: _Call) -> None:
        up = call.up
        if up is None or call.finished:
            return
        data = b"".join(call.pending)
        call.pending = []
        if call.pending_size > _PENDING_LIMIT:
            self.resume("pending")
        call.pending_size = 0
        transport = up.transport
        if transport is not None:  # `up.send`, inline: once per call
            transport.write(data)
            up.last_read = self.server.loop.time()

    # --- request parsing ------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.in_head = True
        self.head_bytes = 0
        self.url = b""
        self.headers = []

    def on_url(self, piece: bytes) -> None:
        url = self.url + piece
        if len(url) > self.server.max_line:
            raise _LimitExceeded
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self.headers
        # len(name) + len(value) + 2 > max_line, with the sum's constant taken out (once per server).
        if len(name) + len(value) > self.max_value or len(headers) >= self.max_headers:
            raise _LimitExceeded
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.in_head = False
        if self.deadline is not None:
            self._disarm()
        call = self.server.new_call(self, self.parser, self.url, self.headers)
        self.parsing = self.latest = call
        if self.current is None:
            self.current = call
            self._start(call)
        else:
            # Pipelined: answered after the call before it; read no more until then.
            self.queued.append(call)
            self.pause("pipeline")

    def on_body(self, data: bytes) -> None:
        call = self.parsing
        if call is not None:
            call.body(data)

    def on_message_complete(self) -> None:
        call = self.parsing
        self.parsing = None
        if call is not None:
            call.body_end()

    # --- answering -------------------------------------------------------------------------------------

    def _start(self, call: _Call) -> None:
        call.started = True
        if call.expect and not call.http10 and not call.body_done:
            # Now, when this call is the one being answered (never inside the response before
            # it), and never to an HTTP/1.0 client, which reads no 1xx (RFC 9110 §10.1.1, §15.2).
            self.write(_CONTINUE)
        if call.local is not None:
            if call.body_done:
                self.answer_local(call)
            elif not self.feeding:
                self._arm_body()
            return
        if call.body_done:
            self.server.pool.acquire(call)
            return
        # Like nginx, the body is read before an upstream connection is taken (up to the pending
        # buffer; a bigger body streams on from there): a client that stalls its body holds no
        # upstream connection, and its deadline (proxy.body_timeout_s) is never re-armed by a byte.
        call.held = True
        if not self.feeding:
            self._arm_body()  # otherwise armed when this read's parse returns, if still incomplete

    def body_complete(self, call: _Call) -> None:
        if call is self.current and self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def _arm_body(self) -> None:
        self.body_timer = self.server.loop.call_later(self.server.body_timeout_s, self._body_expired)

    def _body_expired(self) -> None:
        self.body_timer = None
        call = self.current
        if call is None or call.body_done or call.finished or self.transport is None:
            return
        self.proxy.fail(call.ex, "client_body_timeout")
        log.info("request_body_timeout", path=call.path)
        call.held = False
        call.keep_alive = False
        if call.up is not None:
            call.up.abort()
            call.up = None
        else:
            self.server.pool.forget(call)
        if call.sent_head:
            # The upstream answered early and the rest of the body never came: end both.
            call.finished = True
            ex = call.ex
            if ex is not None:
                ex.t_end = perf_counter()
                self.proxy.finish(ex)
            self.current = None
            self.transport.abort()
            return
        if call.ex is not None:
            call.ex.status = 408
        self._send_error(
            call,
            408,
            self.proxy.relay_error_body(BODY_TIMEOUT),
        )
        self.response_done(call)  # and the connection closes: the body's bytes are unframed

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None:
            transport.write(data)

    def response_done(self, call: _Call) -> None:
        call.finished = True
        ex = call.ex
        if ex is not None:
            ex.t_end = perf_counter()
            self.proxy.finish(ex)
        self._next(call)

    def _next(self, call: _Call) -> None:
        self.current = None
        transport = self.transport
        if transport is None:
            return
        if not call.body_done and not self.server.closing:
            # A request whose body was not read to its end leaves the connection's bytes unframed.
            self._linger(transport)
            return
        if not call.keep_alive or self.server.closing:
            transport.close()
            return
        if self.queued:
            following = self.queued.popleft()
            self.current = following
            if not self.queued:
                self.resume("pipeline")
            self._start(following)
            return
        self.idle_since = self.server.loop.time()

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close a connection whose client may still be sending the answered call's body.

        Closed at once with its bytes unread, the connection is reset, and a client still sending
        reads ECONNRESET instead of the answer (an upstream's early 413, a 502, a 408; RFC 9112
        §9.6). As nginx's lingering close: half-close after the answer, read and drop whatever
        comes, close when the client does or after _LINGER_S.
        """
        self.lingering = True
        self.queued.clear()
        if self.paused:
            self.paused.clear()
            transport.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()
        self.server.loop.call_later(_LINGER_S, transport.close)

    def answer_local(self, call: _Call) -> None:
        status, body = call.local  # type: ignore[misc]
        self._send_error(call, status, body)
        call.finished = True
        self._next(call)

    def _send_error(self, call: _Call, status: int, body: bytes) -> None:
        call.sent_head = True
        close = not call.keep_alive or call.http10
        self.write(error_answer(status, body, close=close))
        if close:
            call.keep_alive = False

    def upstream_failed(self, call: _Call, what: str, *, timeout: bool) -> None:
        """No response head came: answer 502/504 in fixed words."""
        if call.finished:
            return
        status, body = self.proxy.relay_gateway_error(call.ex, timeout=timeout, what=what, path=call.path)
        if not call.body_done:
            call.keep_alive = False  # the rest of the request body has nowhere to go
        self._send_error(call, status, body)
        self.response_done(call)

    def interrupted(self, call: _Call, *, reset: bool = False) -> None:
        """The upstream broke off a response whose head the client has: break the client's too
        (`reset`: with a reset, where a close would be the end of the client's body)."""
        if call.finished:
            return
        call.finished = True
        self.proxy.fail(call.ex, "stream_interrupted")
        ex = call.ex
        if ex is not None:
            ex.t_end = perf_counter()
            self.proxy.finish(ex)
        self.current = None
        transport = self.transport
        if transport is not None:
            if reset:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            transport.abort()

    def _client_gone(self, call: _Call) -> None:
        call.finished = True
        if call.up is not None:
            call.up.abort()
            call.up = None
        else:
            self.server.pool.forget(call)
        if call.local is None and not (call.ex is not None and stream_ended(call.ex)):
            # A client that hangs up after the stream's `[DONE]` has its whole answer: not an error.
            self.proxy.fail(call.ex, "client_disconnected")
        ex = call.ex
        if ex is not None:
            ex.t_end = perf_counter()
            self.proxy.finish(ex)

    def _reject(self, status: int, message: str) -> None:
        """A malformed request: one line in the log (never the client's bytes), 400, and close."""
        log.info("malformed_request_rejected", status=status)
        transport = self.transport
        if transport is None:
            return
        broken = self.parsing  # the request whose bytes broke; None: a head that never completed
        self.parsing = None
        call = self.current
        if broken is not None and broken is call and not call.sent_head and not call.finished:
            # Its body broke (a bad chunk, an unknown transfer-coding) before any answer went out:
            # the upstream (if it was reached) is dropped, and the client gets a real 400 (or the
            # 501 its transfer-coding already earned: llhttp refuses some codings as it reads them).
            if call.local is not None and call.local[0] == 501:
                self._send_error(call, 501, call.local[1])
                self.response_done(call)
                return
            self._refuse(call, status, message)
            return
        self.proxy.fail(None, "bad_request")
        if call is None:
            body = self.proxy.relay_error_body(message)
            transport.write(
                b"HTTP/1.1 %d %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%b"
                % (status, _REASONS[status], len(body), body)
            )
            transport.close()
            return
        # Bytes after a complete request broke (junk, or a pipelined head): that request is still
        # answered, with `Connection: close`; nothing more is read from this connection.
        call.keep_alive = False
        self.queued.clear()
        self.pause("broken")
        pending = self.flush
        if pending is not None:
            self.flush = None
            self._flush(pending)

    def _refuse(self, call: _Call, status: int, message: str) -> None:
        call.held = False
        call.keep_alive = False
        if call.up is not None:
            call.up.abort()
            call.up = None
        else:
            self.server.pool.forget(call)
        self.proxy.fail(call.ex, "bad_request")
        if call.ex is not None:
            call.ex.status = status
        self._send_error(call, status, self.proxy.relay_error_body(message))
        self.response_done(call)

    # --- flow control and deadlines ---------------------------------------------------------------------

    def pause(self, reason: str) -> None:
        if not self.paused and self.transport is not None:
            self.transport.pause_reading()
        self.paused.add(reason)

    def resume(self, reason: str) -> None:
        paused = self.paused
        if reason in paused:
            paused.discard(reason)
            if not paused and self.transport is not None:
                self.transport.resume_reading()

    def _arm(self) -> None:
        self.deadline = self.server.loop.call_later(self.server.header_timeout_s, self._head_expired)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _head_expired(self) -> None:
        # Disarmed when a head completes: firing means no complete head since it was armed.
        self.deadline = None
        if self.transport is not None:
            self.server.on_header_timeout()
            self.transport.close()


class _AdoptedClient(_Client):
    """A client connection accepted, and begun, elsewhere (see `RelayServer.adopt`)."""

    def __init__(self, server: "RelayServer", prefix: bytes, head_left_s: float | None) -> None:
        super().__init__(server)
        self.prefix = prefix
        self.head_left_s = head_left_s

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.head_left_s is not None:
            # The head deadline runs from the accept, wherever that was: what is left of it.
            self._disarm()
            self.deadline = self.server.loop.call_later(self.head_left_s, self._head_expired)
        # Fed here, before the transport starts reading (asyncio and uvloop both call
        # connection_made first): the bytes already read come before any the socket still holds.
        prefix, self.prefix = self.prefix, b""
        if prefix:
            self.data_received(prefix)


class RelayServer:
    """The listening side: accepts clients, owns the upstream pool, stops in bounded time.

    `proxy` is the `Proxy` of collectors/llmwatch/collectors/receivers/proxy/handler.py (typed Any: that module imports this one).
    """

    def __init__(self, proxy: Any) -> None:
        p = proxy.cfg.proxy
        self.proxy = proxy
        self.loop = asyncio.get_running_loop()
        self.pool = _Pool(proxy, self.loop)
        self.max_line = p.max_header_bytes
        self.max_headers = p.max_headers
        self.max_head = head_limit(p.max_header_bytes, p.max_headers)
        self.header_timeout_s = p.header_timeout_s
        self.body_timeout_s = p.body_timeout_s
        self.shutdown_timeout_s = p.shutdown_timeout_s
        self.on_header_timeout: Callable[[], None] = proxy.metrics.proxy_errors.labels(
            error_type="client_header_timeout"
        ).inc
        self.clients: set[_Client] = set()
        self.server: asyncio.AbstractServer | None = None
        self.setting = p.engine  # auto, python or native; `engine` is the one that serves (`start`)
        self.engine = "python" if p.engine == "auto" else p.engine
        self.front: Any = None  # native.NativeFront, when the native engine serves
        self.forwarding = False  # whether C forwards plain calls (native, plain-HTTP upstream)
        self.listen_sock: socket.socket | None = None
        self.closing = False
        self.drained: asyncio.Event | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        url = proxy.upstream
        self.prefix = url.raw_path.rstrip("/").encode("latin-1")
        self.host_header = b"Host: " + url.host_port_subcomponent.encode("latin-1") + b"\r\n"
        self.auth = (
            (b"Authorization: " + proxy.upstream_authorization.encode("latin-1") + b"\r\n")
            if proxy.upstream_authorization
            else None
        )
        self.preserve_host = p.preserve_host
        self.routes = proxy.capture_routes
        self.read_headers = frozenset(h.encode("latin-1") for h in proxy.exchange_headers)
        # Request header names as clients spell them -> (lower case, what new_call does with it).
        self.header_kinds: dict[bytes, tuple[bytes, int]] = {}

    async def start(self, sock: socket.socket) -> int:
        sock.setblocking(False)
        engine, why = choose_engine(self.setting, https=self.pool.ssl is not None, host=self.pool.host)
        forward = False
        if engine == "native":
            # The C front door accepts and reads first heads on its own thread, forwards plain
            # calls itself, hands the rest to this server (`adopt`), and its ring hands the calls it
            # ended to the proxy's finish path (design record 0067); the socket is held here,
            # closed in `cleanup`.
            from llmwatch.collectors.receivers.proxy.native import NativeFront

            # DATAPLANE_FORWARD=0 (not LLMWATCH_: that prefix is the configuration's) keeps C to the
            # front door, handing every connection over: the benchmark's and the fuzzer's way to
            # measure and compare that part alone.
            forward = os.environ.get("DATAPLANE_FORWARD", "1") != "0"
            sock.listen(2048)  # as create_server does with the bound socket it is given
            self.listen_sock = sock
            try:
                self.front = NativeFront(self, sock, forward=forward)
            except ValueError as exc:  # an upstream C cannot reach itself: https, a name that does not resolve
                log.info("native_forward_off", reason=str(exc))
                forward = False
                self.front = NativeFront(self, sock, forward=False)
            self.front.start()
        else:
            self.server = await self.loop.create_server(lambda: _Client(self), sock=sock, backlog=2048)
        self.engine = engine
        self.forwarding = forward
        self.proxy.metrics.engine_info.labels(self.engine, "true" if self.forwarding else "false").set(1)
        log.info("relay_engine", engine=self.engine, forwarding=self.forwarding, setting=self.setting, why=why)
        self._sweeper = self.loop.call_later(_CLIENT_KEEPALIVE_S / 5, self._sweep)
        return sock.getsockname()[1]

    def dataplane_constants(self) -> dict[str, float | int]:
        """This module's constants that the C data plane applies too (`dataplane.Front`'s keywords),
        read when it starts: a test that changes one here changes both engines."""
        return {
            "client_keepalive_s": _CLIENT_KEEPALIVE_S,
            "linger_s": _LINGER_S,
            "upstream_idle_s": _UPSTREAM_IDLE_S,
            "peer_check_idle_s": _PEER_CHECK_IDLE_S,
            "pending_limit": _PENDING_LIMIT,
        }

    def error_answers(self) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """The relay's answers that the C data plane sends itself (design record 0067), as
        `_Client._send_error` writes them to a keep-alive client (C adds `Connection: close` where
        this does): 502 unreachable, 502 closed, 502 invalid, 504 timeout, 408 body timeout. Made
        here, so that their words stay the relay's."""

        def gateway(*, timeout: bool, what: str) -> bytes:
            status, _, body = self.proxy.gateway_error(timeout=timeout, what=what)
            return error_answer(status, body, close=False)

        return (
            gateway(timeout=False, what=UNREACHABLE),
            gateway(timeout=False, what=CLOSED),
            gateway(timeout=False, what=INVALID),
            gateway(timeout=True, what=""),
            error_answer(408, self.proxy.relay_error_body(BODY_TIMEOUT), close=False),
        )

    async def adopt(self, sock: socket.socket, prefix: bytes = b"", head_left_s: float | None = None) -> None:
        """Serve a client connection accepted elsewhere, whose first `prefix` bytes were read there.

        The C data plane (design record 0067) reads a connection's first head and hands over the
        ones it does not implement, with the bytes it read: the connection is then answered exactly
        as if this server had accepted it and read those bytes itself. `head_left_s`: what is left
        of the head deadline (proxy.header_timeout_s from the accept); None: all of it.
        """
        sock.setblocking(False)
        await self.loop.connect_accepted_socket(lambda: _AdoptedClient(self, prefix, head_left_s), sock)

    def _sweep(self) -> None:
        # Idle keep-alive clients are closed by one periodic sweep, not a timer per request.
        cutoff = self.loop.time() - _CLIENT_KEEPALIVE_S
        for client in list(self.clients):
            if (
                client.current is None
                and not client.in_head
                and client.idle_since < cutoff
                and client.transport is not None
            ):
                client.transport.close()
        self._sweeper = self.loop.call_later(_CLIENT_KEEPALIVE_S / 5, self._sweep)

    def new_call(self, client: _Client, parser: Any, target: bytes, headers: list[tuple[bytes, bytes]]) -> _Call:  # noqa: C901
        call = _Call(client)
        method = parser.get_method()
        version = parser.get_http_version()
        call.http10 = version == "1.0"
        if version not in ("1.1", "1.0"):
            # llhttp reads `GET /path` alone as HTTP/0.9; nothing but 1.0 and 1.1 is forwarded.
            call.local = (
                400,
                self.proxy.relay_error_body("llmwatch proxy: only HTTP/1.0 and HTTP/1.1 requests are served"),
            )
            call.keep_alive = False
            return call
        call.keep_alive = parser.should_keep_alive() and not self.closing
        call.is_head = method == b"HEAD"
        proxy = self.proxy
        if not target.startswith(b"/"):
            # Absolute-form (`GET http://other/ HTTP/1.1`) or asterisk-form: a reverse proxy only
            # ever sends to its one upstream, so only a path can be forwarded.
            if target == b"*":
                call.local = (
                    404 if method == b"OPTIONS" else 400,
                    proxy.relay_error_body(
                        "llmwatch proxy: the request target must be a path such as /v1/chat/completions"
                    ),
                )
            else:
                call.local = (
                    400,
                    proxy.relay_error_body(
                        "llmwatch proxy: the request target must be a path such as /v1/chat/completions, not an absolute URL"
                    ),
                )
            call.body_done = False
            return call
        raw_path = target.split(b"?", 1)[0]
        if (b"." in raw_path or b"%" in raw_path or b"\\" in raw_path) and climbs_above_root(raw_path):
            # Forwarded under the upstream's path prefix, it would escape it at a server that
            # resolves dot segments (nginx answers 400 too).
            call.local = (
                400,
                proxy.relay_error_body("llmwatch proxy: the request path climbs above its root with dot segments (..)"),
            )
            return call
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(raw_path.decode("utf-8", "replace"))
        call.path = path
        # Of a captured call's headers, only the few the Exchange reads are decoded.
        lookup: dict[str, str] | None = None
        if path in self.routes:
            # Taken here, not for every call: only a captured call has an Exchange to time.
            t0 = perf_counter()
            started_at = time.time()
            lookup = {}
        read = self.read_headers
        out = [method, b" ", self.prefix, target, b" HTTP/1.1\r\n"]
        if not self.preserve_host:
            out.append(self.host_header)
        has_auth = False
        chunked = False
        codings = 0
        hosts = 0
        length = None
        kinds = self.header_kinds
        for name, value in headers:
            known = kinds.get(name)
            if known is None:
                known = _header_kind(kinds, name)
            lower, kind = known
            if lookup is not None and lower in read:
                key = lower.decode("latin-1")
                if key not in lookup:
                    lookup[key] = value.decode("latin-1")
            if kind == _PLAIN:
                out += (name, b": ", value, b"\r\n")
                continue
            if kind == _HOP:
                continue
            if kind == _TE:
                chunked = True  # llhttp accepts it only with chunked last
                codings += 1 if value.strip().lower() == b"chunked" else 2
                continue
            if kind == _HOST:
                hosts += 1
                if not self.preserve_host:
                    continue
                if _HOST_VALUE.fullmatch(value) is None:
                    hosts += 1  # refused below as two would be: RFC 9112 §3.2, 400 for an invalid Host
            elif kind == _EXPECT:
                if value.lower() == b"100-continue":
                    # Answered by the proxy: forwarded, it would make the upstream request wait for
                    # a second 100 that an upstream expecting only the body never sends. Not written
                    # here: a pipelined call's 100 would land inside the response before it (see
                    # `_Client._start`).
                    call.expect = True
                    continue
            elif kind == _AUTH:
                has_auth = True
            else:  # _LENGTH
                length = value
            out += (name, b": ", value, b"\r\n")
        if hosts > 1 or (hosts == 0 and not call.http10):
            # RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without a Host, or
            # any request with two or an invalid one (nginx does); which of two the upstream
            # would read is a guess.
            call.local = (
                400,
                proxy.relay_error_body("llmwatch proxy: the request must carry exactly one valid Host header"),
            )
            call.chunked = chunked
            return call
        if codings > 1:
            # Only a lone `chunked` is a framing the relay forwards as it is; any other coding
            # (`gzip, chunked`) would reach the upstream as a plain body (nginx: 501).
            call.local = (
                501,
                proxy.relay_error_body(_TE_501),
            )
            call.keep_alive = False
            call.chunked = True
            return call
        if hosts == 0 and self.preserve_host:
            # An HTTP/1.0 request without Host goes on as HTTP/1.1, which must carry one (RFC 9112
            # §3.2; the upstream would answer 400): the upstream's, as without preserve_host.
            out.append(self.host_header)
        if not has_auth and self.auth is not None:
            out.append(self.auth)
        if chunked:
            out.append(b"Transfer-Encoding: chunked\r\n")
            if call.http10:
                # RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing (a
                # 1.0 peer in front may have read the body otherwise): answered, then closed.
                call.keep_alive = False
        out.append(b"\r\n")
        call.head = b"".join(out)
        call.chunked = chunked
        if (length is None or length == b"0") and not chunked and method in _REPLAYABLE:
            # Its head is the whole request: it can be sent again as it is. (A POST with a body,
            # the usual call, is decided by the first test.)
            call.replay = True
        if lookup is not None:
            ex = call.ex = proxy.relay_exchange(method.decode("latin-1"), path, lookup, t0, started_at)
            has_body = chunked or (length is not None and length.strip() not in (b"0", b""))
            if not has_body:
                ex.request_body = b""
            elif length is not None and int(length) > ex.max_body_bytes:
                ex.notes.append("request_too_large")
            else:
                call.req_buf = bytearray()
        return call

    async def _settled(self) -> None:
        if self.clients:
            self.drained = asyncio.Event()
            await self.drained.wait()
        if self.front is not None:
            await self.front.quiet()

    async def cleanup(self) -> None:
        """Stop accepting; give calls in flight `proxy.shutdown_timeout_s`; then cut what is left."""
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self.server is not None:
            self.server.close()
        if self.front is not None:
            # Accepts no more; its connections between calls are closed; the calls it forwards get
            # the same grace as the relay's (before, they were cut at once).
            self.front.shutdown()
        for client in list(self.clients):
            if client.current is None and client.transport is not None:
                client.transport.close()  # idle: nothing to wait for
        try:
            await asyncio.wait_for(self._settled(), self.shutdown_timeout_s)
        except asyncio.TimeoutError:
            pass
        if self.front is not None:
            await self.front.stop()  # cuts what C still holds
        if self.listen_sock is not None:
            self.listen_sock.close()  # after the C thread has stopped: it watched this descriptor
        for client in list(self.clients):
            if client.transport is not None:
                client.transport.abort()
        self.pool.close()
