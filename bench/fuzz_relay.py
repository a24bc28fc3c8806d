"""The long differential fuzz run of the relay core against h11: `python bench/fuzz_relay.py [--cases N]`.

With `--differential`: the same cases to two proxies, `proxy.engine` python and native (design
record 0067), and what each client and each upstream saw compared; any difference is a finding.
The native engine forwards plain calls in C as it serves; with `--front-door` it only accepts and reads
first heads, handing every connection to the relay (`DATAPLANE_FORWARD=0`).

Starts a real `llmwatch proxy` in front of a scripted upstream (tests/helpers/relay_fuzz.py), draws
N random request cases and N response cases from the same generators as the short run in
tests/integration/test_relay_fuzz.py, checks each against h11, and prints how many cases ran,
what h11 made of them, what the relay answered, and every finding (the case's bytes and why).
Exit status 1 when there was a finding.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import hypothesis  # noqa: E402
from helpers.relay_fuzz import (  # noqa: E402
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MARGIN_S,
    READ_TIMEOUT_S,
    Relay,
    check_request,
    check_response,
    exchange,
    h11_request,
    h11_response,
    requests,
    responses,
)
from hypothesis import HealthCheck, given, settings  # noqa: E402


def _runner(relay, kind, strategy, check, reference, verdicts, findings, cases, examples):  # type: ignore[no-untyped-def]
    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=strategy)
    def run(data: bytes) -> None:
        verdict = reference(data).verdict
        try:
            key = f"{kind}s: h11 {verdict}, relay {check(relay, data)}"
            verdicts[key] += 1
            examples.setdefault(key, data)
        except AssertionError as exc:
            findings.append((kind, data, str(exc)[:500]))
            verdicts[f"{kind}s: h11 {verdict}, finding"] += 1

    return run


def _seen(relay: Relay, kind: str, data: bytes) -> tuple[object, ...]:
    """What the client and the upstream saw of one case through `relay` (no timings)."""
    relay.upstream.take()
    if kind == "request":
        relay.upstream.response = None
        answer = exchange(relay.port, data, second=False, deadline=max(HEADER_TIMEOUT_S, BODY_TIMEOUT_S) + MARGIN_S)
    else:
        relay.upstream.response = data
        request = b"GET /fuzz HTTP/1.1\r\nHost: x\r\n\r\n"
        answer = exchange(relay.port, request, second=True, deadline=READ_TIMEOUT_S + MARGIN_S)
        relay.upstream.response = None
    # The relay's own 502 names its upstream, whose port differs between the two proxies.
    port = b"127.0.0.1:%d" % relay.upstream.sock.getsockname()[1]
    body, second = (None if b is None else b.replace(port, b"127.0.0.1:PORT") for b in (answer.body, answer.second))
    return (relay.upstream.take(), answer.status, body, answer.keep_alive, second, answer.error)


def _differential(relays, kind, strategy, verdicts, findings, cases, examples):  # type: ignore[no-untyped-def]
    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=strategy)
    def run(data: bytes) -> None:
        python, native = (_seen(relay, kind, data) for relay in relays)
        key = f"{kind}s: {'the same' if python == native else 'DIFFERENT'} on both engines"
        verdicts[key] += 1
        examples.setdefault(key, data)
        if python != native:
            findings.append((kind, data, f"python {python!r}\n  native {native!r}"[:1000]))

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="cases of each kind (requests, responses)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    parser.add_argument("--examples", action="store_true", help="print the first case of each outcome")
    parser.add_argument(
        "--differential", action="store_true", help="the same cases to proxy.engine python and native, compared"
    )
    parser.add_argument(
        "--forward",
        action="store_true",
        help="with --differential: the native engine forwards plain calls in C (the default; kept for old command lines)",
    )
    parser.add_argument(
        "--front-door",
        action="store_true",
        help="with --differential: C only reads first heads and hands every connection over (DATAPLANE_FORWARD=0)",
    )
    args = parser.parse_args()
    findings: list[tuple[str, bytes, str]] = []
    verdicts: collections.Counter[str] = collections.Counter()
    examples: dict[str, bytes] = {}
    started = time.monotonic()
    if args.differential:
        with tempfile.TemporaryDirectory() as tmp:
            relays = [
                Relay(Path(tmp) / "python"),
                Relay(Path(tmp) / "native", engine="native", forward=not args.front_door),
            ]
            try:
                for kind, strategy in (("request", requests()), ("response", responses())):
                    run = _differential(relays, kind, strategy, verdicts, findings, args.cases, examples)
                    if args.seed is not None:
                        run = hypothesis.seed(args.seed)(run)
                    run()
            finally:
                for relay in relays:
                    relay.close()
        return _report(verdicts, findings, examples, started, args.examples)
    with tempfile.TemporaryDirectory() as tmp:
        relay = Relay(Path(tmp))
        try:
            for kind, strategy, check, reference in (
                ("request", requests(), check_request, h11_request),
                ("response", responses(), check_response, h11_response),
            ):
                run = _runner(relay, kind, strategy, check, reference, verdicts, findings, args.cases, examples)
                if args.seed is not None:
                    run = hypothesis.seed(args.seed)(run)
                run()
        finally:
            relay.close()
    return _report(verdicts, findings, examples, started, args.examples)


def _report(verdicts, findings, examples, started, show_examples):  # type: ignore[no-untyped-def]
    cases = sum(verdicts.values())
    print(f"cases: {cases} in {time.monotonic() - started:.0f} s")
    for key in sorted(verdicts):
        print(f"  {key}: {verdicts[key]}")
        if show_examples and key in examples:
            print(f"    e.g. {examples[key][:200]!r}")
    print(f"findings: {len(findings)}")
    seen: set[str] = set()
    for kind, data, why in findings:
        key = kind + why.split("(")[-1][:60]
        if key in seen:
            continue  # one example of each kind of finding
        seen.add(key)
        print(f"- {kind} {data!r}\n  {why}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
