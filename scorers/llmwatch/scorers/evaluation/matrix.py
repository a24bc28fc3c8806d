"""The business evaluation matrix: task categories x model versions, scored by the checks.

Each sample is put in one task category (the first configured category whose `match` holds, else
`matrix.default_category`). Its quality is computed from the category's checks only:

* sample score = mean `value` of those checks that gave a verdict (pass = 1, fail = 0, continuous
  checks such as embedding similarity their value); `error` and `skip` results do not count;
* the sample passes when every one of those checks passed; a sample none of them judged is
  counted as `unscored` and left out of the figures.

Per category and version: mean sample score, pass rate with a Wilson 95% interval, n. The
weighted overall quality of a version is `sum_c w_c * mean_score_c / sum_c w_c` over the
categories that version has samples in, so a version is not penalised for traffic it never saw.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Callable, Iterable, Mapping, Sequence

from llmwatch.core.config import ConfigError
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.core.wire import content_to_text
from llmwatch.scorers.checks.suite import json_mode
from llmwatch.scorers.evaluation.config import CategorySpec, MatrixSection
from llmwatch.scorers.stats.proportions import wilson_interval

__all__ = [
    "DEFAULT_CATEGORIES",
    "Category",
    "CategoryCell",
    "ScoredSample",
    "build_categories",
    "categorize",
    "quality_matrix",
    "overall_quality",
    "request_text",
    "score_samples",
    "user_turns",
]

# What a product team recognises on day one; replaced entirely by `matrix.categories`.
DEFAULT_CATEGORIES: list[dict[str, Any]] = [
    {"name": "multi_turn_dialogue", "weight": 1.0, "match": {"min_turns": 2}},
    {"name": "extraction", "weight": 1.5, "match": {"json_mode": True}},
    {
        "name": "long_document_summary",
        "weight": 1.0,
        "match": {"request_matches": r"(?i)\bsummar(?:y|ise|ize|ising|izing)\b", "min_prompt_chars": 2000},
    },
    {
        "name": "code",
        "weight": 1.5,
        "match": {
            "request_matches": r"(?i)\b(?:python|javascript|typescript|sql|code|function|script|traceback|stack trace|regex|bug|compile)\b"
        },
    },
    {"name": "instruction_following", "weight": 1.0},
]


@dataclass(frozen=True)
class Category:
    name: str
    weight: float
    checks: tuple[str, ...]
    matches: Callable[[Sample], bool]


def request_messages(request: Any) -> list[dict[str, Any]]:
    """The request's conversation as [{role, content}] whatever the API shape (chat, completions, responses)."""
    if not isinstance(request, dict):
        return [{"role": "user", "content": request}] if isinstance(request, str) else []
    messages = request.get("messages")
    if isinstance(messages, list):
        return [m for m in messages if isinstance(m, dict)]
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return [{"role": "user", "content": prompt[0]}]
    inp = request.get("input")
    if isinstance(inp, str):
        return [{"role": "user", "content": inp}]
    if isinstance(inp, list):
        out: list[dict[str, Any]] = []
        for item in inp:
            if isinstance(item, str):
                out.append({"role": "user", "content": item})
            elif isinstance(item, dict) and ("content" in item or "role" in item):
                out.append({"role": item.get("role", "user"), "content": item.get("content")})
        return out
    return []


def request_text(request: Any) -> str:
    """Every message's text, joined: a summary request often has the document outside the last turn."""
    return "\n".join(content_to_text(m.get("content")) for m in request_messages(request))


def user_turns(request: Any) -> int:
    return sum(1 for m in request_messages(request) if m.get("role", "user") == "user")


def _has_tools(request: Any) -> bool:
    return isinstance(request, dict) and bool(request.get("tools") or request.get("functions"))


def _matcher(spec: CategorySpec) -> Callable[[Sample], bool]:
    m = spec.match
    pattern = re.compile(m.request_matches) if m.request_matches is not None else None

    def matches(sample: Sample) -> bool:
        if m.routes and not any(fnmatchcase(sample.route, g) for g in m.routes):
            return False
        if m.models and not any(fnmatchcase(sample.model or "", g) for g in m.models):
            return False
        for key, glob in m.metadata.items():
            value = sample.metadata.get(key)
            if value is None or not fnmatchcase(str(value), glob):
                return False
        if m.has_tools is not None and _has_tools(sample.request) != m.has_tools:
            return False
        if m.json_mode is not None and json_mode(sample.request) != m.json_mode:
            return False
        if m.min_turns is not None and user_turns(sample.request) < m.min_turns:
            return False
        if pattern is not None or m.min_prompt_chars is not None:
            text = request_text(sample.request)
            if m.min_prompt_chars is not None and len(text) < m.min_prompt_chars:
                return False
            if pattern is not None and pattern.search(text) is None:
                return False
        return True

    return matches


def build_categories(cfg: MatrixSection, known_checks: Iterable[str] | None = None) -> list[Category]:
    """Compile the configured (or built-in) categories; with `known_checks`, refuse unknown check names."""
    specs = (
        cfg.categories if cfg.categories is not None else [CategorySpec.model_validate(c) for c in DEFAULT_CATEGORIES]
    )
    if known_checks is not None:
        known = sorted(set(known_checks))
        for i, spec in enumerate(specs):
            for j, name in enumerate(spec.checks):
                if name not in known:
                    raise ConfigError(
                        f"matrix.categories[{i}] ({spec.name}).checks[{j}]: unknown check {name!r}; "
                        f"checks in the scoring suite or the scores: {', '.join(known) or 'none'}"
                    )
    return [Category(s.name, s.weight, tuple(s.checks), _matcher(s)) for s in specs]


def categorize(sample: Sample, categories: Sequence[Category], default: str = "uncategorized") -> str:
    # An explicit tag (the `x-llmwatch-category` request header, or `metadata.category` in an
    # export) that names a configured category beats every heuristic rule.
    tagged = sample.metadata.get("category") if isinstance(sample.metadata, dict) else None
    if isinstance(tagged, str) and any(c.name == tagged for c in categories):
        return tagged
    for category in categories:
        if category.matches(sample):
            return category.name
    return default


@dataclass(frozen=True)
class ScoredSample:
    sample: Sample
    category: str
    version: str
    score: float | None  # None: none of the category's checks judged it
    passed: bool | None
    failed_checks: tuple[str, ...] = ()
    values: Mapping[str, float] = field(default_factory=dict)  # check -> value, the checks that counted


def score_samples(
    samples: Iterable[Sample],
    scores: Iterable[Score],
    categories: Sequence[Category],
    default_category: str = "uncategorized",
) -> list[ScoredSample]:
    by_sample: dict[str, dict[str, Score]] = defaultdict(dict)
    for sc in scores:
        by_sample[sc.sample_id][sc.check] = sc
    wanted = {c.name: c.checks for c in categories}
    out = []
    for sample in samples:
        category = categorize(sample, categories, default_category)
        checks = wanted.get(category) or ()
        values: dict[str, float] = {}
        failed = []
        for name, sc in by_sample.get(sample.id, {}).items():
            if checks and name not in checks:
                continue
            if sc.result not in ("pass", "fail"):
                continue
            values[name] = float(sc.value) if sc.value is not None else (1.0 if sc.result == "pass" else 0.0)
            if sc.result == "fail":
                failed.append(name)
        score = sum(values.values()) / len(values) if values else None
        passed = (not failed) if values else None
        out.append(
            ScoredSample(
                sample, category, sample.model_version or "unknown", score, passed, tuple(sorted(failed)), values
            )
        )
    return out


@dataclass(frozen=True)
class CategoryCell:
    category: str
    model_version: str
    weight: float
    n: int
    n_unscored: int
    mean_score: float | None
    pass_rate: float | None
    ci_low: float | None
    ci_high: float | None


def quality_matrix(rows: Sequence[ScoredSample], categories: Sequence[Category]) -> list[CategoryCell]:
    weight = {c.name: c.weight for c in categories}
    order = {c.name: i for i, c in enumerate(categories)}
    groups: dict[tuple[str, str], list[ScoredSample]] = defaultdict(list)
    for row in rows:
        groups[(row.category, row.version)].append(row)
    cells = []
    for (category, version), items in sorted(
        groups.items(), key=lambda kv: (order.get(kv[0][0], len(order)), kv[0][1])
    ):
        scored = [r for r in items if r.score is not None]
        values = [r.score for r in items if r.score is not None]
        passed = sum(1 for r in scored if r.passed)
        cells.append(category_cell(category, version, weight, len(items), passed, values, sum(values)))
    return cells


def category_cell(
    category: str,
    version: str,
    weight: Mapping[str, float],
    samples: int,
    passed: int,
    values: Sequence[float],
    total: float,
) -> CategoryCell:
    """One cell of the quality matrix: of `samples`, the scored `values` (summing to `total`), `passed`
    of them passing. The same for rows and for streamed columns (report_stream)."""
    n = len(values)
    lo, hi = wilson_interval(passed, n) if n else (None, None)
    return CategoryCell(
        category=category,
        model_version=version,
        # Traffic outside every configured category still counts, at the smallest weight.
        weight=weight.get(category, min(weight.values(), default=1.0)),
        n=n,
        n_unscored=samples - n,
        mean_score=total / n if n else None,
        pass_rate=passed / n if n else None,
        ci_low=lo,
        ci_high=hi,
    )


def overall_quality(cells: Sequence[CategoryCell]) -> dict[str, float | None]:
    """Per version: category mean scores weighted by business weight, over the categories present."""
    num: dict[str, float] = defaultdict(float)
    den: dict[str, float] = defaultdict(float)
    versions = []
    for cell in cells:
        if cell.model_version not in versions:
            versions.append(cell.model_version)
        if cell.mean_score is None:
            continue
        num[cell.model_version] += cell.weight * cell.mean_score
        den[cell.model_version] += cell.weight
    return {v: (num[v] / den[v] if den[v] > 0 else None) for v in sorted(versions)}
