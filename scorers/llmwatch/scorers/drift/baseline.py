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

from llmwatch.core.errors import describe_validation_error
from llmwatch.core.jsonio import atomic_write_bytes, read_document, records_kind
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score
from llmwatch.core.version import __version__
from llmwatch.scorers.drift.features import RouteStats, summarize
from llmwatch.scorers.drift.model import DriftSettings

# v2: per-sample rows (stratum, prompt hash, prompt-side features, per-token performance) for
# the drift families, the category of each embedding, and the material minimums it was frozen with.
BASELINE_SCHEMA = "llmwatch.baseline/v2"
OLD_SCHEMAS = ("llmwatch.baseline/v1",)


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
    # Material minimums (DriftSettings.minimums) this baseline is judged with; other settings refuse.
    minimums: dict[str, float] = Field(default_factory=dict)
    checksum: str = ""

    def content_digest(self) -> str:
        body = self.model_dump(mode="json", by_alias=True, exclude={"checksum"})
        return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()

    def centroids(self) -> dict[str, np.ndarray]:
        return {
            route: np.asarray(s.embedding.centroid, dtype=np.float32)
            for route, s in self.routes.items()
            if s.embedding is not None
        }


def freeze(
    samples: Iterable[Sample],
    scores: Iterable[Score],
    embeddings: Mapping[str, np.ndarray] | None,
    *,
    model_version: str,
    reservoir_size: int = 5000,
    embedding_reservoir: int = 500,
    minimums: Mapping[str, float] | None = None,
    prompt_embeddings: Mapping[str, np.ndarray] | None = None,
) -> Baseline:
    items = list(samples)
    if not items:
        raise BaselineError(f"no samples of model version {model_version!r} to freeze")
    score_list = list(scores)
    stamps = sorted(s.timestamp for s in items)
    return freeze_summary(
        summarize(
            items,
            score_list,
            embeddings,
            reservoir_size=reservoir_size,
            embedding_reservoir=embedding_reservoir,
            prompt_embeddings=prompt_embeddings,
        ),
        model_version=model_version,
        sample_count=len(items),
        time_span=(stamps[0], stamps[-1]),
        checks=sorted({s.check for s in score_list}),
        minimums=minimums,
    )


def freeze_summary(
    routes: dict[str, RouteStats],
    *,
    model_version: str,
    sample_count: int,
    time_span: tuple[datetime, datetime],
    checks: list[str],
    minimums: Mapping[str, float] | None = None,
) -> Baseline:
    """A checksummed baseline of per-route stats already built (e.g. streamed by `summarize_window`)."""
    if not sample_count:
        raise BaselineError(f"no samples of model version {model_version!r} to freeze")
    baseline = Baseline(
        model_version=model_version,
        created_at=datetime.now(timezone.utc),
        sample_count=sample_count,
        time_span=time_span,
        checks=checks,
        routes=routes,
        minimums=dict(minimums) if minimums is not None else DriftSettings().minimums(),
    )
    baseline.checksum = baseline.content_digest()
    return baseline


def write_baseline(baseline: Baseline, path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    if target.exists():
        raise BaselineError(
            f"{target} already exists; baselines are immutable, so freeze into a new file (e.g. add the version or date to the name)"
        )
    data = orjson.dumps(baseline.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2)
    # JSON has no inf/NaN (orjson writes null): never freeze a file that `drift` would refuse.
    try:
        Baseline.model_validate(orjson.loads(data))
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in err["loc"]) for err in exc.errors()})
        more = f" and {len(fields) - 3} more" if len(fields) > 3 else ""
        raise BaselineError(
            f"refusing to write {target}: the baseline would not load back (no finite value for {', '.join(fields[:3])}{more}); "
            "check the samples for extreme numeric values (e.g. latency_ms or cost_usd near 1e308)"
        ) from None
    # Read-only as well as private: baselines are immutable.
    return atomic_write_bytes(target, data, read_only=True)


def _refuse_records(source: Path) -> None:
    """A samples (scores, pairs) file given as the baseline: it said "not valid JSON at line 2 ...;
    refreeze it", as if a baseline had been damaged."""
    kind = records_kind(source)
    if kind:
        raise BaselineError(
            f"baseline {source} is a file of {kind}, not a baseline; freeze one from the samples with "
            "`llmwatch baseline freeze --samples ... --model-version V --out baseline-V.json` and pass that file "
            "(the demo writes llmwatch-data/baseline-A-*.json)"
        )


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    source = Path(path)
    try:
        data = read_document(
            source,
            what="baseline",
            error=BaselineError,
            missing="create one with `llmwatch baseline freeze`",
            fix="refreeze it with `llmwatch baseline freeze`",
        )
    except BaselineError:
        _refuse_records(source)
        raise
    if not (isinstance(data, dict) and data.get("schema") in (BASELINE_SCHEMA, *OLD_SCHEMAS)):
        _refuse_records(source)
    if isinstance(data, dict) and data.get("schema") in OLD_SCHEMAS:
        # Refused rather than half-used: without per-sample rows no family could compare like
        # with like, and a verdict from marginal tests is exactly what issue 14 found misleading.
        raise BaselineError(
            f"baseline {source} was frozen by an older llmwatch (schema {data['schema']!r}, this one reads {BASELINE_SCHEMA!r}) and lacks what the drift "
            "families need (per-sample strata, prompt hashes, per-token latency); refreeze it from the same samples with `llmwatch baseline freeze`"
        )
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA:
        if not isinstance(data, dict):
            found = f"it is a JSON {type(data).__name__}"
        elif "schema" not in data:
            found = "it has no 'schema' field"
        else:
            found = f"its schema is {data['schema']!r}"
        raise BaselineError(
            f"baseline {source} is not an llmwatch baseline (a JSON object with schema {BASELINE_SCHEMA!r}): {found}. "
            "Freeze one with `llmwatch baseline freeze --samples ... --model-version V --out baseline-V.json`"
        )
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


def check_minimums(baseline: Baseline, settings: DriftSettings, source: str = "the baseline") -> None:
    """Refuse to compare with material minimums other than the baseline's: the verdicts would not mean the same."""
    ours = settings.minimums()
    differ = {k: (v, ours.get(k)) for k, v in baseline.minimums.items() if ours.get(k) != v}
    if differ:
        what = ", ".join(
            f"drift.{k} is {cur} but {source} was frozen with {frozen}" for k, (frozen, cur) in sorted(differ.items())
        )
        raise BaselineError(
            f"{what}: set them back to the frozen values, or freeze a new baseline with the new settings"
        )
