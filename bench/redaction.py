"""Recall per kind and false-mask rate of redaction on the labelled corpus.

A positive line counts as recalled when its secret no longer occurs in the masked text and the
kind's placeholder does (so a phone number masked as a card counts as a miss). A `none` line
counts as falsely masked when redaction changes it at all. Corpus: tests/data/redaction_corpus.jsonl
(synthetic, CC0). Every kind of the detector is switched on, ipv4 included.

    python bench/redaction.py [--corpus tests/data/redaction_corpus.jsonl] [--show-misses]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from llmwatch.scorers.pipeline import pii
from llmwatch.scorers.pipeline.redaction import Redactor

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "redaction_corpus.jsonl"


@dataclass
class Table:
    total: dict[str, int] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    misses: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, text, masked)
    seconds: float = 0.0

    def recall(self, kind: str) -> float:
        return self.hits.get(kind, 0) / self.total[kind]

    @property
    def false_mask_rate(self) -> float:
        return 1.0 - self.recall("none")


def load(path: Path = CORPUS) -> list[dict]:
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return [r for r in rows if "kind" in r]  # the first line is the header comment


def evaluate(rows: list[dict], redactor: Redactor | None = None) -> Table:
    redactor = redactor or Redactor(pii.KINDS)
    table = Table()
    start = time.perf_counter()
    for row in rows:
        kind, text = row["kind"], row["text"]
        masked = redactor.text(text)
        if kind == "none":
            ok = masked == text
        else:
            ok = row["secret"] not in masked and pii.PLACEHOLDERS[kind] in masked
        table.total[kind] = table.total.get(kind, 0) + 1
        table.hits[kind] = table.hits.get(kind, 0) + int(ok)
        if not ok:
            table.misses.append((kind, text, masked))
    table.seconds = time.perf_counter() - start
    return table


def format_table(table: Table) -> str:
    lines = ["| kind | strings | recall |", "|---|---:|---:|"]
    for kind in [k for k in pii.KINDS if k in table.total]:
        lines.append(f"| {kind} | {table.total[kind]} | {table.recall(kind):.3f} |")
    n_none = table.total.get("none", 0)
    lines.append(f"| none (must stay unchanged) | {n_none} | false-mask rate {table.false_mask_rate:.3f} |")
    n = sum(table.total.values())
    lines.append(f"\n{n} strings in {table.seconds * 1000:.1f} ms ({table.seconds / n * 1e6:.1f} us per string)")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--corpus", default=str(CORPUS))
    p.add_argument("--show-misses", action="store_true")
    args = p.parse_args()
    table = evaluate(load(Path(args.corpus)))
    print(format_table(table))
    if args.show_misses:
        for kind, text, masked in table.misses:
            print(f"\n[{kind}] {text!r}\n   -> {masked!r}")


if __name__ == "__main__":
    main()
