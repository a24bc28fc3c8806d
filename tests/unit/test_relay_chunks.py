"""The relay's chunked-body reader (`_Upstream._chunked_body`): however the upstream's bytes are cut
into reads, the client gets the same bytes, the capture holds the same content, and a bad frame
breaks the response the same way. A read that is exactly one whole chunk (a stream's usual read)
takes a shorter path; the same bytes fed one byte at a time, or with each read's last two bytes
(a chunk's CRLF) held back to a read of their own, never can, so the two paths are compared on
every body below. (Where the capture stops at `max_body_bytes` depends on how the content came
in pieces, so under a limit only reads cut at the same content bytes are compared.)"""

from __future__ import annotations

import base64
import os
import tracemalloc
import zlib
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmwatch.collectors.receivers.proxy.capture import Exchange, analyze
from llmwatch.collectors.receivers.proxy.relay import _Call, _Upstream


class _Transport:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True


class _Client:
    def __init__(self) -> None:
        self.transport: Any = _Transport()
        self.events: list[str] = []
        self.paused: set[str] = set()  # the relay resumes a paused client at a response's end

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def resume(self, reason: str) -> None:
        pass

    def response_done(self, call: Any) -> None:
        self.events.append("done")

    def interrupted(self, call: Any, *, reset: bool = False) -> None:
        self.events.append("interrupted")

    def upstream_failed(self, call: Any, what: str, *, timeout: bool) -> None:
        self.events.append("failed")


class _Loop:
    def time(self) -> float:
        return 0.0


class _Pool:
    loop = _Loop()

    def __init__(self) -> None:
        self.released: list[bool] = []

    def release(self, up: Any, reusable: bool) -> None:
        self.released.append(reusable)

    def lost(self, up: Any) -> None:
        pass


def relay_body(reads: list[bytes], *, http10: bool = False, max_body_bytes: int = 1 << 20) -> dict[str, Any]:
    """Feed a chunked body to a fresh upstream connection read by read; what came out of it."""
    pool = _Pool()
    up = _Upstream(pool)  # type: ignore[arg-type]
    transport = _Transport()
    up.transport = transport  # type: ignore[assignment]
    client = _Client()
    call = _Call(client)  # type: ignore[arg-type]
    call.body_done = True
    call.ex = Exchange("r", 0.0, 0.0, "POST", "/v1/chat/completions", max_body_bytes=max_body_bytes)
    up.call = call
    call.up = up
    up.state = 2
    up.keep_alive = True
    up.dechunk = http10
    unread = 0
    for data in reads:
        if up.call is None:
            unread += len(data)  # past the response's end
            continue
        up.data_received(data)
    ex = call.ex
    assert len(ex.chunk_ends) == len(ex.chunk_times) == len(ex.response_chunks)
    assert ex.chunk_ends == sorted(ex.chunk_ends)
    return {
        "written": b"".join(client.transport.out),
        "events": client.events,
        "released": pool.released,
        "aborted": transport.aborted,
        "captured": b"".join(ex.response_chunks),
        "captured_bytes": ex.captured_bytes,
        "truncated": ex.response_truncated,
        "ends": ex.chunk_ends,
        "unread": unread,
    }


def one_byte_reads(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


def crlf_apart(reads: list[bytes]) -> list[bytes]:
    """The same reads with the last two bytes of each as a read of its own: the same pieces of
    content, none of them a whole chunk read."""
    out = []
    for data in reads:
        if len(data) > 2:
            out += [data[:-2], data[-2:]]
        elif data:
            out.append(data)
    return out


def without(result: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != key}


def without_ends(result: dict[str, Any]) -> dict[str, Any]:
    return without(result, "ends")


def alike(result: dict[str, Any], other: dict[str, Any], *, ends: bool = True) -> bool:
    """The same outcome. A broken frame sends nothing of the read it is in, so how far the client
    got before it depends on where the reads were cut: then only the order of what it got is compared."""
    skip = {"unread"} if ends else {"ends", "unread"}
    if "interrupted" in result["events"]:
        skip.add("written")
        shorter, longer = sorted((result["written"], other["written"]), key=len)
        if not longer.startswith(shorter):
            return False
    return {k: v for k, v in result.items() if k not in skip} == {k: v for k, v in other.items() if k not in skip}


EVENTS = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n", b"x" * 300]


def test_a_stream_read_chunk_by_chunk_is_relayed_as_sent_and_captured_chunk_by_chunk():
    chunks = [b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS]
    reads = [*chunks, b"0\r\n\r\n"]
    result = relay_body(reads)
    assert result["written"] == b"".join(reads)
    assert result["events"] == ["done"]
    assert result["released"] == [True]
    assert result["captured"] == b"".join(EVENTS)
    # One capture entry per chunk, ending where its content ends: what TTFT is read by.
    assert result["ends"] == [len(EVENTS[0]), len(EVENTS[0]) + len(EVENTS[1]), sum(map(len, EVENTS))]
    assert without_ends(result) == without_ends(relay_body(one_byte_reads(b"".join(reads))))
    assert result == relay_body(crlf_apart(reads))


def test_an_http10_client_gets_whole_chunk_reads_without_their_framing():
    reads = [b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS] + [b"0\r\n\r\n"]
    result = relay_body(reads, http10=True)
    assert result["written"] == b"".join(EVENTS)
    assert result["events"] == ["done"]


def test_the_capture_stops_past_its_limit_while_the_client_gets_everything():
    reads = [b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS] + [b"0\r\n\r\n"]
    result = relay_body(reads, max_body_bytes=40)
    assert result["written"] == b"".join(reads)
    assert result["truncated"] is True
    assert result["captured"] == EVENTS[0]  # the first chunk crosses the limit; no chunk after it
    assert result == relay_body(crlf_apart(reads), max_body_bytes=40)


# Whole-chunk reads whose frame is wrong: each must fail as the byte-by-byte reading fails.
BAD_READS = [
    b"5\r\nhello\n\r\n",  # one byte more than its size says
    b"5\r\nhelloXY",  # no CRLF after the data
    b"5\r\nhello\rX",  # a CR, then not LF
    b"5\r\nhello\nX",
    b"5\r\nhelloX\n",
    b"0x5\r\nhello\r\n",  # a 0x prefix
    b"g\r\nhello\r\n",  # not hex
    b"5 \r\nhello\r\n",  # trailing space: allowed (the general reader's regex)
    b"5;ext=1\r\nhello\r\n",  # an extension: allowed
    b"-5\r\nhello\r\n",
    b"+5\r\nhello\r\n",
    b"5\nhello\r\n",  # bare LF after the size
    b"\r\nhello\r\n",
    b"0000000000000005\r\nhello\r\n",  # 16 digits
    b"00000000000000005\r\nhello\r\n",  # 17
    b"00000000000000000005\r\nhello\r\n",  # 20 digits
    b"000000000000000000005\r\nhello\r\n",  # 21
    b"\xd9\xa5\r\nhello\r\n",  # a non-ASCII digit
]


def test_each_frame_whole_or_byte_by_byte_ends_the_same_way():
    for bad in BAD_READS:
        reads = [bad, b"0\r\n\r\n"]
        whole = relay_body(reads)
        assert alike(whole, relay_body(one_byte_reads(b"".join(reads))), ends=False), bad
        assert alike(whole, relay_body(crlf_apart(reads))), bad


_whole_chunk = st.one_of(
    st.binary(min_size=1, max_size=40).map(lambda b: b"%x\r\n%b\r\n" % (len(b), b)),
    st.binary(min_size=1, max_size=40).map(lambda b: b"%X\r\n%b\r\n" % (len(b), b)),
    st.binary(min_size=1, max_size=8).map(lambda b: b"%x;a=b\r\n%b\r\n" % (len(b), b)),
)
_chunk = st.one_of(
    _whole_chunk.map(lambda b: (b, True)),
    st.binary(min_size=0, max_size=12).map(lambda b: (b, False)),  # anything: framing faults, parts
)


@settings(max_examples=300, deadline=None)
@given(
    drawn=st.lists(_chunk, min_size=1, max_size=6),
    cuts=st.sets(st.integers(min_value=1, max_value=6)),
    trailers=st.sampled_from([b"0\r\n\r\n", b"0\r\nA: b\r\n\r\n", b"0\r\n\r\nEXTRA", b""]),
    http10=st.booleans(),
    limit=st.sampled_from([1 << 20, 10]),
)
# A drawn piece that is itself a whole terminal chunk, with bytes after it (found by hypothesis).
@example(drawn=[(b"0\r\n\n", False)], cuts=set(), trailers=b"0\r\n\r\n", http10=False, limit=1 << 20)
def test_chunk_aligned_reads_and_byte_by_byte_reads_agree_on_any_body(drawn, cuts, trailers, http10, limit):
    pieces = [data for data, _ in drawn] + [trailers]
    body = b"".join(pieces)
    # Reads of one piece each, or of several together where no cut falls (a stream's tail: its
    # last events, the terminal chunk and trailers in one read).
    bounds = [0, *sorted(c for c in cuts if c < len(pieces)), len(pieces)]
    reads = [b"".join(pieces[a:b]) for a, b in zip(bounds, bounds[1:])]
    reads = [r for r in reads if r]
    by_chunk = relay_body(reads, http10=http10, max_body_bytes=limit)
    if all(whole for _, whole in drawn):
        # Every read whole chunks: the same pieces of content either way, the capture's limit included.
        assert alike(by_chunk, relay_body(crlf_apart(reads), http10=http10, max_body_bytes=limit))
    if limit == 1 << 20 and not trailers.endswith(b"EXTRA"):
        one = relay_body(one_byte_reads(body), http10=http10)
        if one["unread"]:
            # The drawn bytes held a complete end (`0\r\n\n`) before the last: byte by byte, the
            # bytes past it come in reads of their own, after the connection went back to the
            # pool (another case), where a whole read holds them with the end and the connection
            # is not reused. Everything before the end must still agree.
            by_chunk, one = without(by_chunk, "released"), without(one, "released")
        assert alike(by_chunk, one, ends=False)


def _framed(pieces: list[bytes]) -> list[bytes]:
    """Each piece as one chunk read (a stream's usual read), then the terminal chunk."""
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p] + [b"0\r\n\r\n"]


def _analyzed_peak(result: dict[str, Any], max_body_bytes: int) -> tuple[list[str], int]:
    """`analyze` over what the relay captured of a gzip'd SSE answer: its notes, and the most memory
    it held at once (tracemalloc counts the inflated bytes zlib hands back)."""
    ex = Exchange("r", 0.0, 0.0, "POST", "/v1/chat/completions", max_body_bytes=max_body_bytes)
    ex.request_body = b'{"model": "m", "stream": true, "messages": []}'
    ex.status = 200
    ex.response_headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    ex.response_chunks = [result["captured"]]
    ex.chunk_ends = [len(result["captured"])]
    ex.chunk_times = [0.0]
    ex.captured_bytes = result["captured_bytes"]
    ex.response_truncated = result["truncated"]
    tracemalloc.start()
    try:
        facts = analyze(ex)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return facts.notes, peak


def test_a_gzipped_stream_past_the_cap_is_kept_and_inflated_no_further_than_the_cap():
    # The relay never looks at Content-Encoding: a compressed stream is kept up to the cap (plus
    # the read that crossed it) like any other, and the analysis inflates at most cap + 1 bytes
    # of what was kept (capture._inflate), then counts it (`decompressed_too_large`).
    cap = 64 << 10
    deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    text = base64.b64encode(os.urandom(1 << 20))  # about as long compressed as inflated
    events = [b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % text[i : i + 4096]
              for i in range(0, len(text), 4096)]  # fmt: skip
    pieces = [deflater.compress(e) + deflater.flush(zlib.Z_SYNC_FLUSH) for e in events] + [deflater.flush()]
    reads = _framed(pieces)
    result = relay_body(reads, max_body_bytes=cap)
    assert result["written"] == b"".join(reads)  # the client gets every byte, framing included
    assert result["truncated"] and cap < result["captured_bytes"] <= cap + max(map(len, pieces))
    assert result["captured"] == b"".join(pieces)[: result["captured_bytes"]]
    notes, peak = _analyzed_peak(result, cap)
    assert "response_truncated" in notes and "decompressed_too_large" in notes, notes
    assert peak < 8 * cap, peak

    # A bomb in a stream: 256 MiB of zeros from about 260 KB, all within a 1 MiB cap, so all kept.
    bomb = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block, wire = b"\0" * (1 << 20), []
    for _ in range(256):
        wire.append(bomb.compress(block) + bomb.flush(zlib.Z_SYNC_FLUSH))
    wire.append(bomb.flush())
    result = relay_body(_framed(wire), max_body_bytes=1 << 20)
    assert not result["truncated"] and result["captured"] == b"".join(wire)
    notes, peak = _analyzed_peak(result, 1 << 20)
    assert "decompressed_too_large" in notes and "response_truncated" not in notes, notes
    assert peak < 8 << 20, peak  # 256 MiB inflated whole would show here
