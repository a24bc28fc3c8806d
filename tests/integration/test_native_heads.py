"""The C data plane's head decision against the Python relay (design record 0067, step 2).

`dataplane.Planner.plan` keeps a connection's first request head only if it is a plain case, and
builds the head it would send upstream. Every generated request it calls plain is sent through
the running Python relay to a recording upstream: the upstream must receive exactly the head the
planner built, and the client the upstream's answer. A request it hands over is the Python
relay's, whatever it is, so those are checked only for what they are (the plain-case rules).
"""

from __future__ import annotations

import asyncio
import random
import shutil

import hypothesis
import pytest
from helpers.planners import smallest_planner
from helpers.raw_http import CHAT_BODY, RawUpstream, answer_ok, post, read_body, read_response
from helpers.relay_fuzz import requests as fuzz_requests
from helpers.relay_fuzz import responses as fuzz_responses
from hypothesis import HealthCheck, given, settings

from llmwatch.collectors.receivers.proxy import native

dataplane, why = native.load()
if dataplane is None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the extension is optional", allow_module_level=True)
    raise ImportError(why)  # a compiler is here, so the extension should be: say how to build it

# What a plain request is made of; each list's first entries are plain, the rest are not (or are
# edge cases of what is). A request takes the plain ones, and one or two of the others in half the
# cases.
PLAIN_METHODS = [b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"OPTIONS"]
METHODS = [b"HEAD", b"PROPFIND", b"get", b"CONNECT"]
PLAIN_TARGETS = [
    b"/v1/chat/completions",
    b"/v1/models",
    b"/",
    b"/v1/x?a=b&c=d",
    b"/v1/x?q=../..&r=%41",
    b"/v1//double",
    b"/~user/-_!$&'()*+,;=:@",
]
TARGETS = [b"/a/../b", b"/a%2e%2e", b"/v1/a.b", b"/a\\b", b"*", b"http://other/x"]
VERSIONS = [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.2"]
PLAIN_HOSTS = [[b"llmwatch.test"], [b"127.0.0.1:8080"], [b"[::1]:8080"], [b"example.com:"], [b"%41.test"], [b""]]
HOSTS = [[], [b"a", b"b"], [b"a b"], [b"[::1"], [b"h:port"], [b"a/b"]]
PLAIN_HEADERS = [
    (b"Content-Type", b"application/json"),
    (b"Accept", b"*/*"),
    (b"X-Trailing", b"v "),
    (b"x-mixed-CASE", b"Value"),
    (b"Authorization", b"Bearer client-token"),
    (b"authorization", b"Basic eDp5"),
    (b"Connection", b"close"),
    (b"Connection", b"keep-alive"),
    (b"connection", b"Keep-Alive, X-Custom"),
    (b"Keep-Alive", b"timeout=5"),
    (b"TE", b"trailers"),
    (b"Trailer", b"X-T"),
    (b"Proxy-Connection", b"keep-alive"),
    (b"Proxy-Authorization", b"Basic eDp5"),
    (b"X-Empty", b""),
    (b"X-Tab", b"a\tb"),
    (b"X-Obs-Text", b"caf\xe9"),
    (b"X-Request-Id", b"r-1"),
    (b"x-llmwatch-category", b"cat"),
    (b"Cookie", b"a=b; c=d"),
    (b"Content-Encoding", b"identity"),
]
HEADERS = [
    (b"Transfer-Encoding", b"chunked"),
    (b"Expect", b"100-continue"),
    (b"Expect", b"something"),
    (b"Upgrade", b"websocket"),
    (b"X-Long", b"v" * 9000),
    (b"X-Ctl", b"a\x01b"),
    (b"Bad Name", b"v"),
]
PLAIN_LENGTHS: list[list[bytes]] = [[], [], [b"0"], [b"5"], [b"12"], [b"005"]]
LENGTHS: list[list[bytes]] = [[b"5", b"5"], [b"5", b"6"], [b"-1"], [b"5x"], [b""]]
PLAIN_SEPARATORS = [b": ", b":", b":  ", b":\t"]
SEPARATORS = [b" : ", b" :"]


def generate(rng: random.Random, *, many_headers: bool = False) -> bytes:
    """One request: plain parts, and in half the cases one or two parts that are not."""
    odd = set(rng.sample(range(8), rng.choice([1, 2]))) if rng.random() < 0.5 else set()

    def pick(plain: list, other: list, part: int):  # type: ignore[type-arg]
        return rng.choice(other if part in odd else plain)

    lines: list[bytes] = [
        pick(PLAIN_METHODS, METHODS, 0)
        + b" "
        + pick(PLAIN_TARGETS, TARGETS, 1)
        + b" "
        + pick([b"HTTP/1.1"], VERSIONS, 2)
    ]
    headers = [(b"Host", h) for h in pick(PLAIN_HOSTS, HOSTS, 3)]
    headers += rng.sample(PLAIN_HEADERS, rng.randint(0, 5))
    if 4 in odd:
        headers.append(rng.choice(HEADERS))
    if many_headers and rng.random() < 0.5:
        headers += [(b"X-N%d" % i, b"n") for i in range(rng.choice([10, 25, 31, 32, 40]))]
    lengths = pick(PLAIN_LENGTHS, LENGTHS, 5)
    headers += [(b"Content-Length", v) for v in lengths]
    rng.shuffle(headers)
    odd_separator = rng.randrange(len(headers)) if headers and 6 in odd else -1
    for i, (name, value) in enumerate(headers):
        lines.append(name + (rng.choice(SEPARATORS) if i == odd_separator else rng.choice(PLAIN_SEPARATORS)) + value)
    ends = [b"\r\n"] * len(lines)
    if 7 in odd and len(lines) > 1:
        if rng.random() < 0.5:
            ends[rng.randrange(len(lines))] = b"\n"  # a bare LF
        else:
            lines.insert(rng.randrange(2, len(lines) + 1), b" folded")  # obs-fold
            ends.append(b"\r\n")
    head = b"".join(line + end for line, end in zip(lines, ends)) + b"\r\n"
    body = b""
    if lengths and lengths[0].isdigit():
        body = b"x" * int(lengths[0])
    return head + body


async def through_python(port: int, upstream: RawUpstream, request: bytes) -> tuple[bytes | None, int, dict[str, str]]:
    """What the Python relay did with `request`: the head the upstream got (None: none), the status
    and headers the client got."""
    before = len(upstream.heads)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        status, headers, _ = await asyncio.wait_for(read_response(reader), 10)
    finally:
        writer.close()
    got = upstream.heads[before:]
    assert len(got) <= 1, got
    return (got[0] if got else None), status, headers


CONFIGS = {
    # A path prefix and credentials in the upstream URL: the head gains the prefix and, where the
    # client sent no Authorization, the upstream's Basic credentials.
    "prefix-and-credentials": ({}, "http://user:secret@127.0.0.1:{port}/base/"),
    "preserve-host": ({"proxy": {"preserve_host": True}}, "http://127.0.0.1:{port}"),
    "smallest-limits": ({"proxy": {"max_header_bytes": 8190, "max_headers": 32}}, "http://127.0.0.1:{port}/p"),
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
async def test_every_head_the_planner_calls_plain_reaches_the_upstream_as_the_python_relay_sends_it(make_agent, config):
    sections, url = CONFIGS[config]
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(url.format(port=upstream.port), **sections)
        planner = native.planner(agent.proxy.relay)
        rng = random.Random(f"native-heads-{config}")
        plain = handed = 0
        reasons: set[str] = set()
        for _ in range(600):
            request = generate(rng, many_headers=config == "smallest-limits")
            verdict = planner.plan(request)
            assert verdict[0] in (dataplane.PLAIN, dataplane.HAND_OVER), (request, verdict)
            if verdict[0] == dataplane.HAND_OVER:
                handed += 1
                reasons.add(verdict[1])
                continue
            plain += 1
            _, head, consumed, length, keep_alive, method, path = verdict
            assert request[:consumed].endswith(b"\r\n\r\n") and consumed == request.index(b"\r\n\r\n") + 4
            assert length == (len(request) - consumed if b"content-length" in request[:consumed].lower() else -1)
            assert method == request.split(b" ", 1)[0] and path == request.split(b" ", 2)[1].split(b"?")[0]
            got, status, headers = await through_python(agent.proxy_port, upstream, request)
            assert got is not None, (request, status)
            assert got + b"\r\n\r\n" == head, (request, got, head)
            assert status == 200
            # The Python relay closes the client's connection after the answer exactly when the
            # planner says the request does not keep it alive.
            assert (headers.get("connection") == "close") == (not keep_alive), (request, headers)
        # The corpus exercises both sides (a planner that hands everything over would pass the
        # comparison vacuously) and the rules that make a head not plain.
        assert plain >= 200 and handed >= 200, (plain, handed)
        assert len(reasons) >= 8, reasons


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        b"GET /v1/models HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    ],
)
def test_a_plain_head_read_in_pieces_is_more_until_its_last_byte_and_the_same_with_what_follows(request_bytes):
    planner = smallest_planner(dataplane)
    whole = planner.plan(request_bytes)
    assert whole[0] == dataplane.PLAIN
    end = whole[2]
    for cut in range(end):
        assert planner.plan(request_bytes[:cut]) == (dataplane.MORE,), cut
    # The body, and a pipelined request behind it, are the data plane's to read: not the head's.
    assert planner.plan(request_bytes + b"GET / HTTP/1.1\r\nHost: h\r\n\r\n") == whole
    assert planner.plan(bytearray(request_bytes)) == whole


@pytest.mark.parametrize(
    "request_bytes, reason",
    [
        (b"GET / HTTP/1.0\r\nHost: h\r\n\r\n", "not HTTP/1.1"),
        (b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", "a method outside the plain set"),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", "Transfer-Encoding or Upgrade"),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
            "Transfer-Encoding, Upgrade or Expect",
        ),
        (b"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n", "Transfer-Encoding or Upgrade"),
        (b"GET /a/../b HTTP/1.1\r\nHost: h\r\n\r\n", "a dot, percent or backslash in the path"),
        (b"GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n", "not an origin-form target"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "not exactly one Host"),
        (b"GET / HTTP/1.1\r\n\r\n", "not exactly one Host"),
        (b"GET / HTTP/1.1\nHost: h\r\n\r\n", "a line not ended by CRLF, or a folded header line"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", "a line not ended by CRLF, or a folded header line"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "llhttp refused the head"),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX: " + b"v" * 8190 + b"\r\n\r\n",
            "a header line exceeds proxy.max_header_bytes",
        ),
        (b"GET / HTTP/1.1\r\nHost: h\r\n" + b"X: y\r\n" * 32 + b"\r\n", "more headers than proxy.max_headers"),
        (b"GET /" + b"a" * 8191 + b" HTTP/1.1\r\nHost: h\r\n\r\n", "the target exceeds proxy.max_header_bytes"),
        (b"GET / HTTP/1.1\r\nHost: h\r\n" + b"X: y\r\n" * 30 + b"Y" * 300_000, "the head exceeds the whole-head bound"),
    ],
)
def test_what_is_not_a_plain_case_is_handed_over_with_its_reason(request_bytes, reason):
    planner = smallest_planner(dataplane)
    assert planner.plan(request_bytes) == (dataplane.HAND_OVER, reason)


# --- the response side: no hand-over, so the two engines must agree both ways --------------------

# As for requests: plain parts, and in half the answers one or two that are not (or are edge cases).
PLAIN_STATUSES = [b"200", b"201", b"204", b"304", b"404", b"500"]
STATUSES = [b"099", b"999", b"101", b"20", b"2000"]
PLAIN_REASONS = [b" OK", b"", b" ", b" Weird  Reason ", b" caf\xe9", b" Tab\there"]
REASONS = [b" Bad\x01", b" \x7f"]
PLAIN_RESPONSE_HEADERS = [
    (b"Content-Type", b"application/json"),
    (b"X-Trailing", b"v "),
    (b"X-Empty", b""),
    (b"Connection", b"close"),
    (b"Connection", b"keep-alive"),
    (b"Keep-Alive", b"timeout=5"),
    (b"Upgrade", b"h2c"),
    (b"Trailer", b"X-T"),
    (b"Proxy-Authenticate", b"Basic"),
    (b"x-ratelimit-remaining-requests", b"7"),
    (b"Server", b"up"),
]
RESPONSE_HEADERS = [(b"X-Long", b"v" * 9000), (b"X-Ctl", b"a\x01b"), (b"Bad Name", b"v")]
PLAIN_FRAMINGS: list[list[tuple[bytes, bytes]]] = [
    [(b"Content-Length", b"5")],
    [(b"Content-Length", b"5 ")],
    [(b"Content-Length", b"005")],
    [(b"Content-Length", b"0")],
    [(b"Transfer-Encoding", b"chunked")],
    [(b"Transfer-Encoding", b"Chunked")],
    [(b"Transfer-Encoding", b"chunked ")],
    [],
]
FRAMINGS: list[list[tuple[bytes, bytes]]] = [
    [(b"Content-Length", b"abc")],
    [(b"Content-Length", b"5x")],
    [(b"Content-Length", b"")],
    [(b"Content-Length", b"5"), (b"Content-Length", b"5")],
    [(b"Content-Length", b"5"), (b"Content-Length", b"6")],
    [(b"Transfer-Encoding", b"gzip, chunked")],
    [(b"Transfer-Encoding", b"gzip")],
    [(b"Transfer-Encoding", b"chunked, gzip")],
    [(b"Transfer-Encoding", b"chunked"), (b"Transfer-Encoding", b"chunked")],
    [(b"Transfer-Encoding", b"chunked"), (b"Content-Length", b"5")],
]
PLAIN_INTERIMS = [b"", b"", b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"]
INTERIMS = [
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\nX-Ctl: \x01\r\n\r\n",
]


def generate_response(rng: random.Random) -> bytes:
    odd = set(rng.sample([0, 1, 2, 3, 4, 5, 7, 8], rng.choice([1, 2]))) if rng.random() < 0.5 else set()

    def pick(plain: list, other: list, part: int):  # type: ignore[type-arg]
        return rng.choice(other if part in odd else plain)

    version = pick([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0"], [b"HTTP/2", b"HTTP/1.1 "], 0)
    lines = [version + b" " + pick(PLAIN_STATUSES, STATUSES, 1) + pick(PLAIN_REASONS, REASONS, 2)]
    headers = rng.sample(PLAIN_RESPONSE_HEADERS, rng.randint(0, 4)) + pick(PLAIN_FRAMINGS, FRAMINGS, 3)
    if 4 in odd:
        headers.append(rng.choice(RESPONSE_HEADERS))
    if rng.random() < 0.2:
        headers += [(b"X-N%d" % i, b"n") for i in range(rng.choice([10, 25, 31, 32, 40]))]
    rng.shuffle(headers)
    lines += [name + rng.choice([b": ", b":", b":  ", b":\t"]) + value for name, value in headers]
    ends = [b"\r\n"] * len(lines)
    if rng.random() < 0.15:
        ends[rng.randrange(len(ends))] = b"\n"  # a bare LF: read as CRLF, as nginx reads it
    if 5 in odd:
        lines.insert(1, b" folded")
        ends.append(b"\r\n")
    # The empty line: a bare LF ends the head too. (The body must stay well framed: the Python
    # relay sends the head with the first chunk, so a bad first chunk is a 502, not a head.)
    last = rng.choice([b"\r\n", b"\r\n", b"\n"])
    head = b"".join(line + end for line, end in zip(lines, ends)) + last
    if 7 in odd:
        head = b"\r\n" + head  # an empty line before the status line
    names = {name.lower() for name, _ in headers}
    if b"transfer-encoding" in names:
        body = b"5\r\nhello\r\n0\r\n\r\n"
    elif b"content-length" in names:
        body = b"hello"
    else:
        body = b"until the close"
    return pick(PLAIN_INTERIMS, INTERIMS, 8) + head + body


async def test_every_upstream_answer_is_relayed_with_the_head_the_planner_builds_or_is_a_502_for_both(make_agent):
    answers: list[bytes] = []

    async def respond(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(answers[-1])
        await writer.drain()
        writer.close()  # every answer on its own connection: some end only with the close

    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url, proxy={"max_header_bytes": 8190, "max_headers": 32})
        planner = native.planner(agent.proxy.relay)
        rng = random.Random("native-responses")
        outcomes = {dataplane.HEAD: 0, dataplane.INVALID: 0}
        framings: set[int] = set()
        for n in range(600):
            answers.append(generate_response(rng))
            request = (
                post("/v1/chat/completions", CHAT_BODY) if n % 2 else b"GET /v1/models HTTP/1.1\r\nHost: h\r\n\r\n"
            )
            if n % 3 == 0:
                request = request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
            asked = planner.plan(request)
            assert asked[0] == dataplane.PLAIN
            verdict = planner.respond(answers[-1], asked[4], False)
            assert verdict[0] in outcomes, (answers[-1], verdict)
            outcomes[verdict[0]] += 1
            reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
            try:
                writer.write(request)
                got = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                if verdict[0] == dataplane.INVALID:
                    assert got.startswith(b"HTTP/1.1 502 "), (answers[-1], got)
                    body = await asyncio.wait_for(read_body(got[:-4], reader), 10)
                    assert b"llmwatch proxy" in body  # the relay's own 502, not an upstream's
                else:
                    assert got == verdict[1], (answers[-1], got, verdict[1])
                    framings.add(verdict[3])
            finally:
                writer.close()
        assert outcomes[dataplane.HEAD] >= 250 and outcomes[dataplane.INVALID] >= 100, outcomes
        assert framings == {
            dataplane.FRAME_LENGTH,
            dataplane.FRAME_CHUNKED,
            dataplane.FRAME_CLOSE,
            dataplane.FRAME_NONE,
        }


# --- the relay fuzzer's hostile cases (tests/helpers/relay_fuzz.py) through both ------------------


def drawn(strategy, count: int, seed: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    """`count` cases of a hypothesis strategy, drawn once, reproducibly."""
    cases: list[bytes] = []

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(data: bytes) -> None:
        cases.append(data)

    hypothesis.seed(seed)(collect)()
    return cases


async def test_the_relay_fuzzers_requests_that_the_planner_calls_plain_reach_the_upstream_as_it_built_them(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent("http://user:secret@127.0.0.1:%d/base" % upstream.port)
        planner = native.planner(agent.proxy.relay)
        plain = 0
        for data in drawn(fuzz_requests(), 800, 29):
            verdict = planner.plan(data)
            if verdict[0] != dataplane.PLAIN:
                continue
            plain += 1
            head, consumed, length = verdict[1], verdict[2], max(verdict[3], 0)
            # The head is the question; the body is made whole (a short one holds the call).
            request = data[:consumed] + (data[consumed:] + b"x" * length)[:length]
            got, status, _ = await through_python(agent.proxy_port, upstream, request)
            assert got is not None and got + b"\r\n\r\n" == head, (data, got, head)
            assert status == 200
        assert plain >= 60, plain  # the fuzzer draws mostly hostile requests


async def test_the_relay_fuzzers_answers_get_the_planners_head_or_a_502_from_both(make_agent):
    answers: list[bytes] = []

    async def respond(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(answers[-1])
        await writer.drain()
        writer.close()

    request = post("/v1/chat/completions", CHAT_BODY)
    async with RawUpstream(respond) as upstream:
        agent = await make_agent(upstream.url)
        planner = native.planner(agent.proxy.relay)
        seen = {dataplane.HEAD: 0, dataplane.INVALID: 0}
        for data in drawn(fuzz_responses(), 800, 29):
            verdict = planner.respond(data, True, False)
            if verdict[0] == dataplane.MORE:
                continue  # a head cut short: the upstream's close decides, not the head
            seen[verdict[0]] += 1
            if verdict[0] == dataplane.HEAD:
                # The head is the question; the body after it is made well framed (the Python relay
                # sends a chunked head with its first chunk: a broken first chunk is a 502).
                consumed, framing, length = verdict[2], verdict[3], verdict[4]
                data = (
                    data[:consumed]
                    + {
                        dataplane.FRAME_LENGTH: b"x" * max(length, 0),
                        dataplane.FRAME_CHUNKED: b"0\r\n\r\n",
                        dataplane.FRAME_CLOSE: b"until the close",
                        dataplane.FRAME_NONE: b"",
                    }[framing]
                )
            answers.append(data)
            reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
            try:
                writer.write(request)
                got = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                if verdict[0] == dataplane.INVALID:
                    assert got.startswith(b"HTTP/1.1 502 "), (data, got)
                    assert b"llmwatch proxy" in await asyncio.wait_for(read_body(got[:-4], reader), 10)
                else:
                    assert got == verdict[1], (data, got, verdict[1])
            finally:
                writer.close()
        assert seen[dataplane.HEAD] >= 150 and seen[dataplane.INVALID] >= 100, seen
