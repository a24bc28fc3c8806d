"""The C front door (`native.NativeFront`, design record 0067 step 2): a thread of its own accepts on
the listening socket and reads each connection's first head on raw epoll; the Python relay then
answers every connection, so a client must not be able to tell it from a connection the relay
accepted itself. Real sockets, a real relay, a recording upstream."""

from __future__ import annotations

import asyncio
import shutil
import socket
from contextlib import asynccontextmanager

import pytest
from helpers.agents import metric, scrape, wait_until
from helpers.planners import smallest_planner
from helpers.raw_http import CHAT_BODY, OK_JSON, RawUpstream, answer_ok, header, post, read_body, read_response

from llmwatch.collectors.receivers.proxy import native

dataplane, why = native.load()
if dataplane is None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the extension is optional", allow_module_level=True)
    raise ImportError(why)

PLAIN = post("/v1/chat/completions", CHAT_BODY, "X-Request-Id: front-1")
CASES = {
    "plain": (PLAIN, 1),
    "plain-get-closing": (b"GET /v1/models HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 1),
    "pipelined": (PLAIN + post("/v1/other", b'{"n": 2}'), 2),
    "two-hosts": (b"GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 1),
    "http-1.0": (b"GET /v1/models HTTP/1.0\r\n\r\n", 1),
    "chunked-upload": (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY),
        1,
    ),
    "dot-segments": (b"GET /v1/../../etc HTTP/1.1\r\nHost: h\r\n\r\n", 1),
    "junk": (b"NOT HTTP AT ALL\r\n\r\n", 1),
}


@asynccontextmanager
async def front_of(relay):  # type: ignore[no-untyped-def]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        front = native.NativeFront(relay, listener)
        front.start()
        try:
            yield front, listener.getsockname()[1]
        finally:
            await front.stop()


async def exchange(port: int, data: bytes, answers: int, *, pieces: int = 1) -> list[tuple[int, dict[str, str], bytes]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        step = max(1, len(data) // pieces)
        for at in range(0, len(data), step):
            writer.write(data[at : at + step])
            await writer.drain()
        return [await asyncio.wait_for(read_response(reader), 10) for _ in range(answers)]
    finally:
        writer.close()


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = b""
    for _ in range(10_000):  # chunks per body, far more than any case sends
        size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
        body += (await reader.readexactly(size + 2))[:-2]
        if size == 0:
            return body
    raise AssertionError("too many chunks")


@pytest.mark.parametrize("case", sorted(CASES))
async def test_every_kind_of_request_through_the_front_gets_what_the_relay_answers_directly(make_agent, case):
    data, answers = CASES[case]
    received: list[tuple[bytes, bytes]] = []

    async def record(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The head and the body's content (a chunked upload is re-chunked as it is read, so its
        # framing depends on how the bytes arrived, on either engine).
        body = await read_chunked(reader) if header(head, "transfer-encoding") else await read_body(head, reader)
        received.append((head, body))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OK_JSON), OK_JSON))
        await writer.drain()

    async with RawUpstream(record) as upstream:
        agent = await make_agent(upstream.url)
        expected = await exchange(agent.proxy_port, data, answers)
        direct = list(received)
        async with front_of(agent.proxy.relay) as (front, port):
            got = await exchange(port, data, answers)
            # The same bytes in eleven pieces: the head is read across reads in C.
            again = await exchange(port, data, answers, pieces=11)
            stats = front.stats()
        assert got == expected and again == expected
        assert received == direct * 3 and len(upstream.heads) == len(direct) * 3
        assert stats["accepted"] == 2 and stats["handed"] == 2 and stats["running"]
        assert stats["plain"] == (2 if case.startswith("plain") or case == "pipelined" else 0)


async def test_many_clients_at_once_are_all_answered(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        async with front_of(agent.proxy.relay) as (front, port):
            results = await asyncio.gather(*(exchange(port, PLAIN, 1) for _ in range(64)))
            stats = front.stats()
        assert all(status == 200 for ((status, _, _),) in results)
        assert stats["accepted"] == 64 and stats["plain"] == 64


async def test_a_head_that_never_completes_is_closed_at_the_head_deadline_and_counted(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url, proxy={"header_timeout_s": 0.5})
        async with front_of(agent.proxy.relay) as (front, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\n")
                await writer.drain()
                # Closed without an answer (as the relay closes its own): EOF, within a bound.
                assert await asyncio.wait_for(reader.read(), 10) == b""
            finally:
                writer.close()
            stats = front.stats()
        assert stats["expired"] == 1 and stats["handed"] == 1
        assert upstream.heads == []
        # Counted by the relay, as it counts its own expired heads (a scrape runs what waits first).
        assert metric(await scrape(agent), "llmwatch_proxy_errors_total", error_type="client_header_timeout") == 1


async def test_a_client_that_leaves_before_a_byte_is_dropped_and_one_whose_head_is_cut_gets_the_relays_answer(
    make_agent,
):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        expected = b""
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.proxy_port)
        writer.write(b"GET /v1/models HT")
        writer.write_eof()
        expected = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        async with front_of(agent.proxy.relay) as (front, port):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            await wait_until(lambda: front.stats()["left"] == 1, 10)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /v1/models HT")
            writer.write_eof()
            got = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            stats = front.stats()
        assert got == expected
        assert stats["accepted"] == 2 and stats["left"] == 1 and stats["handed"] == 1


async def test_stopping_closes_the_connections_still_reading_their_head_and_the_thread_ends(make_agent):
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            front = native.NativeFront(agent.proxy.relay, listener)
            front.start()
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
            writer.write(b"GET /v1/models HTTP/1.1\r\n")
            await writer.drain()
            await wait_until(lambda: front.stats()["accepted"] == 1, 10)
            await front.stop()
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
            stats = front.stats()
        assert not stats["running"] and stats["left"] == 1 and stats["handed"] == 0


def test_a_front_never_started_closes_every_descriptor_it_opened():
    # A Front made and dropped without start() (its settings refused by the caller, or the proxy
    # stopping first) closes its epoll and its three eventfds, as a started one does in stop().
    import gc
    import os

    def polling() -> list[str]:  # this process's epoll and eventfd descriptors (the Front's kinds)
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # the listing's own descriptor, closed since
                continue
            if target in ("anon_inode:[eventfd]", "anon_inode:[eventpoll]"):
                found.append(fd)
        return sorted(found)

    planner = smallest_planner(dataplane)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        for start in (False, True):
            gc.collect()  # earlier tests' garbage (event loops, Fronts) closes its own descriptors first
            before = polling()
            for _ in range(3):
                front = dataplane.Front(planner=planner, listen_fd=listener.fileno(), header_timeout_s=60)
                if start:
                    front.start()
                    front.stop()
                del front
                gc.collect()
            assert polling() == before, f"started: {start}"


_EXHAUSTED_CHILD = r"""
import json, resource, socket, sys
from llmwatch.collectors.receivers.proxy import dataplane

resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(128)
listener.setblocking(False)
planner = dataplane.Planner(prefix=b"", host_header=b"Host: up\r\n", authorization=None, preserve_host=False,
                            max_header_bytes=8190, max_headers=32, max_head=8190 * 33)
front = dataplane.Front(planner=planner, listen_fd=listener.fileno(), header_timeout_s=60)
front.start()
print(json.dumps({"port": listener.getsockname()[1]}), flush=True)
held = []
for line in sys.stdin:
    command = line.strip()
    if command in ("hold", "drain"):  # held: the handed-over descriptors stay in use
        held += [socket.socket(fileno=fd) for fd, *_ in front.take()]
    if command == "drain":
        for sock in held:
            sock.close()
        held = []
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({**front.stats(), "cpu": usage.ru_utime + usage.ru_stime}), flush=True)
    if command == "quit":
        break
front.stop()
"""


def test_out_of_descriptors_the_front_stops_watching_the_listener_for_a_while_and_then_accepts_the_rest():
    import json
    import subprocess
    import sys
    import time

    child = subprocess.Popen(
        [sys.executable, "-c", _EXHAUSTED_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    clients: list[socket.socket] = []

    def ask(command: str) -> dict:
        child.stdin.write(command + "\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        return json.loads(child.stdout.readline())  # type: ignore[union-attr]

    try:
        port = json.loads(child.stdout.readline())["port"]
        for _ in range(60):  # more than the child's 40 descriptors: they wait in the backlog
            client = socket.create_connection(("127.0.0.1", port), timeout=10)
            client.sendall(b"GET /v1/models HTTP/1.1\r\nHost: h\r\n\r\n")
            clients.append(client)
        deadline = time.monotonic() + 30
        while (stats := ask("hold"))["accept_pauses"] == 0:
            assert time.monotonic() < deadline, stats
            time.sleep(0.02)
        assert stats["accepted"] < 60
        # Descriptors free again: the front watches the listener again and takes every one left.
        while (stats := ask("drain"))["handed"] < 60:
            assert time.monotonic() < deadline, stats
            time.sleep(0.02)
        assert stats["accepted"] == 60 and stats["plain"] == 60 and stats["running"]
        ask("quit")
        assert child.wait(timeout=30) == 0
    finally:
        for client in clients:
            client.close()
        if child.poll() is None:
            child.kill()
            child.wait()


async def test_an_accepted_connection_has_tcp_nodelay_as_asyncio_gives_its_own(make_agent):
    # Without it, an answer written in two sends waits for the client's delayed ACK: measured as
    # 40 ms added to every plain call forwarded in C (bench/peers.py llmwatch-cfwd, p50 92 ms
    # against 52), the CPU figures unchanged.
    async with RawUpstream(answer_ok) as upstream:
        agent = await make_agent(upstream.url)
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(8)
            listener.setblocking(False)
            front = dataplane.Front(
                planner=native.planner(agent.proxy.relay), listen_fd=listener.fileno(), header_timeout_s=10
            )
            front.start()
            try:
                with socket.create_connection(listener.getsockname(), timeout=10) as client:
                    client.sendall(b"NOT HTTP\r\n\r\n")  # handed over at once
                    taken: list = []
                    await wait_until(lambda: bool(taken.extend(front.take()) or taken))
                    with socket.socket(fileno=taken[0][0]) as accepted:
                        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            finally:
                front.stop()
