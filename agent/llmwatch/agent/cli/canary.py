"""`llmwatch canary`: a canary version against the stable one, from the samples of one window.

Registered by agent/llmwatch/agent/cli/main.py. The work is in scorers/llmwatch/scorers/drift/canary.py; here are the options, the input
checks made before anything heavy loads, and the output. Exit codes as `llmwatch drift`: 0 the
canary is not worse, 1 worse (the families and signals are named), 2 bad input or too few samples.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import Any, Callable

from llmwatch.agent.cli.args import add_comparison_options, config_from_args, fail_on_families
from llmwatch.agent.cli.common import require_records
from llmwatch.core.config import ConfigError


def _when(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{flag} {text!r} is not an ISO 8601 time; e.g. {flag} 2026-12-03T09:00:00Z") from None
    # A time without a zone is UTC, as the samples' own timestamps.
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def cmd_canary(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    from llmwatch.agent.cli.evaluate import check_out_args, write_comparison

    check_out_args(args, "canary.json")
    require_records(args.samples, "--samples")
    if args.scores:
        require_records(args.scores, "--scores", "scores")
    if args.last and (args.window_start or args.window_end):
        raise ConfigError("--last and --window-start/--window-end both set the window; give one or the other")
    start, end = _when(args.window_start, "--window-start"), _when(args.window_end, "--window-end")
    if start and end and start >= end:
        raise ConfigError(f"--window-start {args.window_start} is not before --window-end {args.window_end}")
    fail_on = fail_on_families(args.fail_on)
    from llmwatch.scorers.drift.canary import compare_summaries, format_text, parse_duration, side_of, window_of

    try:
        last = parse_duration(args.last) if args.last else None
    except ValueError as exc:
        raise ConfigError(f"--last {exc}") from None

    from llmwatch.core.jsonio import read_records
    from llmwatch.scorers.checks.offline import summarize_sides
    from llmwatch.scorers.drift.compare import settings_from_config

    # The window first, from the records alone: a missing version or two versions never served
    # together is said before the checks and the embedding model load. Then both versions
    # summarised in one streamed pass (issue 29): no Sample, Score or vector per sample is kept.
    window = window_of(read_records(args.samples), args.stable, args.canary, start=start, end=end, last=last)
    reference, current = summarize_sides(
        cfg.scoring,
        args.samples,
        args.scores,
        side_of(window, args.stable, args.canary),
        2,
        purpose="the canary comparison",
    )
    settings = settings_from_config(cfg.drift, alpha=args.alpha, min_samples=args.min_samples, fail_on=fail_on)
    report, reference, current = compare_summaries(
        reference,
        current,
        stable_version=args.stable,
        canary_version=args.canary,
        window=window,
        settings=settings,
    )

    def html() -> str:
        from llmwatch.scorers.reports.html import CanaryVerdict, render_drift

        level = {"worse": "bad", "not_worse": "ok"}.get(report.verdict, "warn")
        verdict = CanaryVerdict(format_text(report).splitlines()[0], level, report.exit_code, report.family_verdicts())
        return render_drift(report.drift, reference, current, canary=verdict)

    title = f"canary {report.verdict.upper().replace('_', ' ')}"
    return write_comparison(args, report, title, html, lambda: format_text(report))


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "canary",
        help="compare a canary version with the stable one served in the same window (exit 0 not worse, 1 worse, 2 too little data or bad input)",
    )
    common(p)
    p.add_argument("--samples", required=True, help="samples .jsonl file or directory holding both versions")
    p.add_argument("--scores", help="scores for those samples (default: score them now)")
    p.add_argument("--stable", required=True, help="the stable version (model_version of the samples)")
    p.add_argument("--canary", required=True, help="the canary version")
    p.add_argument(
        "--window-start",
        help="ISO 8601 time; only samples from then on (default: the first time both versions were served)",
    )
    p.add_argument(
        "--window-end", help="ISO 8601 time; only samples up to then (default: the last time both were served)"
    )
    p.add_argument(
        "--last", help="only the last DURATION (e.g. 30m, 2h, 1d) before the newest sample of either version"
    )
    add_comparison_options(
        p,
        min_samples_help="fewest samples a signal needs of each version (default 30)",
        fail_on_help="families whose worsening exits 1, from inputs, behaviour, performance (default: drift.fail_on, behaviour,performance)",
    )
    p.set_defaults(func=cmd_canary)
