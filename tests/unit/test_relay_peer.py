"""The relay's idle-close check without TCP_INFO (`_Upstream.peer_closed`'s MSG_PEEK fallback, for
macOS and the BSDs), forced on Linux by taking TCP_INFO away; real loopback TCP connections."""

from __future__ import annotations

import asyncio
import select
import socket
import struct
from collections.abc import Iterator

import pytest
from helpers.agents import wait_until

from llmwatch.collectors.receivers.proxy import relay


@pytest.fixture
def no_tcp_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "_TCP_INFO", None)  # as on a platform without it


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the proxy's end, the server's end) of a loopback TCP connection; the proxy's non-blocking."""
    listener = socket.create_server(("127.0.0.1", 0))
    ours = socket.create_connection(listener.getsockname())
    theirs, _ = listener.accept()
    listener.close()
    ours.setblocking(False)
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


def checked(sock: object) -> bool:
    up = relay._Upstream(None)  # type: ignore[arg-type]
    up.sock = sock
    return up.peer_closed()


def wait_readable(sock: socket.socket) -> None:
    # The peer's FIN, reset or bytes have reached this end (select: bounded, not a sleep).
    assert select.select([sock], [], [], 10)[0] == [sock]


def test_an_open_idle_connection_is_not_closed_and_stays_usable(no_tcp_info, pair):
    ours, theirs = pair
    assert checked(ours) is False
    # The look went through a socket made on the descriptor and detached: the connection is intact.
    ours.sendall(b"ping")
    assert theirs.recv(4) == b"ping"
    assert checked(ours) is False


def test_a_connection_its_server_closed_is_closed(no_tcp_info, pair):
    ours, theirs = pair
    theirs.shutdown(socket.SHUT_WR)  # the server's FIN, not yet read by the loop
    wait_readable(ours)
    # Before the fix: False without TCP_INFO, and the call went out on a closed connection.
    assert checked(ours) is True
    assert ours.fileno() >= 0 and ours.recv(1) == b""  # the FIN is still there for the loop to read


def test_a_connection_its_server_reset_is_closed(no_tcp_info, pair):
    ours, theirs = pair
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    theirs.close()
    wait_readable(ours)
    assert checked(ours) is True


def test_an_idle_connection_with_bytes_nobody_asked_for_is_not_used(no_tcp_info, pair):
    ours, theirs = pair
    theirs.sendall(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
    wait_readable(ours)
    assert checked(ours) is True
    assert ours.recv(4) == b"HTTP"  # peeked, not taken


async def _stand_in_seen_open_then_closed() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    writer = None
    try:
        _, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        await wait_until(lambda: bool(accepted))
        stand_in = writer.get_extra_info("socket")
        assert not isinstance(stand_in, socket.socket)
        assert checked(stand_in) is False
        accepted[0].write_eof()  # the server's FIN
        await wait_until(lambda: checked(stand_in))
        assert stand_in.fileno() >= 0  # detached after the look, never closed by it
    finally:
        if writer is not None:
            writer.close()
        for w in accepted:
            w.close()
        server.close()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_loops_socket_stand_in_is_looked_at_through_its_descriptor(no_tcp_info, loop):
    # What the pool holds is the transport's socket object (asyncio's TransportSocket, uvloop's
    # PseudoSocket; the proxy runs on uvloop), not a socket.socket: a descriptor, no recv.
    factory = asyncio.new_event_loop if loop == "asyncio" else pytest.importorskip("uvloop").new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_stand_in_seen_open_then_closed())
