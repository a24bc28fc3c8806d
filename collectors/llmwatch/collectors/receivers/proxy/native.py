"""The proxy's optional C data plane (`dataplane`, design record 0067): whether it is here, its head
planner, and its front door.

The extension is built by `hatch_build.py` when a C compiler is present; without it, or when it
fails to load, `load()` says why and the Python relay serves every call. This first milestone has
the two head decisions (`Planner.plan`, `Planner.respond`) and the front door (`NativeFront`: C
accepts and reads first heads, the Python relay answers every connection). It is not yet wired
into serving, and no setting selects it.
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
    the next step); `stats()` counts them apart. The caller keeps `sock` (and closes it).
    """

    def __init__(self, server: Any, sock: socket.socket) -> None:
        native, why = load()
        if native is None:
            raise ImportError(why)
        self.native = native
        self.server = server
        sock.setblocking(False)
        self.front = native.Front(
            planner=planner(server), listen_fd=sock.fileno(), header_timeout_s=server.header_timeout_s
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
