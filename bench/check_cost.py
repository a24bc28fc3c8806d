"""CPU per sampled call by check kind: each check of the built-in suite (and every embedding kind)
alone over the same samples, process CPU time per sample (with that of child processes) after a
warm-up batch (model load excluded), with the scorer's defaults (one torch thread, batches of 32).

    python bench/check_cost.py [--samples 256] [--rules-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import orjson

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scoring_throughput import samples as make_samples  # noqa: E402

from llmwatch.core.records import Sample  # noqa: E402
from llmwatch.scorers.checks.config import CheckSpec  # noqa: E402
from llmwatch.scorers.checks.suite import DEFAULT_EMBEDDING_CHECKS, DEFAULT_RULE_CHECKS, Suite  # noqa: E402

EXTRA_EMBEDDING = [
    {"name": "embedding_repetition", "kind": "embedding_repetition"},
]
# Kinds measured on samples of their own shape (the default samples offer no tools).
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}


EXTRA_RULE = [
    {"name": "fields", "kind": "fields"},
    {"name": "input_truncated", "kind": "input_truncated"},
    {"name": "code_exec", "kind": "code_exec"},
]
PROGRAM = "```python\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint(fib(15))\n```"


def code_samples(items: list[Sample]) -> list[Sample]:
    """The same calls answered with a short Python program in a fenced block."""
    message = {"role": "assistant", "content": "Here it is:\n\n" + PROGRAM}
    return [
        s.model_copy(update={"response": {"choices": [{"message": message, "finish_reason": "stop"}]}}) for s in items
    ]


def cpu_s() -> float:
    """This process's CPU time and that of its finished children (code_exec runs the answer in one)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


CONTRACT = " ".join(["Summarise the attached contract clause about payment terms and late fees."] * 40)


def long_prompt_samples(items: list[Sample]) -> list[Sample]:
    """The same calls with a 520-word prompt; one in four reported as cut to 256 tokens."""
    out = []
    for i, s in enumerate(items):
        request = {
            **s.request,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": CONTRACT}],
        }
        usage = {"input_tokens": 256 if i % 4 == 3 else 700, "output_tokens": 60}
        out.append(s.model_copy(update={"request": request, "usage": s.usage.model_copy(update=usage)}))
    return out


INVOICE = {
    "number": "INV-0042",
    "date": "2024-05-01",
    "total": 1234.5,
    "customer": {"name": "Ada Lovelace", "country": "GB"},
    "items": ["paper", "ink", "toner"],
}


def field_samples(items: list[Sample]) -> list[Sample]:
    """The same calls answering an extraction in JSON against a reference of 6 fields; one in four gets the date wrong."""
    out = []
    for i, s in enumerate(items):
        answer = {**INVOICE, "total": "$1,234.50", "date": "May 2, 2024" if i % 4 == 3 else "May 1, 2024"}
        message = {"role": "assistant", "content": orjson.dumps(answer).decode()}
        out.append(
            s.model_copy(
                update={
                    "metadata": {"reference": INVOICE},
                    "response": {"choices": [{"message": message, "finish_reason": "stop"}]},
                }
            )
        )
    return out


def tool_samples(items: list[Sample]) -> list[Sample]:
    """The same calls, each offering two tools and answered with one call; one in four breaks its schema."""
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
    ]
    out = []
    for i, s in enumerate(items):
        args = '{"city": "Paris", "days": "3"}' if i % 4 == 3 else '{"city": "Paris", "days": 3, "unit": "celsius"}'
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": args}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        out.append(
            s.model_copy(
                update={
                    "request": {**s.request, "tools": tools},
                    "response": {"choices": [{"message": message, "finish_reason": "tool_calls"}]},
                }
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rules-only", action="store_true", help="skip the embedding kinds (no model load)")
    args = ap.parse_args()
    plain = make_samples(args.samples)
    shaped = {
        "tool_call": tool_samples(plain),
        "fields": field_samples(plain),
        "input_truncated": long_prompt_samples(plain),
        "code_exec": code_samples(plain),
    }
    rows = []
    shared = None
    specs = DEFAULT_RULE_CHECKS + EXTRA_RULE + ([] if args.rules_only else DEFAULT_EMBEDDING_CHECKS + EXTRA_EMBEDDING)
    for spec in specs:
        items = shaped.get(spec["kind"], plain)
        suite = Suite([CheckSpec.model_validate(spec)], torch_threads=1)
        if suite.embedder is not None:
            # One model for every embedding kind: only its CPU per sample is measured here.
            if shared is None:
                shared = suite.embedder.embedder
            suite.embedder.embedder = shared
        suite.score(items[: args.batch])  # warm-up
        started = cpu_s()
        for i in range(0, len(items), args.batch):
            suite.score(items[i : i + args.batch])
        rows.append((spec["name"], spec["kind"], (cpu_s() - started) / len(items)))
    print(
        f"CPU per sampled call by check, {len(items)} samples, batches of {args.batch}, one torch thread, {time.strftime('%Y-%m-%d')}"
    )
    print()
    print("| check | kind | CPU per sample | in the default suite |")
    print("|---|---|---|---|")
    defaults = {s["name"] for s in DEFAULT_RULE_CHECKS + DEFAULT_EMBEDDING_CHECKS}
    for name, kind, cpu in rows:
        print(f"| {name} | {kind} | {cpu * 1e3:.2f} ms | {'yes' if name in defaults else 'no (opt-in)'} |")


if __name__ == "__main__":
    main()
