"""`llmwatch` command line. Each subcommand is a thin shell over a module that does the work.

Exit codes: 0 success, 1 the command ran and found a problem (e.g. drift), 2 bad usage,
bad config or unreadable input (the message says which field or line and how to fix it), 130 and
143 stopped by Ctrl-C and SIGTERM (temporary files removed, no output written).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import math
import signal
import sys
import threading
from typing import Any, Callable, Coroutine, Iterator, NoReturn, Sequence

import structlog

from llmwatch.agent import signals
from llmwatch.agent.cli.args import (
    add_comparison_options,
    at_least_one,
    config_from_args,
    fail_on_families,
    public_url,
    setup_logging,
    whole_number,
)
from llmwatch.agent.cli.common import (
    log_options,
    require_each_path_once,
    require_file,
    require_output_not_an_input,
    require_records,
    require_writable,
    show_usage,
)
from llmwatch.agent.signals import run_until_stopped
from llmwatch.core.config import ConfigError, ListenError
from llmwatch.core.errors import LlmwatchError
from llmwatch.core.extras import require
from llmwatch.core.version import __version__

log = structlog.get_logger(__name__)


def run_async(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())


async def _serve_until_signal(make_agent: Callable[[], Any]) -> int:
    agent = make_agent()

    async def serve(stop: asyncio.Event) -> None:
        await agent.start()
        await stop.wait()

    # Also after a failed start (a port in use): what did start (the upstream session, the scorer
    # process, the pipeline thread) is closed, not left to warn at exit. The signals are held
    # from before the start to the end of the stop (see run_until_stopped).
    await run_until_stopped(serve, agent.stop)
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if not cfg.upstream:
        raise ConfigError(
            "upstream: not set; pass --upstream http://HOST:PORT (the LLM service) or set `upstream:` in the config"
        )
    from llmwatch.agent.runtime import Agent

    return run_async(lambda: _serve_until_signal(lambda: Agent(cfg)))


def cmd_demo(args: argparse.Namespace) -> int:
    from llmwatch.agent.apps.demo import run_demo

    cfg = config_from_args(args)
    return run_async(
        lambda: run_demo(
            cfg,
            duration=args.duration,
            rate=args.rate,
            concurrency=args.concurrency,
            out=sys.stdout,
            sample_rate=args.sample_rate,
        )
    )


def cmd_score(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    require_records(args.input, "--in")
    require_writable(args.output, "--out")
    from llmwatch.scorers.checks.offline import score_files

    return score_files(cfg.scoring, args.input, args.output, batch_size=args.batch_size, out=sys.stdout)


def cmd_baseline_freeze(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    require_records(args.samples, "--samples")
    if args.scores:
        require_records(args.scores, "--scores", "scores")
    require_writable(
        args.out,
        "--out",
        example=f"baseline-{args.model_version}.json",
        must_not_exist="baselines are immutable, so freeze into a new file (e.g. add the version or date to the name)",
    )
    from llmwatch.scorers.drift.baseline import freeze, freeze_summary, write_baseline
    from llmwatch.scorers.drift.compare import settings_from_config

    minimums = settings_from_config(cfg.drift).minimums()
    if args.consistency:
        # The consistency probe's verdicts joined in: the whole window in memory.
        from llmwatch.scorers.checks.offline import load_window

        prompts: dict = {}
        samples, scores, embeddings, _ = load_window(
            cfg.scoring, args.samples, args.scores, args.model_version, purpose="the baseline", prompts=prompts
        )
        scores = [*scores, *_consistency_scores(args.consistency)]
        baseline = freeze(
            samples,
            scores,
            embeddings,
            model_version=args.model_version,
            minimums=minimums,
            prompt_embeddings=prompts,
        )
    else:
        # Streamed, in memory that does not grow with whole samples (issue 29); with embeddings,
        # vectors read or computed a batch at a time, only the reservoirs' kept.
        from llmwatch.scorers.checks.offline import summarize_window

        window = summarize_window(cfg.scoring, args.samples, args.scores, args.model_version, purpose="the baseline")
        baseline = freeze_summary(
            window.routes,
            model_version=args.model_version,
            sample_count=window.sample_count,
            time_span=window.time_span,
            checks=window.checks,
            minimums=minimums,
        )
    path = write_baseline(baseline, args.out)
    routes = ", ".join(f"{r} ({s.n})" for r, s in baseline.routes.items())
    sys.stdout.write(
        f"froze baseline of version {baseline.model_version}: {baseline.sample_count} samples, {len(baseline.checks)} checks, routes {routes} -> {path}\nchecksum sha256:{baseline.checksum}\n"
    )
    return 0


def _consistency_scores(path: str | None) -> list:
    """`--consistency PAIRS`: the probe's verdicts as `consistency` check results (lexical/structured)."""
    if not path:
        return []
    require_records(path, "--consistency", "pairs")
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.pairs import Pair
    from llmwatch.scorers.evaluation.consistency import consistency_scores

    return consistency_scores(read_records(path, Pair, prefix="pairs"))


def cmd_drift(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    from llmwatch.agent.cli.evaluate import check_out_args, write_comparison

    check_out_args(args, "drift.json")
    # Before the window is read and scored (minutes with the embedding checks): a typo here
    # (`--fail-on behavior`) used to be refused only after all of it.
    fail_on = fail_on_families(args.fail_on)
    require_file(args.baseline, "--baseline", "create one with `llmwatch baseline freeze`")
    require_records(args.samples, "--samples")
    if args.scores:
        require_records(args.scores, "--scores", "scores")

    from llmwatch.scorers.checks.offline import load_window, summarize_window
    from llmwatch.scorers.drift.baseline import check_minimums, load_baseline
    from llmwatch.scorers.drift.compare import compare, format_text, settings_from_config
    from llmwatch.scorers.drift.features import summarize

    baseline = load_baseline(args.baseline)
    if args.consistency:
        # The consistency probe's verdicts joined in: the whole window in memory.
        prompts: dict = {}
        samples, scores, embeddings, versions = load_window(
            cfg.scoring, args.samples, args.scores, args.model_version, purpose="the drift window", prompts=prompts
        )
        scores = [*scores, *_consistency_scores(args.consistency)]
        current = summarize(samples, scores, embeddings, prompt_embeddings=prompts)
        window_versions = sorted({s.model_version or "unknown" for s in samples})
        del samples, scores
    else:
        # Streamed, in memory that does not grow with whole samples (issue 29), embeddings or not.
        window = summarize_window(
            cfg.scoring, args.samples, args.scores, args.model_version, purpose="the drift window"
        )
        current, window_versions = window.routes, window.window_versions
    settings = settings_from_config(cfg.drift, alpha=args.alpha, min_samples=args.min_samples, fail_on=fail_on)
    check_minimums(baseline, settings, f"baseline {args.baseline}")
    shown = [args.model_version] if args.model_version else window_versions
    report = compare(
        baseline.routes, current, baseline_version=baseline.model_version, current_versions=shown, settings=settings
    )

    def html() -> str:
        from llmwatch.scorers.reports.html import render_drift

        return render_drift(report, baseline.routes, current)

    return write_comparison(args, report, f"drift {report.verdict.upper()}", html, lambda: format_text(report))


def _kafka_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    kafka = {
        "bootstrap_servers": args.bootstrap,
        "samples_topic": args.topic,
        "group_id": args.group,
        "scores_topic": args.scores_topic,
    }
    return {k: v for k, v in kafka.items() if v is not None} or None


def cmd_scorer(args: argparse.Namespace) -> int:
    require("kafka", "llmwatch scorer")
    from llmwatch.agent.processes.kafka_scorer import run_scorer

    return run_scorer(config_from_args(args, kafka=_kafka_overrides(args)))


def cmd_aggregate(args: argparse.Namespace) -> int:
    require("kafka", "llmwatch aggregate")
    from llmwatch.agent.processes.kafka_aggregate import run_aggregator

    return run_aggregator(
        config_from_args(
            args, kafka=_kafka_overrides(args), drift={"baseline": args.baseline} if args.baseline else None
        )
    )


def cmd_archive(args: argparse.Namespace) -> int:
    require("kafka", "llmwatch archive")
    require("parquet", "llmwatch archive")
    from llmwatch.agent.processes.kafka_archive import run_archiver

    if args.batch_bytes <= 0:
        raise ConfigError(f"--batch-bytes {args.batch_bytes}: give bytes above 0 (default 67108864, 64 MiB)")
    # Taken as given, 0 or a negative count wrote (or tried to) after every poll, and a period of
    # 0 or below wrote after every poll; NaN or inf never wrote by time at all.
    if args.batch_records <= 0:
        raise ConfigError(f"--batch-records {args.batch_records}: give a count of records above 0 (default 10000)")
    if not (math.isfinite(args.flush_s) and args.flush_s > 0):
        raise ConfigError(f"--flush-s {args.flush_s}: give a finite number of seconds above 0 (default 10)")
    kafka = _kafka_overrides(args) or {}
    if args.pairs_topic:
        kafka["pairs_topic"] = args.pairs_topic
    return run_archiver(
        config_from_args(args, kafka=kafka or None),
        args.out,
        batch_records=args.batch_records,
        flush_s=args.flush_s,
        batch_bytes=args.batch_bytes,
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    from llmwatch.agent.apps.simulator.server import run

    try:
        return run(args)
    except OSError as exc:
        raise ListenError(f"cannot listen on {args.host}:{args.port} (--host/--port): {exc.strerror or exc}") from None


def cmd_ingest(args: argparse.Namespace) -> int:
    require("otel", "llmwatch ingest")
    cfg = config_from_args(args, otel={"ingest_listen": args.ingest_listen} if args.ingest_listen else None)
    if not cfg.otel.ingest_listen:
        cfg = cfg.model_copy(update={"otel": cfg.otel.model_copy(update={"ingest_listen": "127.0.0.1:4318"})})
    from llmwatch.agent.runtime import Agent

    return run_async(lambda: _serve_until_signal(lambda: Agent(cfg, serve_proxy=False)))


def cmd_ui(args: argparse.Namespace) -> int:
    from llmwatch.agent.apps.ui.app import run

    if not (math.isfinite(args.refresh) and args.refresh > 0):
        # nan and inf passed `<= 0`: the UI started and never looked for new files.
        raise ConfigError(f"--refresh {args.refresh}: give a finite number of seconds above 0 (default 5)")
    return run(
        args.data_dir,
        args.listen,
        auth=args.auth,
        token_file=args.token_file,
        suites=args.suite or (),
        drift_reports=args.drift_report or (),
        public_url=args.public_url,
        refresh_s=args.refresh,
    )


class _Parser(argparse.ArgumentParser):
    """An unknown option is refused by the command that was given it, with the closest options.

    argparse hands a subcommand's unknown options up to the top parser, which printed
    `usage: llmwatch [-h] [--version] COMMAND ...` for `llmwatch proxy --upstrem URL`: the
    command's own usage and a "did you mean --upstream?" are what lets the reader fix it.
    Subparsers are made of this class too (add_subparsers uses the parent's type).

    Abbreviations are off (`allow_abbrev=False`): argparse took `--sample x` for `--samples x`, so
    `--sample a --samples b` passed the repeated-input check (require_each_path_once) and read b
    alone; an abbreviation is now an unrecognized argument, with the full option suggested.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._given: list[str] = []

    def _hints(self, words: Sequence[str]) -> list[str]:
        """ "did you mean" for each `--word` among `words` that is none of this parser's options."""
        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        hints = []
        for given in (a.split("=", 1)[0] for a in words if a.startswith("--")):
            if given in options or given == "--":
                continue
            # An abbreviation (`--samp`) names the one option it starts; else the closest spelling.
            starts = [o for o in options if o.startswith(given)]
            close = starts if len(starts) == 1 else difflib.get_close_matches(given, options, n=1, cutoff=0.8)
            if close:
                hints.append(f"{given}: did you mean {close[0]}?")
        return hints

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            hints = self._hints(extra)
            self.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else ""))
        return parsed, extra

    def error(self, message: str) -> NoReturn:
        # `drift --samp s` is "required: --samples" before any unknown argument is named: the
        # abbreviation is named too, or the reader sees a --samples they believe they gave.
        if message.startswith("the following arguments are required") and (hints := self._hints(self._given)):
            message += f" ({'; '.join(hints)}; options are not abbreviated)"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="llmwatch", description="Production traffic observability for OpenAI-compatible LLM services."
    )
    parser.add_argument("--version", action="version", version=f"llmwatch {__version__}")
    # Not required: `llmwatch` alone prints the commands (main), not argparse's bare complaint.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config", help="YAML config file (env LLMWATCH_CONFIG); env LLMWATCH_<SECTION>__<FIELD> overrides it"
        )
        log_options(p)

    p = sub.add_parser(
        "proxy",
        help="run the sidecar proxy in front of an LLM service",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "scoring isolation on one machine:\n"
            "  The scorer runs in a child process at nice 10 (scoring.nice). With two or more CPUs\n"
            "  allowed, it is pinned to all of them but the first (scoring.cpu_affinity: auto), which\n"
            "  is left to traffic: the proxy (one event loop) runs there while the scorer is busy.\n"
            "  Give the proxy at least two CPUs for this (e.g. `taskset -c 0,1 llmwatch proxy ...`);\n"
            "  with one CPU the scorer shares it at lower priority only.\n"
            '  scoring.cpu_affinity: "2-3" names the scorer\'s CPUs; "all" turns pinning off.\n'
            "  To keep scoring off the machine's traffic altogether: scoring.enabled: false here, and\n"
            "  kafka.enabled: true with `llmwatch scorer` workers elsewhere (the Helm chart's scorer\n"
            "  Deployment, with its own CPU request and limit)."
        ),
    )
    common(p)
    p.add_argument("--upstream", help="the LLM service's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--listen", help="HOST:PORT to accept client traffic on (default 127.0.0.1:8080)")
    p.add_argument("--metrics-listen", help="HOST:PORT for /metrics, /healthz, /readyz (default 127.0.0.1:9464)")
    p.add_argument("--data-dir", help="where samples are written (default ./llmwatch-data)")
    p.set_defaults(func=cmd_proxy)

    p = sub.add_parser(
        "simulate", help="run the built-in OpenAI-compatible LLM simulator (an upstream to try llmwatch on)"
    )
    from llmwatch.agent.apps.simulator.options import add_arguments as simulator_arguments

    simulator_arguments(p)
    log_options(p)
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser(
        "demo",
        help="run a simulator, the proxy in front of it, and traffic through it; print a summary",
        # What a first run does, how long it takes and what its exit code means, before it starts.
        description=(
            "Start the built-in simulator and the proxy in front of it, send --duration seconds of traffic in "
            "three phases (version A; A again, against the baseline frozen from the first phase; version B, "
            "subtly degraded), wait for the scorer while it makes progress (at most a few minutes), and print "
            "what llmwatch saw: pass rates, drift verdicts, the shadow verdict and the stability figures. "
            "About 2.5 minutes with the defaults. Exit 0 when the story was shown; 2 when it could not be "
            "(too little scored data, stopped early, a non-empty --data-dir the demo did not write), saying "
            "why. Ctrl-C stops it early."
        ),
    )
    common(p)
    p.add_argument("--duration", type=float, default=45.0, help="seconds of traffic over the three phases (default 45)")
    p.add_argument("--rate", type=float, default=20.0, help="requests per second offered (default 20)")
    p.add_argument(
        "--sample-rate", type=float, default=0.5, help="fraction of calls sampled and scored (default 0.5 in the demo)"
    )
    p.add_argument("--concurrency", type=whole_number, default=64, help="most requests in flight (default 64)")
    p.add_argument("--listen", help="proxy HOST:PORT (default 127.0.0.1:8080)")
    p.add_argument("--metrics-listen", help="metrics HOST:PORT (default 127.0.0.1:9464)")
    p.add_argument("--data-dir", help="where samples are written (default ./llmwatch-data)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("score", help="run the checks over sample files (JSON Lines) and write scores")
    common(p)
    p.add_argument("--in", dest="input", required=True, help="a samples .jsonl file, or a directory of them")
    p.add_argument("--out", dest="output", required=True, help="where to write scores (JSON Lines)")
    p.add_argument(
        "--batch-size",
        type=at_least_one,
        default=256,
        help="samples scored together; larger is faster for the embedding checks and uses more memory (default 256)",
    )
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("baseline", help="frozen baselines of a model version's behaviour")
    bsub = p.add_subparsers(dest="baseline_command", metavar="COMMAND", title="commands")
    p.set_defaults(func=show_usage(p))
    p = bsub.add_parser(
        "freeze", help="summarise samples of one model version into an immutable, checksummed baseline file"
    )
    common(p)
    p.add_argument("--samples", required=True, help="samples .jsonl file or directory")
    p.add_argument("--scores", help="scores .jsonl file or directory (default: score the samples now)")
    p.add_argument(
        "--model-version", required=True, help="the version to freeze (samples of other versions are ignored)"
    )
    p.add_argument("--out", required=True, help="baseline file to create (never overwritten)")
    p.add_argument(
        "--consistency",
        metavar="PAIRS",
        help="the consistency probe's pairs (<data_dir>/consistency/pairs): adds the `consistency` check to the samples re-asked",
    )
    p.set_defaults(func=cmd_baseline_freeze)

    p = sub.add_parser(
        "drift",
        help="compare a window of samples against a frozen baseline (exit 0 stable, 1 drift, 2 too little data or bad input)",
    )
    common(p)
    p.add_argument("--baseline", required=True, help="baseline file written by `llmwatch baseline freeze`")
    p.add_argument("--samples", required=True, help="samples .jsonl file or directory (the current window)")
    p.add_argument("--scores", help="scores for those samples (default: score them now)")
    p.add_argument("--model-version", help="only samples of this version (default: all)")
    p.add_argument(
        "--consistency",
        metavar="PAIRS",
        help="the consistency probe's pairs (<data_dir>/consistency/pairs): adds the `consistency` check to the samples re-asked",
    )
    add_comparison_options(
        p,
        min_samples_help="fewest samples a signal needs on each side (default 30)",
        fail_on_help="families whose drift exits 1, from inputs, behaviour, performance (default: drift.fail_on, behaviour,performance)",
    )
    p.set_defaults(func=cmd_drift)

    def kafka_options(p: argparse.ArgumentParser, group_help: str) -> None:
        common(p)
        p.add_argument(
            "--kafka",
            dest="bootstrap",
            help="bootstrap servers HOST:PORT[,HOST:PORT] (default: kafka.bootstrap_servers)",
        )
        p.add_argument("--topic", help="samples topic (default: kafka.samples_topic, llmwatch.samples)")
        p.add_argument("--group", help=group_help)
        p.add_argument("--scores-topic", help="scores topic (default: kafka.scores_topic, llmwatch.scores)")
        p.add_argument("--metrics-listen", help="HOST:PORT for /metrics and /healthz (default: metrics_listen)")

    p = sub.add_parser("scorer", help="score samples from a Kafka topic as one member of a consumer group")
    kafka_options(p, "consumer group shared by all workers (default: kafka.group_id, llmwatch-scorers)")
    p.set_defaults(func=cmd_scorer)

    p = sub.add_parser(
        "aggregate", help="fleet-wide exact quality metrics and drift from the samples and scores topics"
    )
    kafka_options(p, "the workers' group id; the aggregator uses <group>-aggregator (default: kafka.group_id)")
    p.add_argument("--baseline", help="baseline file for drift (default: drift.baseline)")
    p.set_defaults(func=cmd_aggregate)

    p = sub.add_parser(
        "archive",
        help="write the samples, scores and pairs topics to a Parquet dataset, exactly one row per record",
    )
    kafka_options(p, "the workers' group id; archive workers use <group>-archive (default: kafka.group_id)")
    p.add_argument("--pairs-topic", help="pairs topic (default: kafka.pairs_topic, llmwatch.pairs)")
    p.add_argument(
        "--out", required=True, help="dataset directory shared by every archive worker (samples/, scores/, pairs/)"
    )
    p.add_argument(
        "--batch-records",
        type=whole_number,
        default=10_000,
        help="most records buffered before a write (default 10000)",
    )
    p.add_argument(
        "--batch-bytes",
        type=whole_number,
        default=64 * 1024 * 1024,
        help="most bytes of records buffered before a write (default 67108864, 64 MiB)",
    )
    p.add_argument(
        "--flush-s", type=float, default=10.0, help="write buffered records at least this often, seconds (default 10)"
    )
    p.set_defaults(func=cmd_archive)

    p = sub.add_parser(
        "ingest",
        help="receive OTLP/HTTP traces from instrumented apps and store, redact and score their LLM spans (no proxy)",
    )
    common(p)
    p.add_argument(
        "--listen",
        dest="ingest_listen",
        help="HOST:PORT for POST /v1/traces (default: otel.ingest_listen, else 127.0.0.1:4318)",
    )
    p.add_argument("--metrics-listen", help="HOST:PORT for /metrics, /healthz, /readyz (default 127.0.0.1:9464)")
    p.add_argument("--data-dir", help="where samples are written (default ./llmwatch-data)")
    p.set_defaults(func=cmd_ingest)
    p = sub.add_parser(
        "ui",
        help="browse samples, scores, versions, drift reports, shadow pairs and suites of a data directory (local web app)",
    )
    log_options(p)
    p.add_argument(
        "--data-dir",
        default="llmwatch-data",
        help="the sidecar's data directory, or a Parquet dataset (llmwatch archive) as a directory or URL: s3://, gs://, file:// (default ./llmwatch-data)",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:8090",
        help="HOST:PORT (default 127.0.0.1:8090; port 0 picks a free one, printed)",
    )
    p.add_argument(
        "--auth",
        choices=["auto", "token", "none"],
        default="auto",
        help="auto (default): no token on a loopback address, a token anywhere else; token: always; none: never (behind an authenticating proxy)",
    )
    p.add_argument(
        "--token-file",
        help="keep the token here (0600) so that links survive a restart (default: a new token per start)",
    )
    p.add_argument(
        "--suite",
        action="append",
        help="a regression suite .jsonl to show (repeatable; also <data-dir>/suites/*.jsonl)",
    )
    p.add_argument(
        "--drift-report",
        action="append",
        help="a drift report (`llmwatch drift --format json` output) to show (repeatable; also <data-dir>/drift/*.json)",
    )
    p.add_argument(
        "--public-url", type=public_url, help="base URL of the printed link when served behind a reverse proxy"
    )
    p.add_argument(
        "--refresh", type=float, default=5.0, help="seconds between looks for new or grown files (default 5)"
    )
    p.set_defaults(func=cmd_ui)
    from llmwatch.agent.cli.evaluate import register as register_evaluation

    register_evaluation(sub, common)
    from llmwatch.agent.cli.shadow import add_parser as register_shadow

    register_shadow(sub, common)
    from llmwatch.agent.cli.canary import add_parser as register_canary

    register_canary(sub, common)
    from llmwatch.agent.cli.replay import add_parser as register_replay

    register_replay(sub, common)

    from llmwatch.agent.cli.judge import add_parser as register_judge

    register_judge(sub, common)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM during a command that runs to its end (`score`, `drift`, `report`, ...).

    A KeyboardInterrupt, so that everything that lets Ctrl-C through (asyncio's callbacks, which
    swallow other exceptions, `except Exception` blocks) lets this through alike."""


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises `Terminated` inside, as Ctrl-C raises KeyboardInterrupt: the command unwinds,
    so its temporary files (an atomic writer's hidden `.partial`, a cache's parts) are removed.

    The default action killed the process where it stood and left them beside the output (exit
    143, the output itself untouched). The long-running commands take SIGTERM for their own stop
    (`llmwatch.agent.signals`) and put this handler back after. A second SIGTERM while the first
    unwinds is ignored, so the cleanup is not cut short by a supervisor that signals twice; its
    SIGKILL still ends a stop that takes too long. Installed only over the default handler, in
    the main thread: an application that set its own (or runs `main` in a thread) keeps it."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def unwind(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if signals.stop_taken():
            # A long-running command stopped on a signal and put this handler back: its cleanup is
            # done and the process is leaving; raised now, it would land in asyncio's shutdown.
            return
        raise Terminated

    signals.forget_stop()
    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        return show_usage(parser)(args)
    # Until a command reads its config: nothing may reach stdout, the human output's stream.
    setup_logging(args)
    try:
        require_each_path_once(sys.argv[1:] if argv is None else argv)
        require_output_not_an_input(args)
        with _sigterm_unwinds():
            return int(args.func(args) or 0)
    except LlmwatchError as exc:
        # Bad config, bad input files, unusable suites or reviews: the message names the place.
        sys.stderr.write(f"llmwatch: {exc.label}{exc}\n")
        return exc.exit_code
    except Terminated:
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        # Typically a port already in use or an unwritable data directory.
        sys.stderr.write(f"llmwatch: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
