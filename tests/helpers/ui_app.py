"""`llmwatch ui` as a real process on loopback, the port and link read from what it prints."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

from helpers.procs import Proc, agent_env


class UiServer:
    def __init__(self, data_dir: Path, *args: str) -> None:
        self.proc = Proc(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                "ui",
                "--data-dir",
                str(data_dir),
                "--listen",
                "127.0.0.1:0",
                *args,
            ],
            env=agent_env(),
        )
        try:
            self.port = int(self.proc.wait_for(r"llmwatch ui listening on http://127\.0\.0\.1:(\d+) ", 120).group(1))
            self.link = self.proc.wait_for(r"^open: (\S+)", 10).group(1)
        except BaseException:
            self.proc.stop()
            raise
        self.base = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.stop()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the redirect is the answer under test
        return None


def get(url: str, headers: dict[str, str] | None = None, follow: bool = True) -> tuple[int, dict[str, str], str]:
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode("utf-8", "replace")
