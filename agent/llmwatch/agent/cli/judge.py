"""`llmwatch judge calibrate`, and `review export --judge-spot-check`: the live judge measured against people.

Registered by agent/llmwatch/agent/cli/main.py. The statistics are in
scorers/llmwatch/scorers/evaluation/judge_calibration.py; the live judge is llmwatch.collectors.judge.
Exit codes: 0 written (calibrated or not: the table says which), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from llmwatch.agent.cli.args import whole_number
from llmwatch.agent.cli.common import print_result, require_records, require_writable
from llmwatch.core.config import ConfigError


def cmd_judge_calibrate(args: argparse.Namespace) -> int:
    require_records(args.verdicts, "--verdicts", "scores")
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence {args.confidence} must be between 0 and 1 (e.g. 0.95)")
    if args.min_labels < 1:
        raise ConfigError("--min-labels must be at least 1")

    from llmwatch.core.jsonio import read_records
    from llmwatch.core.scores import Score
    from llmwatch.scorers.evaluation.judge_calibration import (
        calibrate,
        format_calibration,
        human_labels,
        judge_verdicts,
        write_calibration,
    )

    if args.out:
        require_writable(args.out, "--out", example="calibration.json")
    verdicts = judge_verdicts(read_records(args.verdicts, Score, prefix="scores"))
    if not verdicts:
        raise ConfigError(
            f"--verdicts {args.verdicts}: no judge verdicts (checks judge:<criterion>) in these scores; is judge.enabled on?"
        )
    labels = human_labels(args.tasks, args.reviews, args.key)
    calibration = calibrate(
        verdicts,
        labels,
        min_agreement=args.min_agreement,
        min_labels=args.min_labels,
        confidence=args.confidence,
        seed=args.seed,
    )
    if args.out:
        write_calibration(calibration, args.out)
    print_result(
        args.format,
        data=lambda: calibration.model_dump(mode="json", by_alias=True),
        text=lambda: format_calibration(calibration),
        out=args.out,
        wrote="calibration -> {} (point judge.calibration at it)",
    )
    return 0


def cmd_review_export_spot_check(args: argparse.Namespace) -> int:
    require_records(args.judge_spot_check, "--judge-spot-check", "spot-check")
    from llmwatch.core.jsonio import read_records
    from llmwatch.scorers.evaluation.review import export_judge_tasks

    samples = list(read_records(args.judge_spot_check, prefix="spot-check"))
    summary = export_judge_tasks(samples, n=args.n, out_path=args.out, seed=args.seed)
    sys.stdout.write(
        f"wrote {summary.n_tasks} blind review tasks ({2 * summary.n_tasks} spot-checked answers of "
        f"{summary.available.get('spot_check', 0)}) -> {summary.tasks_path}\n"
        f"key (which sample is which; keep it from the reviewers) -> {summary.key_path}\n"
    )
    return 0


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    from llmwatch.agent.cli.common import show_usage

    p = sub.add_parser("judge", help="the live model judge: calibrate it against people's blind ratings")
    jsub = p.add_subparsers(dest="judge_command", metavar="COMMAND", title="commands")
    p.set_defaults(func=show_usage(p))
    c = jsub.add_parser(
        "calibrate",
        help="agreement, sensitivity and specificity of the judge against blind human ratings; writes the calibration file",
    )
    common(c)
    c.add_argument(
        "--verdicts", required=True, help="the judge's verdicts: a scores .jsonl file or directory (<data_dir>/scores)"
    )
    c.add_argument("--tasks", required=True, help="the tasks .jsonl of `llmwatch review export --judge-spot-check`")
    c.add_argument("--key", help="key file (default: <tasks>.key.json next to the tasks)")
    c.add_argument("--reviews", required=True, help="people's reviews of those tasks, .jsonl, one review per line")
    c.add_argument("--out", help="write the calibration here (what judge.calibration reads)")
    c.add_argument(
        "--min-agreement",
        type=float,
        default=0.6,
        help="kappa interval's lower bound a calibrated judge reaches (default 0.6; the running judge applies judge.min_agreement)",
    )
    c.add_argument(
        "--min-labels", type=whole_number, default=50, help="labelled samples a calibrated judge needs (default 50)"
    )
    c.add_argument("--confidence", type=float, default=0.95, help="level of the intervals (default 0.95)")
    c.add_argument("--seed", type=whole_number, default=0, help="seed of the bootstrap (default 0)")
    c.add_argument(
        "--format", choices=("text", "json"), default="text", help="text for a person, json for a script (default text)"
    )
    c.set_defaults(func=cmd_judge_calibrate)
