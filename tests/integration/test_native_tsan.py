"""The C data plane's sharing with the event loop (the hand-over queue, the ring, the counters, the
pool's slots) under ThreadSanitizer: a short run of `bench/fuzz_dataplane.py --tsan` (the whole
list is the bench script's default), and its self-check, which proves such a run can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "fuzz_dataplane.py"

pytestmark = pytest.mark.slow


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    # The timeout bounds a hung run (a deadlock would hang, not fail); a TSan build is 5-15x
    # slower than the plain one, more on a loaded machine, so it is wide.
    if shutil.which("gcc") is None:
        pytest.skip("no gcc: the extension is optional")
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900, cwd=ROOT)
    if done.returncode == 2 and "not run:" in done.stdout:
        pytest.skip(done.stdout.strip())
    return done


def test_a_race_put_in_the_data_plane_is_reported_by_the_tsan_run():
    # A copy of dataplane.c whose count() bumps the thread's counters without the mutex stats()
    # reads them under: the run over test_native_forward.py must stop with TSan's report of it.
    done = bench("--tsan-self-check")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "the planted race was reported" in done.stdout and "in Front_stats" in done.stdout


def test_the_ring_and_the_front_door_under_tsan_find_no_race():
    done = bench("--tsan", "tests/integration/test_native_ring.py", "tests/integration/test_native_front.py")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "tsan: clean" in done.stdout and " passed" in done.stdout and "failed" not in done.stdout
