"""`stream_ended` (collectors/llmwatch/collectors/receivers/proxy/capture.py): whether a client that
hangs up has had the stream's `data: [DONE]`, also in a compressed stream."""

from __future__ import annotations

import zlib

import pytest

from llmwatch.collectors.receivers.proxy.capture import Exchange, stream_ended

EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"Paris"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


def exchange(pieces: list[bytes], encoding: str | None = None, max_body_bytes: int = 1 << 20) -> Exchange:
    ex = Exchange("r", 0.0, 0.0, "POST", "/v1/chat/completions", max_body_bytes=max_body_bytes)
    if encoding is not None:
        ex.response_headers["content-encoding"] = encoding
    for piece in pieces:
        ex.response_chunks.append(piece)
        ex.captured_bytes += len(piece)
    ex.response_truncated = ex.captured_bytes > max_body_bytes
    return ex


def flushed(wbits: int, *events: bytes) -> list[bytes]:
    """Each event compressed and flushed as a streaming server sends it; the stream's end (the
    gzip trailer) not sent: the client hung up before it."""
    deflater = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return [deflater.compress(e) + deflater.flush(zlib.Z_SYNC_FLUSH) for e in events]


@pytest.mark.parametrize(
    ("encoding", "wbits"), [("gzip", 16 + zlib.MAX_WBITS), ("x-gzip", 31), ("deflate", zlib.MAX_WBITS)]
)
def test_a_compressed_streams_done_is_seen(encoding, wbits):
    # Before the fix: False, the compressed bytes never match.
    assert stream_ended(exchange(flushed(wbits, EVENT, DONE), encoding)) is True
    assert stream_ended(exchange(flushed(wbits, EVENT), encoding)) is False


def test_a_plain_streams_done_is_seen_as_before():
    assert stream_ended(exchange([EVENT, DONE])) is True
    assert stream_ended(exchange([EVENT, DONE], "identity")) is True
    assert stream_ended(exchange([EVENT])) is False


def test_a_compressed_stream_past_the_capture_cap_is_not_seen_to_have_ended():
    # Its end cannot be inflated without its start, which the cap kept only in part.
    pieces = flushed(31, *(EVENT for _ in range(40)), DONE)
    assert stream_ended(exchange(pieces, "gzip", max_body_bytes=64)) is False


def test_a_bomb_is_inflated_no_further_than_the_cap_and_an_unreadable_body_is_not_ended():
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    packed = bomb.compress(b"\0" * (64 << 20)) + bomb.compress(DONE) + bomb.flush()
    assert len(packed) < 1 << 20
    assert stream_ended(exchange([packed], "gzip")) is False  # 64 MiB out: over the 1 MiB cap
    assert stream_ended(exchange([b"not gzip at all " + DONE], "gzip")) is False
    assert stream_ended(exchange([DONE], "br")) is False  # not inflated here, as in the analysis
