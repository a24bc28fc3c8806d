"""Stability figures, each in [0, 1] with 1 = perfectly stable, per task category and model version.

sampling
    Samples of one version whose normalised request (message roles and whitespace-collapsed text,
    plus the requested output format and tool names) hashes the same are one *prompt group*:
    live duplicates, or the repeats of a regression run. For a group with sample scores x_1..x_n
    (n >= 2): variance = population variance (1/n) sum (x_i - mean)^2, and
    CV = sqrt(variance) / mean. Scores are never negative, so mean = 0 means every score is 0:
    the answers are consistently bad but consistent, and CV is defined as 0 there.
    Stability = clip(1 - CV, 0, 1) (CV above 1 is as unstable as it gets). A category's figure
    is the plain mean over its prompt groups (every distinct prompt counts once, however often it
    was repeated); so is the variance shown beside it.

turn
    Chat samples are indexed by the number of user messages in the request (turn 1 = the first
    question). Over turns 1..10, the ordinary least-squares slope of sample score on turn index
    is fitted to the individual samples (not to per-turn means, so busy turns weigh more), with
    its classical standard error sqrt(SSR / (n - 2) / Sxx). Stability = clip(1 - 9 * max(0,
    -slope), 0, 1): one minus the score the fit says a conversation loses from turn 1 to turn 10.
    Needs at least 3 samples on at least 2 distinct turns.

version
    The version's samples against a frozen baseline (`llmwatch baseline freeze`), with the drift
    detector's tests and Holm correction (embeddings left out). Stability = 1 - (signals that
    drift / signals tested); the smallest adjusted p-value is reported beside it. Undefined
    (None) when nothing could be tested.

The stability of a version used by the decision score is the mean of its available figures over
all categories (category "all") across the three kinds.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import orjson

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.core.wire import content_to_text
from llmwatch.scorers.evaluation.matrix import ScoredSample, request_messages, user_turns

__all__ = [
    "ALL",
    "MAX_TURN",
    "PromptGroup",
    "StabilityCell",
    "combined_stability",
    "decay_slope",
    "decay_slope_arrays",
    "group_stability",
    "prompt_hash",
    "sampling_stability",
    "turn_stability",
    "version_stability",
]

ALL = "all"
MAX_TURN = 10
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class StabilityCell:
    kind: str  # sampling | turn | version
    category: str
    model_version: str
    value: float | None
    n_groups: int  # prompt groups (sampling), distinct turns (turn), signals tested (version)
    n_samples: int
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def caveat(self) -> str:
        """Why the figure is no estimate, for text and HTML alike ("" when it is one).

        Sampling stability is a mean over prompt groups: from one group it is that prompt's spread
        alone, which says nothing of how the version varies across prompts (the demo's report showed
        "0.854 (..., 1 prompts, 2 samples)" beside figures from 28 prompts, unmarked)."""
        if self.kind == "sampling" and self.value is not None and self.n_groups == 1:
            return "one prompt only: not a stability estimate"
        return ""


def prompt_hash(request: Any) -> str:
    """Same hash for requests a user would call "the same prompt": transport and sampling fields ignored."""
    messages = [
        [str(m.get("role", "user")), _WS.sub(" ", content_to_text(m.get("content"))).strip()]
        for m in request_messages(request)
    ]
    extra: dict[str, Any] = {}
    if isinstance(request, dict):
        fmt = request.get("response_format")
        if isinstance(fmt, dict):
            extra["format"] = fmt.get("type")
        tools = request.get("tools")
        if isinstance(tools, list):
            extra["tools"] = sorted(
                str((t.get("function") or {}).get("name", t.get("name", ""))) for t in tools if isinstance(t, dict)
            )
    return hashlib.sha256(orjson.dumps([messages, extra], option=orjson.OPT_SORT_KEYS)).hexdigest()


def group_stability(values: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """(mean, population variance, clip(1 - CV, 0, 1)) with CV := 0 when the mean is 0."""
    arr = np.asarray(values, dtype=float)
    mean = float(arr.mean())
    var = float(arr.var())
    if mean <= 0.0:
        cv = 0.0
    else:
        cv = math.sqrt(var) / mean
    return mean, var, min(1.0, max(0.0, 1.0 - cv))


@dataclass(frozen=True)
class PromptGroup:
    prompt_hash: str
    category: str
    model_version: str
    n: int
    mean: float
    variance: float
    stability: float


def sampling_stability(
    rows: Sequence[ScoredSample], min_group: int = 2
) -> tuple[list[PromptGroup], list[StabilityCell]]:
    buckets: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for row in rows:
        if row.score is None:
            continue
        buckets[(row.version, row.category, prompt_hash(row.sample.request))].append(row.score)
    groups = []
    for (version, category, digest), values in buckets.items():
        if len(values) < min_group:
            continue
        mean, var, stab = group_stability(values)
        groups.append(PromptGroup(digest, category, version, len(values), mean, var, stab))
    by_key: dict[tuple[str, str], list[tuple[int, float, float]]] = defaultdict(list)
    for g in groups:
        by_key[(g.category, g.model_version)].append((g.n, g.variance, g.stability))
        by_key[(ALL, g.model_version)].append((g.n, g.variance, g.stability))
    return groups, sampling_cells(by_key)


def sampling_cells(by_key: Mapping[tuple[str, str], Sequence[tuple[int, float, float]]]) -> list[StabilityCell]:
    """The sampling-stability cells of prompt groups, each (samples, variance, stability), by
    (category, version): the mean stability and variance of the groups, per version, ALL after its
    categories. The same for rows and for streamed columns (report_stream)."""
    cells = []
    for (category, version), gs in sorted(by_key.items(), key=lambda kv: (kv[0][1], kv[0][0] == ALL, kv[0][0])):
        cells.append(
            StabilityCell(
                kind="sampling",
                category=category,
                model_version=version,
                value=sum(g[2] for g in gs) / len(gs),
                n_groups=len(gs),
                n_samples=sum(g[0] for g in gs),
                detail={"mean_variance": sum(g[1] for g in gs) / len(gs)},
            )
        )
    return cells


def decay_slope(
    points: Sequence[tuple[int, float]], max_turn: int = MAX_TURN, groups: Sequence[int] | None = None
) -> dict[str, Any] | None:
    """OLS of score on turn over turns 1..max_turn: slope, its standard error, per-turn means; None
    if unfit. With `groups` (one per point), the slope is fitted within each group (see
    `decay_slope_arrays`)."""
    keep = [i for i, (t, _) in enumerate(points) if 1 <= t <= max_turn]
    return decay_slope_arrays(
        np.asarray([points[i][0] for i in keep], dtype=float),
        np.asarray([points[i][1] for i in keep], dtype=float),
        max_turn,
        None if groups is None else np.asarray([groups[i] for i in keep], dtype=np.int64),
    )


def decay_slope_arrays(
    turn: np.ndarray, score: np.ndarray, max_turn: int = MAX_TURN, groups: np.ndarray | None = None
) -> dict[str, Any] | None:
    """`decay_slope` of the points (turn[i], score[i]), in their order: what `report` keeps per sample.

    With `groups` (an integer per point: the category), the slope is the within-group one (each
    group's turns and scores taken from their own means, one slope for all): a version's figure
    over all categories must not compare first questions of every category with later turns that
    are mostly of one (multi-turn dialogue), which pooling did (a category's own level read as
    decay). A group whose points all have one turn adds nothing; no variation of turn within any
    group is unfit (None)."""
    keep = (turn >= 1) & (turn <= max_turn)
    x = np.asarray(turn[keep], dtype=float)
    y = np.asarray(score[keep], dtype=float)
    turns = [int(t) for t in np.unique(x)]
    if len(x) < 3 or len(turns) < 2:
        return None
    if groups is None:
        xc, yc, n_groups = x - x.mean(), y - y.mean(), 1
    else:
        g = np.asarray(groups[keep])
        _, index = np.unique(g, return_inverse=True)
        n_groups = int(index.max()) + 1
        counts = np.bincount(index, minlength=n_groups).astype(float)
        xc = x - (np.bincount(index, weights=x, minlength=n_groups) / counts)[index]
        yc = y - (np.bincount(index, weights=y, minlength=n_groups) / counts)[index]
    sxx = float((xc**2).sum())
    dof = len(x) - n_groups - 1
    if sxx <= 1e-12 or dof < 1:
        return None
    slope = float((xc * yc).sum() / sxx)
    intercept = float(y.mean() - slope * x.mean())
    ssr = float(((yc - slope * xc) ** 2).sum())
    stderr = math.sqrt(ssr / dof / sxx)
    by_turn = {str(t): {"mean": float(y[x == t].mean()), "n": int((x == t).sum())} for t in turns}
    fit = {"slope": slope, "stderr": stderr, "intercept": intercept, "n": len(x), "by_turn": by_turn}
    if groups is not None:
        fit["within"] = "category"
    return fit


def turn_cell(category: str, version: str, fit: dict[str, Any], max_turn: int = MAX_TURN) -> StabilityCell:
    """The turn-stability figure of a decay fit, the same for rows and for streamed columns: 1 with no
    decline, 0 when the fitted decline from turn 1 to `max_turn` spans the whole score scale (a
    rising slope counts as no decline)."""
    value = min(1.0, max(0.0, 1.0 - (max_turn - 1) * max(0.0, -fit["slope"])))
    return StabilityCell("turn", category, version, value, len(fit["by_turn"]), fit["n"], fit)


def turn_stability(rows: Sequence[ScoredSample], max_turn: int = MAX_TURN) -> list[StabilityCell]:
    points: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    categories: dict[str, list[int]] = defaultdict(list)  # per version: each ALL point's category
    category_index: dict[str, int] = {}
    for row in rows:
        if (
            row.score is None
            or not isinstance(row.sample.request, dict)
            or not isinstance(row.sample.request.get("messages"), list)
        ):
            continue
        turn = user_turns(row.sample.request)
        points[(row.category, row.version)].append((turn, row.score))
        points[(ALL, row.version)].append((turn, row.score))
        categories[row.version].append(category_index.setdefault(row.category, len(category_index)))
    cells = []
    for (category, version), pts in sorted(points.items(), key=lambda kv: (kv[0][1], kv[0][0] == ALL, kv[0][0])):
        # A version's figure over all categories is fitted within each category (decay_slope_arrays).
        fit = decay_slope(pts, max_turn, categories[version] if category == ALL else None)
        if fit is not None:
            cells.append(turn_cell(category, version, fit, max_turn))
    return cells


def version_stability(
    samples: Iterable[Sample], scores: Iterable[Score], baseline: Any, *, alpha: float = 0.05, min_samples: int = 30
) -> list[StabilityCell]:
    """One figure per version from the drift report of its samples against `baseline` (a scorers.baseline.Baseline)."""
    from llmwatch.scorers.drift.compare import DriftSettings, compare
    from llmwatch.scorers.drift.features import summarize

    by_version: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_version[s.model_version or "unknown"].append(s)
    score_list = list(scores)
    settings = DriftSettings(alpha=alpha, min_samples=min_samples)
    cells = []
    for version, items in sorted(by_version.items()):
        ids = {s.id for s in items}
        current = summarize(items, [sc for sc in score_list if sc.sample_id in ids], None)
        report = compare(
            baseline.routes,
            current,
            baseline_version=baseline.model_version,
            current_versions=[version],
            settings=settings,
        )
        cells.append(version_cell(version, report, baseline.model_version, len(items)))
    return cells


def version_cell(version: str, report: Any, baseline_version: str, samples: int) -> StabilityCell:
    """The version figure of one drift report against the baseline (the list and streamed reports)."""
    # Behaviour and performance signals only: an `inputs` signal reads `shifted`, never `drift`, so
    # in the count it only made the share smaller, and its p-value was shown as the smallest.
    tested = [sig for sig in report.signals if sig.family != "inputs" and not math.isnan(sig.p_adjusted)]
    drifting = [sig for sig in tested if sig.verdict == "drift"]
    detail = {
        "baseline_version": baseline_version,
        "signals_tested": len(tested),
        "signals_drifting": len(drifting),
        "drifting": [f"{sig.route} {sig.name}" for sig in drifting],
        "min_p_adjusted": min((sig.p_adjusted for sig in tested), default=None),
        "verdict": report.verdict,
    }
    value = 1.0 - len(drifting) / len(tested) if tested else None
    return StabilityCell("version", ALL, version, value, len(tested), samples, detail)


def combined_stability(cells: Iterable[StabilityCell]) -> dict[str, float | None]:
    """Per version: the mean of its category-"all" figures over the kinds that could be computed."""
    values: dict[str, list[float]] = defaultdict(list)
    versions: set[str] = set()
    for c in cells:
        versions.add(c.model_version)
        if c.category == ALL and c.value is not None:
            values[c.model_version].append(c.value)
    return {v: (sum(values[v]) / len(values[v]) if values[v] else None) for v in sorted(versions)}
