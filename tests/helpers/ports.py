"""Loopback ports for tests, in one place.

Our own processes bind port 0 and report the port they got (the simulator prints `url=...`, the
agent logs `agent_started` with proxy_port/metrics_port/ingest_port, in-process Agents expose
`proxy_port`/`metrics_port`): tests read that instead of probing. What is left here is for the
two cases where that is impossible:

- `free_port()`: ONLY for external programs that cannot report what they bound (Prometheus,
  Alertmanager, the tansu broker). Bind-close-reuse is racy on a busy machine: another process
  can take the port between the close and the program's bind (tests/helpers/prom.py retries on
  "address already in use" for that reason).
- `dead_address()`: an address where nothing listens, for tests that want connection refused.
"""

from __future__ import annotations

import socket

# Sockets bound but never listening, held for the whole test session: a connect to them is
# refused by the kernel, and since the port stays bound no other process can start listening
# there in the middle of a test (which a closed probe port could not promise).
_held: list[socket.socket] = []


def free_port() -> int:
    """A loopback port that was free a moment ago. Only for programs that cannot bind port 0 and report it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dead_address() -> str:
    """ "127.0.0.1:PORT" where nothing listens (connection refused) for the rest of the test session."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    _held.append(s)
    return f"127.0.0.1:{s.getsockname()[1]}"
