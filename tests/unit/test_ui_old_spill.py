"""The rule that removes a spill folder of the older name (`llmwatch-ui-spill-XXXXXXXX`, no PID in
it): only when no live process of this user can have made it (agent/llmwatch/agent/apps/ui/index.py).
Real ui processes in a fresh PID namespace: tests/integration/test_ui_spill.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from llmwatch.agent.apps.ui.index import _old_spill_dead, _own_processes, _Process

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")


def test_a_process_of_ours_is_listed_never_younger_than_it_is():
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        after = time.time()
        processes = _own_processes(os.getuid())
        assert processes is not None
        (mine,) = [p for p in processes if p.pid == child.pid]
        # Never later than the true start (which is after `before`); within a second of it.
        assert before - 1.0 < mine.start_s <= after
        assert "sys.stdin.read()" in mine.command
        assert os.getpid() not in {p.pid for p in processes}, "the ui itself never made an old-named folder"
    finally:
        child.communicate(b"", timeout=30)


def test_an_old_folder_is_dead_only_when_every_live_process_of_ours_is_younger_and_none_is_llmwatch():
    made = 1000.0
    assert _old_spill_dead(made, []) is True
    assert _old_spill_dead(made, [_Process(7, 1000.5, "bash"), _Process(8, 2000.0, "python x.py")]) is True
    # One that started before it (or with it) may be its maker, alive: kept.
    assert _old_spill_dead(made, [_Process(7, 1000.0, "bash"), _Process(8, 2000.0, "python")]) is False
    assert _old_spill_dead(made, [_Process(7, 999.0, "sleep 1")]) is False
    # A live llmwatch of ours keeps it whatever its start says (a wall clock stepped forward since).
    assert _old_spill_dead(made, [_Process(7, 5000.0, "/usr/bin/python /usr/local/bin/llmwatch ui")]) is False
    # Without /proc nothing is proved.
    assert _old_spill_dead(made, None) is False
