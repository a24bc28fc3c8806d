"""`llmwatch score`: the sidecar's checks over sample files, for traffic exported by users.

The output is written to a temporary file beside `--out` and renamed only when every input line
was read, so a bad line leaves no half-written result behind; the error names file and line.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, Callable, Iterator, Mapping, NamedTuple

from llmwatch.core.jsonio import atomic_writer, batches, jsonl_paths, read_records
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.embedding_cache import (
    PROMPT_PREFIX,
    CacheWriter,
    cache_path,
    open_cache,
    read_cache,
    text_key,
)
from llmwatch.scorers.checks.errors import ErrorTally, refuse_mostly_errors
from llmwatch.scorers.checks.suite import build_suite
from llmwatch.scorers.reports.text import pass_rate_table


def _count_lines(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as fh:
            total += sum(1 for line in fh if line.strip())
    return total


def offline_scoring(cfg: ScoringSection) -> ScoringSection:
    """The scoring settings of an offline command: torch on every CPU this process may use.

    The sidecar's default of one torch thread leaves the other cores to traffic; a `score`,
    `freeze` or `drift` run has the machine to itself. An explicit `scoring.torch_threads`
    (config file or LLMWATCH_SCORING__TORCH_THREADS) is kept: on a machine shared with other
    busy processes fewer threads can be faster (docs/design/0013-offline-commands-in-plain-torch.md).
    """
    if "torch_threads" not in cfg.model_fields_set:
        try:
            cpus = len(os.sched_getaffinity(0))  # a taskset or cgroup cpuset, not the host's count
        except AttributeError:  # not Linux
            cpus = os.cpu_count() or 1
        cfg = cfg.model_copy(update={"torch_threads": max(1, min(cpus, 64))})
    if cfg.torch_threads > 1:
        # OpenMP threads that wait by spinning burn a core each whenever another process holds
        # it: on 2 shared cores that doubled the CPU of the model forward (31 s instead of 18 s for
        # 1,000 samples) and made 2 threads slower than 1. Read when torch loads, so set before;
        # a value the user set wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return cfg


def score_files(
    scoring: ScoringSection, source: str, out_path: str, *, batch_size: int = 256, out: IO[str] = sys.stdout
) -> int:
    from tqdm import tqdm

    from llmwatch.core import parquet

    # A Parquet dataset (`llmwatch archive`) is read by `read_records` too; its files are counted.
    dataset = (
        parquet.is_url(source)
        or parquet.is_parquet_file(source)
        or Path(source).is_dir()
        and not any(Path(source).glob("*.jsonl"))
        and parquet.is_dataset(source, "samples")
    )
    paths = [name for _, _, name in parquet.parts(source, "samples")] if dataset else jsonl_paths(source)
    suite = build_suite(offline_scoring(scoring))
    target = Path(out_path)
    # Counted as they are written, not kept: 200,000 samples' Score objects were 1.2 GB (issue 29).
    counts: dict[tuple[str, str, str], float] = {}
    scores_written = 0
    samples_seen = 0
    shown = sys.stderr.isatty()
    # The total is one more read of every file: only worth it when a bar is shown.
    progress = tqdm(
        total=_count_lines(paths) if shown and not dataset else None, unit="sample", disable=not shown, file=sys.stderr
    )
    # Answer vectors the relevance checks just computed (no second model call), kept beside the
    # scores so that `baseline freeze` and `drift --scores` do not embed again. Appended to
    # temporary files batch by batch, not kept: two vectors a sample were 3 GB at a million (issue 29).
    vectors = (
        CacheWriter(cache_path(target), quantized=scoring.quantize_embeddings) if suite.embedder is not None else None
    )
    try:
        with atomic_writer(target) as fh:
            for batch in batches(read_records(source), batch_size):
                samples_seen += len(batch)
                for result in suite.score(batch):
                    fh.write(result.score.to_json() + b"\n")
                    key = (result.score.check, result.score.model_version or "unknown", result.score.result)
                    counts[key] = counts.get(key, 0.0) + 1
                    scores_written += 1
                if vectors is not None:
                    _keep_vectors(suite.embedder, batch, vectors.add)
                progress.update(len(batch))
            if not samples_seen:
                # An empty .jsonl is refused up front; Parquet files of no rows, or a file whose one
                # line is a torn write, were "scored 0 samples", exit 0, and an empty output.
                raise RecordError(
                    f"--in {source} holds no samples (no rows, or only a torn last line); nothing written; "
                    "export some traffic first, e.g. with `llmwatch proxy` or `llmwatch demo`"
                )
        if vectors is not None:
            vectors.close()  # the cache appears whole, after the scores (as before)
    finally:
        if vectors is not None:
            vectors.abort()
        progress.close()
    out.write(f"scored {samples_seen} samples from {len(paths)} file(s): {scores_written} scores -> {target}\n")
    out.write(pass_rate_table(counts) + "\n")
    return 0


def _keep_vectors(embedder: Any, batch: list[Sample], add: Callable[[str, str, Any], None]) -> None:
    """Answer and prompt vectors of a scored batch (mostly what relevance just computed), by sample id:
    `add(key, text hash, vector)`."""
    from llmwatch.scorers.checks.embeddings import prompt_for_embedding

    for sample, vector in zip(batch, embedder.embed_answers(batch)):
        if vector.any():
            add(sample.id, text_key(sample.answer_text()), vector)
    for sample, vector in zip(batch, embedder.embed_prompts(batch)):
        if vector.any():
            add(PROMPT_PREFIX + sample.id, text_key(prompt_for_embedding(sample)), vector)


def _into(known: dict[str, tuple[str, Any]]) -> Callable[[str, str, Any], None]:
    def add(key: str, text_hash: str, vector: Any) -> None:
        known[key] = (text_hash, vector)

    return add


def load_window(
    scoring: ScoringSection,
    samples_path: str,
    scores_path: str | None,
    model_version: str | None,
    *,
    purpose: str,
    prompts: dict | None = None,
):
    """Samples (of one version, if asked), their scores (read, or computed now) and answer embeddings.

    With a `prompts` dict (and embeddings on), it is filled with the prompt vectors by sample id,
    for the drift's prompt matching, clusters and `inputs` signal.
    """
    import numpy as np

    samples = [s for s in read_records(samples_path)]
    versions = sorted({s.model_version or "unknown" for s in samples})
    if model_version is not None:
        samples = [s for s in samples if (s.model_version or "unknown") == model_version]
        if not samples:
            raise RecordError(
                f"no samples of model version {model_version!r} in {samples_path} for {purpose}; versions found: {', '.join(versions) or 'none'}"
            )
    if not samples:
        raise RecordError(f"{samples_path} holds no samples for {purpose}")
    ids = {s.id for s in samples}
    suite = None
    # Vectors computed once per sample: by `llmwatch score` (the cache beside its scores file),
    # or by the relevance checks while scoring now; the model runs only for what is left.
    known: dict[str, tuple[str, np.ndarray]] = {}
    if scores_path is not None:
        from llmwatch.scorers.evaluation.judge import counts_for_verdicts

        # An uncalibrated live judge's verdicts are in the same files: shown in reports, never a drift signal.
        scores = [
            sc
            for sc in read_records(scores_path, Score, prefix="scores")
            if sc.sample_id in ids and counts_for_verdicts(sc)
        ]
        if scoring.embeddings:
            known = read_cache(cache_path(scores_path), quantized=scoring.quantize_embeddings)
    else:
        suite = build_suite(offline_scoring(scoring))
        scores = []
        with _progress(len(samples), f"scoring for {purpose}") as progress:
            for start in range(0, len(samples), _OFFLINE_BATCH):
                batch = samples[start : start + _OFFLINE_BATCH]
                scores += [r.score for r in suite.score(batch)]
                if scoring.embeddings and suite.embedder is not None:
                    _keep_vectors(suite.embedder, batch, _into(known))
                progress.update(len(batch))
    # A window of `error` scores has no pass rate: refuse it before embedding anything (exit 2).
    refuse_mostly_errors(scores, samples=samples_path, scores_path=scores_path, purpose=purpose)
    embeddings: dict[str, np.ndarray] = {}
    if scoring.embeddings:
        wanted = [
            s
            for s in samples
            if s.status < 400
            and s.operation in ("chat", "text_completion", "generate_content")
            and s.answer_text().strip()
        ]
        embedder = suite.embedder.embedder if suite is not None and suite.embedder is not None else None
        embedder = _embed_missing(
            scoring,
            wanted,
            known,
            "",
            lambda s: s.answer_text(),
            embeddings,
            embedder,
            f"embedding answers for {purpose}",
        )
        if prompts is not None:
            from llmwatch.scorers.checks.embeddings import prompt_for_embedding

            asked = [
                s
                for s in samples
                if s.operation in ("chat", "text_completion", "generate_content") and prompt_for_embedding(s)
            ]
            _embed_missing(
                scoring,
                asked,
                known,
                PROMPT_PREFIX,
                prompt_for_embedding,
                prompts,
                embedder,
                f"embedding prompts for {purpose}",
            )
    return samples, scores, embeddings, versions


def _embed_missing(
    scoring: ScoringSection,
    wanted: list[Sample],
    known: dict,
    prefix: str,
    text: Any,
    into: dict,
    embedder: Any,
    what: str,
) -> Any:
    """Vectors of `text(sample)` into `into[sample.id]`: from `known` when the text hash matches, else embedded now."""
    missing = []
    for s in wanted:
        hit = known.get(prefix + s.id)
        if hit is not None and hit[0] == text_key(text(s)):
            into[s.id] = hit[1]
        else:
            missing.append(s)
    if missing:
        if embedder is None:
            from llmwatch.scorers.checks.embeddings import Embedder

            embedder = Embedder(threads=offline_scoring(scoring).torch_threads, quantize=scoring.quantize_embeddings)
        with _progress(len(missing), what) as progress:
            for start in range(0, len(missing), _OFFLINE_BATCH):
                part = missing[start : start + _OFFLINE_BATCH]
                for s, v in zip(part, embedder.encode([text(s) for s in part])):
                    into[s.id] = v
                progress.update(len(part))
    return embedder


# Samples per model call in the offline commands: large enough for batching, small enough for a
# progress bar that moves.
_OFFLINE_BATCH = 256


def _progress(total: int, what: str):
    from tqdm import tqdm

    # On a terminal only: a redirected stderr (CI logs) gets no bar.
    return tqdm(total=total, unit="sample", desc=what, disable=not sys.stderr.isatty(), file=sys.stderr)


class Codes:
    """Strings as small ints, in the order first seen: the per-record columns of the streamed
    offline commands hold a code where a string per record would cost ~50 bytes each."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def code(self, name: str) -> int:
        got = self.index.get(name)
        if got is None:
            got = self.index[name] = len(self.names)
            self.names.append(name)
        return got


class ScoredEntry(NamedTuple):
    """What the drift summaries read of a score, shared between samples with equal values.

    A Score object costs about 2 KB; at 200,000 samples with four checks that is 1.6 GB. Rule
    checks repeat a handful of (check, result, value) combinations, so one instance serves all."""

    check: str
    kind: str
    result: str
    value: float | None
    details: Mapping[str, Any]


_NO_DETAILS: Mapping[str, Any] = MappingProxyType({})
_TRUNCATED: Mapping[str, Any] = MappingProxyType({"truncated": True})


def compact_score(score: Score, cache: dict[tuple, ScoredEntry]) -> ScoredEntry:
    # failure_mode reads details only of a failed not_empty_or_truncated: keep just its verdict.
    truncated = (
        score.kind == "not_empty_or_truncated"
        and score.result == "fail"
        and bool(score.details.get("truncated") or "length" in str(score.details))
    )
    key = (score.check, score.kind, score.result, score.value, truncated)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = ScoredEntry(
            score.check, score.kind, score.result, score.value, _TRUNCATED if truncated else _NO_DETAILS
        )
    return hit


@dataclass
class StreamedWindow:
    """A window summarised while streaming its files: what `baseline freeze` and `drift` need of it."""

    routes: dict[str, Any]  # route -> RouteStats
    sample_count: int
    time_span: tuple[datetime, datetime]
    checks: list[str]
    versions: list[str]  # every version in the samples file
    window_versions: list[str]  # the versions of the samples summarised


def summarize_window(
    scoring: ScoringSection,
    samples_path: str,
    scores_path: str | None,
    model_version: str | None,
    *,
    purpose: str,
    reservoir_size: int = 5000,
    embedding_reservoir: int = 500,
) -> StreamedWindow:
    """`load_window` then `summarize`, in memory that does not grow with whole samples.

    Reads the samples file twice and the scores file once, in order: the first pass validates the
    samples and keeps the window's ids, versions and time span; the scores are kept per sample as
    a tuple of shared compact entries (`ScoredEntry`); the second pass feeds each sample with its
    scores to the per-route accumulators and drops it. Without a scores file the checks run on
    batches of the second pass. Errors are those of `load_window`, in the same order.

    With `scoring.embeddings` the second pass goes by batches: each batch's answer and prompt
    vectors are read from the cache beside the scores file (`open_cache`: by row, never the
    whole file) or taken from what the relevance check just computed, the rest embedded now, and
    dropped once the batch is summarised. The answer centroid is a running sum; only the
    reservoirs' vectors (500 answers, 5,000 prompt rows per route) stay.
    """
    from llmwatch.scorers.drift.features import WindowSummary

    summary = WindowSummary(reservoir_size=reservoir_size, embedding_reservoir=embedding_reservoir)
    window = _summarize_into(summary, scoring, samples_path, scores_path, model_version, purpose=purpose)
    window.routes = summary.finish()
    return window


def summarize_sides(
    scoring: ScoringSection,
    samples_path: str,
    scores_path: str | None,
    side_of: Callable[[Sample], int | None],
    sides: int,
    *,
    purpose: str,
    reservoir_size: int = 5000,
    embedding_reservoir: int = 500,
) -> list[dict[str, Any]]:
    """`load_window` of every version without prompt vectors, then one `summarize` per side of
    the window (`side_of(sample)`: its side, or None for a sample left out), streamed as
    `summarize_window` is: what `llmwatch canary` compares (issue 29).

    Every sample is scored (or its scores read) and counted for the mostly-`error` refusal, in
    file order, as `load_window` did; only the samples of a side reach a summary.
    """
    from llmwatch.scorers.drift.features import WindowSummary

    summaries = [
        WindowSummary(reservoir_size=reservoir_size, embedding_reservoir=embedding_reservoir) for _ in range(sides)
    ]
    _summarize_into(
        _Sides(side_of, summaries), scoring, samples_path, scores_path, None, purpose=purpose, prompts=False
    )
    return [summary.finish() for summary in summaries]


class _Sides:
    """A summary that hands each sample to its side's summary (without a prompt vector)."""

    def __init__(self, side_of: Callable[[Sample], int | None], summaries: list[Any]) -> None:
        self.side_of = side_of
        self.summaries = summaries

    def add(
        self, sample: Sample, scored: Mapping[str, Any], answer_vector: Any = None, prompt_vector: Any = None
    ) -> None:
        side = self.side_of(sample)
        if side is not None:
            self.summaries[side].add(sample, scored, answer_vector)


def _summarize_into(
    summary: Any,
    scoring: ScoringSection,
    samples_path: str,
    scores_path: str | None,
    model_version: str | None,
    *,
    purpose: str,
    prompts: bool = True,
) -> StreamedWindow:
    """The work of `summarize_window`, each sample handed to `summary.add`; `routes` left empty."""
    ids, versions, window_versions, time_span = _window_ids(samples_path, model_version, purpose)
    tally = ErrorTally()
    checks: set[str] = set()
    window_size = len(ids)

    def window() -> Iterator[Sample]:
        for s in read_records(samples_path):
            if model_version is None or (s.model_version or "unknown") == model_version:
                yield s

    count = 0
    if scores_path is not None:
        index = _scores_index(scores_path, ids, tally, checks)
        ids.clear()
        # A window of `error` scores has no pass rate: refuse it before summarising (exit 2).
        refuse_mostly_errors(tally, samples=samples_path, scores_path=scores_path, purpose=purpose)
        if not scoring.embeddings:
            for s in window():
                count += 1
                # Later scores of one check replace earlier ones, in the first one's place (as `summarize`).
                summary.add(s, {c.check: c for c in index.get(s.id, ())})
        else:
            vectors = _BatchVectors(
                scoring, open_cache(cache_path(scores_path), quantized=scoring.quantize_embeddings), prompts=prompts
            )
            try:
                with _progress(window_size, f"summarising for {purpose}") as progress:
                    for batch in batches(window(), _OFFLINE_BATCH):
                        count += len(batch)
                        vectors.add(batch, None, [{c.check: c for c in index.get(x.id, ())} for x in batch], summary)
                        progress.update(len(batch))
            finally:
                vectors.close()
    else:
        ids.clear()
        suite = build_suite(offline_scoring(scoring))
        vectors = _BatchVectors(scoring, None, suite, prompts=prompts)
        with _progress(window_size, f"scoring for {purpose}") as progress:
            for batch in batches(window(), _OFFLINE_BATCH):
                count += len(batch)
                _score_batch(suite, batch, tally, checks, summary, vectors)
                progress.update(len(batch))
        refuse_mostly_errors(tally, samples=samples_path, scores_path=None, purpose=purpose)
    return StreamedWindow(
        routes={},
        sample_count=count,
        time_span=time_span,
        checks=sorted(checks),
        versions=versions,
        window_versions=window_versions,
    )


_EMBEDDED_OPERATIONS = ("chat", "text_completion", "generate_content")


class _BatchVectors:
    """A streamed window's answer and prompt vectors, one batch at a time (what `load_window`
    computes for the whole window: the same samples, texts and cache rules).

    An answer is embedded for a successful call with answer text, a prompt for a call with prompt
    text (`prompt_for_embedding`); a vector is taken from the cache (or the batch the relevance
    check just embedded) when the id and the text hash match, else embedded now. With embeddings
    off, no vector: the summary is that of the rule checks.
    """

    def __init__(self, scoring: ScoringSection, cache: Any, suite: Any = None, *, prompts: bool = True) -> None:
        self.scoring = scoring
        self.prompts = prompts  # False: answers only (`llmwatch canary` matches no prompts by vector)
        self.cache = cache
        self.suite = suite
        self.embedder: Any = suite.embedder.embedder if suite is not None and suite.embedder is not None else None

    def add(
        self,
        batch: list[Sample],
        known: Mapping[str, tuple[str, Any]] | None,
        scored: list[Mapping[str, Any]],
        summary: Any,
    ) -> None:
        """Each sample of `batch` added to `summary` with its scores and vectors, in order."""
        if not self.scoring.embeddings:
            for s, sc in zip(batch, scored):
                summary.add(s, sc)
            return
        from llmwatch.scorers.checks.embeddings import prompt_for_embedding

        answers = self._vectors(
            [s for s in batch if s.status < 400 and s.operation in _EMBEDDED_OPERATIONS and s.answer_text().strip()],
            known,
            "",
            lambda s: s.answer_text(),
        )
        prompts = (
            self._vectors(
                [s for s in batch if s.operation in _EMBEDDED_OPERATIONS and prompt_for_embedding(s)],
                known,
                PROMPT_PREFIX,
                prompt_for_embedding,
            )
            if self.prompts
            else {}
        )
        for s, sc in zip(batch, scored):
            summary.add(s, sc, answers.get(s.id), prompts.get(s.id))

    def _vectors(
        self, wanted: list[Sample], known: Mapping[str, tuple[str, Any]] | None, prefix: str, text: Any
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        missing = []
        for s in wanted:
            key = text_key(text(s))
            vector = None
            if known is not None:
                hit = known.get(prefix + s.id)
                vector = hit[1] if hit is not None and hit[0] == key else None
            elif self.cache is not None:
                vector = self.cache.get(prefix + s.id, key)
            if vector is None:
                missing.append(s)
            else:
                out[s.id] = vector
        if missing:
            if self.embedder is None:
                from llmwatch.scorers.checks.embeddings import Embedder

                self.embedder = Embedder(
                    threads=offline_scoring(self.scoring).torch_threads, quantize=self.scoring.quantize_embeddings
                )
            for s, v in zip(missing, self.embedder.encode([text(s) for s in missing])):
                out[s.id] = v
        return out

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def _window_ids(
    samples_path: str, model_version: str | None, purpose: str
) -> tuple[set[str], list[str], list[str], tuple[datetime, datetime]]:
    """First pass: the window's sample ids, every version, the window's versions and time span."""
    ids: set[str] = set()
    versions: set[str] = set()
    window_versions: set[str] = set()
    first: datetime | None = None
    last: datetime | None = None
    for s in read_records(samples_path):
        version = s.model_version or "unknown"
        versions.add(version)
        if model_version is not None and version != model_version:
            continue
        ids.add(s.id)
        window_versions.add(version)
        first = s.timestamp if first is None or s.timestamp < first else first
        last = s.timestamp if last is None or s.timestamp > last else last
    if not ids or first is None or last is None:
        if model_version is not None:
            raise RecordError(
                f"no samples of model version {model_version!r} in {samples_path} for {purpose}; versions found: {', '.join(sorted(versions)) or 'none'}"
            )
        raise RecordError(f"{samples_path} holds no samples for {purpose}")
    return ids, sorted(versions), sorted(window_versions), (first, last)


def _scores_index(
    scores_path: str, ids: set[str], tally: ErrorTally, checks: set[str]
) -> dict[str, tuple[ScoredEntry, ...]]:
    """The window's scores by sample id, as tuples of shared compact entries; counted into `tally` and `checks`."""
    from llmwatch.scorers.evaluation.judge import counts_for_verdicts

    cache: dict[tuple, ScoredEntry] = {}
    index: dict[str, tuple[ScoredEntry, ...]] = {}
    for sc in read_records(scores_path, Score, prefix="scores"):
        # An uncalibrated live judge's verdicts are shown in reports, never a drift signal (as `load_window`).
        if sc.sample_id not in ids or not counts_for_verdicts(sc):
            continue
        tally.add(sc)
        checks.add(sc.check)
        index[sc.sample_id] = index.get(sc.sample_id, ()) + (compact_score(sc, cache),)
    return index


def _score_batch(
    suite: Any, batch: list[Sample], tally: ErrorTally, checks: set[str], summary: Any, vectors: _BatchVectors
) -> None:
    """The checks over one batch of the window, each sample then added to the summary with its scores (and vectors)."""
    by_sample: dict[str, dict[str, Score]] = {}
    for result in suite.score(batch):
        tally.add(result.score)
        checks.add(result.score.check)
        by_sample.setdefault(result.score.sample_id, {})[result.score.check] = result.score
    known: dict[str, tuple[str, Any]] = {}
    if vectors.scoring.embeddings and suite.embedder is not None:
        _keep_vectors(suite.embedder, batch, _into(known))  # what relevance just computed: no second model call
    vectors.add(batch, known, [by_sample.get(s.id, {}) for s in batch], summary)
