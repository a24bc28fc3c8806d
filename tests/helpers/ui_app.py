"""`llmwatch ui` as a real process on loopback, the port and link read from what it prints."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

import orjson

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


def records(folder: Path) -> list[dict]:
    """Every record of the folder's .jsonl files, in file name order: what the UI reads."""
    return [
        orjson.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_bytes().splitlines() if line
    ]


def count(body: str) -> int:
    """The number of matching samples a list page says it has."""
    m = re.search(r'<p id="count"><strong>([\d,]+)</strong>', body)
    assert m, body[:2000]
    return int(m.group(1).replace(",", ""))


def listed_ids(body: str) -> list[str]:
    """The sample ids a list page links to, in its order."""
    return re.findall(r'class="sample-link" href="/samples/([^"]+)"', body)
