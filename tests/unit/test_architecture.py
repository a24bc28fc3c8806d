"""The package layout is a contract: one namespace, layers that import downward only, no cycles.

Layers, lowest first: `llmwatch.core` -> `llmwatch.scorers` (processing) -> `llmwatch.collectors`
(ways in and out) -> `llmwatch.agent` (runtime and CLI). A module may import its own layer and
the layers below it, never above; no two modules import each other, directly or round a loop;
no module reaches into another's private (`_name`) helpers.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Each layer is a portion of the `llmwatch` namespace package in a folder of its own: the folder
# that holds `llmwatch/<layer>/` is the root its module paths are read from.
PORTIONS = {
    "llmwatch.core": ROOT,
    "llmwatch.scorers": ROOT / "scorers",
    "llmwatch.collectors": ROOT / "collectors",
    "llmwatch.agent": ROOT / "agent",
}
RANK = {"llmwatch.core": 0, "llmwatch.scorers": 1, "llmwatch.collectors": 2, "llmwatch.agent": 3}


def modules() -> dict[str, Path]:
    """Every module of the package, named by its file's path below its portion's root."""
    found = {}
    for package, root in PORTIONS.items():
        folder = root.joinpath(*package.split("."))
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every llmwatch import, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("llmwatch"):
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names if a.name.startswith("llmwatch"))
    return out


def layer(module: str) -> str | None:
    return next((p for p in RANK if module == p or module.startswith(p + ".")), None)


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for target, names in imports(path):
            for name in names or [""]:
                full = f"{target}.{name}" if name and f"{target}.{name}" in mods else target
                if full in mods and full != mod:
                    edges[mod].add(full)
    return edges


def test_llmwatch_is_a_namespace_package_with_one_portion_per_layer() -> None:
    # No llmwatch/__init__.py in any portion: a regular package there would hide the others (or
    # need __path__ tricks that static tools cannot follow).
    assert [p for root in set(PORTIONS.values()) for p in [root / "llmwatch" / "__init__.py"] if p.exists()] == []
    for package, root in PORTIONS.items():
        assert root.joinpath(*package.split("."), "__init__.py").is_file(), package


def test_every_package_folder_is_a_regular_package() -> None:
    # A folder of modules without __init__.py would be a namespace package of its own, which a
    # wheel build and mypy treat differently; only `llmwatch` itself is a namespace.
    missing = []
    for package, root in PORTIONS.items():
        top = root.joinpath(*package.split("."))
        for folder in [top, *(p for p in top.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
            if any(folder.glob("*.py")) and not (folder / "__init__.py").exists():
                missing.append(str(folder.relative_to(ROOT)))
    assert missing == []


def test_the_wheel_holds_only_the_namespace() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'only-include = ["llmwatch", "agent/llmwatch", "collectors/llmwatch", "scorers/llmwatch"]' in text
    assert 'sources = { "agent/" = "", "collectors/" = "", "scorers/" = "" }' in text


def test_every_import_points_down_or_sideways() -> None:
    upward = []
    for mod, path in modules().items():
        own = layer(mod)
        if own is None:
            continue
        for target, _ in imports(path):
            other = layer(target)
            if other is not None and RANK[other] > RANK[own]:
                upward.append(f"{mod} imports {target}")
    assert upward == []


def test_no_import_cycles() -> None:
    edges = graph()
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert cycles == []


def test_no_private_names_imported_across_modules() -> None:
    private = []
    for mod, path in modules().items():
        for target, names in imports(path):
            private.extend(f"{mod} imports {target}.{n}" for n in names if n.startswith("_") and n != "__version__")
    assert private == []
