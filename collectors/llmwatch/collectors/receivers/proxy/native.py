"""The proxy's optional C data plane (`dataplane`, design record 0067): whether it is here, and its head planner.

The extension is built by `hatch_build.py` when a C compiler is present; without it, or when it
fails to load, `load()` says why and the Python relay serves every call. This first milestone has
the plain-head decision only (`Planner.plan`): it is not yet wired into serving, and no setting
selects it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


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
