"""`llmwatch ui`'s private spill folders: a ui killed with SIGKILL (an OOM kill) runs no clean-up,
and its 0700 folder stayed in the temp directory for good. Each start now removes this user's
spill folders whose process is gone, and nothing else. Real `llmwatch ui` processes, each with
TMPDIR pointed at a folder of the test's own (the machine's /tmp is never swept by the test)."""

from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

from helpers.procs import Proc

SPILL = "llmwatch-ui-spill-"


def start_ui(data_dir: Path, tmp: Path) -> Proc:
    env = {**os.environ, "TMPDIR": str(tmp)}
    argv = [sys.executable, "-m", "llmwatch.agent.cli", "ui", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"]
    proc = Proc(argv, env=env)
    proc.wait_for(r"llmwatch ui listening on http://127\.0\.0\.1:\d+", timeout=120)
    return proc


def spill_of(proc: Proc, tmp: Path) -> Path:
    (folder,) = [p for p in tmp.iterdir() if p.name.startswith(f"{SPILL}{proc.pid}-")]
    return folder


def test_a_killed_uis_spill_folder_goes_at_the_next_start_and_nothing_else_does(tmp_path: Path):
    data_dir = tmp_path / "data"
    (data_dir / "samples").mkdir(parents=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o1777)
    killed = start_ui(data_dir, tmp)
    live = start_ui(data_dir, tmp)
    newer = None
    try:
        killed_folder, live_folder = spill_of(killed, tmp), spill_of(live, tmp)
        assert stat.S_IMODE(killed_folder.stat().st_mode) == 0o700
        (killed_folder / "duckdb_temp_block-1.block").write_bytes(b"spilled page")
        killed.popen.send_signal(signal.SIGKILL)
        killed.popen.wait(timeout=30)
        assert killed_folder.is_dir(), "SIGKILL runs no clean-up: the folder stays"

        # What must stay: another user's folder of a dead process, a link with a spill folder's
        # name, a folder of another name, and the live ui's folder. What must go besides the
        # killed ui's: a folder named for the live ui's PID but another start time (a PID reused).
        _, pid, start, _ = killed_folder.name.rsplit("-", 3)
        others = tmp / f"{SPILL}{pid}-{start}-otheruser"
        others.mkdir(mode=0o700)
        as_root = os.getuid() == 0
        if as_root:
            os.chown(others, 65534, 65534)
        target = tmp_path / "not-a-spill"
        target.mkdir()
        link = tmp / f"{SPILL}{pid}-{start}-alink"
        link.symlink_to(target, target_is_directory=True)
        unnamed = tmp / f"{SPILL}abc123"  # the old name: its owner cannot be told, so it stays
        unnamed.mkdir(mode=0o700)
        _, live_pid, live_start, _ = live_folder.name.rsplit("-", 3)
        reused = tmp / f"{SPILL}{live_pid}-{int(live_start) - 1}-reused"
        reused.mkdir(mode=0o700)

        newer = start_ui(data_dir, tmp)
        assert not killed_folder.exists() and not reused.exists()
        assert live_folder.is_dir() and spill_of(newer, tmp).is_dir()
        assert link.is_symlink() and target.is_dir() and unnamed.is_dir()
        assert others.is_dir() == as_root  # not root: it is this user's, of a dead process, and goes
        (event,) = newer.events("ui.stale_spill_removed")
        assert event["folders"] == (2 if as_root else 3)
    finally:
        for proc in (killed, live, newer):
            if proc is not None:
                proc.stop()
