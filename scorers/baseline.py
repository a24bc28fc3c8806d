"""Frozen baselines: a model version's behaviour, summarised once and never changed.

A baseline file is JSON with a SHA-256 checksum over its canonical content. Loading verifies
the schema and the checksum, so a truncated, hand-edited or otherwise tampered file is refused
with a message that says what to do, instead of silently moving every drift verdict.
`write_baseline` refuses to overwrite: a new baseline is a new file.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import orjson
from pydantic import BaseModel, Field, ValidationError

from llmwatch import __version__
from llmwatch.core.errors import describe_validation_error
from llmwatch.core.jsonio import atomic_write_bytes
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.features import RouteStats, summarize

BASELINE_SCHEMA = "llmwatch.baseline/v1"


class BaselineError(RecordError):
    """A baseline that cannot be used; the message names the file and the fix."""


class Baseline(BaseModel):
    schema_: str = Field(default=BASELINE_SCHEMA, alias="schema")
    model_version: str
    created_at: datetime
    llmwatch_version: str = __version__
    sample_count: int
    time_span: tuple[datetime, datetime]
    checks: list[str]
    routes: dict[str, RouteStats]
    checksum: str = ""

    def content_digest(self) -> str:
        body = self.model_dump(mode="json", by_alias=True, exclude={"checksum"})
        return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()

    def centroids(self) -> dict[str, np.ndarray]:
        return {route: np.asarray(s.embedding.centroid, dtype=np.float32) for route, s in self.routes.items() if s.embedding is not None}


def freeze(
    samples: Iterable[Sample],
    scores: Iterable[Score],
    embeddings: Mapping[str, np.ndarray] | None,
    *,
    model_version: str,
    reservoir_size: int = 5000,
    embedding_reservoir: int = 500,
) -> Baseline:
    items = list(samples)
    if not items:
        raise BaselineError(f"no samples of model version {model_version!r} to freeze")
    score_list = list(scores)
    stamps = sorted(s.timestamp for s in items)
    baseline = Baseline(
        model_version=model_version,
        created_at=datetime.now(timezone.utc),
        sample_count=len(items),
        time_span=(stamps[0], stamps[-1]),
        checks=sorted({s.check for s in score_list}),
        routes=summarize(items, score_list, embeddings, reservoir_size=reservoir_size, embedding_reservoir=embedding_reservoir),
    )
    baseline.checksum = baseline.content_digest()
    return baseline


def write_baseline(baseline: Baseline, path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    if target.exists():
        raise BaselineError(f"{target} already exists; baselines are immutable, so freeze into a new file (e.g. add the version or date to the name)")
    atomic_write_bytes(target, orjson.dumps(baseline.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2))
    target.chmod(0o444)
    return target


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    source = Path(path)
    try:
        raw = source.read_bytes()
    except FileNotFoundError:
        raise BaselineError(f"baseline {source} does not exist; create one with `llmwatch baseline freeze`") from None
    except OSError as exc:
        raise BaselineError(f"baseline {source} cannot be read: {exc}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BaselineError(f"baseline {source} is corrupt (not valid JSON: {exc}); refreeze it with `llmwatch baseline freeze`") from None
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise BaselineError(f"baseline {source} is not an llmwatch baseline (schema {found!r}, expected {BASELINE_SCHEMA!r})")
    try:
        baseline = Baseline.model_validate(data)
    except ValidationError as exc:
        raise BaselineError(f"baseline {source} is corrupt: {describe_validation_error(exc)}") from None
    if not baseline.checksum or baseline.content_digest() != baseline.checksum:
        raise BaselineError(
            f"baseline {source} failed its checksum: it was modified or damaged after it was frozen. "
            "Baselines are immutable; refreeze from the original samples with `llmwatch baseline freeze`"
        )
    return baseline
