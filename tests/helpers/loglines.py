"""A module's structlog lines, recorded whatever structlog's global set-up is.

`structlog.testing.capture_logs` sees only what passes the configured level: after an in-process
command has configured logging at `warning` (as commands do, and the full suite runs many), a
test waiting for an `info` line through it waits in vain. Put a `LogLines` in place of the
module's `log` (monkeypatch) instead.
"""

from __future__ import annotations

from typing import Any


class LogLines:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def _line(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, **fields})

    debug = info = warning = error = exception = critical = _line

    @property
    def events(self) -> list[str]:
        return [line["event"] for line in self.lines]
