"""`llmwatch review serve` as a real process, and where it listens."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.browser import browser_fixture, console_errors, failed_requests, network_events, requested_urls, screenshot  # noqa: F401


class Server:
    """`llmwatch review serve` as a child process; the port and the links come from what it prints."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = open(tmp_path / "serve.stderr", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llmwatch.agent.cli", "review", "serve", "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            cwd=tmp_path,
        )
        self.links: dict[str, str] = {}
        self.port = 0
        expected = 1 + sum(
            len(a.split(",")) for flag, a in zip(args, args[1:]) if flag in ("--reviewers", "--arbiters")
        )
        try:
            lines = self._read_lines(expected, deadline=time.monotonic() + 60)
        except BaseException:
            self.proc.kill()  # the child this test started, by its own handle
            self.stop()
            raise
        self.port = int(re.match(r"review app listening on http://127\.0\.0\.1:(\d+) ", lines[0]).group(1))  # type: ignore[union-attr]
        for line in lines[1:]:
            role_name, url = line.split(": ", 1)
            self.links[role_name.split(" ", 1)[1]] = url

    def _read_lines(self, n: int, deadline: float) -> list[str]:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        buf = b""
        # Raw reads, not readline(): a buffered reader could hold lines that select() no longer sees.
        while buf.count(b"\n") < n:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise AssertionError(
                    f"review serve printed {buf!r} before {'exiting' if self.proc.poll() is not None else 'the deadline'}"
                )
            if sel.select(timeout=left):
                buf += os.read(self.proc.stdout.fileno(), 65536)  # type: ignore[union-attr]
        sel.close()
        return buf.decode().splitlines()[:n]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=15)
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.log.close()
        return code
