"""Pass rates per check and model version, as a small text table for people."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

# (check, model_version, result) -> count
Counts = Mapping[tuple[str, str, str], float]


def count_scores(scores: Iterable) -> dict[tuple[str, str, str], float]:
    counts: dict[tuple[str, str, str], float] = defaultdict(float)
    for s in scores:
        counts[(s.check, s.model_version or "unknown", s.result)] += 1
    return counts


def pass_rate_table(counts: Counts) -> str:
    """Rows: checks; columns: versions; cells: pass rate over pass+fail, with n and errors."""
    checks = sorted({c for c, _, _ in counts})
    versions = sorted({v for _, v, _ in counts})
    if not checks:
        return "  (no scores)"
    width = max(len(c) for c in checks)
    lines = ["  " + "check".ljust(width) + "".join(f"  {('version ' + v)[:28]:>28}" for v in versions)]
    for check in checks:
        cells = []
        for v in versions:
            passed = counts.get((check, v, "pass"), 0)
            failed = counts.get((check, v, "fail"), 0)
            errors = counts.get((check, v, "error"), 0)
            n = passed + failed
            cell = f"{passed / n:6.1%} of {n:>5.0f}" if n else "     -"
            if errors:
                cell += f" ({errors:.0f} err)"
            cells.append(f"  {cell:>28}")
        lines.append("  " + check.ljust(width) + "".join(cells))
    return "\n".join(lines)
