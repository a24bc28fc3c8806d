"""The README's fast lane (`bash tests/run.sh --fast`) runs tests/unit with the `dev` extra only.

Twice a unit file imported an optional extra (pyarrow, matplotlib) at its top and the fast lane
stopped at collection on a fresh clone, while the full lane, which installs every extra, stayed
green. This collects tests/unit in a child interpreter that cannot import what `dev` does not
install, so such a file fails here, in the full lane, and not only on a user's machine.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]

# Installed in the child's import path: every module outside the fast lane fails to import as it
# would on a machine without it (ModuleNotFoundError, which importorskip turns into a skip).
BLOCKER = """
import importlib.abc, json, sys
BLOCKED = set(json.loads(sys.argv[1]))
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the fast lane)", name=name)
        return None
sys.meta_path.insert(0, Absent())
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def _fast_lane_distributions() -> set[str]:
    """llmwatch's own requirements and its `dev` extra's, with everything they require in turn."""
    wanted: list[str] = []
    for text in md.requires("llmwatch") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": "dev"}):
            wanted.append(_name(text))
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                wanted.append(_name(text))
    return seen


def _modules_outside_the_fast_lane() -> list[str]:
    inside = _fast_lane_distributions()
    blocked = []
    for module, dists in md.packages_distributions().items():
        if module.startswith("_") or module == "llmwatch":
            continue
        if not any(_name(dist) in inside for dist in dists):
            blocked.append(module)
    return sorted(blocked)


def test_the_blocked_set_is_the_extras_and_not_the_fast_lanes_own_tools() -> None:
    pytest.importorskip("pyarrow")  # in the fast lane itself no extra is installed to block
    blocked = set(_modules_outside_the_fast_lane())
    # One module of each extra the full lane installs, so the check is not vacuous ...
    assert {"pyarrow", "matplotlib", "kafka", "torch", "sentence_transformers"} <= blocked
    # ... and none of what `dev` and the base install give.
    assert not {"pytest", "hypothesis", "numpy", "scipy", "duckdb", "pydantic", "h11"} & blocked


def _plugins_args() -> list[str]:
    """The pytest plugins the fast lane has, loaded by name (the others' entry points are not)."""
    inside = _fast_lane_distributions()
    args = []
    for entry in md.entry_points(group="pytest11"):
        if entry.dist is not None and _name(entry.dist.name) in inside:
            args += ["-p", entry.value]
    return args


def test_every_unit_file_is_collected_without_the_optional_extras() -> None:
    blocked = _modules_outside_the_fast_lane()
    # Plugins of packages outside the fast lane (trio's for hypothesis, say) are not loaded there.
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "HYPOTHESIS_NO_PLUGINS": "1"}
    args = ["tests/unit", "--collect-only", "-q", "-p", "no:cacheprovider", *_plugins_args()]
    result = subprocess.run(
        [sys.executable, "-c", BLOCKER, json.dumps(blocked), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR ")]
    assert result.returncode == 0 and not errors, (
        "a unit file imports an optional extra at its top; the fast lane would stop at collection. "
        "Skip it without the extra (`pytest.importorskip(...)`, as its neighbours do):\n"
        + "\n".join(errors or result.stdout.splitlines()[-20:])
    )
