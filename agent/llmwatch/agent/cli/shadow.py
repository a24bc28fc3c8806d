"""`llmwatch shadow report`: the paired comparison of each candidate against the primary, and a verdict.

Exit codes: 0 every candidate is not worse on any signal within the margins (config
`shadow.margins`, or the flags); 1 a candidate is worse, the output names the signals; 2 not
enough pairs to decide (the output says how many the margins need), or bad input.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable, Sequence

from llmwatch.agent.cli.args import finite, probability, whole_number
from llmwatch.agent.cli.common import log_options, require_records, require_writable, show_usage
from llmwatch.scorers.stats.format import interval_text

EXIT = {"not_worse": 0, "worse": 1, "inconclusive": 2}


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("shadow", help="shadow evaluation: compare mirrored candidate answers with the primary's")
    ssub = p.add_subparsers(dest="shadow_command", metavar="COMMAND", title="commands")
    p.set_defaults(func=show_usage(p))
    log_options(p)
    r = ssub.add_parser(
        "report",
        help="paired statistics and a non-inferiority verdict per candidate (exit 0 not worse, 1 worse, 2 not enough pairs)",
    )
    common(r)
    r.add_argument("--pairs", required=True, help="a pairs .jsonl file, or a directory of them (<data_dir>/pairs)")
    r.add_argument("--candidate", help="only this candidate (default: every candidate in the pairs)")
    r.add_argument("--format", choices=["text", "json", "html"], default="text", help="output format (default text)")
    r.add_argument("--out", help="write the report here (required for html)")
    r.add_argument(
        "--margin-pass-rate",
        type=finite("1 (points)"),
        help="points a candidate's pass rate may be lower (default shadow.margins.pass_rate_points, 1)",
    )
    r.add_argument(
        "--margin-latency",
        type=finite("1.10 (p95 at most 10 % higher)"),
        help="ratio a candidate's p95 latency may reach (default shadow.margins.p95_latency_ratio, 1.10)",
    )
    r.add_argument("--alpha", type=probability, help="one-sided level of the tests (default shadow.alpha, 0.05)")
    r.set_defaults(func=cmd_shadow_report)
    j = ssub.add_parser(
        "judge",
        help="pairwise model-as-judge over pairs: both answers blind, asked twice with the order swapped; a win counts only if it survives the swap",
    )
    common(j)
    j.add_argument("--pairs", required=True, help="a pairs .jsonl file, or a directory of them (<data_dir>/pairs)")
    j.add_argument(
        "--judge-url", required=True, help="OpenAI-compatible base URL of the judge, e.g. http://127.0.0.1:8001/v1"
    )
    j.add_argument("--judge-model", required=True, help="the judge's model name")
    j.add_argument(
        "--judge-key-env", help="environment variable holding the judge's API key (never given on the command line)"
    )
    j.add_argument(
        "--rubric", help="what better means (default: correctness, then completeness and instructions; not length)"
    )
    j.add_argument("--candidate", help="only this candidate's pairs")
    j.add_argument(
        "--max-pairs",
        type=whole_number,
        default=200,
        help="most pairs judged, two judge calls each: the cap on the judge's cost (default 200)",
    )
    j.add_argument("--concurrency", type=whole_number, default=4, help="judge calls in flight (default 4)")
    j.add_argument("--out", help="write one verdict per pair here (JSON Lines)")
    j.add_argument("--format", choices=["text", "json"], default="text", help="summary format (default text)")
    j.add_argument(
        "--tasks",
        help="with --reviews: a tasks file of `llmwatch review export --pairs`; the judge is asked on exactly those pairs and its agreement with the reviewers is reported",
    )
    j.add_argument(
        "--reviews",
        help="with --tasks: the reviewers' verdicts on those tasks (the file `llmwatch review serve` writes, as `review import` reads)",
    )
    j.add_argument("--key", help="the key of --tasks (default: TASKS.key.json next to it)")
    j.set_defaults(func=cmd_shadow_judge)


def cmd_shadow_report(args: argparse.Namespace) -> int:
    from llmwatch.agent.cli.args import config_from_args
    from llmwatch.core.config import ConfigError

    shadow: dict[str, Any] = {}
    margins: dict[str, Any] = {}
    if args.margin_pass_rate is not None:
        margins["pass_rate_points"] = args.margin_pass_rate
    if args.margin_latency is not None:
        margins["p95_latency_ratio"] = args.margin_latency
    if margins:
        shadow["margins"] = margins
    if args.alpha is not None:
        shadow["alpha"] = args.alpha
    cfg = config_from_args(args, shadow=shadow or None)
    if args.format == "html":
        # As cli_eval.check_html_args (not imported: cli_eval dispatches `review export --pairs` here).
        from llmwatch.scorers.reports.html import require_matplotlib

        require_matplotlib()
        if not args.out:
            raise ConfigError("--format html writes a file: pass --out FILE.html")
    if args.out:
        require_writable(
            args.out, "--out", example="shadow-report.html" if args.format == "html" else "shadow-report.txt"
        )
    require_records(args.pairs, "--pairs", "pairs")
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.pairs import Pair
    from llmwatch.scorers.evaluation.paired import PairColumns, compare_columns

    # Streamed: each pair is added to its candidate's typed columns and dropped (issue 29).
    names: set[str] = set()
    groups: dict[str, PairColumns] = {}
    for pair in read_records(args.pairs, Pair, prefix="pairs"):
        names.add(pair.candidate)
        if args.candidate and pair.candidate != args.candidate:
            continue
        cols = groups.get(pair.candidate)
        if cols is None:
            cols = groups[pair.candidate] = PairColumns()
        cols.add(pair)
    if args.candidate and args.candidate not in groups:
        raise ConfigError(
            f"--candidate {args.candidate}: no pairs of that candidate in {args.pairs}; candidates there: {', '.join(sorted(names)) or 'none'}"
        )
    s = cfg.shadow
    reports = [compare_columns(cols, s.margins, alpha=s.alpha, power=s.power) for _, cols in sorted(groups.items())]
    codes = [EXIT[r.verdict] for r in reports]
    code = 1 if 1 in codes else 2 if 2 in codes else 0
    if args.format == "json":
        import orjson

        text = (
            orjson.dumps(
                {
                    "verdict": {0: "not_worse", 1: "worse", 2: "inconclusive"}[code],
                    "exit_code": code,
                    "margins": s.margins.model_dump(),
                    "alpha": s.alpha,
                    "candidates": [r.as_dict() for r in reports],
                },
                option=orjson.OPT_INDENT_2,
            ).decode()
            + "\n"
        )
        _emit(args.out, text)
    elif args.format == "html":
        from llmwatch.core.jsonio import atomic_write_text

        text = render_html(reports, s.margins.model_dump(), s.alpha)
        target = atomic_write_text(args.out, text)
        sys.stdout.write(
            f"shadow report {['NOT WORSE', 'WORSE', 'UNDECIDED'][code]}: html report ({len(text.encode()) / 1024:.0f} KiB) -> {target}\n"
        )
    else:
        _emit(args.out, format_text(reports, s.alpha))
    return code


def cmd_shadow_judge(args: argparse.Namespace) -> int:  # noqa: C901
    import asyncio
    import os

    from llmwatch.agent.cli.args import config_from_args
    from llmwatch.core.config import ConfigError

    config_from_args(args)
    if args.max_pairs < 1 or args.concurrency < 1:
        raise ConfigError("--max-pairs and --concurrency must be at least 1")
    if bool(args.tasks) != bool(args.reviews):
        raise ConfigError("--tasks and --reviews go together: the exported tasks and the reviewers' verdicts on them")
    key = "llmwatch-no-key"
    if args.judge_key_env:
        if args.judge_key_env not in os.environ:
            raise ConfigError(f"--judge-key-env {args.judge_key_env}: that environment variable is not set")
        key = os.environ[args.judge_key_env]
    require_records(args.pairs, "--pairs", "pairs")
    if args.out:  # before the judge calls, which cost money: verdicts judged and not written are lost
        require_writable(args.out, "--out", example="judge-verdicts.jsonl")
    import openai
    import orjson

    from llmwatch.core.jsonio import read_records
    from llmwatch.core.pairs import Pair
    from llmwatch.scorers.evaluation.pairwise_judge import (
        agreement,
        human_verdicts,
        judge_outcomes,
        judge_pair,
        summarize,
    )

    pairs = [
        p for p in read_records(args.pairs, Pair, prefix="pairs") if not args.candidate or p.candidate == args.candidate
    ]
    human = per_reviewer = None
    if args.tasks:
        # Before any judge call: bad review files fail fast, and only the reviewed pairs are judged.
        human, per_reviewer, reviewed_candidate = human_verdicts(args.tasks, args.reviews, args.key)
        pairs = [p for p in pairs if p.candidate == reviewed_candidate and p.shadow.id in human]
        if not pairs:
            raise ConfigError(
                f"--pairs {args.pairs}: none of the {len(human)} reviewed pairs of {args.tasks} (candidate {reviewed_candidate}) is there; give the pairs they were exported from"
            )
    # Only pairs where both sides answered; the newest first would favour nothing, so file order.
    pairs = [p for p in pairs if p.primary.answer_text().strip() and p.shadow.answer_text().strip()][: args.max_pairs]
    if not pairs:
        raise ConfigError(
            f"--pairs {args.pairs}: no pair where both sides answered"
            + (f" for candidate {args.candidate}" if args.candidate else "")
        )

    async def run_all() -> list:
        client = openai.AsyncOpenAI(base_url=args.judge_url, api_key=key, max_retries=1, timeout=120.0)
        gate = asyncio.Semaphore(args.concurrency)

        async def one(pair: Pair):
            async with gate:
                return await judge_pair(client, args.judge_model, pair, rubric=args.rubric)

        try:
            return await asyncio.gather(*(one(p) for p in pairs))
        finally:
            await client.close()

    verdicts = asyncio.run(run_all())
    if args.out:
        from llmwatch.core.jsonio import atomic_write_bytes

        atomic_write_bytes(args.out, b"".join(orjson.dumps(v.as_dict()) + b"\n" for v in verdicts))
    out = {}
    for name in sorted({v.candidate for v in verdicts}):
        out[name] = summarize([v for v in verdicts if v.candidate == name])
    if human is not None and per_reviewer is not None:
        # People's verdicts are keyed by the candidate's sample id (the key's), the judge's by pair id.
        shadow_id = {p.id: p.shadow.id for p in pairs}
        judged = {shadow_id[pid]: o for pid, o in judge_outcomes(verdicts).items()}
        for name in out:
            out[name]["human_agreement"] = {
                **agreement(judged, human),
                "reviewed_pairs": len(human),
                "judge_errors": sum(1 for v in verdicts if v.winner == "error"),
                "per_reviewer": {who: agreement(judged, theirs) for who, theirs in sorted(per_reviewer.items())},
            }
    if args.format == "json":
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        for name, sm in out.items():
            rate = sm["position_inconsistent_rate"]
            sys.stdout.write(
                f"candidate {name}: judged {sm['judged']} of {sm['pairs']} pairs ({sm['errors']} judge errors): "
                f"candidate wins {sm['candidate_wins']}, ties {sm['ties']}, losses {sm['candidate_losses']}; "
                f"position-inconsistent (counted as ties) {sm['position_inconsistent']} ({'-' if rate is None else f'{rate:.0%}'}); "
                f"sign test p {sm['sign_test_p']:.2g}\n"
            )
            if "human_agreement" in sm:
                sys.stdout.write(format_agreement(sm["human_agreement"]))
    return 0


def format_agreement(ag: dict[str, Any]) -> str:
    """The judge-versus-people block of `shadow judge --tasks --reviews` (text)."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    lo, hi = ag["kappa_ci"]
    lines = [
        f"  agreement with human verdicts: {ag['pairs']} pairs with both verdicts (of {ag['reviewed_pairs']} reviewed; {ag['judge_errors']} judge errors left out): "
        f"agreement {pct(ag['agreement'])}, Cohen's kappa {_f(ag['kappa'])} [{_f(lo)}, {_f(hi)}] ({ag['confidence']:.0%} bootstrap CI)",
        "    the candidate's outcome   people: win   tie  loss",
    ]
    for row in ("win", "tie", "loss"):
        c = ag["confusion"][row]
        lines.append(f"    judge: {row:<4}                     {c['win']:>5} {c['tie']:>5} {c['loss']:>5}")
    for who, mine in ag["per_reviewer"].items():
        lines.append(
            f"    reviewer {who}: {mine['pairs']} pairs, agreement {pct(mine['agreement'])}, kappa {_f(mine['kappa'])}"
        )
    lines.append(
        "    (people: each reviewer's preferred answer, else the higher mean score; several reviewers summed, a split is a tie)"
    )
    return "\n".join(lines) + "\n"


def cmd_review_export_pairs(args: argparse.Namespace) -> int:
    """`llmwatch review export --pairs DIR`: blind review tasks straight from shadow-evaluation pairs."""
    from llmwatch.agent.cli.args import config_from_args
    from llmwatch.core.config import ConfigError

    cfg = config_from_args(args)
    require_records(args.pairs, "--pairs", "pairs")
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.pairs import Pair
    from llmwatch.scorers.evaluation.review import export_pair_tasks

    pairs = list(read_records(args.pairs, Pair, prefix="pairs"))
    if args.candidate:
        pairs = [p for p in pairs if p.candidate == args.candidate]
        if not pairs:
            raise ConfigError(f"--candidate {args.candidate}: no pairs of that candidate in {args.pairs}")
    criteria = [c.strip() for c in args.criteria.split(",") if c.strip()]
    summary = export_pair_tasks(
        pairs,
        n=args.n,
        out_path=args.out,
        seed=args.seed,
        criteria=criteria,
        default_category=cfg.matrix.default_category,
    )
    strata = ", ".join(f"{s} {summary.by_stratum.get(s, 0)}" for s in ("typical", "failing"))
    sys.stdout.write(
        f"wrote {summary.n_tasks} blind review tasks from pairs ({strata}; all on the same prompt) -> {summary.tasks_path}\n"
        f"key (which answer is the primary's; keep it from the reviewers) -> {summary.key_path}\n"
    )
    return 0


def _emit(out: str | None, text: str) -> None:
    if out:
        from llmwatch.core.jsonio import atomic_write_text

        atomic_write_text(out, text)
        sys.stdout.write(f"shadow report -> {out}\n")
    else:
        sys.stdout.write(text)


def _f(value: float | None, spec: str = ".2f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def _unit(r: Any) -> str:
    """The unit of a row's primary and candidate figures: 2.5 (a rate in %) and 2.5 (a p95 in ms) read alike without it."""
    if r.kind in ("rate", "rate_up"):
        return " %"
    return f" {r.note}" if r.note else ""


def _figure(value: float | None, unit: str) -> str:
    text = _f(value, ".4g")
    return text if text == "-" else text + unit


def table_rows(report: Any) -> list[list[str]]:
    rows = []
    for r in report.rows:
        is_ratio = r.kind in ("ratio",) or r.signal.endswith(("_p95", "_mean"))
        effect = f"x{_f(r.effect, '.3f')}" if is_ratio else f"{_f(r.effect, '+.2f')}"
        ci = (
            f"[{_f(r.ci_low, '.3f')}, {_f(r.ci_high, '.3f')}]"
            if is_ratio
            else f"[{_f(r.ci_low, '+.2f')}, {_f(r.ci_high, '+.2f')}]"
        )
        if r.ci_low is None:
            ci = "-"
        wtl = f"{r.wins}/{r.ties}/{r.losses}" if r.wins is not None else "-"
        margin = "-" if r.margin is None else (f"x{r.margin:.2f}" if r.kind == "ratio" else f"{r.margin:+.1f}")
        rows.append(
            [
                r.signal,
                r.category,
                str(r.n),
                _figure(r.primary, _unit(r)),
                _figure(r.shadow, _unit(r)),
                effect,
                ci,
                wtl,
                _p(r.p_worse),
                _p(r.p_adjusted),
                margin,
                r.verdict or "",
            ]
        )
    return rows


HEADERS = [
    "signal",
    "category",
    "pairs",
    "primary",
    "candidate",
    "effect",
    "CI",
    "win/tie/loss",
    "p(worse)",
    "p Holm",
    "margin",
    "verdict",
]


def _headline(report: Any) -> str:
    if report.verdict == "worse":
        return f"candidate {report.candidate}: WORSE on {', '.join(report.worse_on)}"
    if report.verdict == "not_worse":
        return f"candidate {report.candidate}: NOT WORSE within the margins ({report.pairs} pairs)"
    return f"candidate {report.candidate}: UNDECIDED with {report.pairs} pairs; about {report.needed} pairs are needed for the margins"


def _similarity(sim: dict[str, Any]) -> str:
    return (
        f"answer similarity within pairs (normalised text): {sim['mean']:.3f} "
        f"{interval_text(sim['ci_low'], sim['ci_high'], sim['confidence'])} over {sim['n']} pairs"
    )


def _too_narrow(report: Any) -> list[str]:
    """One line per ratio interval that rests on too few pairs to keep its level."""
    from llmwatch.scorers.evaluation.paired import ratio_too_narrow

    return [f"{r.signal}: {ratio_too_narrow('p95')}" for r in report.rows if r.interval_too_narrow]


def _legend(alpha: float) -> str:
    """How to read the table's effect, CI, win/tie/loss and p Holm columns (text and HTML alike)."""
    return (
        f"effect: candidate minus primary (points) for rates, candidate / primary for p95 and means; CI: two-sided {100 - 200 * alpha:.0f} % "
        "(each bound one-sided); win = the candidate passes where the primary fails, or is faster/cheaper; p Holm: Holm-adjusted over the verdict signals"
    )


def format_text(reports: Sequence[Any], alpha: float) -> str:
    out = []
    for report in reports:
        out.append(_headline(report))
        if report.versions_text():
            out.append(f"  {report.versions_text()}")
        rows = [HEADERS] + table_rows(report)
        widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
        for row in rows:
            out.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        sim = report.similarity
        if sim.get("mean") is not None:
            out.append(f"  {_similarity(sim)}")
        out.extend(f"  {line}" for line in _too_narrow(report))
        out.append(f"  {_legend(alpha)}")
        out.append("")
    return "\n".join(out)


def render_html(reports: Sequence[Any], margins: dict[str, Any], alpha: float) -> str:
    from llmwatch.scorers.reports.html import HtmlDocument, margins_text, shadow_figures

    doc = HtmlDocument(
        "llmwatch shadow report",
        "; ".join(p for p in (f"{len(reports)} candidate(s)", f"alpha {alpha:g}", margins_text(margins)) if p),
    )
    for report in reports:
        level = {"worse": "bad", "not_worse": "ok"}.get(report.verdict, "warn")
        points = [f"worse on {s}" for s in report.worse_on]
        if report.versions_text():
            points.append(report.versions_text())
        doc.verdict(level, _headline(report), points)
        doc.heading(f"candidate {report.candidate}")
        shadow_figures(doc, report, alpha)
        doc.table(HEADERS, table_rows(report), numeric=[2, 3, 4, 5, 6, 7, 8, 9])
        for line in _too_narrow(report):
            doc.paragraph(line + ".")
        doc.paragraph(_legend(alpha), "note")
        sim = report.similarity
        if sim.get("mean") is not None:
            # With its interval, as the text report gives it: the point alone read as exact.
            line = _similarity(sim)
            doc.paragraph(line[0].upper() + line[1:] + ".")
    return doc.render()
