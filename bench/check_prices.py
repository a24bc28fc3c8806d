"""The shipped price table (llmwatch/core/prices.json) against LiteLLM's, row by row.

llmwatch's prices are list prices typed from the providers' pages; prices change and a typo
costs a team a wrong cost dashboard. LiteLLM keeps the most used open table of them
(`model_prices_and_context_window_backup.json`, in its wheel), so this compares every shipped
row that LiteLLM also has: input, output, cached input, cache writes and the tiers above a
prompt size (LiteLLM's `*_above_200k_tokens`). Rows LiteLLM lacks (the simulator's `sim-*`,
names LiteLLM spells only with a date or a provider prefix) are listed, not judged.

    pip download litellm --no-deps -d /tmp/lw && unzip -o /tmp/lw/litellm-*.whl \\
        'litellm/model_prices_and_context_window_backup.json' -d /tmp/lw
    python bench/check_prices.py /tmp/lw/litellm/model_prices_and_context_window_backup.json

Exit 0 when every compared field agrees, 1 when one differs, 2 when the file cannot be read.
`--emit NAME [NAME ...]` prints rows in prices.json's shape from LiteLLM's entries instead (to add
models, with the source named in the file's note), and exits 1 if one is not in LiteLLM's table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "llmwatch" / "core" / "prices.json"
# The prefixes under which LiteLLM files a provider's own API (the bare name comes first).
PREFIXES = ("", "openai/", "anthropic/", "gemini/", "mistral/", "deepseek/")
# Ours -> LiteLLM's field, per million tokens.
FIELDS = {
    "input": "input_cost_per_token",
    "output": "output_cost_per_token",
    "cached_input": "cache_read_input_token_cost",
    "cache_write": "cache_creation_input_token_cost",
}


# Fields where the shipped table differs from LiteLLM's on purpose, and why.
DELIBERATE = {
    "gemini-2.5-pro.tiers[>200k].cache_write": "Gemini bills writing a context cache as input and its storage by the hour; "
    "LiteLLM lists a write rate only above 200k tokens and none below, which reads as a slip",
}


def per_million(value: object) -> float | None:
    return round(float(value) * 1e6, 6) if isinstance(value, int | float) else None


def compare(ours: dict, theirs: dict) -> tuple[list[str], list[str]]:
    """(differences, rows LiteLLM lacks): a difference names the row, the field and both values."""
    differences, missing = [], []
    for name, row in ours["models"].items():
        found = lookup(theirs, name)
        if found is None:
            missing.append(name)
            continue
        key, entry = found
        for field, their_field in FIELDS.items():
            mine, other = row.get(field), per_million(entry.get(their_field))
            if other in (None, 0.0) and mine is None:
                continue  # neither prices it: billed at the input rate by both
            if mine is None or other is None or abs(mine - other) > 1e-9:
                differences.append(f"{name}.{field}: ours {mine}, LiteLLM[{key}] {other}")
        for tier in row.get("tiers", []):
            if tier["above_input_tokens"] != 200_000:
                continue  # LiteLLM names only the 200k boundary
            for field, their_field in FIELDS.items():
                mine, other = tier.get(field), per_million(entry.get(f"{their_field}_above_200k_tokens"))
                if mine is None and other is None:
                    continue
                if mine is None or other is None or abs(mine - other) > 1e-9:
                    differences.append(f"{name}.tiers[>200k].{field}: ours {mine}, LiteLLM[{key}] {other}")
    return differences, missing


def row_from(entry: dict) -> dict:
    """One LiteLLM entry in prices.json's shape (USD per million tokens)."""
    row: dict = {}
    for field, their_field in FIELDS.items():
        value = per_million(entry.get(their_field))
        if value is not None and (value > 0 or field in ("input", "output")):
            row[field] = value
    batch = per_million(entry.get("input_cost_per_token_batches"))
    if batch is not None and row.get("input"):
        row["batch_discount"] = round(1.0 - batch / row["input"], 6)
    tier = {}
    for field, their_field in FIELDS.items():
        value = per_million(entry.get(f"{their_field}_above_200k_tokens"))
        if value is not None:
            tier[field] = value
    if "input" in tier and "output" in tier:
        row["tiers"] = [{"above_input_tokens": 200_000, **tier}]
    return row


def lookup(theirs: dict, name: str) -> tuple[str, dict] | None:
    return next(((p + name, theirs[p + name]) for p in PREFIXES if p + name in theirs), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("litellm_json", type=Path, help="LiteLLM's model_prices_and_context_window(_backup).json")
    ap.add_argument(
        "--emit", nargs="+", metavar="NAME", help="print prices.json rows for these models from LiteLLM's table"
    )
    args = ap.parse_args()
    try:
        theirs = json.loads(args.litellm_json.read_text())
    except (OSError, ValueError) as exc:
        print(f"check_prices: cannot read {args.litellm_json}: {exc}", file=sys.stderr)
        return 2
    if args.emit:
        absent = 0
        for name in args.emit:
            found = lookup(theirs, name)
            if found is None:
                print(f"check_prices: {name} is not in LiteLLM's table", file=sys.stderr)
                absent += 1
                continue
            print(f'    "{name}": {json.dumps(row_from(found[1]))},')
        return 1 if absent else 0
    ours = json.loads(SHIPPED.read_text())
    differences, missing = compare(ours, theirs)
    compared = len(ours["models"]) - len(missing)
    print(f"{compared} of {len(ours['models'])} shipped rows compared with LiteLLM's table (as_of {ours['as_of']})")
    deliberate = [d for d in differences if d.split(":")[0] in DELIBERATE]
    differences = [d for d in differences if d not in deliberate]
    for line in deliberate:
        print(f"  differs on purpose {line} ({DELIBERATE[line.split(':')[0]]})")
    for line in differences:
        print("  DIFFERS " + line)
    if missing:
        print("  not in LiteLLM's table under that name: " + ", ".join(missing))
    print("agree" if not differences else f"{len(differences)} field(s) differ")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
