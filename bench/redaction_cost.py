"""CPU per sampled call of the proxy's sample pipeline: analyse, build, redact, serialise (issue 13).

The proxy samples 10 % of calls by default; each sampled call is analysed, turned into a `Sample`,
redacted with the default `Redactor` and written as one JSON line, in a thread of the proxy's
process, so this is part of the proxy's CPU per call. The call is the proxy benchmark's own
(bench/common.py BODY, and bench/proxy_overhead.py's upstream answer: 600 characters of recipe
prose with a few numbers). Also timed: `pii.find` per kind on that answer, and all kinds on a few
other texts (non-ASCII prose, prose with PII in it, a short value).

`--against REV` loads scorers/llmwatch/scorers/pipeline/pii.py, scorers/llmwatch/scorers/pipeline/redaction.py and llmwatch/core/records.py as they
are at git revision REV next to the current ones and times both in the same run (the machine
may be shared: figures of two separate runs are not comparable); it also checks that both give
the same redacted sample and the same findings. Times are the best of `--repeat` runs, in µs.

    python bench/redaction_cost.py [--against 2c4d185] [--repeat 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import timeit
import types
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BODY, ROOT  # noqa: E402
from upstream import ANSWER, plain_body  # noqa: E402

from llmwatch.collectors.receivers.proxy.capture import Exchange, analyze, to_sample  # noqa: E402
from llmwatch.scorers.pipeline import pii  # noqa: E402
from llmwatch.scorers.pipeline.redaction import Redactor, redact_sample  # noqa: E402

TEXTS = {
    f"answer ({len(ANSWER)} chars, ASCII)": ANSWER,
    "answer, non-ASCII (220 °C — …)": ANSWER.replace(" C ", " °C — ").replace("carving.", "carving…"),
    "answer + e-mail, phone, card": ANSWER
    + " Questions: jane.doe@corp.io, +1 (415) 555-2671, card 4111 1111 1111 1111.",
    "short value ('gpt-4o-mini')": "gpt-4o-mini",
}


def exchange() -> Exchange:
    """The proxy benchmark's call, as the proxy has captured it."""
    response = plain_body()
    now = time.perf_counter()
    ex = Exchange(
        request_id="r1",
        started_at=time.time(),
        t0=now,
        method="POST",
        route="/v1/chat/completions",
        request_body=BODY,
        max_body_bytes=1 << 20,
        sample_id="s1",
        metadata={},
    )
    ex.status = 200
    ex.response_headers = {"content-type": "application/json"}
    ex.response_chunks.append(response)
    ex.chunk_ends.append(len(response))
    ex.chunk_times.append(now)
    ex.captured_bytes = len(response)
    ex.t_end = time.perf_counter()
    return ex


def load_at(rev: str, path: str, name: str, replace: dict[str, types.ModuleType] | None = None) -> types.ModuleType:
    """Module `path` as it is at git revision `rev`, under the name `name`; `replace` stands in
    for the modules it imports while it loads (the old redaction imports the old detector)."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType(name)
    module.__file__ = f"{rev}:{path}"
    sys.modules[name] = module  # dataclasses and pydantic look their module up by name
    saved = {key: sys.modules.get(key) for key in replace or {}}
    sys.modules.update(replace or {})
    try:
        exec(compile(source, module.__file__, "exec"), module.__dict__)
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
    return module


def best_us(fn: Callable[[], Any], repeat: int) -> float:
    """Best of `repeat` runs, each long enough (~0.1 s) for the clock, in µs per call."""
    number = max(10, int(0.1 / max(timeit.timeit(fn, number=20) / 20, 1e-7)))
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def row(label: str, new: float, old: float | None) -> str:
    if old is None:
        return f"| {label} | {new:.1f} |"
    return f"| {label} | {old:.1f} | {new:.1f} | {old / new:.1f}x |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--against", metavar="REV", help="also time the detector, redaction and records of this git revision"
    )
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    ex = exchange()
    facts = analyze(ex)
    sample = to_sample(ex, facts, model_version="v", cost_usd=0.001, reason="random")
    redactor = Redactor()
    redacted = redact_sample(redactor, sample)

    old_pii = old_redaction = old_records = None
    if args.against:
        old_pii = load_at(args.against, "scorers/llmwatch/scorers/pipeline/pii.py", "bench_old_pii")
        old_redaction = load_at(
            args.against,
            "scorers/llmwatch/scorers/pipeline/redaction.py",
            "bench_old_redaction",
            {"llmwatch.scorers.pipeline.pii": old_pii},
        )
        old_records = load_at(args.against, "llmwatch/core/records.py", "bench_old_records")
        old_redactor = old_redaction.Redactor()
        old_redacted = old_records.Sample.model_validate(
            old_redaction.redact_sample(old_redactor, sample).model_dump(by_alias=True)
        )
        # Same output, or the figures compare different work.
        assert redacted.to_json() == old_redacted.to_json(), "the redacted samples differ"
        for text in TEXTS.values():
            for kinds in (pii.KINDS, redactor.kinds):
                assert [vars_(f) for f in pii.find(text, kinds)] == [vars_(f) for f in old_pii.find(text, kinds)]

    def timed(label: str, new: Callable[[], Any], old: Callable[[], Any] | None = None) -> str:
        return row(
            label, best_us(new, args.repeat), best_us(old, args.repeat) if old is not None and args.against else None
        )

    head = "| | before µs | after µs | speed-up |\n|---|---:|---:|---:|" if args.against else "| | µs |\n|---|---:|"
    print(f"Sample pipeline of one sampled call (best of {args.repeat}; Python {sys.version.split()[0]})\n")
    print(head)
    print(timed("analyze", lambda: analyze(ex)))
    print(timed("to_sample", lambda: to_sample(ex, facts, model_version="v", cost_usd=0.001, reason="random")))
    print(
        timed(
            "redact_sample",
            lambda: redact_sample(redactor, sample),
            old_redaction and (lambda: old_redaction.redact_sample(old_redactor, sample)),
        )
    )
    print(timed("to_json", redacted.to_json, old_records and old_redacted.to_json))

    print(f"\n`pii.find` on the answer ({len(ANSWER)} characters), one kind at a time\n")
    print(head)
    for kind in pii.KINDS:
        print(
            timed(kind, lambda k=(kind,): pii.find(ANSWER, k), old_pii and (lambda k=(kind,): old_pii.find(ANSWER, k)))
        )
    print(
        timed("all kinds", lambda: pii.find(ANSWER, pii.KINDS), old_pii and (lambda: old_pii.find(ANSWER, pii.KINDS)))
    )

    print("\n`Redactor().text` (default kinds) on other texts\n")
    print(head)
    for label, text in TEXTS.items():
        print(timed(label, lambda t=text: redactor.text(t), old_redaction and (lambda t=text: old_redactor.text(t))))


def vars_(finding: Any) -> tuple[str, int, int]:
    return (finding.kind, finding.start, finding.end)


if __name__ == "__main__":
    main()
