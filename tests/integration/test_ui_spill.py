"""`llmwatch ui`'s private spill folders: a ui killed with SIGKILL (an OOM kill) runs no clean-up,
and its 0700 folder stayed in the temp directory for good. Each start now removes this user's
spill folders whose process is gone, and nothing else. Real `llmwatch ui` processes, each with
TMPDIR pointed at a folder of the test's own (the machine's /tmp is never swept by the test)."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.procs import Proc, stop_gracefully

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
        unnamed = tmp / f"{SPILL}abc123"  # a name of neither form (nor the older one, 8 characters): stays
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


# What ran in the new PID namespace before the ui: an older process of this user, alive, that makes
# an old-named folder after it started (a live maker: its folder stays), then runs the ui as its
# child and waits. Its command line must not name llmwatch (that alone keeps every old folder), so
# the ui's argv comes in the environment.
KEEPER = """
import json, os, subprocess, sys, tempfile
made = tempfile.mkdtemp(prefix=os.environ["OLD_PREFIX"], dir=os.environ["TMPDIR"])
print("keeper-made " + made, flush=True)
sys.exit(subprocess.call(json.loads(os.environ["UI_ARGV"])))
"""


def make_old_folder(tmp: Path) -> Path:
    """A folder as an older ui (before the PID was in the name) made it, by a process that has ended."""
    made = subprocess.run(
        [sys.executable, "-c", "import sys, tempfile; print(tempfile.mkdtemp(prefix=sys.argv[1], dir=sys.argv[2]))",
         SPILL, str(tmp)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    folder = Path(made.stdout.strip())
    assert re.fullmatch(r"llmwatch-ui-spill-[a-z0-9_]{8}", folder.name), folder
    (folder / "duckdb_temp_block-1.block").write_bytes(b"spilled page")
    return folder


def unshare_works() -> bool:
    try:
        done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(not unshare_works(), reason="needs unshare --pid --mount-proc (root, or user namespaces)")
def test_an_old_named_spill_folder_goes_only_once_no_live_process_of_ours_can_have_made_it(tmp_path: Path):
    """A folder of the older name (`llmwatch-ui-spill-XXXXXXXX`, no PID) is removed only when every
    live process of this user started after it was made. Outside a fresh PID namespace this test's
    own processes are older: it stays. In one (a container restarted with /tmp kept: the case of an
    OOM kill) it goes, while an old-named folder whose maker is alive, another user's, and a link
    of that name stay."""
    data_dir = tmp_path / "data"
    (data_dir / "samples").mkdir(parents=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o1777)
    dead = make_old_folder(tmp)
    others = make_old_folder(tmp)
    as_root = os.getuid() == 0
    if as_root:
        os.chown(others, 65534, 65534)
    target = tmp_path / "not-a-spill"
    target.mkdir()
    link = tmp / f"{SPILL}alinkxyz"
    link.symlink_to(target, target_is_directory=True)

    # This test (and its shell) started before the folder was made and are alive: nothing proves
    # the maker gone, so a ui started here keeps it.
    here = start_ui(data_dir, tmp)
    try:
        assert dead.is_dir() and not here.events("ui.stale_spill_removed")
    finally:
        stop_gracefully(here)
    assert not list(tmp.glob(f"{SPILL}{here.pid}-*")), "a ui stopped cleanly removes its own folder"

    ui_argv = [sys.executable, "-m", "llmwatch.agent.cli", "ui", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"]
    env = {**os.environ, "TMPDIR": str(tmp), "OLD_PREFIX": SPILL, "UI_ARGV": json.dumps(ui_argv)}
    fresh = Proc(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c", KEEPER], env=env)
    try:
        kept = Path(fresh.wait_for(r"^keeper-made (\S+)", timeout=60)[1])
        fresh.wait_for(r"llmwatch ui listening on http://127\.0\.0\.1:\d+", timeout=120)
        assert not dead.exists(), fresh.output()
        assert kept.is_dir() and link.is_symlink() and target.is_dir()
        assert others.is_dir() == as_root  # not root: it is this user's too, made by a dead process
        (event,) = fresh.events("ui.stale_spill_removed")
        assert event["folders"] == (1 if as_root else 2)
    finally:
        fresh.stop()
