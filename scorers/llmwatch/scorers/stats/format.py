"""How an interval is written wherever llmwatch shows one: with its level, so 0.91 [0.88, 0.93] is
never read as a range of certainty or taken for a 95 % interval when it is a 90 % one."""

from __future__ import annotations


def interval_text(lo: float | None, hi: float | None, confidence: float, spec: str = ".3f", unit: str = "") -> str:
    """`[lo, hi] (90 % interval)`; `-` for a bound that is not known."""

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:{spec}}{unit}"

    return f"[{f(lo)}, {f(hi)}] ({100 * confidence:.0f} % interval)"
