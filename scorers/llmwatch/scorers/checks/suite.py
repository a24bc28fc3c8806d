"""A configured set of checks, and the one function that scores a batch of samples with it.

The same `Suite` runs in the sidecar's scorer process, in `llmwatch score` over files, and in
Kafka scorer workers, so a score means the same thing wherever it was computed. Every check
is isolated: an exception or a timeout becomes an `error` result for that check on that sample,
and the other checks go on.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from llmwatch.core.config import ConfigError
from llmwatch.core.errors import LlmwatchError
from llmwatch.core.extras import require
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.base import ConfiguredCheck, error_outcome
from llmwatch.scorers.checks.config import CheckSpec, ScoringSection
from llmwatch.scorers.checks.registry import CHECK_KINDS, build_check, unknown_kind
from llmwatch.scorers.checks.tools import request_tools

if TYPE_CHECKING:  # imported when embedding checks are configured: it needs the embeddings extra
    from llmwatch.scorers.checks.embeddings import EmbeddingScorer

GENERATIVE = ["chat", "text_completion", "generate_content"]

# The built-in suite: what an SRE wants on day one without writing any config.
DEFAULT_RULE_CHECKS: list[dict[str, Any]] = [
    {"name": "refusal", "kind": "refusal", "when": {"operations": GENERATIVE}},
    {"name": "not_empty_or_truncated", "kind": "not_empty_or_truncated", "when": {"operations": GENERATIVE}},
    {
        "name": "json_valid",
        "kind": "json_valid",
        "when": {"json_mode": True},
        "params": {"allow_fences": True, "require_object": True},
    },
    {"name": "language_match", "kind": "language_match", "when": {"operations": GENERATIVE}},
    {"name": "pii_leak", "kind": "pii_leak", "when": {"operations": GENERATIVE}},
    # Each tool call against the request's own tools, schemas and tool_choice: no params needed.
    {"name": "tool_call", "kind": "tool_call", "when": {"tools": True}},
]
# Relevance only: it embeds the prompt and the answer, which the drift detector needs anyway.
# `embedding_repetition` also embeds every sentence (about twice the model time): opt in to it.
DEFAULT_EMBEDDING_CHECKS: list[dict[str, Any]] = [
    {"name": "answer_relevance", "kind": "embedding_relevance", "when": {"operations": GENERATIVE}},
]


def default_checks(embeddings: bool) -> list[CheckSpec]:
    specs = DEFAULT_RULE_CHECKS + (DEFAULT_EMBEDDING_CHECKS if embeddings else [])
    return [CheckSpec.model_validate(s) for s in specs]


def json_mode(request: Any) -> bool:
    if not isinstance(request, dict):
        return False
    fmt = request.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        return True
    text = request.get("text")  # Responses API: text.format.type
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        return text["format"].get("type") in ("json_object", "json_schema")
    return False


def _selector(spec: CheckSpec) -> Callable[[Sample], bool]:
    routes, models, when = spec.routes, spec.models, spec.when

    def applies(sample: Sample) -> bool:
        if routes and not any(fnmatchcase(sample.route, r) for r in routes):
            return False
        if models and not any(fnmatchcase(sample.model or "", m) for m in models):
            return False
        if when.operations is not None and sample.operation not in when.operations:
            return False
        if when.stream is not None and sample.stream != when.stream:
            return False
        if when.json_mode is not None and json_mode(sample.request) != when.json_mode:
            return False
        if when.tools is not None and (request_tools(sample.request) is not None) != when.tools:
            return False
        return True

    return applies


class CheckTimeout(LlmwatchError):
    """A check ran past scoring.check_timeout_s; recorded as that check's error outcome."""


class _TimeLimit:
    """Interrupt a check that runs too long (a catastrophic regex, a huge answer).

    SIGALRM works only in the main thread of a process: the scorer process and `llmwatch score`
    run checks there. Elsewhere (a test calling from a thread) the limit is not enforced. The
    handler is installed once per batch; each check only arms and disarms the timer, because
    installing a handler per check cost as much as the cheap checks themselves.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.enabled = threading.current_thread() is threading.main_thread()
        self._previous: Any = None

    def _expire(self, signum: int, frame: Any) -> None:
        raise CheckTimeout(f"check took longer than {self.seconds:g} s")

    def __enter__(self) -> "_TimeLimit":
        if self.enabled:
            self._previous = signal.signal(signal.SIGALRM, self._expire)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)

    @contextmanager
    def check(self, seconds: float | None = None) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        signal.setitimer(signal.ITIMER_REAL, seconds or self.seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


@dataclass
class ScoredCheck:
    score: Score
    duration_s: float


class Suite:
    def __init__(
        self,
        specs: Sequence[CheckSpec],
        *,
        check_timeout_s: float = 2.0,
        torch_threads: int = 1,
        quantize: bool = False,
        centroids: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.check_timeout_s = check_timeout_s
        self.rules: list[ConfiguredCheck] = []
        embedding_specs: list[CheckSpec] = []
        names: set[str] = set()
        for i, spec in enumerate(specs):
            where = f"scoring.checks[{i}] ({spec.name})"
            if spec.name in names:
                raise ConfigError(f"{where}: check name '{spec.name}' is used twice; names must be unique")
            names.add(spec.name)
            entry = CHECK_KINDS.get(spec.kind)
            if entry is None:
                raise ConfigError(f"{where}.kind: {unknown_kind(spec.kind)}")
            if entry.family == "embedding":
                embedding_specs.append(spec)
                continue
            try:
                self.rules.append(build_check(spec.name, spec.kind, spec.params, _selector(spec)))
            except ValueError as exc:
                raise ConfigError(f"{where}.params: {exc}") from None
        self.embedding_specs = embedding_specs
        self._embedding_applies = {s.name: _selector(s) for s in embedding_specs}
        self.embedder = None
        if embedding_specs:
            from llmwatch.scorers.checks.embeddings import EmbeddingScorer

            try:
                self.embedder = EmbeddingScorer(
                    [(s.name, s.kind, s.params) for s in embedding_specs],
                    threads=torch_threads,
                    quantize=quantize,
                    centroids=centroids,
                )
            except ValueError as exc:
                raise ConfigError(f"scoring.checks: {exc}") from None

    @property
    def check_names(self) -> list[str]:
        return [r.name for r in self.rules] + [s.name for s in self.embedding_specs]

    def score(self, samples: Sequence[Sample]) -> list[ScoredCheck]:
        out: list[ScoredCheck] = []
        with _TimeLimit(self.check_timeout_s) as limit:
            for sample in samples:
                for rule in self.rules:
                    if not rule.applies(sample):
                        continue
                    start = time.perf_counter()
                    try:
                        with limit.check():
                            outcome = rule.run(sample)
                    except Exception as exc:  # includes CheckTimeout
                        outcome = error_outcome(exc)
                    out.append(
                        ScoredCheck(
                            Score.from_outcome(sample, outcome, check=rule.name, kind=rule.kind),
                            time.perf_counter() - start,
                        )
                    )
            if self.embedder is not None:
                out.extend(self._score_embeddings(self.embedder, samples, limit))
        return out

    def _score_embeddings(
        self, embedder: EmbeddingScorer, samples: Sequence[Sample], limit: _TimeLimit
    ) -> list[ScoredCheck]:
        applies = self._embedding_applies
        wanted = [s for s in samples if any(fn(s) for fn in applies.values())]
        if not wanted:
            return []
        start = time.perf_counter()
        try:
            with limit.check(max(self.check_timeout_s * len(wanted), 10.0)):
                results = embedder.score_batch(wanted)
        except Exception as exc:
            failure = error_outcome(exc)
            results = [[(spec.name, spec.kind, failure) for spec in self.embedding_specs] for _ in wanted]
        per_sample = (time.perf_counter() - start) / len(wanted)
        out = []
        for sample, checks in zip(wanted, results):
            for name, kind, outcome in checks:
                if applies[name](sample):
                    out.append(ScoredCheck(Score.from_outcome(sample, outcome, check=name, kind=kind), per_sample))
        return out


def build_suite(cfg: ScoringSection, *, centroids: Mapping[str, np.ndarray] | None = None) -> Suite:
    specs = cfg.checks if cfg.checks is not None else default_checks(cfg.embeddings)
    return Suite(
        specs,
        check_timeout_s=cfg.check_timeout_s,
        torch_threads=cfg.torch_threads,
        quantize=cfg.quantize_embeddings,
        centroids=centroids,
    )


def _family(kind: str) -> str | None:
    entry = CHECK_KINDS.get(kind)
    return entry.family if entry is not None else None


def validate_scoring(cfg: ScoringSection) -> None:
    """Everything `build_suite` checks, without loading the embedding model (for start-up)."""
    specs = cfg.checks if cfg.checks is not None else default_checks(cfg.embeddings)
    embedding_specs = [(i, s) for i, s in enumerate(specs) if _family(s.kind) == "embedding"]
    Suite([s for s in specs if _family(s.kind) != "embedding"], check_timeout_s=cfg.check_timeout_s)
    names = [s.name for s in specs]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"scoring.checks: check name '{name}' is used twice; names must be unique")
    if embedding_specs:
        require(
            "embeddings",
            "the embedding checks (scoring.embeddings)",
            "set scoring.embeddings: false to run the rule checks only",
        )
        from llmwatch.scorers.checks.embeddings import model_dir, validate_embedding_params

        for i, spec in embedding_specs:
            try:
                validate_embedding_params(spec.kind, spec.params)
            except ValueError as exc:
                raise ConfigError(f"scoring.checks[{i}] ({spec.name}).params: {exc}") from None
        try:
            model_dir()
        except RuntimeError as exc:
            raise ConfigError(f"scoring: {exc}; or set scoring.embeddings: false to run the rule checks only") from None
