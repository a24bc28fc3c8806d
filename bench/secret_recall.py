"""Secret detection: recall on the documented key formats, and false masks on ordinary text.

Recall: tests/data/secrets_corpus.jsonl (tests/data/make_secrets_corpus.py: providers' documented
formats with random bodies, and bare secrets after words such as "aws secret"; CC0): a line counts
as found when its secret is gone from the default redactor's output. False masks: the corpus's
`none` lines (sentences that name secrets without holding one) must come out unchanged, and on the
real answers of five models to AlpacaEval's 805 instructions (../shared/real-outputs, Apache-2.0)
every `[SECRET]` the redactor puts in is a false positive (those answers hold no secret).

    python bench/secret_recall.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from llmwatch.scorers.pipeline import pii
from llmwatch.scorers.pipeline.redaction import RedactionSection, Redactor

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "secrets_corpus.jsonl"


@dataclass
class Result:
    found: Counter = field(default_factory=Counter)
    total: Counter = field(default_factory=Counter)
    missed: list[tuple[str, str]] = field(default_factory=list)
    false_masks: list[str] = field(default_factory=list)  # `none` lines that changed
    real_texts: int = 0
    real_flagged: list[str] = field(default_factory=list)  # real answers with a secret finding

    def recall(self, source: str | None = None) -> float:
        if source is None:
            return sum(self.found.values()) / max(1, sum(self.total.values()))
        return self.found[source] / max(1, self.total[source])


def redactor() -> Redactor:
    made = Redactor.from_config(RedactionSection())
    assert made is not None
    return made


def evaluate(shared: Path | None) -> Result:
    red = redactor()
    out = Result()
    for raw in CORPUS.read_bytes().splitlines():
        line = orjson.loads(raw)
        if "_comment" in line:
            continue
        masked = red.text(line["text"])
        if line["kind"] == "none":
            out.total["none"] += 0
            if masked != line["text"]:
                out.false_masks.append(line["text"])
            continue
        out.total[line["source"]] += 1
        if line["secret"] not in masked:
            out.found[line["source"]] += 1
        else:
            out.missed.append((line["source"], line["text"]))
    if shared is not None:
        for path in sorted((shared / "real-outputs").glob("*.model_outputs.json.gz")):
            for item in json.loads(gzip.decompress(path.read_bytes())):
                text = item["output"]
                out.real_texts += 1
                if pii.find(text, ("api_key",)):
                    out.real_flagged.append(text)
    return out


def table(result: Result) -> str:
    lines = [f"{'source':<26} {'found':>5} {'of':>4} {'recall':>7}"]
    for source in sorted(result.total):
        if source == "none":
            continue
        lines.append(f"{source:<26} {result.found[source]:>5} {result.total[source]:>4} {result.recall(source):>7.3f}")
    lines.append(f"{'all':<26} {sum(result.found.values()):>5} {sum(result.total.values()):>4} {result.recall():>7.3f}")
    lines.append(f"false masks on the corpus's 'none' lines: {len(result.false_masks)}")
    if result.real_texts:
        lines.append(
            f"real answers with a secret finding (false positives): {len(result.real_flagged)} of {result.real_texts}"
            f" ({len(result.real_flagged) / result.real_texts:.2%})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=str(ROOT.parent / "shared"), help="the shared folder (real-outputs)")
    args = parser.parse_args()
    shared = Path(args.shared)
    started = time.perf_counter()
    result = evaluate(shared if (shared / "real-outputs").is_dir() else None)
    print(table(result))
    for source, text in result.missed:
        print(f"missed [{source}]: {text}")
    for text in result.real_flagged[:10]:
        print(f"flagged real answer: {text[:200]!r}")
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
