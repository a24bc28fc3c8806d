# The C extension built from native/dataplane.c by hatch_build.py (optional: see proxy/native.py).
from typing import Any

MORE: int
PLAIN: int
HAND_OVER: int
HEAD: int
INVALID: int
FRAME_LENGTH: int
FRAME_CHUNKED: int
FRAME_CLOSE: int
FRAME_NONE: int
GIVE_HAND_OVER: int
GIVE_PLAIN: int
GIVE_EXPIRED: int
LLHTTP_VERSION: str

class Planner:
    def __init__(
        self,
        *,
        prefix: bytes,
        host_header: bytes,
        authorization: bytes | None,
        preserve_host: bool,
        max_header_bytes: int,
        max_headers: int,
        max_head: int,
    ) -> None: ...
    def plan(self, data: bytes | bytearray | memoryview, /) -> tuple[Any, ...]: ...
    def respond(self, data: bytes | bytearray | memoryview, keep_alive: bool, closing: bool, /) -> tuple[Any, ...]: ...

class Front:
    def __init__(self, *, planner: Planner, listen_fd: int, header_timeout_s: float) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def fileno(self) -> int: ...
    def take(self) -> list[tuple[int, bytes, int, float]]: ...
    def stats(self) -> dict[str, Any]: ...
