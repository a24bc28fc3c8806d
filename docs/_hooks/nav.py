"""MkDocs hook: a page dropped into a section's folder appears in that section of the nav.

mkdocs.yml lists the pages of each section in reading order; every section's pages live in one
folder (guide/, operations/, design/, ...). A page added to such a folder and not yet listed is
appended to its section, sorted by path (so design records 0040, 0041, ... line up by number),
instead of being left out of the navigation. Listing it in mkdocs.yml moves it to its place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pages(items: list[Any]) -> list[str]:
    """Every page path listed under these nav items, sections included."""
    out: list[str] = []
    for item in items:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            out.extend(_pages(value))
        elif isinstance(value, str) and value.endswith(".md"):
            out.append(value)
    return out


def _folder(items: list[Any]) -> str | None:
    """The one folder a section's listed pages live in (pages at the top level aside), else None."""
    folders = {p.split("/")[0] for p in _pages(items) if "/" in p}
    return folders.pop() if len(folders) == 1 else None


def on_config(config: Any, **kwargs: Any) -> Any:
    nav = config.get("nav")
    if not nav:
        return config
    docs = Path(config["docs_dir"])
    listed = set(_pages(nav))
    for item in nav:
        if not (isinstance(item, dict) and isinstance(next(iter(item.values())), list)):
            continue
        items = next(iter(item.values()))
        folder = _folder(items)
        if folder is None:
            continue
        found = sorted(p.relative_to(docs).as_posix() for p in (docs / folder).rglob("*.md"))
        items.extend(p for p in found if p not in listed and not p.split("/")[-1].startswith("_"))
    return config
