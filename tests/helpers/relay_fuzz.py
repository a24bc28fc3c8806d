"""A differential fuzzer of the proxy's relay core: byte streams through a real `llmwatch proxy` and through h11.

h11 is the strict reference parser. For a request, the client's bytes go to the proxy and to an h11
server connection; for a response, an upstream's bytes go (through the proxy) to a client and to an
h11 client connection. The invariants (`check_request`, `check_response`):

- the relay forwards exactly the messages h11 accepts, with the same method, target (under the
  upstream's prefix) and body bytes, or answers the client itself with 400/408/501 (requests) or
  502/504 (responses): stricter than h11 is allowed, looser is a finding;
- it never forwards a byte past a message's end (a second request on the same client connection
  gets its own answer, never bytes the upstream sent after the first);
- it answers (or closes) before its configured deadlines plus a margin: never a hang.

Used by tests/integration/test_relay_fuzz.py (a short, derandomized run) and bench/fuzz_relay.py (a long one).
Everything is synchronous sockets; the upstream is a thread, the proxy a real process.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import h11
from hypothesis import strategies as st

from helpers.procs import Proc, agent_env, agent_started

# The proxy's deadlines in the fuzz runs: short, so a case that waits on one ends fast.
HEADER_TIMEOUT_S = 0.5
BODY_TIMEOUT_S = 0.5
READ_TIMEOUT_S = 0.5
# What "it answered before its deadline" allows on top of the deadline: a loaded 2-core machine.
MARGIN_S = 8.0
PREFIX = "/base"

_SPACES = re.compile(rb"(?<=\S)  +(?=\S)")
SECOND = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"


@dataclass
class Forwarded:
    method: bytes
    target: bytes
    body: bytes


@dataclass
class Upstream:
    """Answers `/…/second` with SECOND and every other request with `response` (or a plain 200);
    records each request it read, parsed by h11, and whether one was not valid HTTP/1.1."""

    response: bytes | None = None
    requests: list[Forwarded] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()
        return self.sock.getsockname()[1]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        parser = h11.Connection(h11.SERVER)
        try:
            while True:
                request = None
                body = b""
                while True:
                    event = parser.next_event()
                    if event is h11.NEED_DATA:
                        data = conn.recv(65536)
                        parser.receive_data(data)
                        if not data:
                            return
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                assert request is not None
                with self.lock:
                    self.requests.append(Forwarded(request.method, request.target, body))
                    fuzzed = self.response
                if request.target.endswith(b"/second") or fuzzed is None:
                    conn.sendall(SECOND if request.target.endswith(b"/second") else _OK)
                    parser.send(h11.Response(status_code=200, headers=[("Content-Length", "2")]))
                    parser.send(h11.Data(data=b"ok"))
                    parser.send(h11.EndOfMessage())
                    parser.start_next_cycle()
                    continue
                # A fuzzed answer: its bytes, then the end of the connection (a body delimited by
                # the close needs it, and bytes after a message's end must go nowhere).
                conn.sendall(fuzzed)
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(65536):
                    pass
                return
        except h11.RemoteProtocolError as exc:
            with self.lock:
                self.invalid.append(str(exc))
        except OSError:
            pass
        finally:
            conn.close()

    def take(self) -> list[Forwarded]:
        with self.lock:
            out, self.requests = self.requests, []
            return out

    def close(self) -> None:
        self.sock.close()


_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Relay:
    """A real `llmwatch proxy` process (`proxy.engine` `engine`) in front of an `Upstream`, with short deadlines."""

    def __init__(self, data_dir: Path, engine: str = "python", *, forward: bool = True) -> None:
        self.upstream = Upstream()
        port = self.upstream.start()
        env = agent_env(
            # `forward`: the native engine forwards plain calls in C, as it serves; without, C is a
            # front door handing every connection to the relay (DATAPLANE_FORWARD=0)
            DATAPLANE_FORWARD="1" if forward else "0",
            LLMWATCH_SCORING__ENABLED="false",
            LLMWATCH_PROXY__ENGINE=engine,
            LLMWATCH_PROXY__HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
            LLMWATCH_PROXY__BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
            LLMWATCH_PROXY__READ_TIMEOUT_S=str(READ_TIMEOUT_S),
        )
        env.pop("LLMWATCH_CONFIG", None)
        self.proc = Proc(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                "proxy",
                "--upstream",
                f"http://127.0.0.1:{port}{PREFIX}",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--data-dir",
                str(data_dir),
            ],
            env=env,
            cwd=os.getcwd(),
        )
        self.port = agent_started(self.proc)["proxy_port"]

    def close(self) -> None:
        self.proc.stop()
        self.upstream.close()


# --- the client side -------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int | None = None  # None: no complete final response head
    body: bytes | None = None  # None: the body did not complete (connection cut)
    keep_alive: bool = False
    second: bytes | None = None  # what a second request on the same connection read
    elapsed: float = 0.0
    error: str = ""


def exchange(port: int, data: bytes, *, second: bool, deadline: float) -> Answer:
    """Send `data`; read one response with h11 (strict: a proxy's output must be valid HTTP/1.1);
    with `second`, then ask for /second on the same connection and read what comes back."""
    started = time.monotonic()
    answer = Answer()
    sock = socket.create_connection(("127.0.0.1", port), timeout=deadline)
    client = h11.Connection(h11.CLIENT)
    # h11's client state machine needs the request it "sent"; the bytes sent are the fuzzed ones.
    client.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    try:
        if data:
            sock.sendall(data)
        answer = _read(sock, client, answer, started + deadline)
        if second and answer.body is not None and answer.keep_alive:
            client.start_next_cycle()
            client.send(h11.Request(method="GET", target="/second", headers=[("Host", "x")]))
            client.send(h11.EndOfMessage())
            sock.sendall(b"GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
            again = _read(sock, client, Answer(), started + deadline)
            if again.status is not None:
                answer.second = b"%d " % again.status + (again.body or b"<cut>")
            else:
                answer.second = b"<closed>" if not again.error else again.error.encode()
    except (OSError, h11.ProtocolError) as exc:
        answer.error = answer.error or f"{type(exc).__name__}: {exc}"
    finally:
        sock.close()
    answer.elapsed = time.monotonic() - started
    return answer


def _read(sock: socket.socket, client: h11.Connection, answer: Answer, until: float) -> Answer:
    body = b""
    while True:
        try:
            event = client.next_event()
        except h11.RemoteProtocolError as exc:
            answer.error = f"invalid: {exc}"
            return answer
        if event is h11.NEED_DATA:
            left = until - time.monotonic()
            if left <= 0:
                answer.error = "timeout"
                return answer
            sock.settimeout(left)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                answer.error = "timeout"
                return answer
            except OSError:
                data = b""
            client.receive_data(data)
            continue
        if isinstance(event, h11.Response):
            answer.status = event.status_code
            answer.keep_alive = (
                not any(n == b"connection" and b"close" in v.lower() for n, v in event.headers)
                and event.http_version == b"1.1"
            )
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            answer.body = body
            return answer
        elif isinstance(event, h11.ConnectionClosed):
            return answer


# --- the reference ---------------------------------------------------------------------------------


@dataclass
class Reference:
    verdict: str  # "accepted", "rejected" or "incomplete"
    messages: list[Forwarded] = field(default_factory=list)
    status: int | None = None
    body: bytes | None = None
    reason: str = ""


def h11_request(data: bytes) -> Reference:
    """The requests h11 (as a server) reads from `data`, in order, until it stops."""
    conn = h11.Connection(h11.SERVER)
    # RFC 9112 §2.2: a server SHOULD ignore empty lines before a request line; llhttp does (also a
    # lone CR), h11 does not. The relay forwards a request line of its own, so nothing of them goes on.
    data = data.lstrip(b"\r\n")
    # RFC 9112 §3: a recipient MAY split a request line on runs of whitespace; llhttp reads
    # `GET  /x` as `GET /x`, h11 refuses it. Again the relay writes its own request line.
    line_end = data.find(b"\n")
    if line_end > 0:
        data = _SPACES.sub(b" ", data[:line_end]) + data[line_end:]
    conn.receive_data(data)
    ref = Reference("incomplete")
    request = None
    body = b""
    try:
        for _ in range(100):
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return ref
            if isinstance(event, h11.Request):
                request, body = event, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                ref.messages.append(Forwarded(request.method, request.target, body))
                ref.verdict = "accepted"
                if conn.our_state is h11.SEND_RESPONSE:
                    conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
                    conn.send(h11.EndOfMessage())
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return ref
                conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:
        if not ref.messages:
            ref.verdict = "rejected"
        ref.reason = str(exc)
    return ref


def h11_response(data: bytes) -> Reference:
    """The final response h11 (as a client of `GET /fuzz`) reads from `data` and then the close."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/fuzz", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    conn.receive_data(b"")
    ref = Reference("incomplete")
    body = b""
    try:
        for _ in range(1000):
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return ref
            if isinstance(event, h11.Response):
                ref.status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                ref.verdict, ref.body = "accepted", body
                return ref
            elif isinstance(event, h11.ConnectionClosed):
                return ref
    except h11.RemoteProtocolError as exc:
        ref.verdict, ref.reason = "rejected", str(exc)
    return ref


# --- the invariants --------------------------------------------------------------------------------


def check_request(relay: Relay, data: bytes) -> str:
    """Raise AssertionError (a finding) if the relay treats `data` differently from h11; else say
    what it did."""
    relay.upstream.response = None
    relay.upstream.take()
    ref = h11_request(data)
    answer = exchange(relay.port, data, second=False, deadline=max(HEADER_TIMEOUT_S, BODY_TIMEOUT_S) + MARGIN_S)
    forwarded = relay.upstream.take()
    assert not relay.upstream.invalid, f"the relay forwarded bytes h11 rejects: {relay.upstream.invalid}"
    assert answer.error != "timeout", f"no answer within the deadlines plus {MARGIN_S} s"
    expected = [Forwarded(m.method, PREFIX.encode() + m.target, m.body) for m in ref.messages]
    # What it forwarded is what h11 read, message by message (it may stop earlier: stricter).
    assert forwarded == expected[: len(forwarded)], (
        f"forwarded {forwarded!r}, h11 read {expected!r} ({ref.verdict}: {ref.reason})"
    )
    if forwarded:
        assert answer.status == 200 and answer.body == b"ok", answer
        return "forwarded"
    assert answer.status in (None, 400, 404, 408, 501), answer
    return "closed" if answer.status is None else f"answered {answer.status}"


def check_response(relay: Relay, data: bytes) -> str:
    """Raise AssertionError (a finding) if the relay relays `data` differently from h11; else say
    what it did."""
    relay.upstream.response = data
    relay.upstream.take()
    ref = h11_response(data)
    request = b"GET /fuzz HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = exchange(relay.port, request, second=True, deadline=READ_TIMEOUT_S + MARGIN_S)
    relay.upstream.response = None
    assert answer.error != "timeout", f"no answer within the deadlines plus {MARGIN_S} s"
    if answer.status in (502, 504):
        pass  # stricter than h11, or an upstream that never finished: both allowed
    elif ref.verdict == "accepted":
        assert (answer.status, answer.body) == (ref.status, ref.body), (
            f"client got {answer.status} {answer.body!r} ({answer.error}), h11 read {ref.status} {ref.body!r}"
        )
    else:
        # h11 rejects it: the client may have its head (relayed before the fault) but never a whole message.
        assert answer.body is None, f"relayed as whole a response h11 rejects ({ref.reason}): {answer}"
    if answer.second is not None:
        assert answer.second in (b"200 second", b"502 " + answer.second[4:], b"<closed>"), (
            f"bytes after the first response reached the client: {answer.second!r}"
        )
    if answer.status in (502, 504):
        return f"answered {answer.status}"
    return "relayed" if answer.body is not None else "cut"


# --- generators ------------------------------------------------------------------------------------


def _mostly(good: list[bytes], bad: list[bytes], weight: int = 4) -> st.SearchStrategy[bytes]:
    """One of `good` most of the time, one of `bad` some of the time: most cases stay close to
    valid HTTP, where the parsers' differences are, with one or two hostile parts each."""
    return st.sampled_from(good * weight * max(1, len(bad)) + bad)


_EOL = _mostly([b"\r\n"], [b"\n"])
_TOKEN = _mostly([b"X-A", b"x-b", b"User-Agent"], [b"X A", b"X-\x7f", b"", b"X:Y", b"X\x00"])
_VALUE = _mostly([b"v", b"", b" padded ", b"a\tb", b"x" * 300], [b"\x80\xff", b"a\x00b", b"a\rb", b"a\nb", b"\x7f"])
_FRAMING = _mostly(
    [b"length", b"chunked", b"none"], [b"both", b"two-lengths", b"bad-length", b"te-other", b"chunked-bad"], 2
)


@st.composite
def _headers(draw: st.DrawFn) -> list[bytes]:
    lines = [
        draw(_TOKEN) + b":" + draw(_mostly([b" ", b""], [b"  ", b"\t"])) + draw(_VALUE)
        for _ in range(draw(st.integers(0, 3)))
    ]
    if draw(st.integers(0, 7)) == 0:
        lines.append(b" folded")  # obs-fold: a continuation of the line before
    return lines


@st.composite
def _framing(draw: st.DrawFn, body: bytes, *, request: bool) -> tuple[list[bytes], bytes]:
    """Framing headers and body bytes: a length, chunks, both, neither, or broken ones."""
    kind = draw(_FRAMING)
    if kind == b"length":
        return [b"Content-Length: %d" % len(body)], body
    if kind == b"none":
        return [], (body if not request else b"")
    if kind == b"two-lengths":
        other = draw(st.sampled_from([len(body), len(body) + 1]))
        return [b"Content-Length: %d" % len(body), b"Content-Length: %d" % other], body
    if kind == b"bad-length":
        value = draw(st.sampled_from([b"+1", b"-1", b"0x1", b"1 1", b"", b"99999999999999999999", b"1,1"]))
        return [b"Content-Length: " + value], body
    pieces = draw(st.lists(st.binary(min_size=1, max_size=8), max_size=3)) if body else []
    bad = kind == b"chunked-bad"
    ext = draw(_mostly([b""], [b";a=b", b";", b" ;x", b';q="1"', b";a b"], 1 if bad else 6))
    size_fmt = draw(_mostly([b"%x"], [b"%X", b"0%x", b"%x ", b" %x", b"+%x"], 1 if bad else 6))
    eol = draw(_mostly([b"\r\n"], [b"\n", b"\r"], 1 if bad else 6))
    chunks = b"".join((size_fmt % len(p)) + ext + eol + p + eol for p in pieces)
    trailer = draw(_mostly([b""], [b"X-T: 1\r\n", b"bad trailer\r\n", b"X-T: 1\n"], 1 if bad else 6))
    chunks += b"0" + eol + trailer + eol
    te = draw(
        _mostly(
            [b"chunked"],
            [b"Chunked", b" chunked ", b"gzip, chunked", b"chunked, chunked", b"xchunked"],
            1 if bad else 6,
        )
    )
    headers = [b"Transfer-Encoding: " + te]
    if kind == b"both":
        headers.append(b"Content-Length: %d" % len(chunks))
    elif kind == b"te-other":
        headers = [b"Transfer-Encoding: " + draw(st.sampled_from([b"gzip", b"identity", b"chunked;x"]))]
    return headers, chunks


def _mutate(draw: st.DrawFn, data: bytes) -> bytes:
    """Some of the cases: a byte changed, inserted, removed, or the stream cut short."""
    op = draw(_mostly([b"none"], [b"flip", b"insert", b"delete", b"truncate", b"append"], 3))
    if op == b"none" or not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    byte = bytes([draw(st.sampled_from([0, 9, 10, 13, 32, 58, 48, 102, 127, 255]))])
    if op == b"flip":
        return data[:at] + byte + data[at + 1 :]
    if op == b"insert":
        return data[:at] + byte + data[at:]
    if op == b"delete":
        return data[:at] + data[at + 1 :]
    if op == b"truncate":
        return data[:at]
    return data + draw(st.sampled_from([b"junk", b"\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED"]))


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    method = draw(_mostly([b"GET", b"POST", b"PUT"], [b"get", b"P OST", b"PO\x00ST"]))
    target = draw(
        _mostly(
            [b"/v1/x", b"/v1/chat/completions", b"/a?b=c", b"/v1/./x"],
            [b"/../x", b"/%2e%2e/x", b"x", b"/a b", b"/\x7f", b"/a#b", b"*", b"http://h/x"],
        )
    )
    version = draw(_mostly([b"HTTP/1.1"], [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"http/1.1", b"HTTP/1.10"]))
    body = draw(st.binary(max_size=24))
    framing, payload = draw(_framing(body, request=True))
    host = draw(st.sampled_from([[b"Host: x"]] * 8 + [[], [b"Host: x", b"Host: y"], [b"Host: x", b"Host: x"]]))
    lines = [method + b" " + target + b" " + version, *host, *draw(_headers()), *framing]
    eol = draw(_EOL)
    data = eol.join(lines) + eol + eol + payload
    return _mutate(draw, data)


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    status = draw(
        _mostly(
            [b"200 OK", b"404 Not Found", b"500 Oops"],
            [b"204 No Content", b"304 Not Modified", b"200", b"200 ", b"2000 X", b"099 X", b"20 OK"],
        )
    )
    version = draw(_mostly([b"HTTP/1.1"], [b"HTTP/1.0", b"HTTP/1.2", b"HTTP/2", b"http/1.1"]))
    body = draw(st.binary(max_size=24))
    framing, payload = draw(_framing(body, request=False))
    interim = draw(
        _mostly([b""], [b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", b"HTTP/1.1 100 Continue\r\n\r\n"])
    )
    lines = [version + b" " + status, *draw(_headers()), *framing]
    eol = draw(_EOL)
    data = interim + eol.join(lines) + eol + eol + payload
    return _mutate(draw, data)
