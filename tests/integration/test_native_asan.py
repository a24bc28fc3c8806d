"""The C planner reads nothing out of bounds and does nothing undefined on hostile input: a short
run of bench/fuzz_dataplane.py (AddressSanitizer and UBSan; the long run is the bench script)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_hostile_requests_and_responses_through_the_sanitized_planner_find_nothing():
    if shutil.which("gcc") is None:
        pytest.skip("no gcc: the extension is optional")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fuzz_dataplane.py"), "--cases", "1500", "--seed", "29"],
        capture_output=True,
        text=True,
        timeout=900,  # bounds a hung run; a sanitized build is slow, slower on a loaded machine
    )
    if done.returncode == 2 and "not run:" in done.stdout:
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "1500 cases" in done.stdout and "sanitizers: clean" in done.stdout
