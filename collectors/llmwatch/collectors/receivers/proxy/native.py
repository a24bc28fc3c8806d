"""The proxy's optional C data plane (`dataplane`, design record 0067): whether it is here, its head
planner, and its front door.

The extension is built by `hatch_build.py` when a C compiler is present; without it, or when it
fails to load, `load()` says why and the Python relay serves every call. It has the two head
decisions (`Planner.plan`, `Planner.respond`) and the front door (`NativeFront`: C accepts and
reads heads). With `forward=True` (the native engine, `proxy.engine: native` or `auto`'s choice)
C forwards plain calls itself and hands the rest to the Python relay, and the calls it ends reach
the proxy's metrics and finish path through the ring (`NativeFront._drain`); without it
(DATAPLANE_FORWARD=0, the benchmark's and the fuzzer's switch) it hands every connection over.
"""

from __future__ import annotations

import asyncio
import socket
from types import ModuleType
from typing import Any

import structlog

from llmwatch.collectors.receivers.proxy.capture import Exchange, stream_ended

log = structlog.get_logger(__name__)


def load() -> tuple[ModuleType | None, str]:
    """(the extension, "") or (None, why it is not available)."""
    try:
        from llmwatch.collectors.receivers.proxy import dataplane
    except ImportError as exc:  # not built (no compiler at install time), or built for another interpreter
        return None, f"the proxy's C extension is not built or does not load ({exc}); run `python hatch_build.py`"
    return dataplane, ""


# Finished calls C keeps for Python (`dataplane.Front`'s ring): past it a call is relayed and not
# captured, counted as capture_skipped{reason="ring_full"}. Python drains the whole ring each time the
# event loop runs its reader, so it fills only when the loop is that far behind.
RING_CAPACITY = 256
# ... and the bytes its records may hold together: a record keeps up to about twice
# capture.max_body_bytes (request and response), so 256 of them could hold ~512 MiB at the default.
RING_BYTES = 64 << 20

# `Front.drain`'s error codes (dataplane.c's E_*) -> the relay's proxy_errors error_type.
_ERRORS = {1: "upstream_unavailable", 2: "upstream_timeout", 3: "stream_interrupted", 4: "client_body_timeout"}
_GONE = 5
# `Front.drain`'s running counts, in order, -> the metric the relay counts for each event.
_COUNTS = (
    ("proxy_errors", "upstream_unavailable"),
    ("proxy_errors", "upstream_timeout"),
    ("proxy_errors", "stream_interrupted"),
    ("proxy_errors", "client_body_timeout"),
    ("proxy_errors", "client_disconnected"),
    ("proxy_errors", "bad_request"),
    ("capture_skipped", "ring_full"),
)


def forwarding(server: Any) -> dict[str, Any]:
    """`dataplane.Front`'s forwarding settings for a `relay.RelayServer`: the upstream's address
    resolved here (the C thread never blocks on DNS), the pool's deadlines and bound (shared with
    the relay's pool once started: `_Pool.share`), the answers, what it captures (capture.routes as
    latin-1 bytes, as the relay compares a plain path), and relay.py's constants.

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
        "routes": tuple(r.encode("latin-1") for r in server.routes if _latin1(r)),
        "max_body_bytes": int(server.proxy.cfg.capture.max_body_bytes),
        # relay.py's constants, read from the relay now: a test that changes one changes both engines
        **server.dataplane_constants(),
    }


def _latin1(route: str) -> bool:
    # A plain path is its bytes read as latin-1: a route beyond it never matches one.
    try:
        route.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


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
    the relay does. With `forward`, C forwards plain calls itself (`dataplane.Front`'s comment says
    what it does) and hands the rest over; the calls it ends come back through its ring, drained
    here into `Exchange`s for `Proxy.finish`, with its counts into the relay's metrics. Without it
    plain heads are handed over too, counted apart (`stats()`). The caller keeps `sock` (and closes it).
    """

    def __init__(
        self,
        server: Any,
        sock: socket.socket,
        *,
        forward: bool = False,
        ring_capacity: int = RING_CAPACITY,
        ring_bytes: int = RING_BYTES,
    ) -> None:
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
            ring_capacity=ring_capacity,
            ring_bytes=ring_bytes,
            **(forwarding(server) if forward else {}),
        )
        self.forward = forward
        self.closing: asyncio.Event | None = None  # set by `_take` once, shutting down, C holds no client
        self.adopting: set[asyncio.Task[None]] = set()
        self.counted = (0,) * len(_COUNTS)  # `Front.drain`'s counts already in the metrics
        metrics = server.proxy.metrics
        self._counters = [(getattr(metrics, name), label) for name, label in _COUNTS]
        # The request headers the Exchange reads (`RelayServer.read_headers`), the response's (`_Pool.wanted`).
        self._read = server.read_headers
        self._wanted = server.pool.wanted

    def start(self) -> None:
        self.server.loop.add_reader(self.front.fileno(), self._take)
        self.front.start()
        if self.forward:
            # One bound of proxy.max_connections for both engines: the relay's pool takes its slots
            # from C's count (design record 0067).
            self.server.pool.share(self.front)

    def in_flight(self) -> int:
        """Calls C is forwarding (planned, not yet ended)."""
        return int(self.front.in_flight())

    def stats(self) -> dict[str, Any]:
        return dict(self.front.stats())

    def _take(self) -> None:
        # One eventfd for all: connections handed over, calls C ended (the ring, its counts), and a
        # pool slot C gave back while calls wait in the relay's pool.
        self._handed()
        self._drain()
        self.server.pool.slot_freed()
        if self.closing is not None and self.front.held() == 0:
            self.closing.set()

    def shutdown(self) -> None:
        """Accept no more and close C's connections between calls; its calls in flight finish
        (`quiet`), as the relay's do in `cleanup`."""
        self.closing = asyncio.Event()
        self.front.shutdown()
        if self.front.held() == 0:
            self.closing.set()

    async def quiet(self) -> None:
        """Once C holds no client connection (after `shutdown`)."""
        if self.closing is not None:
            await self.closing.wait()

    def _handed(self) -> None:
        for fd, prefix, kind, head_left_s in self.front.take():
            sock = socket.socket(fileno=fd)
            if kind == self.native.GIVE_UPSTREAM:  # an idle upstream connection, for the relay's waiters
                self.server.pool.adopt(sock)
                continue
            if kind == self.native.GIVE_EXPIRED:
                self.server.on_header_timeout()
                sock.close()
                continue
            task = self.server.loop.create_task(self.server.adopt(sock, prefix, head_left_s))
            self.adopting.add(task)
            task.add_done_callback(lambda done, sock=sock: self._adopted(done, sock))

    def _drain(self) -> None:
        """The calls C forwarded and ended since the last drain, to the proxy's finish path as the
        relay hands its own (in the order they ended; `Proxy.finish` batches them), and C's counts of
        the events the relay counts as they happen, into the same metrics."""
        records, counts = self.front.drain()
        if counts != self.counted:
            for (metric, label), now, before in zip(self._counters, counts, self.counted):
                if now > before:  # a series is made when first counted, as the relay's are
                    metric.labels(label).inc(now - before)
            gateway = (counts[0] - self.counted[0], counts[1] - self.counted[1])
            rejected = counts[5] - self.counted[5]
            self.counted = counts
            if rejected:
                # Bytes after a forwarded request that the relay's parser refuses (`_Client._reject`).
                log.info("malformed_request_rejected", engine="native", calls=rejected)
            if any(gateway):
                # The relay logs each 502/504 (`relay_gateway_error`); C's are told per drain.
                log.warning(
                    "upstream_failed",
                    engine="native",
                    upstream=self.server.proxy.shown_upstream,
                    upstream_unavailable=gateway[0],
                    upstream_timeout=gateway[1],
                )
        if records:
            proxy = self.server.proxy
            for record in records:
                proxy.finish(self.exchange(record))

    def exchange(self, record: tuple[Any, ...]) -> Exchange:
        """The `Exchange` the relay would have built of the same call (`RelayServer.new_call`,
        `_Call.body_end`, `_Upstream._respond` and `_capture`, the failure paths of `_Client`)."""
        (
            method,
            path,
            (t0, started_at),
            request_head,
            request_body,
            too_large,
            status,
            response_head,
            chunks,
            ends,
            times,
            truncated,
            tail,
            t_end,
            error,
        ) = record
        proxy = self.server.proxy
        ex: Exchange = proxy.relay_exchange(method, path, _picked(request_head, self._read, b":"), t0, started_at)
        if too_large:
            ex.notes.append("request_too_large")
        else:
            ex.request_body = request_body
        if response_head is not None:
            ex.response_headers = _picked(response_head, self._wanted, b": ")
        ex.status = status
        ex.response_chunks = chunks
        ex.chunk_ends = ends
        ex.chunk_times = times
        ex.captured_bytes = ends[-1] if ends else 0
        ex.response_truncated = truncated
        ex.response_tail = tail
        ex.t_end = t_end
        if error == _GONE:
            # relay.py's `_client_gone`: a client that hangs up after the stream's [DONE] has its answer.
            if not stream_ended(ex):
                proxy.fail(ex, "client_disconnected")
        elif error:
            ex.error_type = _ERRORS[error]  # counted already, with C's counts
        return ex

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
        """Stop the thread: connections it still holds are closed, calls still in flight cut (after
        `shutdown` and `quiet`, none where they finished in time); those already handed over are the
        relay's (its `cleanup` bounds them)."""
        self.server.loop.remove_reader(self.front.fileno())
        self.front.stop()  # calls still in flight are cut, and reach the ring as the relay's cut ones do
        self._take()
        if self.adopting:
            await asyncio.wait(list(self.adopting), timeout=10)


def _picked(head: bytes, names: frozenset[bytes], sep: bytes) -> dict[str, str]:
    """The first value of each header in `names` (lower case) of a head C read or built: a plain
    request head (CRLF lines, no obs-fold; llhttp's value: leading blanks dropped, trailing kept) or
    the client's response head (`name: value` lines as C wrote them)."""
    found: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        if not line:
            break
        name, _, value = line.partition(sep)
        lower = name.lower()
        if lower in names:
            key = lower.decode("latin-1")
            if key not in found:
                found[key] = value.lstrip(b" \t").decode("latin-1")
    return found
