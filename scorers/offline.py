"""`llmwatch score`: the sidecar's checks over sample files, for traffic exported by users.

The output is written to a temporary file beside `--out` and renamed only when every input line
was read, so a bad line leaves no half-written result behind; the error names file and line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

from llmwatch.core.config import Config
from llmwatch.core.jsonio import atomic_writer, jsonl_paths, read_records
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.report import count_scores, pass_rate_table
from llmwatch.scorers.suite import build_suite


def _count_lines(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as fh:
            total += sum(1 for line in fh if line.strip())
    return total


def score_files(cfg: Config, source: str, out_path: str, *, batch_size: int = 64, out: IO[str] = sys.stdout) -> int:
    from tqdm import tqdm

    paths = jsonl_paths(source)
    suite = build_suite(cfg.scoring)
    target = Path(out_path)
    scores_all = []
    samples_seen = 0
    progress = tqdm(total=_count_lines(paths), unit="sample", disable=not sys.stderr.isatty(), file=sys.stderr)
    try:
        with atomic_writer(target) as fh:
            batch: list[Sample] = []

            def flush() -> None:
                for result in suite.score(batch):
                    fh.write(result.score.to_json() + b"\n")
                    scores_all.append(result.score)
                progress.update(len(batch))
                batch.clear()

            for sample in read_records(source):
                batch.append(sample)
                samples_seen += 1
                if len(batch) >= batch_size:
                    flush()
            if batch:
                flush()
    finally:
        progress.close()
    out.write(f"scored {samples_seen} samples from {len(paths)} file(s): {len(scores_all)} scores -> {target}\n")
    out.write(pass_rate_table(count_scores(scores_all)) + "\n")
    return 0


def load_window(cfg: Config, samples_path: str, scores_path: str | None, model_version: str | None, *, purpose: str):
    """Samples (of one version, if asked), their scores (read, or computed now) and answer embeddings."""
    import numpy as np

    samples = [s for s in read_records(samples_path)]
    versions = sorted({s.model_version or "unknown" for s in samples})
    if model_version is not None:
        samples = [s for s in samples if (s.model_version or "unknown") == model_version]
        if not samples:
            raise RecordError(f"no samples of model version {model_version!r} in {samples_path} for {purpose}; versions found: {', '.join(versions) or 'none'}")
    if not samples:
        raise RecordError(f"{samples_path} holds no samples for {purpose}")
    ids = {s.id for s in samples}
    if scores_path is not None:
        scores = [sc for sc in read_records(scores_path, Score, prefix="scores") if sc.sample_id in ids]
    else:
        suite = build_suite(cfg.scoring)
        scores = [r.score for r in suite.score(samples)]
    embeddings: dict[str, np.ndarray] = {}
    if cfg.scoring.embeddings:
        from llmwatch.scorers.embeddings import Embedder

        wanted = [s for s in samples if s.status < 400 and s.operation in ("chat", "text_completion", "generate_content") and s.answer_text().strip()]
        if wanted:
            vectors = Embedder(threads=cfg.scoring.torch_threads, quantize=cfg.scoring.quantize_embeddings).encode([s.answer_text() for s in wanted])
            embeddings = {s.id: v for s, v in zip(wanted, vectors)}
    return samples, scores, embeddings, versions
