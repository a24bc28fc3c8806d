"""The proxy's optional C data plane (`dataplane`, design record 0067): whether it is here, its head
planner, and its front door.

The extension is built by `hatch_build.py` when a C compiler is present; without it, or when it
fails to load, `load()` says why and the Python relay serves every call. It has the two head
decisions (`Planner.plan`, `Planner.respond`) and the front door (`NativeFront`: C accepts and
reads heads; `proxy.engine: native` hands every connection to the Python relay). With
`forward=True` (second milestone, not selected by any setting yet: finished calls do not reach
the control plane until the ring exists, design record 0067) C forwards plain calls itself.
"""

from __future__ import annotations

import asyncio
import socket
from types import ModuleType
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def load() -> tuple[ModuleType | None, str]:
    """(the extension, "") or (None, why it is not available)."""
    try:
        from llmwatch.collectors.receivers.proxy import dataplane
    except ImportError as exc:  # not built (no compiler at install time), or built for another interpreter
        return None, f"the proxy's C extension is not built or does not load ({exc}); run `python hatch_build.py`"
    return dataplane, ""


def forwarding(server: Any) -> dict[str, Any]:
    """`dataplane.Front`'s forwarding settings for a `relay.RelayServer`: the upstream's address
    resolved here (the C thread never blocks on DNS), the pool's deadlines and bound, the answers.

    Raises ValueError for an upstream C cannot reach (https: TLS is the relay's)."""
    pool = server.pool
    if pool.ssl is not None:
        raise ValueError("the C data plane forwards to a plain-HTTP upstream only; https stays with the relay")
    infos = socket.getaddrinfo(pool.host, pool.port, type=socket.SOCK_STREAM)
    if not infos:
        raise ValueError(f"the upstream host {pool.host!r} does not resolve")
    address = infos[0][4]
    return {
        "upstream": (str(address[0]), int(address[1])),
        "connect_timeout_s": float(pool.connect_timeout),
        "read_timeout_s": float(pool.read_timeout),
        "body_timeout_s": float(server.body_timeout_s),
        "max_connections": int(pool.limit),
        "answers": server.error_answers(),
    }


def planner(server: Any) -> Any:
    """A `dataplane.Planner` with a `relay.RelayServer`'s settings: the upstream head it builds for a
    plain request is the one `RelayServer.new_call` builds (tests/integration/test_native_heads.py).

    Raises ImportError (with `load()`'s reason) when the extension is not available.
    """
    native, why = load()
    if native is None:
        raise ImportError(why)
    return native.Planner(
        prefix=server.prefix,
        host_header=server.host_header,
        authorization=server.auth,
        preserve_host=server.preserve_host,
        max_header_bytes=server.max_line,
        max_headers=server.max_headers,
        max_head=server.max_head,
    )


class NativeFront:
    """The C front door (`dataplane.Front`) before a `relay.RelayServer`.

    Accepts on `sock` on its own thread, reads each connection's first request head there, and
    hands the connection with the bytes read to the relay (`RelayServer.adopt`), with what is left
    of its head deadline; a head not complete in `proxy.header_timeout_s` is counted and closed as
    the relay does. Plain heads are handed over too in this milestone (forwarding them from C is
    the next step); `stats()` counts them apart. With `forward`, C forwards plain calls itself
    (`dataplane.Front`'s comment says what it does), and hands the rest over as before; nothing of
    a call forwarded in C reaches the metrics or samples yet (the ring is left to do). The caller
    keeps `sock` (and closes it).
    """

    def __init__(self, server: Any, sock: socket.socket, *, forward: bool = False) -> None:
        native, why = load()
        if native is None:
            raise ImportError(why)
        self.native = native
        self.server = server
        sock.setblocking(False)
        self.front = native.Front(
            planner=planner(server),
            listen_fd=sock.fileno(),
            header_timeout_s=server.header_timeout_s,
            **(forwarding(server) if forward else {}),
        )
        self.adopting: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.server.loop.add_reader(self.front.fileno(), self._take)
        self.front.start()

    def stats(self) -> dict[str, Any]:
        return dict(self.front.stats())

    def _take(self) -> None:
        for fd, prefix, kind, head_left_s in self.front.take():
            sock = socket.socket(fileno=fd)
            if kind == self.native.GIVE_EXPIRED:
                self.server.on_header_timeout()
                sock.close()
                continue
            task = self.server.loop.create_task(self.server.adopt(sock, prefix, head_left_s))
            self.adopting.add(task)
            task.add_done_callback(lambda done, sock=sock: self._adopted(done, sock))

    def _adopted(self, task: asyncio.Task[None], sock: socket.socket) -> None:
        self.adopting.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        # The relay could not take the connection (its loop is closing, or out of descriptors):
        # closed, counted, said once; never the client's bytes.
        self.server.proxy.metrics.internal_errors.labels(stage="relay").inc()
        log.error("native_front_handover_failed", error=type(task.exception()).__name__)
        sock.close()

    async def stop(self) -> None:
        """Stop accepting; connections still reading their first head are closed; those already
        handed over are the relay's (its `cleanup` bounds them)."""
        self.server.loop.remove_reader(self.front.fileno())
        self.front.stop()
        self._take()
        if self.adopting:
            await asyncio.wait(list(self.adopting), timeout=10)
