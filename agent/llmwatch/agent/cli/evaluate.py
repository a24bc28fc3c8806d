"""`llmwatch report`, `llmwatch regress` and `llmwatch review export|import`: evaluation commands.

Kept apart from agent/llmwatch/agent/cli/main.py so that the sidecar's own commands stay small; `register` adds the
subcommands to its parser. Exit codes follow agent/llmwatch/agent/cli/main.py: 0 fine, 1 the command found a problem
(a regression), 2 bad usage or unusable input (the message names the file, line or field). A
suite or review file that cannot be used raises its `LlmwatchError` (RegressError, ReviewError),
which agent/llmwatch/agent/cli/main.py's `main` reports and turns into its exit code like every other.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from typing import Any, Callable, Iterable, Iterator

import orjson

from llmwatch.agent.cli.args import (
    add_report_format,
    at_least_one,
    config_from_args,
    probability,
    public_url,
    whole_number,
)
from llmwatch.agent.cli.common import (
    log_options,
    print_result,
    require_file,
    require_records,
    require_writable,
    show_usage,
)
from llmwatch.core.jsonio import atomic_write_bytes, atomic_write_text, read_document


def _load_samples_and_scores(cfg: Any, samples_path: str, scores_path: str | None) -> tuple[list, list, list[str]]:
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.records import RecordError
    from llmwatch.core.scores import Score
    from llmwatch.scorers.checks.suite import build_suite, default_checks

    samples = list(read_records(samples_path))
    if not samples:
        raise RecordError(f"{samples_path} holds no samples")
    configured = [
        s.name
        for s in (cfg.scoring.checks if cfg.scoring.checks is not None else default_checks(cfg.scoring.embeddings))
    ]
    if scores_path is not None:
        ids = {s.id for s in samples}
        scores = [sc for sc in read_records(scores_path, Score, prefix="scores") if sc.sample_id in ids]
    else:
        scores = [r.score for r in build_suite(cfg.scoring).score(samples)]
    known = sorted(set(configured) | {sc.check for sc in scores})
    return samples, scores, known


def _fail(message: str) -> int:
    sys.stderr.write(f"llmwatch: {message}\n")
    return 2


def _check_inputs(args: argparse.Namespace) -> None:
    """The files named on the command line, before scipy and the embedding model load (as `drift`)."""
    require_records(args.samples, "--samples")
    if args.scores:
        require_records(args.scores, "--scores", "scores")
    if getattr(args, "baseline", None):
        require_file(args.baseline, "--baseline", "create one with `llmwatch baseline freeze`")


def check_html_args(args: argparse.Namespace) -> None:
    """`--format html` needs --out and the reports extra; refused before any work is done."""
    from llmwatch.core.config import ConfigError
    from llmwatch.scorers.reports.html import require_matplotlib

    require_matplotlib()
    if not args.out:
        raise ConfigError("--format html writes a file: pass --out FILE.html")
    require_writable(args.out, "--out", example="report.html")


def check_out_args(args: argparse.Namespace, json_example: str) -> None:
    """`--out`, before any work: with `--format html` the page's file (and the reports extra);
    with text or json the JSON report's. A report computed and then not written (or, before,
    silently not written at all: drift and canary read --out for html only) loses the run."""
    if args.format == "html":
        check_html_args(args)
    elif args.out:
        require_writable(args.out, "--out", example=json_example)


def write_json_report(args: argparse.Namespace, data: bytes) -> None:
    """The JSON report (`data`, without its newline) to `--out` when given and to stdout with
    `--format json`; `--format text` prints its table after this."""
    if args.out:
        atomic_write_bytes(args.out, data + b"\n")
    if args.format == "json":
        sys.stdout.write(data.decode() + "\n")


def write_html(path: str, text: str, what: str) -> None:
    # Atomic and private like every data file: a viewer never opens half a report.
    target = atomic_write_text(path, text)
    sys.stdout.write(f"{what}: html report ({len(text.encode()) / 1024:.0f} KiB) -> {target}\n")


def write_comparison(
    args: argparse.Namespace, report: Any, title: str, html: Callable[[], str], text: Callable[[], str]
) -> int:
    """How `drift` and `canary` end: the HTML page `html()` makes (with --format html), else the JSON
    report (--out, --format json) and with --format text the table `text()` makes; the report's exit code."""
    if args.format == "html":
        write_html(args.out, html(), title)
        return int(report.exit_code)
    write_json_report(
        args, orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY, default=str)
    )
    if args.format == "text":
        sys.stdout.write(text() + "\n")
    return int(report.exit_code)


def cmd_report(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    check_out_args(args, "report.json")
    _check_inputs(args)
    from llmwatch.scorers.evaluation.evaluate import WeightsMismatch, compare_reports, format_text
    from llmwatch.scorers.evaluation.report_stream import build_report_streamed

    baseline = None
    if args.baseline:
        from llmwatch.scorers.drift.baseline import load_baseline

        baseline = load_baseline(args.baseline)
    # Streamed: typed columns per sample, never a list of Samples or Scores (issue 29).
    report = build_report_streamed(
        cfg,
        args.samples,
        args.scores,
        baseline=baseline,
        drift_alpha=args.alpha,
        drift_min_samples=args.min_samples,
        sensitivity_embed=_sensitivity_embed(cfg),
    )
    for warning in report.warnings:  # on stderr too, so that --format json and html do not hide it
        sys.stderr.write(f"llmwatch: WARNING: {warning}\n")
    if args.consistency:
        report.consistency = _consistency(cfg, args.consistency)
    if args.compare:
        try:
            earlier = read_document(args.compare, what="the earlier report", error=ValueError)
        except ValueError as exc:
            return _fail(str(exc))
        try:
            report.comparison = compare_reports(
                report.to_dict(), earlier, allow_weights_change=args.allow_weights_change
            )
        except WeightsMismatch as exc:
            return _fail(f"refusing to compare with {args.compare}: {exc}")
        except ValueError as exc:
            return _fail(f"{args.compare}: {exc}")
    data = orjson.dumps(
        report.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=str
    )
    if args.format == "html":
        from llmwatch.scorers.reports.html import render_evaluation

        write_html(args.out, render_evaluation(report), "report")
        return 0
    write_json_report(args, data)
    if args.format == "text":
        sys.stdout.write(format_text(report) + "\n")
    return 0


def _sensitivity_embed(cfg: Any) -> Any:
    """The prompt sensitivity's clustering by meaning when embeddings are on, the model loaded at
    its first use (a report with no rephrasing candidates never loads it); where the extra or the
    model is missing, the sensitivity module falls back to clustering lexically."""
    if not cfg.scoring.embeddings:
        return None
    loaded: list[Any] = []

    def embed(texts: list[str]) -> Any:
        if not loaded:
            from llmwatch.scorers.checks.embeddings import Embedder

            loaded.append(Embedder(quantize=cfg.scoring.quantize_embeddings).encode)
        return loaded[0](texts)

    return embed


def _consistency(cfg: Any, path: str) -> list[Any]:
    """The consistency probe's pairs (`<data_dir>/consistency/pairs`) compared, per version."""
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.pairs import Pair
    from llmwatch.scorers.evaluation.consistency import consistency_rows

    pairs = list(read_records(path, Pair, prefix="pairs"))
    embed = None
    if cfg.scoring.embeddings and pairs:
        # Answers compared by meaning where the embedding model is installed; lexically otherwise.
        try:
            from llmwatch.scorers.checks.embeddings import Embedder

            embed = Embedder(quantize=cfg.scoring.quantize_embeddings).encode
        except Exception as exc:  # the extra or the model missing: the lexical fallback
            sys.stderr.write(f"report: consistency compared lexically ({type(exc).__name__}: {exc})\n")
    return consistency_rows(pairs, embed=embed)


# A key given on the command line is in every other local user's `ps` and in /proc/PID/cmdline
# for as long as the run lasts; the environment is readable by the same user (and root) only.
_KEY_FLAGS = (
    ("api_key", "--api-key", "OPENAI_API_KEY"),
    ("judge_api_key", "--judge-api-key", "LLMWATCH_JUDGE_API_KEY"),
)


def warn_keys_on_the_command_line(args: argparse.Namespace) -> None:
    """Say on stderr that a key flag is visible to others, and what to use instead (never the key)."""
    for attr, flag, variable in _KEY_FLAGS:
        if getattr(args, attr, None):
            sys.stderr.write(
                f"regress: warning: {flag} puts the key on the command line, where other users of this machine "
                f"can read it (ps, /proc/PID/cmdline) while the run lasts; leave {flag} out and set "
                f"{variable} in the environment instead, e.g. from a private file: "
                f'{variable}="$(cat key.txt)" llmwatch regress ...\n'
            )


def cmd_regress(args: argparse.Namespace) -> int:
    from llmwatch.scorers.evaluation.regress import RunSettings, format_run, regress

    warn_keys_on_the_command_line(args)
    if args.out:  # before the suite's calls: a run made and then not written is lost
        require_writable(args.out, "--out", example="run.json")
    cfg = config_from_args(args)
    settings = RunSettings(
        upstream=args.upstream,
        model=args.model,
        repeat=args.repeat,
        concurrency=args.concurrency,
        api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or "sk-llmwatch-regress",
        timeout_s=args.timeout,
        max_retries=args.max_retries,
        judge_url=args.judge_url,
        judge_model=args.judge_model,
        judge_api_key=args.judge_api_key
        or os.environ.get("LLMWATCH_JUDGE_API_KEY")
        or os.environ.get("OPENAI_API_KEY")
        or "sk-llmwatch-judge",
        judge_min_score=args.judge_min_score,
        pricing=cfg.metrics.pricing,
        prices=cfg.metrics.price_table(),
        early_stop=args.early_stop,
        min_repeat=args.min_repeat,
        confidence=args.confidence,
        pass_threshold=args.pass_threshold,
        paraphrases=args.paraphrases,
        paraphrase_max_flips=args.paraphrase_max_flips,
        multi_turn=args.multi_turn,
        max_turns=args.max_turns,
        paraphrase_url=args.paraphrase_url,
        paraphrase_model=args.paraphrase_model,
        # From the environment only: a flag would show the key in `ps` and shell history.
        # Not LLMWATCH_*: that prefix is the configuration (config.ENV_PREFIX).
        paraphrase_api_key=os.environ.get("PARAPHRASE_API_KEY")
        or os.environ.get("OPENAI_API_KEY")
        or "sk-llmwatch-paraphrase",
    )
    run, code = regress(
        args.suite,
        settings,
        baseline_path=args.baseline,
        out_path=args.out,
        threshold=args.threshold,
        alpha=args.alpha,
        correction=args.correction,
    )
    print_result(
        args.format,
        data=lambda: run.model_dump(mode="json", by_alias=True, exclude={"attempts"}),
        text=lambda: format_run(run),
        out=args.out,
        wrote="run -> {}",
    )
    return code


def cmd_review_export(args: argparse.Namespace) -> int:
    require_writable(args.out, "--out", example="tasks.jsonl")  # every way of exporting writes it
    if args.judge_spot_check:
        from llmwatch.agent.cli.judge import cmd_review_export_spot_check

        return cmd_review_export_spot_check(args)
    if args.pairs:
        from llmwatch.agent.cli.shadow import cmd_review_export_pairs

        return cmd_review_export_pairs(args)
    if not args.samples or not args.versions:
        return _fail("review export needs --samples and --versions (or --pairs, from shadow evaluation)")
    cfg = config_from_args(args)
    _check_inputs(args)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    if len(versions) != 2:
        return _fail(f"--versions takes exactly two versions separated by a comma (e.g. A,B), got {args.versions!r}")
    criteria = [c.strip() for c in args.criteria.split(",") if c.strip()]
    summary = _export_streamed(cfg, args, (versions[0], versions[1]), criteria)
    strata = ", ".join(f"{s} {summary.by_stratum.get(s, 0)}" for s in ("typical", "edge", "failing"))
    sys.stdout.write(
        f"wrote {summary.n_tasks} blind review tasks ({strata}; {summary.same_prompt} on the same prompt) -> {summary.tasks_path}\n"
        f"key (model identities; keep it from the reviewers) -> {summary.key_path}\n"
    )
    if summary.n_tasks < args.n:
        sys.stdout.write(f"note: only {summary.n_tasks} pairs could be formed (asked for {args.n})\n")
    return 0


def _export_streamed(cfg: Any, args: argparse.Namespace, versions: tuple[str, str], criteria: list[str]) -> Any:
    """`review export` in bounded memory (issue 29): the samples are read twice, the scores once, and
    only a few dozen bytes a sample (ExportScan) and the chosen samples are kept. The checks are in
    the same order as `_load_samples_and_scores`: the samples, then the scores, then the categories'
    check names against the checks configured or scored."""
    from llmwatch.core.jsonio import batches, read_records
    from llmwatch.core.records import RecordError
    from llmwatch.core.scores import Score
    from llmwatch.scorers.checks.suite import build_suite, default_checks
    from llmwatch.scorers.evaluation.matrix import build_categories
    from llmwatch.scorers.evaluation.review import ExportScan, export_from_scan

    scan = ExportScan(versions)
    scan.add_samples(read_records(args.samples), build_categories(cfg.matrix), cfg.matrix.default_category)
    if not scan.n_samples:
        raise RecordError(f"{args.samples} holds no samples")
    if args.scores is not None:
        scan.add_scores(read_records(args.scores, Score, prefix="scores"))
    else:
        suite = build_suite(cfg.scoring)
        for batch in batches(read_records(args.samples), 512):
            scan.add_scores(r.score for r in suite.score(batch))
    configured = [
        s.name
        for s in (cfg.scoring.checks if cfg.scoring.checks is not None else default_checks(cfg.scoring.embeddings))
    ]
    build_categories(cfg.matrix, sorted(set(configured) | scan.score_checks))  # refuses an unknown check name
    return export_from_scan(
        scan,
        lambda: read_records(args.samples),
        versions=versions,
        n=args.n,
        out_path=args.out,
        seed=args.seed,
        criteria=criteria,
    )


def cmd_review_import(args: argparse.Namespace) -> int:
    from llmwatch.scorers.evaluation.review import format_import, import_reviews, key_path_for

    if args.out:
        require_writable(args.out, "--out", example="review-report.json")
    key = args.key or str(key_path_for(args.tasks))
    judge = None
    if args.scores:
        from llmwatch.core.jsonio import read_records
        from llmwatch.core.scores import Score

        judge = {
            sc.sample_id: sc.value
            for sc in read_records(args.scores, Score, prefix="scores")
            if sc.kind == "judge" and sc.value is not None
        }
    report = import_reviews(
        args.tasks, key, args.reviews, level=args.level, arbitration_path=args.arbitration, judge_scores=judge
    )
    if args.out or args.format == "json":
        # Made once for the file and stdout alike (it was serialised once for each).
        write_json_report(args, orjson.dumps(report, option=orjson.OPT_INDENT_2))
    if args.format == "text":
        print_result(
            "text", data=lambda: report, text=lambda: format_import(report), out=args.out, wrote="report -> {}"
        )
    return 0


def cmd_review_serve(args: argparse.Namespace) -> int:
    from llmwatch.agent.apps.review import run
    from llmwatch.scorers.evaluation.review import ReviewError

    require_writable(args.out, "--out", example="reviews.jsonl")  # verdicts are appended to it
    try:
        return run(args.tasks, args.out, args.listen, args.reviewers, args.arbiters, args.public_url)
    except ReviewError as exc:
        return _fail(str(exc))


def _suite_material(cfg: Any, args: argparse.Namespace):
    """Samples and scores read, categorised, de-duplicated: what `suite build` and `suite add` pick from."""
    require_records(args.samples, "--samples")
    require_records(args.scores, "--scores", "scores")
    from llmwatch.core import extras
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.records import RecordError, Sample
    from llmwatch.core.scores import Score
    from llmwatch.scorers.checks.suite import default_checks
    from llmwatch.scorers.evaluation.matrix import build_categories
    from llmwatch.scorers.evaluation.suite_build import gather

    similarity = args.similarity
    if similarity == "auto":
        similarity = "embeddings" if extras.installed("embeddings") else "text"
    elif similarity == "embeddings":
        extras.require("embeddings", "--similarity embeddings")
    re_asks: dict[str, str] = {}
    probe_scores: list[Score] = []
    if args.consistency:
        # The probe's verdicts join the samples as the `consistency` check (confident-but-unstable
        # ones become failures); the re-ask's answer goes with the case as context. Read before
        # the samples (a bad pairs file is said first), a pair at a time: its verdict and the
        # re-ask's answer are kept, never the pair's two Samples (issue 29).
        from llmwatch.core.pairs import Pair
        from llmwatch.scorers.evaluation.consistency import probe_verdicts

        require_records(args.consistency, "--consistency", "pairs")
        probe_scores, re_asks = probe_verdicts(read_records(args.consistency, Pair, prefix="pairs"))
    categories = build_categories(cfg.matrix)
    checks = cfg.scoring.checks if cfg.scoring.checks is not None else default_checks(cfg.scoring.embeddings)
    samples = read_records(args.samples)
    wanted = set(args.model_version or ())
    seen: set[str] = set()
    if wanted:
        # Only the named versions' calls: a suite meant to hold version A's behaviour must not
        # take its reference answers (the latest sample that passed) from a regressed version B.
        def of_versions(records: Iterable[Sample]) -> Iterator[Sample]:
            for sample in records:
                seen.add(str(sample.model_version))
                if sample.model_version in wanted:
                    yield sample

        samples = of_versions(samples)
    # Streamed: gather keeps a compact member per usable sample, never the Samples or Scores (issue 29).
    material = gather(
        samples,
        itertools.chain(read_records(args.scores, Score, prefix="scores"), probe_scores),
        categories,
        default_category=cfg.matrix.default_category,
        similarity=similarity,
        re_asks=re_asks,
    )
    # Every version named must match: `--model-version A --model-version typo` built A's suite, exit
    # 0, and the second version the user asked for was dropped without a word.
    if missing := wanted - seen:
        raise RecordError(
            f"--model-version {', '.join(sorted(missing))}: no sample of that version in {args.samples} "
            f"(versions there: {', '.join(sorted(seen)) or 'none'}); name only versions there, or leave --model-version out"
        )
    return material, categories, checks


def _sources(args: argparse.Namespace) -> dict[str, str]:
    return {
        "samples": args.samples,
        "scores": args.scores,
        **({"consistency": args.consistency} if args.consistency else {}),
    }


def cmd_suite_build(args: argparse.Namespace) -> int:
    from llmwatch.scorers.evaluation.suite_build import build, check_build_options, format_show, show

    cfg = config_from_args(args)
    check_build_options(args.size, args.failure_quota, args.edge_quota)  # before minutes of reading
    require_writable(args.out, "--out")
    material, categories, checks = _suite_material(cfg, args)
    result = build(
        material,
        categories,
        checks,
        args.out,
        size=args.size,
        failure_quota=args.failure_quota,
        edge_quota=args.edge_quota,
        seed=args.seed,
        mix=args.mix,
        sources=_sources(args),
    )
    counts = result.manifest["counts"]
    sys.stdout.write(
        f"suite -> {result.suite_path} ({counts['cases']} cases from {counts['samples']} samples; left out: {counts['placeholder_only']} mostly-placeholder prompts, "
        f"{counts['near_duplicates_collapsed']} near-duplicates collapsed)\nmanifest -> {result.manifest_path}\n"
    )
    sys.stdout.write(format_show(show(result.suite_path)) + "\n")
    return 0


def cmd_suite_add(args: argparse.Namespace) -> int:
    from llmwatch.scorers.evaluation.suite_build import add

    cfg = config_from_args(args)
    require_file(args.suite, "--suite", "build one with `llmwatch suite build`")
    material, _, checks = _suite_material(cfg, args)
    added, manifest = add(
        args.suite,
        material,
        checks,
        failed_only=args.failed_only,
        max_new=args.max_new,
        sources=_sources(args),
    )
    if not added:
        sys.stdout.write(
            f"suite {args.suite} unchanged: no new {'failure' if args.failed_only else 'failure or edge case'} that the suite does not already cover\n"
        )
        return 0
    sys.stdout.write(
        f"added {len(added)} case(s) to {args.suite} (version {manifest['version']}, sha256:{manifest['checksum'][:12]}): {', '.join(added)}\n"
        "runs made with the earlier version are no longer comparable: re-run the baseline with this suite\n"
    )
    return 0


def cmd_suite_show(args: argparse.Namespace) -> int:
    from llmwatch.scorers.evaluation.suite_build import format_show, show

    info = show(args.suite)
    print_result(args.format, data=lambda: info, text=lambda: format_show(info))
    return 0


def register(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("report", help="evaluation matrix, stability, cost/latency and decision score per model version")
    common(p)
    p.add_argument("--samples", required=True, help="samples .jsonl file or directory")
    p.add_argument("--scores", help="scores for those samples (default: score them now with the config's checks)")
    p.add_argument("--baseline", help="frozen baseline (llmwatch baseline freeze) for the version-stability figure")
    add_report_format(p)
    p.add_argument(
        "--out",
        help="also write the JSON report to this file (for a later --compare); with --format html, the HTML page",
    )
    p.add_argument("--compare", metavar="REPORT_JSON", help="an earlier JSON report to compare decision scores with")
    p.add_argument(
        "--allow-weights-change",
        action="store_true",
        help="compare even if the earlier report used other decision weights",
    )
    p.add_argument(
        "--alpha",
        type=probability,
        default=0.05,
        help="test level for version stability, the quality guard (a version significantly worse on a check cannot be best) and the decision score's 1-alpha interval (default 0.05)",
    )
    p.add_argument("--min-samples", type=at_least_one, default=30, help="fewest samples per drift signal (default 30)")
    p.add_argument(
        "--consistency",
        metavar="PAIRS",
        help="the consistency probe's pairs (<data_dir>/consistency/pairs): consistency rate per version with its interval",
    )
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "regress",
        help="run a regression suite N times against a live endpoint; exit 1 if a case regressed vs --baseline",
    )
    common(p)
    p.add_argument(
        "--suite", required=True, help="suite .jsonl: one case per line (id, category, input, expected and/or checks)"
    )
    p.add_argument(
        "--upstream", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000 (or .../v1)"
    )
    p.add_argument("--model", required=True, help="model name sent in every request (the `model` field)")
    p.add_argument("--repeat", type=whole_number, default=5, help="attempts per case (default 5)")
    p.add_argument("--baseline", help="an earlier run file (--out) to compare with; refused if the suite changed")
    p.add_argument("--out", help="write this run (with every attempt) to a JSON file")
    p.add_argument(
        "--concurrency",
        type=whole_number,
        default=8,
        help="most calls in flight at once; lower it if the endpoint rate-limits (default 8)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=0.2,
        help="smallest pass-rate drop that counts as a regression (default 0.2 = 20 points)",
    )
    p.add_argument(
        "--alpha", type=probability, default=0.05, help="significance level of the per-case test (default 0.05)"
    )
    p.add_argument(
        "--correction",
        choices=["holm", "none"],
        default="holm",
        help="multiple-testing correction across cases (default holm)",
    )
    p.add_argument("--api-key", help="API key for --upstream (default: $OPENAI_API_KEY)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per call (default 120)")
    p.add_argument(
        "--max-retries",
        type=whole_number,
        default=2,
        help="retries of one call on 429, 5xx and connection errors, with backoff; a call that still fails counts as a failed attempt (default 2)",
    )
    p.add_argument(
        "--judge-url", help="OpenAI-compatible endpoint of a model-as-judge (adds a 1-5 judge check to every case)"
    )
    p.add_argument("--judge-model", help="the judge's model name")
    p.add_argument(
        "--judge-api-key", help="API key for the judge (default: $LLMWATCH_JUDGE_API_KEY, then $OPENAI_API_KEY)"
    )
    p.add_argument("--judge-min-score", type=float, default=4.0, help="judge score (1-5) needed to pass (default 4)")
    p.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: a table per case for people; json: the run summary for scripts (default text)",
    )
    p.add_argument(
        "--early-stop",
        action="store_true",
        help="stop repeating a case once its verdict is decided: the Wilson interval of its pass rate at --confidence lies wholly above or below "
        "the baseline's pass rate minus --threshold (or --pass-threshold without a baseline); --repeat is then the most attempts per case",
    )
    p.add_argument(
        "--min-repeat",
        type=whole_number,
        default=5,
        help="with --early-stop, attempts before the first decision (default 5)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="confidence of the pass-rate intervals: early stopping and flaky cases (default 0.95)",
    )
    p.add_argument(
        "--pass-threshold",
        type=float,
        default=0.8,
        help="with --early-stop and no --baseline, the pass rate a case is decided against; with --paraphrases, "
        "the pass rate a wording needs for its verdict to be pass (default 0.8)",
    )
    p.add_argument(
        "--paraphrases",
        type=whole_number,
        default=0,
        metavar="K",
        help="also run each case in K deterministic rewordings of its last user message (synonyms, reordering, formatting; "
        "seeded by the case id; code, JSON, numbers and quoted strings untouched) and report the spread of scores per case "
        "and per version; rewordings never change pass rates or regression verdicts (default 0: none; at most 20)",
    )
    p.add_argument(
        "--paraphrase-max-flips",
        type=float,
        metavar="SHARE",
        help="with --paraphrases, exit 1 when more than this share of cases flip their pass verdict under rewording "
        "(e.g. 0.1); default: flips are reported, never a failure",
    )
    p.add_argument(
        "--paraphrase-url",
        help="with --paraphrases, an OpenAI-compatible endpoint asked for the rewordings (one call per case; key from "
        "$PARAPHRASE_API_KEY, then $OPENAI_API_KEY); a failed call or a rewording that changed code, JSON, a number or a quoted "
        "string is replaced by a built-in one and counted",
    )
    p.add_argument("--paraphrase-model", help="the model --paraphrase-url is asked with")
    p.add_argument(
        "--multi-turn",
        choices=["static", "dynamic"],
        default="static",
        help="static: replay a multi-turn case's transcript as written; dynamic: keep its user turns and feed back the "
        "candidate's own answers, one call per turn, scoring the final answer (default static: existing baselines stay comparable)",
    )
    p.add_argument(
        "--max-turns",
        type=whole_number,
        default=10,
        help="with --multi-turn dynamic, the most calls one attempt may make; a case with more user turns is refused (default 10)",
    )
    p.set_defaults(func=cmd_regress)

    p = sub.add_parser("review", help="blind human review of two model versions")
    rsub = p.add_subparsers(dest="review_command", metavar="COMMAND", title="commands")
    p.set_defaults(func=show_usage(p))
    p = rsub.add_parser("export", help="write blind, paired review tasks from live samples (and a separate key file)")
    common(p)
    p.add_argument("--samples", help="samples .jsonl file or directory holding both versions")
    p.add_argument("--scores", help="scores for those samples (default: score them now)")
    p.add_argument("--versions", help="the two versions to compare, e.g. A,B")
    p.add_argument(
        "--pairs",
        help="instead of --samples/--versions: shadow-evaluation pairs (<data_dir>/pairs), primary vs one candidate on the same prompts",
    )
    p.add_argument("--candidate", help="with --pairs: the candidate to review (default: the only one in the pairs)")
    p.add_argument(
        "--judge-spot-check",
        help="instead of --samples/--versions: the live judge's spot checks (<data_dir>/judge), rated on the judge's criteria to calibrate it",
    )
    p.add_argument("--n", type=whole_number, default=50, help="tasks to write (default 50)")
    p.add_argument("--out", required=True, help="tasks .jsonl; the key goes next to it as <name>.key.json")
    p.add_argument(
        "--seed", type=whole_number, default=None, help="seed for sampling and the A/B order (default: random)"
    )
    p.add_argument(
        "--criteria",
        default="accuracy,completeness,hallucination",
        help="criteria scored 1-5 (default accuracy,completeness,hallucination)",
    )
    p.set_defaults(func=cmd_review_export)
    p = rsub.add_parser("import", help="validate reviews, unblind, compute agreement, flag disputes")
    log_options(p)
    p.add_argument("--tasks", required=True, help="the tasks .jsonl written by `llmwatch review export`")
    p.add_argument("--key", help="key file (default: <tasks>.key.json next to the tasks)")
    p.add_argument("--reviews", required=True, help="reviews .jsonl, one review per line")
    p.add_argument("--out", help="write the JSON report here")
    p.add_argument(
        "--disputes",
        "--arbitration",  # the earlier name of the flag
        dest="arbitration",
        help="where to write the disputed tasks, for arbitration (.jsonl; default: <reviews>.disputes.jsonl)",
    )
    p.add_argument(
        "--scores", help="scores with judge-check results made after the export (default: those recorded in the key)"
    )
    p.add_argument(
        "--level",
        choices=["ordinal", "interval"],
        default="ordinal",
        help="Krippendorff's alpha metric (default ordinal)",
    )
    p.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: agreement and disputes for people; json: the full report for scripts (default text)",
    )
    p.set_defaults(func=cmd_review_import)
    p = rsub.add_parser(
        "serve",
        help="blind review in the browser: a personal link per reviewer, verdicts appended to --out, disputes to arbiters",
    )
    p.add_argument("--tasks", required=True, help="tasks .jsonl written by `review export` (the key is never read)")
    p.add_argument(
        "--out",
        required=True,
        help="reviews .jsonl, appended one verdict per line (what `review import --reviews` reads)",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:8088",
        help="HOST:PORT (default 127.0.0.1:8088; port 0 picks a free one, printed)",
    )
    p.add_argument("--reviewers", help="names (alice,bob) or a count (2); kept with their tokens in <out>.tokens.json")
    p.add_argument("--arbiters", help="names or a count of arbiters for disputed tasks")
    p.add_argument(
        "--public-url",
        type=public_url,
        help="base URL of the printed links when served behind a reverse proxy, e.g. https://review.example.com",
    )
    p.set_defaults(func=cmd_review_serve)

    p = sub.add_parser(
        "suite", help="build, grow and review a private regression suite from captured samples (for `llmwatch regress`)"
    )
    ssub = p.add_subparsers(dest="suite_command", metavar="COMMAND", title="commands")
    p.set_defaults(func=show_usage(p))

    def material_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--samples",
            required=True,
            help="captured samples .jsonl file or directory (the sidecar's data_dir/samples)",
        )
        p.add_argument("--scores", required=True, help="their scores .jsonl file or directory (data_dir/scores)")
        p.add_argument(
            "--consistency",
            default=None,
            metavar="PAIRS",
            help="the consistency probe's pairs (<data_dir>/consistency/pairs): confident-but-unstable answers become failure cases, the re-ask kept in the manifest",
        )
        p.add_argument(
            "--model-version",
            action="append",
            default=None,
            metavar="VERSION",
            help="only the samples of this model version (repeatable; default: every version): cases, failures and reference answers from the version you trust",
        )
        p.add_argument(
            "--similarity",
            choices=["auto", "text", "embeddings"],
            default="auto",
            help="near-duplicate rule: embeddings of the prompts (extra: embeddings) or normalised text shingles; auto: embeddings when installed",
        )

    p = ssub.add_parser(
        "build",
        help="pick cases matching live traffic's category mix, with quotas of failures and edge cases; writes the suite and <name>.manifest.json",
    )
    common(p)
    material_args(p)
    p.add_argument("--out", required=True, help="suite .jsonl to write (the manifest goes beside it)")
    p.add_argument("--size", type=whole_number, default=200, help="cases in the suite (default 200)")
    p.add_argument(
        "--failure-quota",
        type=float,
        default=0.2,
        help="share of cases taken from known failures: a failed check, refused, truncated, errored, confident but unstable (--consistency) (default 0.2)",
    )
    p.add_argument(
        "--edge-quota",
        type=float,
        default=0.1,
        help="share of cases taken from edge cases: longest prompts, rare routes/models, other languages (default 0.1)",
    )
    p.add_argument(
        "--mix",
        choices=["traffic", "weighted"],
        default="traffic",
        help="category mix: live traffic share, or traffic share x matrix weight (default traffic)",
    )
    p.add_argument("--seed", type=whole_number, default=None, help="seed for the random picks (default: random)")
    p.set_defaults(func=cmd_suite_build)

    p = ssub.add_parser(
        "add",
        help="append new failures to a suite; existing cases stay byte-identical, the version and checksum change",
    )
    common(p)
    p.add_argument(
        "--suite", required=True, help="suite .jsonl made by `llmwatch suite build` (its manifest beside it)"
    )
    material_args(p)
    p.add_argument(
        "--failed-only", action="store_true", help="add known failures only (default: failures and edge cases)"
    )
    p.add_argument("--max-new", type=whole_number, default=None, help="add at most this many cases")
    p.set_defaults(func=cmd_suite_add)

    p = ssub.add_parser(
        "show", help="counts by category, failure mode and source, to review a suite before freezing it"
    )
    log_options(p)
    p.add_argument("suite", help="suite .jsonl")
    p.add_argument(
        "--format", choices=["text", "json"], default="text", help="text for people, json for scripts (default text)"
    )
    p.set_defaults(func=cmd_suite_show)
