"""mypy, as pyproject.toml configures it, checks the whole package from the checkout.

The full lane runs `.venv/bin/mypy` (tests/run.sh); this test keeps that run honest without running
it: the configured files cover at least 90 % of the package's modules, nothing of ours is excluded
or silenced, and the core layer stays strict.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# Where each portion of the `llmwatch` namespace lives (tests/unit/test_architecture.py has the same).
PORTION_FOLDERS = ["llmwatch", "agent/llmwatch", "collectors/llmwatch", "scorers/llmwatch"]


def mypy_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]


def package_files() -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for folder in PORTION_FOLDERS for path in (ROOT / folder).rglob("*.py"))


def checked_files(cfg: dict) -> list[str]:
    roots = [f.rstrip("/") for f in cfg.get("files", [])]
    exclude = cfg.get("exclude", [])
    patterns = [exclude] if isinstance(exclude, str) else list(exclude)
    out = []
    for name in package_files():
        if not any(name == r or name.startswith(r + "/") for r in roots):
            continue
        if any(re.search(p, name) for p in patterns):
            continue
        out.append(name)
    return out


def overrides_for_our_code(cfg: dict) -> list[dict]:
    """The overrides that apply to any llmwatch module."""
    ours = []
    for override in cfg.get("overrides", []):
        modules = override["module"]
        for pattern in [modules] if isinstance(modules, str) else modules:
            if pattern == "llmwatch" or pattern.startswith("llmwatch.") or fnmatch.fnmatch("llmwatch.core.x", pattern):
                ours.append(override)
                break
    return ours


def test_mypy_checks_at_least_ninety_percent_of_the_package_files():
    cfg = mypy_config()
    every, checked = package_files(), checked_files(cfg)
    assert len(every) > 50  # the package was found at all
    assert len(checked) / len(every) >= 0.9, sorted(set(every) - set(checked))


def test_each_portion_is_a_root_mypy_resolves_imports_from():
    cfg = mypy_config()
    assert cfg.get("explicit_package_bases") is True
    assert cfg.get("namespace_packages", True) is True
    assert set(cfg["mypy_path"]) >= {".", "agent", "collectors", "scorers"}
    assert cfg.get("check_untyped_defs") is True


def test_nothing_of_ours_is_skipped_silenced_or_treated_as_a_missing_import():
    cfg = mypy_config()
    assert not cfg.get("ignore_missing_imports"), "ignore_missing_imports names third-party modules only"
    assert cfg.get("follow_imports", "normal") == "normal"
    for override in overrides_for_our_code(cfg):
        for key in ("ignore_errors", "ignore_missing_imports"):
            assert not override.get(key), (override["module"], key)
        assert override.get("follow_imports", "normal") == "normal", override["module"]


def test_the_core_layer_is_typed_strictly():
    core = [o for o in mypy_config().get("overrides", []) if "llmwatch.core.*" in o["module"]]
    assert core and core[0].get("disallow_untyped_defs") is True
    assert core[0].get("disallow_incomplete_defs") is True


def test_no_type_ignore_goes_without_an_error_code():
    bare = []
    for name in package_files():
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(r"#\s*type:\s*ignore(?!\[)", line):
                bare.append(f"{name}:{number}")
    assert not bare
