"""`llmwatch replay`: recorded samples through the online drift pager, as fast as they can go.

Registered by agent/llmwatch/agent/cli/main.py. The samples go, sorted by timestamp, through the
same `WindowAggregator` the scorer child and `llmwatch aggregate` hold (its windows and the pager
of scorers/llmwatch/scorers/drift/pager.py, on the samples' own clock): every alert transition
is printed as one JSON line as it happens, then one summary line. Exit codes as `llmwatch drift`:
0 nothing paged, 1 at least one page, 2 bad input (a malformed line is named).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from llmwatch.agent.cli.args import config_from_args
from llmwatch.agent.cli.common import require_file, require_records
from llmwatch.core.config import ConfigError
from llmwatch.core.records import RecordError, Sample

# Samples handed to the aggregator at once (as the scorer child hands it a scored batch).
BATCH = 256


def ordered_samples(source: str) -> list[Sample]:
    """The samples of a file or directory, sorted by timestamp (ties in file order).

    A proxy writes each sample when its call finishes, stamped with the time the call started,
    so its own files are not in timestamp order (a slow call lands after faster later ones):
    refusing that made the documented `llmwatch replay --samples llmwatch-data/samples` fail on
    every real recording. They are all held here anyway, so they are sorted.
    """
    return sorted(_samples(source), key=lambda s: s.timestamp)


def _samples(source: str) -> Iterator[Sample]:
    """The JSON Lines reader every other command uses: a malformed line is named by file and line, a
    file of another record kind is named as such, and a torn last line (a writer killed mid-line) is
    skipped with a warning, as in the files a live proxy is still writing."""
    from llmwatch.core.jsonio import iter_jsonl, jsonl_paths

    folder = source if Path(source).is_dir() else None
    for path in jsonl_paths(source, "samples"):
        yield from iter_jsonl(path, Sample, folder=folder)


def cmd_replay(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    require_file(args.baseline, "--baseline", "give the file `llmwatch baseline freeze` wrote")
    require_records(args.samples, "--samples")
    if args.scores:
        require_records(args.scores, "--scores", "scores")
    if not cfg.drift.pager:
        raise ConfigError("drift.pager is false in this config: replay runs the pager; set drift.pager: true")
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.scores import Score
    from llmwatch.scorers.drift.aggregate import WindowAggregator
    from llmwatch.scorers.drift.baseline import check_minimums, load_baseline
    from llmwatch.scorers.drift.compare import settings_from_config

    baseline = load_baseline(args.baseline)
    check_minimums(baseline, settings_from_config(cfg.drift), f"baseline {args.baseline}")
    # Order and shape first, from the records alone: a bad line is named before any check runs.
    samples = ordered_samples(args.samples)
    if not samples:
        raise RecordError(f"--samples {args.samples}: no samples to replay")
    if args.scores:
        ids = {s.id for s in samples}
        by_id: dict[str, list[Score]] = {}
        for sc in read_records(args.scores, Score, prefix="scores"):
            if sc.sample_id in ids:
                by_id.setdefault(sc.sample_id, []).append(sc)
    else:
        from llmwatch.scorers.checks.offline import offline_scoring
        from llmwatch.scorers.checks.suite import build_suite

        suite = build_suite(offline_scoring(cfg.scoring))
        by_id = {}
        for start in range(0, len(samples), BATCH):
            for result in suite.score(samples[start : start + BATCH]):
                by_id.setdefault(result.score.sample_id, []).append(result.score)
    # The drift section as configured, with the baseline given here: the machinery the scorer runs.
    stage = WindowAggregator(baseline, cfg.drift, None)
    if stage.windows.pager is None or not stage.windows.pager.signals:
        raise RecordError(
            f"--baseline {args.baseline}: no signal the pager can watch (each needs 30 or more baseline observations)"
        )
    out = sys.stdout
    pages: list[dict[str, Any]] = []
    for start in range(0, len(samples), BATCH):
        batch = samples[start : start + BATCH]
        for t in stage.add(batch, [sc for s in batch for sc in by_id.get(s.id, [])]):
            line = t.to_dict()
            if t.state == "firing":
                pages.append(line)
            out.write(orjson.dumps(line).decode() + "\n")
    pager = stage.windows.pager
    first = min(pages, key=lambda p: (p["sample_time"], p["samples_seen"])) if pages else None
    t0 = samples[0].timestamp
    summary = {
        "summary": {
            "samples": len(samples),
            "from": t0.isoformat(),
            "to": samples[-1].timestamp.isoformat(),
            "model_versions": sorted({s.model_version or "unknown" for s in samples}),
            "signals_watched": len(pager.signals),
            "threshold": round(pager.threshold, 4),
            "false_pages_per_30d": cfg.drift.false_pages_per_30d,
            "pages": len(pages),
            "first_page": None
            if first is None
            else {
                **{k: first[k] for k in ("family", "signal", "model_version", "sample_time", "samples_seen")},
                "seconds_after_first_sample": (datetime.fromisoformat(first["sample_time"]) - t0).total_seconds(),
            },
        }
    }
    out.write(orjson.dumps(summary).decode() + "\n")
    return 1 if pages else 0


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "replay",
        help="replay recorded samples through the online drift pager; print each alert transition (exit 0 no page, 1 paged)",
    )
    common(p)
    p.add_argument("--baseline", required=True, help="baseline file written by `llmwatch baseline freeze`")
    p.add_argument("--samples", required=True, help="samples .jsonl file or directory (replayed sorted by timestamp)")
    p.add_argument("--scores", help="scores for those samples (default: run the configured checks now)")
    p.set_defaults(func=cmd_replay)
