"""The proxy under hostile input: clients and upstreams that misbehave on purpose.

A sidecar sits in the path of every call, so it must never be why a call hangs, a pod runs out
of memory or a secret leaks. Each test drives the real proxy (an `Agent` on real sockets, or the
`llmwatch proxy` process) against an upstream written for the test, mostly with raw sockets,
because the faults live in bytes that well-behaved HTTP libraries never send.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import os
import signal
import struct
import subprocess
import threading
import zlib
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from helpers.agents import drained, metric, scrape
from helpers.engines import both_engines as proxy_engine  # noqa: F401  (every test on both engines)
from helpers.procs import proxy_argv
from helpers.raw_http import (
    CHAT_BODY,
    OK_JSON,
    RawUpstream,
    answer_ok,
    header,
    post,
    raw_call,
    read_body,
    read_response,
)
from helpers.upstreams import serve

from llmwatch.agent.components import load_config
from llmwatch.core.config import ConfigError

SECRET = "s3cret-Pa55"


# --- raw-socket upstreams and clients -----------------------------------------------------------


# --- 1. Expect: 100-continue --------------------------------------------------------------------


async def test_expect_100_continue_is_answered_by_the_proxy_and_not_forwarded_so_calls_never_hang(make_agent):
    # The upstream waits for the body and never sends 100 Continue: forwarded, `Expect` would
    # have the proxy wait for that 100 forever, holding one of its three pool slots per call.
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"max_connections": 3, "read_timeout_s": 30})
        for i in range(5):
            path = "/v1/chat/completions" if i % 2 == 0 else "/upload"  # captured and streamed-through
            reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
            head = post(path, CHAT_BODY, "Expect: 100-continue")[: -len(CHAT_BODY)]
            writer.write(head)
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert interim.startswith(b"HTTP/1.1 100 Continue")
            writer.write(CHAT_BODY)
            status, _, body = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            assert status == 200 and body == OK_JSON
        assert len(upstream.heads) == 5
        assert all(header(h, "expect") is None for h in upstream.heads)


# --- 2. compressed response bodies ---------------------------------------------------------------


def gzip_bomb(mebibytes: int) -> bytes:
    """A valid gzip body that inflates to `mebibytes` MiB of zeros, built in a fraction of a second.

    After a full flush the deflate stream no longer refers to earlier data, so the compressed
    form of one MiB of zeros can simply be repeated.
    """
    block = b"\0" * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    one_mib = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mebibytes):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return (
        header
        + one_mib * mebibytes
        + deflate.flush(zlib.Z_FINISH)
        + struct.pack("<II", crc, (mebibytes << 20) & 0xFFFFFFFF)
    )


class ProxyProcess:
    """`llmwatch proxy` as its own process: its memory is its own, its log is JSON on stdout."""

    def __init__(self, upstream: str, data_dir: Path) -> None:
        env = {
            **os.environ,
            "LLMWATCH_SCORING__ENABLED": "false",
            "LLMWATCH_SAMPLING__RATE": "1.0",
            "HF_HUB_OFFLINE": "1",
        }
        self.proc = subprocess.Popen(
            proxy_argv(upstream, data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.log: list[bytes] = []
        self.proxy_port = self.metrics_port = 0
        assert self.proc.stdout is not None
        # A process that never logs its start is killed, which ends the readline below.
        watchdog = threading.Timer(60, self.proc.kill)
        watchdog.start()
        try:
            for _ in range(200):  # bounded: the start-up line comes within the first few lines
                line = self.proc.stdout.readline()
                if not line:
                    break
                self.log.append(line)
                if b'"agent_started"' in line:
                    started = orjson.loads(line)
                    self.proxy_port, self.metrics_port = started["proxy_port"], started["metrics_port"]
                    break
        finally:
            watchdog.cancel()
        assert self.proxy_port, b"".join(self.log).decode(errors="replace")

    def peak_rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc status")

    def stop(self) -> bytes:
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=5)
        return b"".join(self.log) + out


async def metrics_text(port: int) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            return await resp.text()


async def test_gzip_bomb_is_relayed_untouched_and_inflated_only_up_to_the_capture_limit(tmp_path: Path):
    bomb = gzip_bomb(512)  # ~520 KB on the wire, 512 MiB inflated
    assert len(bomb) < 1 << 20  # within capture.max_body_bytes: the capture keeps all of it

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner, url = await serve(app)
    proxy = await asyncio.to_thread(ProxyProcess, url, tmp_path / "data")
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            async with session.post(f"http://127.0.0.1:{proxy.proxy_port}/v1/chat/completions", data=CHAT_BODY) as resp:
                assert resp.status == 200 and resp.headers["Content-Encoding"] == "gzip"
                assert await resp.read() == bomb
        skipped = 'llmwatch_capture_skipped_total{reason="decompressed_too_large"} 1.0'
        deadline = asyncio.get_running_loop().time() + 20
        while skipped not in await metrics_text(proxy.metrics_port):
            assert asyncio.get_running_loop().time() < deadline, "the skip was never counted"
            await asyncio.sleep(0.1)
        assert proxy.peak_rss_bytes() < 300 << 20
    finally:
        await asyncio.to_thread(proxy.stop)
        await runner.cleanup()


def gzip_sse_pieces(events: list[bytes]) -> list[bytes]:
    """A gzip'd SSE answer as servers that compress streams send it: each event compressed and
    flushed on its own, then the gzip trailer."""
    deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    pieces = [deflater.compress(e) + deflater.flush(zlib.Z_SYNC_FLUSH) for e in events]
    return [*pieces, deflater.flush()]


def streaming_upstream(pieces: list[bytes]) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"})
        await resp.prepare(request)
        for piece in pieces:
            await resp.write(piece)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


STREAM_BODY = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "long?"}]})


async def test_a_gzipped_stream_past_the_capture_cap_is_relayed_whole_and_kept_and_inflated_only_to_the_cap(
    make_agent,
):
    # 2 MiB of compressed SSE (incompressible text: about as long inflated) against a 64 KiB cap:
    # the relay keeps the first 64 KiB and a read of its compressed bytes (not the stream), inflates
    # at most 64 KiB + 1 of them, and says so in the sample and the counters.
    cap = 64 << 10
    text = base64.b64encode(os.urandom(1 << 21))
    events = [b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % text[i : i + 4096]
              for i in range(0, len(text), 4096)]  # fmt: skip
    pieces = gzip_sse_pieces([*events, b"data: [DONE]\n\n"])
    wire = b"".join(pieces)
    assert len(wire) > 32 * cap
    runner, url = await serve(streaming_upstream(pieces))
    try:
        agent = await make_agent(url, sampling={"rate": 1.0}, capture={"max_body_bytes": cap})
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            async with session.post(
                f"http://127.0.0.1:{agent.proxy_port}/v1/chat/completions", data=STREAM_BODY
            ) as resp:
                assert resp.status == 200 and resp.headers["Content-Encoding"] == "gzip"
                assert await resp.read() == wire  # relayed whole, byte for byte
        [record] = await drained(agent, 1)
        assert record["status"] == 200 and record["error_type"] is None
        notes = record["capture_notes"]
        assert "response_truncated" in notes, notes
        # What it kept inflates past the cap (base64 text barely compresses): counted, not kept.
        assert "decompressed_too_large" in notes, notes
        metrics = await scrape(agent)
        for reason in ("response_truncated", "decompressed_too_large"):
            assert metric(metrics, "llmwatch_capture_skipped_total", reason=reason) == 1, reason
    finally:
        await runner.cleanup()


async def test_a_gzip_bomb_streamed_as_sse_is_relayed_untouched_and_inflated_only_to_the_cap(tmp_path: Path):
    # The bomb of the test above, as a stream: 512 MiB of zeros inflated from about 520 KB sent in
    # 16 KiB writes, within the 1 MiB capture cap, so every compressed byte is kept; inflated, the
    # analysis stops at the cap (`decompressed_too_large`) and the process stays small.
    bomb = gzip_bomb(512)
    pieces = [bomb[i : i + (16 << 10)] for i in range(0, len(bomb), 16 << 10)]
    runner, url = await serve(streaming_upstream(pieces))
    proxy = await asyncio.to_thread(ProxyProcess, url, tmp_path / "data")
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            async with session.post(
                f"http://127.0.0.1:{proxy.proxy_port}/v1/chat/completions", data=STREAM_BODY
            ) as resp:
                assert resp.status == 200 and resp.headers["Content-Encoding"] == "gzip"
                assert await resp.read() == bomb
        skipped = 'llmwatch_capture_skipped_total{reason="decompressed_too_large"} 1.0'
        deadline = asyncio.get_running_loop().time() + 20
        while skipped not in await metrics_text(proxy.metrics_port):
            assert asyncio.get_running_loop().time() < deadline, "the skip was never counted"
            await asyncio.sleep(0.1)
        assert 'llmwatch_capture_skipped_total{reason="response_truncated"}' not in await metrics_text(
            proxy.metrics_port
        )
        assert proxy.peak_rss_bytes() < 300 << 20
    finally:
        await asyncio.to_thread(proxy.stop)
        await runner.cleanup()


async def test_deflate_and_gzip_bodies_within_the_limit_are_still_captured(make_agent):
    answers = {"gzip": gzip.compress(OK_JSON), "deflate": zlib.compress(OK_JSON)}

    async def chat(request: web.Request) -> web.Response:
        coding = (await request.json())["model"]
        return web.Response(
            body=answers[coding], headers={"Content-Type": "application/json", "Content-Encoding": coding}
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner, url = await serve(app)
    try:
        agent = await make_agent(url, sampling={"rate": 1.0})
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for coding in answers:
                async with session.post(
                    f"http://127.0.0.1:{agent.proxy_port}/v1/chat/completions", json={"model": coding, "messages": []}
                ) as resp:
                    assert await resp.read() == answers[coding]
        records = await drained(agent, 2)
        assert sorted(r["model"] for r in records) == ["deflate", "gzip"]
        assert all(r["response"]["choices"][0]["message"]["content"] == "ok" for r in records)
    finally:
        await runner.cleanup()


async def test_a_compressed_request_body_is_forwarded_as_sent_and_still_captured(make_agent):
    received: list[bytes] = []

    async def keep_body(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await read_body(head, reader))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(OK_JSON), OK_JSON)
        )
        await writer.drain()

    compressed = gzip.compress(CHAT_BODY)
    async with RawUpstream(keep_body) as upstream:
        agent = await make_agent(upstream.url, sampling={"rate": 1.0})
        for path in ("/v1/chat/completions", "/uploads"):  # captured, and streamed through
            status, _, _ = await raw_call(agent.proxy_port, post(path, compressed, "Content-Encoding: gzip"))
            assert status == 200
        assert received == [compressed, compressed]
        [record] = await drained(agent, 1)
        assert record["request"]["model"] == "m"


# --- 3. a client that leaves ---------------------------------------------------------------------


async def test_a_client_that_leaves_before_the_first_byte_cancels_the_upstream_call(make_agent):
    upstream_saw_close = asyncio.Event()

    async def think_forever(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        # Never answers; records the moment the proxy closes the connection.
        if await asyncio.wait_for(reader.read(1), 20) == b"":
            upstream_saw_close.set()
        raise ConnectionError

    async with RawUpstream(think_forever) as upstream:
        agent = await make_agent(upstream.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        writer.write(post("/v1/chat/completions", CHAT_BODY))
        await asyncio.wait_for(upstream.got_request.wait(), 5)
        writer.close()
        await asyncio.wait_for(upstream_saw_close.wait(), 5)
        deadline = asyncio.get_running_loop().time() + 5
        while metric(await scrape(agent), "llmwatch_proxy_errors_total", error_type="client_disconnected") != 1:
            assert asyncio.get_running_loop().time() < deadline, "the disconnect was never counted"
            await asyncio.sleep(0.05)


async def read_stream_until(reader: asyncio.StreamReader, until: bytes, *, gzipped: bool = False) -> None:
    """Reads a streamed answer off the proxy as a client does until `until` has come: the raw bytes,
    or, `gzipped`, the chunked body de-chunked and inflated (the head read first)."""
    if gzipped:
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    got = b""
    framed = b""
    while until not in got:
        more = await asyncio.wait_for(reader.read(65536), 5)
        assert more, got
        if not gzipped:
            got += more
            continue
        framed += more
        while (line_end := framed.find(b"\r\n")) >= 0:
            size = int(framed[:line_end], 16)
            if len(framed) < line_end + 2 + size + 2:
                break
            got += inflater.decompress(framed[line_end + 2 : line_end + 2 + size])
            framed = framed[line_end + 2 + size + 2 :]


async def hang_up_after_done_then_before_it(make_agent, *, gzipped: bool) -> tuple[list[dict], float]:
    """Two streamed calls to an upstream that never sends its body's last chunk: the first answer
    is the event "Paris" and `[DONE]`, the second the event alone. The client reads up to `[DONE]`
    (the first) or "Paris" (the second) and hangs up; the upstream waits to see the proxy close its
    connection. `gzipped`: `Content-Encoding: gzip`, each event flushed as servers that compress
    streams flush it (and the gzip trailer never comes either).

    Returns the two calls' records and the `client_disconnected` error count."""
    event = b'data: {"id":"s","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"Paris"},"finish_reason":"stop"}]}\n\n'
    plans = ["done", "cut"]
    closed = asyncio.Event()

    async def stream_then_owe_the_end(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        plan = plans.pop(0)
        deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS) if gzipped else None  # gzip framing
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            + (b"Content-Encoding: gzip\r\n" if gzipped else b"")
            + b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for piece in (event, b"data: [DONE]\n\n") if plan == "done" else (event,):
            if deflater is not None:
                piece = deflater.compress(piece) + deflater.flush(zlib.Z_SYNC_FLUSH)
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        await writer.drain()
        # The body's last chunk (0) never comes: the proxy closes this connection when its client goes.
        if await asyncio.wait_for(reader.read(1), 20) == b"":
            closed.set()
        raise ConnectionError

    stream_body = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "capital?"}]})
    async with RawUpstream(stream_then_owe_the_end) as upstream:
        agent = await make_agent(upstream.url, sampling={"rate": 1.0})
        for until in (b"data: [DONE]\n\n", b'"Paris"'):
            closed.clear()
            reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
            writer.write(post("/v1/chat/completions", stream_body))
            await read_stream_until(reader, until, gzipped=gzipped)
            writer.close()
            await asyncio.wait_for(closed.wait(), 5)
        records = await drained(agent, 2)
        return records, metric(await scrape(agent), "llmwatch_proxy_errors_total", error_type="client_disconnected")


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzipped"])
async def test_a_client_that_hangs_up_after_the_streams_done_event_has_its_whole_answer(make_agent, gzipped):
    # The official `openai` client's synchronous stream closes its connection as soon as it reads
    # `data: [DONE]`; llama.cpp's server sends the end of its chunked body in a later write, so
    # the client's close comes first. That call is complete, not `client_disconnected`; a client
    # that leaves before `[DONE]` still is.
    # Gzipped: a gzip'd SSE answer (`Content-Encoding: gzip`, each event flushed as servers that
    # compress streams flush it). The relay forwards the compressed bytes and never inflates them
    # on its hot path, so `[DONE]` was never seen in them and both calls counted as
    # `client_disconnected` before the fix.
    records, disconnected = await hang_up_after_done_then_before_it(make_agent, gzipped=gzipped)
    done = [r for r in records if r["error_type"] is None]
    cut = [r for r in records if r["error_type"] == "client_disconnected"]
    assert len(done) == 1 and len(cut) == 1, [(r["error_type"], r["finish_reason"]) for r in records]
    assert done[0]["status"] == 200 and done[0]["response"]["choices"][0]["message"]["content"] == "Paris"
    assert disconnected == 1


async def test_a_client_that_hangs_up_after_a_long_streams_done_event_has_its_whole_answer(make_agent):
    # A stream longer than capture.max_body_bytes (a few thousand tokens of SSE events pass the
    # 1 MiB default) keeps only its first bytes: its `[DONE]` was never seen, and a client that
    # hung up after it counted as `client_disconnected`.
    event = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % (b"x" * 1500)
    closed = asyncio.Event()

    async def stream_then_owe_the_end(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (event, event, b"data: [DONE]\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        await writer.drain()
        if await asyncio.wait_for(reader.read(1), 20) == b"":
            closed.set()
        raise ConnectionError

    stream_body = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "long?"}]})
    async with RawUpstream(stream_then_owe_the_end) as upstream:
        agent = await make_agent(upstream.url, sampling={"rate": 1.0}, capture={"max_body_bytes": 1024})
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        writer.write(post("/v1/chat/completions", stream_body))
        await read_stream_until(reader, b"data: [DONE]\n\n")
        writer.close()
        await asyncio.wait_for(closed.wait(), 5)
        [record] = await drained(agent, 1)
        assert record["error_type"] is None, record["error_type"]
        assert "response_truncated" in record["capture_notes"], "the body was longer than the capture cap"
        assert metric(await scrape(agent), "llmwatch_proxy_errors_total", error_type="client_disconnected") == 0


# --- 4. slow clients -----------------------------------------------------------------------------


async def test_a_client_that_trickles_its_headers_is_disconnected_after_the_header_timeout(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"header_timeout_s": 0.5})
        slow = [await asyncio.open_connection("127.0.0.1", agent.proxy_port) for _ in range(3)]

        async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
            writer.write(b"GET /v1/models HTTP/1.1\r\n")
            for line in range(100):  # at most 10 s of trickling
                try:
                    writer.write(b"X-Slow-%d: 1\r\n" % line)
                    await writer.drain()
                    if await asyncio.wait_for(reader.read(1), 0.1) == b"":
                        return line  # closed by the proxy
                except asyncio.TimeoutError:
                    continue
                except ConnectionError:
                    return line
            return -1

        lines_sent = await asyncio.gather(*(trickle(r, w) for r, w in slow))
        assert all(n >= 0 for n in lines_sent), "a slow client was never disconnected"
        assert upstream.heads == []
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_proxy_errors_total", error_type="client_header_timeout") == 3


async def test_an_idle_keep_alive_connection_is_not_cut_by_the_header_timeout(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"header_timeout_s": 0.3})
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        try:
            writer.write(post("/v1/chat/completions", CHAT_BODY))
            assert (await asyncio.wait_for(read_response(reader), 5))[0] == 200
            # Idle between requests is keepalive_timeout's business, not the head deadline's.
            await asyncio.sleep(0.9)
            writer.write(post("/v1/chat/completions", CHAT_BODY))
            assert (await asyncio.wait_for(read_response(reader), 5))[0] == 200
        finally:
            writer.close()


async def test_a_slow_request_body_is_not_cut_by_the_header_timeout(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"header_timeout_s": 0.3})
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        try:
            request = post("/v1/chat/completions", CHAT_BODY)
            head_end = len(request) - len(CHAT_BODY)
            writer.write(request[:head_end])
            for start in range(0, len(CHAT_BODY), 4):  # the body takes well over 0.3 s to arrive
                writer.write(CHAT_BODY[start : start + 4])
                await writer.drain()
                await asyncio.sleep(0.05)
            assert (await asyncio.wait_for(read_response(reader), 5))[0] == 200
        finally:
            writer.close()


# --- 5. header limits ----------------------------------------------------------------------------


async def test_long_headers_many_headers_and_long_request_lines_pass_as_common_servers_accept(make_agent):
    long_value = "v" * 20_000

    async def echo_head(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        body = orjson.dumps({"headers": len(head.split(b"\r\n")) - 1, "line": len(head.split(b"\r\n")[0])})
        writer.write(
            b"HTTP/1.1 200 OK\r\nX-Long: %s\r\nContent-Length: %d\r\n\r\n%s" % (long_value.encode(), len(body), body)
        )
        await writer.drain()

    async with RawUpstream(echo_head) as upstream:
        agent = await make_agent(upstream.url)
        many = [f"X-H-{i}: {i}" for i in range(200)]
        status, headers, body = await raw_call(agent.proxy_port, post("/v1/chat/completions", CHAT_BODY, *many))
        assert status == 200 and headers["x-long"] == long_value
        assert orjson.loads(body)["headers"] >= 200
        path = "/v1/files?q=" + "a" * 20_000
        status, _, body = await raw_call(agent.proxy_port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert status == 200 and orjson.loads(body)["line"] == len(f"GET {path} HTTP/1.1")


async def test_header_limits_are_configurable_and_enforced_both_ways(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"max_header_bytes": 10_000, "max_headers": 40})
        too_many = [f"X-H-{i}: {i}" for i in range(60)]
        assert (await raw_call(agent.proxy_port, post("/v1/chat/completions", CHAT_BODY, *too_many)))[0] == 400
        too_long = "X-Long: " + "v" * 12_000
        assert (await raw_call(agent.proxy_port, post("/v1/chat/completions", CHAT_BODY, too_long)))[0] == 400
        assert upstream.heads == []


# --- 6. absolute-form request targets -----------------------------------------------------------


async def test_absolute_form_targets_get_400_and_never_reach_another_host(make_agent):
    async with RawUpstream(answer_ok) as upstream, RawUpstream(answer_ok) as elsewhere:
        agent = await make_agent(upstream.url)
        for target in (f"http://127.0.0.1:{elsewhere.port}/v1/models", f"http://127.0.0.1:{upstream.port}/v1/models"):
            status, headers, body = await raw_call(
                agent.proxy_port, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            assert status == 400 and headers["content-type"].startswith("application/json")
            assert orjson.loads(body)["error"]["type"] == "invalid_request_error"
        # Asterisk-form is refused by aiohttp itself (parser or router), before the proxy sees it.
        assert (await raw_call(agent.proxy_port, b"GET * HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 400
        assert (await raw_call(agent.proxy_port, b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 404
        # A path that looks like an authority is still a path on the one upstream.
        status, _, _ = await raw_call(
            agent.proxy_port, f"GET //127.0.0.1:{elsewhere.port}/v1/models HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        assert status == 200
        assert [h.split(b"\r\n")[0] for h in upstream.heads] == [
            f"GET //127.0.0.1:{elsewhere.port}/v1/models HTTP/1.1".encode()
        ]
        assert elsewhere.connections == 0


# --- 7. informational responses and added headers -----------------------------------------------


async def test_no_header_is_added_to_a_relayed_response_and_an_early_hint_does_not_break_the_call(make_agent):
    async def bare(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()

    async with RawUpstream(bare) as upstream:
        agent = await make_agent(upstream.url)
        for path in ("/v1/chat/completions", "/plain"):
            status, headers, body = await raw_call(agent.proxy_port, post(path, CHAT_BODY))
            assert status == 200 and body == b"hello"
            assert set(headers) == {"content-length"}, headers


# --- 8. credentials and what error bodies say ---------------------------------------------------


async def test_upstream_credentials_are_sent_as_basic_auth_unless_the_client_brings_its_own(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(f"http://llm:{SECRET}@127.0.0.1:{upstream.port}")
        assert (await raw_call(agent.proxy_port, post("/v1/chat/completions", CHAT_BODY)))[0] == 200
        assert (
            await raw_call(
                agent.proxy_port, post("/v1/chat/completions", CHAT_BODY, "Authorization: Bearer sk-client-own")
            )
        )[0] == 200
        assert (
            header(upstream.heads[0], "authorization") == "Basic " + base64.b64encode(f"llm:{SECRET}".encode()).decode()
        )
        assert header(upstream.heads[1], "authorization") == "Bearer sk-client-own"


async def test_credentials_in_the_upstream_url_never_appear_in_the_log_or_error_bodies(tmp_path: Path):
    proxy = await asyncio.to_thread(
        ProxyProcess, f"http://llm:{SECRET}@127.0.0.1:9", tmp_path / "data"
    )  # port 9: nothing listens
    try:
        status, _, body = await raw_call(proxy.proxy_port, post("/v1/chat/completions", CHAT_BODY))
        assert status == 502
        message = orjson.loads(body)["error"]["message"]
        assert SECRET not in message and "http://***@127.0.0.1:9" in message
    finally:
        output = await asyncio.to_thread(proxy.stop)
    assert b'"agent_started"' in output and SECRET.encode() not in output


def test_an_invalid_upstream_url_is_reported_without_its_password():
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides={"upstream": f"ftp://llm:{SECRET}@127.0.0.1:21"}, environ={})
    assert "upstream" in str(err.value) and "ftp://***@127.0.0.1:21" in str(err.value)
    assert SECRET not in str(err.value)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nX-Token: LEAKED-%s\r\nContent-Length: 2\r\n\r\nok" % (b"t" * 70_000),
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\nX-Token: LEAKED\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 2OO LEAKED\r\n\r\n",
    ],
    ids=["header-over-limit", "length-and-chunked", "bad-status-line"],
)
async def test_502_bodies_say_what_happened_in_fixed_words_never_the_upstream_bytes(make_agent, answer):
    async def broken(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_body(head, reader)
        writer.write(answer)
        await writer.drain()
        raise ConnectionError

    async with RawUpstream(broken) as upstream:
        agent = await make_agent(upstream.url)
        status, _, body = await raw_call(agent.proxy_port, post("/v1/chat/completions", CHAT_BODY))
        assert status == 502
        assert b"LEAKED" not in body and orjson.loads(body)["error"]["type"] == "upstream_unavailable"


# --- 9. attribution -----------------------------------------------------------------------------


async def test_retries_with_the_same_client_request_id_are_distinct_samples(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url, sampling={"rate": 1.0})
        for _ in range(2):
            assert (
                await raw_call(agent.proxy_port, post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: retry-me"))
            )[0] == 200
        records = await drained(agent, 2)
        assert len({r["id"] for r in records}) == 2
        assert [r["client_request_id"] for r in records] == ["retry-me", "retry-me"]


async def test_junk_model_names_sent_first_do_not_push_real_models_into_other(make_agent):
    async def models(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        model = orjson.loads(await read_body(head, reader))["model"]
        if model not in ("served-model", "gpt-4o"):
            body = orjson.dumps({"error": {"message": "model not found", "type": "invalid_request_error"}})
            writer.write(
                b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
        else:
            body = orjson.dumps(
                {
                    "object": "chat.completion",
                    "model": model + "-2025-01-01",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                    ],
                }
            )
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        await writer.drain()

    async with RawUpstream(models) as upstream:
        agent = await make_agent(upstream.url, metrics={"max_models": 3, "models": ["allowed-model"]})

        async def call(model: str) -> None:
            await raw_call(
                agent.proxy_port, post("/v1/chat/completions", orjson.dumps({"model": model, "messages": []}))
            )

        for i in range(6):
            await call(f"junk-{i}")
        for model in ("served-model", "gpt-4o", "allowed-model"):  # answered by the upstream / priced / configured
            await call(model)
        samples = await scrape(agent)
        count = "gen_ai_client_operation_duration_seconds_count"
        for model in ("served-model", "gpt-4o", "allowed-model"):
            assert metric(samples, count, gen_ai_request_model=model) == 1, model
        assert metric(samples, count, gen_ai_request_model="other") == 3  # junk-3..5: past the cap of 3
