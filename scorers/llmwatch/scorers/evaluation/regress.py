"""`llmwatch regress`: a fixed suite of cases, run N times against a live endpoint, compared with a stored run.

Suite file (JSON Lines, one case per line):

    {"id": "refund-json", "category": "extraction",
     "input": "Extract the amount ..." | [{"role": "user", "content": "..."}, ...],
     "params": {"response_format": {"type": "json_object"}, "max_tokens": 300},
     "expected": "42.50", "expected_match": "contains" | "exact" | "regex",
     "checks": [{"kind": "json_schema", "params": {"schema": {...}}}, {"kind": "length", "name": "long_enough", "params": {"min_chars": 200}}],
     "reference": "a good answer ...", "rubric": "5: ..."}

`checks` use the rule registry (scorers/llmwatch/scorers/checks/rules.py) with the same params as `scoring.checks`.
The suite's checksum is the SHA-256 of its cases as canonical JSON (keys sorted, cases in id
order), so reformatting the file changes nothing and any change to a case changes it; a run
made with another suite is refused (exit 2) rather than compared case by case.

Per attempt: pass when every check that gave a verdict passed; a failed call (HTTP error,
timeout) counts as a failed attempt with score 0, since that is what the user got; an attempt
where no check could judge (e.g. only a judge that was unreachable) is an `error` and is left
out of the pass rate. Attempt score = mean check value.

A case regressed when its pass rate dropped by more than `threshold` (absolute) AND the one-sided
test that the current rate is lower (scorers.stats.compare_proportions: z-test, or Fisher's exact
for small counts) has a Holm-adjusted p-value below `alpha` across all the cases compared.

Sequential repeats (`early_stop`): a case is run `min_repeat` times, then once more at a time, and
stops as soon as the Wilson interval of its pass rate (at `confidence`) lies wholly above or below
the line that decides its verdict: the baseline's pass rate minus `threshold` when there is a
baseline (a drop to below it is what "regressed" needs), `pass_threshold` otherwise. A case near
its line still gets up to `repeat` attempts, so noise is not stopped early into a verdict. Each
case reports its interval, pass^k (all of its k judged attempts passed) beside the mean pass
rate, and `flaky` when it passed and failed at least once in its repeats (0 < passes < judged
attempts; no confidence level enters it).

Prompt sensitivity (`paraphrases` K > 0): each case also runs in K rewordings of its last user
message (paraphrase.py, seeded by the case id), as attempts with `variant` 1..K. They never enter
pass rates, verdicts or the comparison; `paraphrase_report` gives per case the spread of the
wordings' mean scores and whether the pass verdict flips, and per served version the mean spread
and the flipping share with intervals. Exit 1 for flips only with `paraphrase_max_flips`.

Multi-turn replay (`multi_turn`): `static` sends the transcript as written; `dynamic` keeps the
user turns and feeds back the candidate's own answers (one call per turn, at most `max_turns`),
and scores the final answer. A baseline made in the other mode is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from statistics import NormalDist
from typing import Any, Callable, Literal, Mapping, Sequence
from urllib.parse import urlsplit

import numpy as np
import orjson
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from llmwatch.core.config import normalize_upstream
from llmwatch.core.errors import LlmwatchError, describe_validation_error
from llmwatch.core.jsonio import atomic_write_bytes, read_file_bytes, read_model
from llmwatch.core.pricing import PriceTable, TokenCounts
from llmwatch.core.records import Sample, Usage
from llmwatch.core.scores import CheckOutcome
from llmwatch.core.version import __version__
from llmwatch.core.wire import extract_prompt_text, token_count, usage_details
from llmwatch.scorers.checks.base import ConfiguredCheck, every_sample, run_check, skipped
from llmwatch.scorers.checks.registry import CHECK_KINDS, build_check, known_kinds
from llmwatch.scorers.evaluation.paraphrase import (
    Rewording,
    accept_model_rewordings,
    last_user_text,
    model_prompt,
    parse_model_reply,
    reword_messages,
    with_last_user_text,
)
from llmwatch.scorers.stats import twosample as stats
from llmwatch.scorers.stats.format import interval_text
from llmwatch.scorers.stats.proportions import wilson_interval

log = structlog.get_logger(__name__)

RUN_SCHEMA = "llmwatch.regress-run/v1"
MAX_PARAPHRASES = 20
MAX_TURNS = 100
_RESERVED_PARAMS = ("model", "messages", "stream", "stream_options", "n")


class RegressError(LlmwatchError, ValueError):
    """The suite or the baseline cannot be used (exit 2); the message says which line/field and the fix."""


# --- suite -------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SuiteCheck(_Strict):
    kind: str
    name: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    params: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = None


class SuiteCase(_Strict):
    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:/-]+$")
    category: str = Field("uncategorized", min_length=1, max_length=64)
    input: str | list[Message]
    params: dict[str, Any] = Field(default_factory=dict)
    expected: str | None = None
    expected_match: Literal["contains", "exact", "regex"] = "contains"
    checks: list[SuiteCheck] = Field(default_factory=list)
    reference: str | None = None
    rubric: str | None = None

    @field_validator("input")
    @classmethod
    def _has_user_turn(cls, value: str | list[Message]) -> str | list[Message]:
        if isinstance(value, str):
            if not value.strip():
                raise ValueError("the prompt is empty")
        elif not any(m.role == "user" for m in value):
            raise ValueError("the messages need at least one user message")
        return value

    @field_validator("params")
    @classmethod
    def _not_reserved(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in value if k in _RESERVED_PARAMS]
        if bad:
            raise ValueError(
                f"{', '.join(bad)} cannot be set per case (the command sets model and messages, and reads whole answers)"
            )
        return value

    @model_validator(mode="after")
    def _acceptance(self) -> "SuiteCase":
        if self.expected is None and not self.checks:
            raise ValueError("a case needs `expected` and/or `checks` to say what a good answer is")
        if self.expected is not None and self.expected_match == "regex":
            try:
                re.compile(self.expected)
            except re.error as exc:
                raise ValueError(f"expected: not a valid regular expression: {exc}") from None
        return self

    def messages(self) -> list[dict[str, Any]]:
        if isinstance(self.input, str):
            return [{"role": "user", "content": self.input}]
        return [m.model_dump(exclude_none=True) for m in self.input]


@dataclass
class RegressSuite:
    """A loaded suite file: its cases, its checksum, and each case's built checks by case id."""

    path: str
    cases: list[SuiteCase]
    checksum: str
    checks: dict[str, list[ConfiguredCheck]]


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def _expected_check(case: SuiteCase) -> Callable[[Sample], CheckOutcome]:
    expected = case.expected or ""
    mode = case.expected_match
    pattern = re.compile(expected) if mode == "regex" else None

    def check(sample: Sample) -> CheckOutcome:
        if sample.status == 0 or sample.status >= 400:
            return skipped("upstream_error")
        answer = sample.answer_text()
        if pattern is not None:
            ok = pattern.search(answer) is not None
        elif mode == "exact":
            ok = _norm(answer) == _norm(expected)
        else:
            ok = _norm(expected) in _norm(answer)
        return CheckOutcome("pass" if ok else "fail", 1.0 if ok else 0.0, {"match": mode})

    return check


def suite_checksum(raw_cases: Sequence[Mapping[str, Any]]) -> str:
    ordered = sorted(raw_cases, key=lambda c: str(c.get("id")))
    return hashlib.sha256(orjson.dumps(ordered, option=orjson.OPT_SORT_KEYS)).hexdigest()


def load_suite(path: str | os.PathLike[str]) -> RegressSuite:
    source = Path(path)
    directory = "give the suite's .jsonl file (`llmwatch suite build --out FILE` writes one)"
    raw_lines = read_file_bytes(source, what="suite", error=RegressError, directory=directory).splitlines()
    return parse_suite(raw_lines, source)


def parse_suite(raw_lines: Sequence[bytes], source: str | os.PathLike[str]) -> RegressSuite:
    """The suite in `raw_lines` (one case per line), validated as `regress` runs it.

    Also what `suite build` and `suite add` check their output with, in memory, before writing
    it: a suite they write is one `regress` reads. `source` names the file in the messages.
    """
    source = Path(source)
    raws: list[dict[str, Any]] = []
    cases: list[SuiteCase] = []
    checks: dict[str, list[ConfiguredCheck]] = {}
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RegressError(f"{where}: not valid JSON ({exc}); each line must be one case object") from None
        if not isinstance(data, dict):
            raise RegressError(f"{where}: expected a JSON object (a case), got {type(data).__name__}")
        try:
            case = SuiteCase.model_validate(data)
        except ValidationError as exc:
            raise RegressError(f"{where}: {describe_validation_error(exc)}") from None
        if case.id in seen:
            raise RegressError(
                f"{where}: field 'id': case id {case.id!r} is already used on line {seen[case.id]}; ids must be unique"
            )
        seen[case.id] = lineno
        built = []
        if case.expected is not None:
            built.append(ConfiguredCheck("expected", "expected", every_sample, _expected_check(case)))
        names = {b.name for b in built}
        for i, spec in enumerate(case.checks):
            name = spec.name or spec.kind
            if name in names:
                raise RegressError(
                    f"{where}: field 'checks.{i}.name': check name {name!r} is used twice in case {case.id!r}; give one a `name`"
                )
            names.add(name)
            entry = CHECK_KINDS.get(spec.kind)
            if entry is None or entry.family != "rule":
                # A suite's checks run on one answer at a time; embedding kinds need a model and a batch.
                raise RegressError(
                    f"{where}: field 'checks.{i}.kind': unknown check kind {spec.kind!r}; known kinds: {', '.join(known_kinds('rule'))}"
                )
            try:
                built.append(build_check(name, spec.kind, spec.params))
            except ValueError as exc:
                raise RegressError(f"{where}: field 'checks.{i}.params': {exc}") from None
        raws.append(data)
        cases.append(case)
        checks[case.id] = built
    if not cases:
        raise RegressError(f"suite {source} has no cases")
    return RegressSuite(str(source), cases, suite_checksum(raws), checks)


# --- run records -------------------------------------------------------------------------------


class CheckResult(BaseModel):
    name: str
    kind: str
    result: Literal["pass", "fail", "error", "skip"]
    value: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class Attempt(BaseModel):
    case_id: str
    repeat: int
    result: Literal["pass", "fail", "error", "upstream_error"]
    score: float | None = None
    status: int = 0
    error: str | None = None
    model_version: str | None = None
    latency_ms: float = 0.0
    cost_usd: float | None = None
    answer: str = ""
    checks: list[CheckResult] = Field(default_factory=list)
    # 0: the case as written; 1..K: its K rewordings (`--paraphrases`), kept out of pass rates and verdicts.
    variant: int = 0
    # Calls this attempt made: 1, or one per user turn with `--multi-turn dynamic`.
    turns: int = 1
    # With `--multi-turn dynamic`: the candidate's own answers to the earlier user turns, as fed back.
    turn_answers: list[str] = Field(default_factory=list)


class CaseSummary(BaseModel):
    id: str
    category: str
    attempts: int
    n_pass: int
    n_judged: int  # pass + fail + upstream errors: the pass rate's denominator
    n_error: int
    n_upstream_error: int
    pass_rate: float | None
    mean_score: float | None
    variance: float | None
    failing_checks: dict[str, int] = Field(default_factory=dict)
    check_errors: dict[str, int] = Field(default_factory=dict)
    # Wilson interval of the pass rate at the run's confidence; pass^k: every judged attempt passed.
    ci_low: float | None = None
    ci_high: float | None = None
    pass_k: bool | None = None
    flaky: bool = False
    stopped_early: bool = False


class CategorySummary(BaseModel):
    category: str
    cases: int
    attempts: int
    mean_pass_rate: float | None
    mean_variance: float | None
    pass_k_rate: float | None = None  # share of the category's cases whose every attempt passed


class CaseVerdict(BaseModel):
    id: str
    category: str
    baseline_pass_rate: float | None
    pass_rate: float | None
    baseline_counts: tuple[int, int]
    counts: tuple[int, int]
    delta: float | None
    test: str | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    # The one-sided test for a rise, corrected over the same cases: `improved` needs it below
    # alpha as `regressed` needs p_adjusted (before, a rise was called improved untested, at a
    # p_adjusted of 1 printed beside it: that p was the drop test's).
    p_improved: float | None = None
    p_adjusted_improved: float | None = None
    verdict: Literal["regressed", "stable", "improved", "insufficient"]


class Comparison(BaseModel):
    baseline_path: str
    baseline_created_at: datetime
    baseline_versions: list[str]
    threshold: float
    alpha: float
    correction: str
    cases: list[CaseVerdict]

    @property
    def regressed(self) -> list[CaseVerdict]:
        return [c for c in self.cases if c.verdict == "regressed"]

    def blind_spot(self) -> tuple[float, float, int | None] | None:
        """(best p, p needed, repeats needed) when no case could have been found regressed at all.

        The most a case can say is its drop to 0 passes; when even that smallest one-sided p,
        corrected over the tested cases, is not below alpha, "no case regressed" is a run too small
        to tell (5 attempts a side against 30 cases: p 0.004 at best, Holm's first step needs
        0.05 / 30). Repeats needed: the fewest attempts a side at which a case passing every time
        before and never now would be found. None when some case could be found regressed."""
        tested = [
            c
            for c in self.cases
            if c.verdict != "insufficient"
            and c.baseline_pass_rate is not None
            and c.baseline_pass_rate > self.threshold
            and c.baseline_counts[1]
            and c.counts[1]
        ]
        if not tested:
            return None
        best = min(
            stats.compare_proportions(
                c.baseline_counts[0], c.baseline_counts[1], 0, c.counts[1], alternative="less"
            ).p_value
            for c in tested
        )
        m = len([c for c in self.cases if c.verdict != "insufficient"]) if self.correction != "none" else 1
        needed = self.alpha / max(1, m)
        if best < needed:
            return None
        repeats = next(
            (n for n in range(2, 201) if stats.compare_proportions(n, n, 0, n, alternative="less").p_value < needed),
            None,
        )
        return best, needed, repeats


class VariantScore(BaseModel):
    """One wording of a case: the original (variant 0) or a rewording, and how its attempts scored."""

    variant: int
    text: str | None = None  # the reworded last user message (first 500 characters); None for the original
    transforms: list[str] = Field(default_factory=list)
    attempts: int
    n_pass: int
    n_judged: int
    pass_rate: float | None
    mean_score: float | None
    passed: bool | None  # pass_rate >= the run's pass threshold; None with no judged attempt


class CaseSpread(BaseModel):
    """A case's prompt sensitivity: its mean score across the original and its rewordings."""

    id: str
    category: str
    variants: list[VariantScore]
    score_min: float | None
    score_max: float | None
    score_range: float | None  # max - min of the variants' mean scores
    score_std: float | None  # population standard deviation of the variants' mean scores
    flips: bool  # some rewording's pass verdict differs from the original's


class VersionSpread(BaseModel):
    """Per served model version: how sensitive to phrasing the suite is, with intervals over cases."""

    model_version: str  # the x-model-version header; "unknown" when the endpoint sends none
    cases: int  # cases with at least two scored wordings at this version
    mean_range: float | None
    range_ci: tuple[float, float] | None  # normal interval of the mean range over cases, at the run's confidence
    mean_std: float | None
    n_flipped: int
    flip_share: float | None
    flip_ci: tuple[float, float] | None  # Wilson interval of flip_share


class ParaphraseReport(BaseModel):
    k: int
    pass_threshold: float
    confidence: float
    max_flip_share: float | None = None  # the gate (--paraphrase-max-flips); None: reported only
    gate_failed: bool = False
    source: str = "built-in"  # or "model:<name>" with --paraphrase-url
    # With a model: cases where some rewordings are built-in ones instead, and why (counted).
    model_fallbacks: int = 0
    model_errors: dict[str, int] = Field(default_factory=dict)
    cases: list[CaseSpread]
    versions: list[VersionSpread]


class RegressRun(BaseModel):
    schema_: str = Field(default=RUN_SCHEMA, alias="schema")
    model_config = ConfigDict(populate_by_name=True)
    created_at: datetime
    llmwatch_version: str = __version__
    suite_path: str
    suite_checksum: str
    n_cases: int
    upstream: str
    model: str
    repeat: int
    judge_model: str | None = None
    model_versions: list[str] = Field(default_factory=list)
    duration_s: float = 0.0
    cost_per_1k: float | None = None
    latency_ms: dict[str, float] = Field(default_factory=dict)
    cases: list[CaseSummary]
    categories: list[CategorySummary]
    comparison: Comparison | None = None
    confidence: float = 0.95
    early_stop: bool = False
    calls: int = 0
    calls_saved: int = 0  # repeat x cases minus the calls made: what early stopping spared
    multi_turn: Literal["static", "dynamic"] = "static"
    upstream_calls: int = 0  # every chat call: attempts, rewordings and the turns of dynamic replay
    paraphrases: ParaphraseReport | None = None
    attempts: list[Attempt] = Field(default_factory=list)


def load_run(path: str | os.PathLike[str]) -> RegressRun:
    source = Path(path)
    return read_model(
        source,
        RegressRun,
        what="baseline run",
        error=RegressError,
        schema=RUN_SCHEMA,
        kind="an llmwatch regress run",
        missing=f"write one with `llmwatch regress ... --out {source}`",
    )


def _ids(ids: Sequence[str], most: int = 10) -> str:
    shown = ", ".join(ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


def suite_difference(suite: RegressSuite, baseline: RegressRun) -> str:
    """Which cases the suite gained or lost since the baseline run (by case id)."""
    now = [c.id for c in suite.cases]
    then = [c.id for c in baseline.cases]
    added = [i for i in now if i not in set(then)]
    removed = [i for i in then if i not in set(now)]
    parts = []
    if added:
        parts.append(f"{len(added)} case(s) added since the baseline: {_ids(added)}")
    if removed:
        parts.append(f"{len(removed)} case(s) removed: {_ids(removed)}")
    if not parts:
        parts.append("the same case ids, so a case's content changed")
    return "; ".join(parts)


def check_same_suite(suite: RegressSuite, baseline: RegressRun, baseline_path: str) -> None:
    if baseline.suite_checksum != suite.checksum:
        raise RegressError(
            f"suite checksum differs: the baseline run {baseline_path} was made with suite sha256:{baseline.suite_checksum[:16]}… "
            f"({baseline.n_cases} cases, {baseline.suite_path}), but {suite.path} is now sha256:{suite.checksum[:16]}… ({len(suite.cases)} cases): {suite_difference(suite, baseline)}. "
            "Cases changed, so their pass rates are not comparable: re-run the baseline version with this suite "
            "(`llmwatch regress --suite ... --out new-baseline.json`) or compare with the suite the baseline was made with"
        )


def check_turns(suite: RegressSuite, max_turns: int) -> None:
    """Dynamic replay makes one call per user turn: a case with more than `max_turns` is refused before any call."""
    long = [
        (c.id, n)
        for c in suite.cases
        if (n := len(dynamic_turns(c.messages()))) > max_turns and not any(m["role"] == "tool" for m in c.messages())
    ]
    if long:
        shown = ", ".join(f"{i} ({n} turns)" for i, n in long[:10])
        raise RegressError(
            f"--multi-turn dynamic calls the candidate once per user turn, at most --max-turns {max_turns} per attempt; "
            f"{len(long)} case(s) have more: {shown}. Raise --max-turns or use --multi-turn static"
        )


# --- running ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSettings:
    upstream: str
    model: str
    repeat: int = 5
    concurrency: int = 8
    api_key: str = "sk-llmwatch-regress"
    timeout_s: float = 120.0
    max_retries: int = 2
    judge_url: str | None = None
    judge_model: str | None = None
    judge_api_key: str = "sk-llmwatch-judge"
    judge_min_score: float = 4.0
    pricing: Mapping[str, Any] | None = None
    # The whole table (metrics.prices_file and metrics.pricing applied); None: `pricing` over the built-in prices.
    prices: PriceTable | None = None
    early_stop: bool = False
    min_repeat: int = 5
    confidence: float = 0.95
    pass_threshold: float = 0.8
    # K rewordings of each case's last user message, each run like the case (paraphrase.py).
    paraphrases: int = 0
    # Exit 1 when more than this share of cases flip their pass verdict under rewording; None: report only.
    paraphrase_max_flips: float | None = None
    # static: the recorded transcript as written; dynamic: the user turns, with the candidate's own answers fed back.
    multi_turn: Literal["static", "dynamic"] = "static"
    max_turns: int = 10
    # Rewordings from an OpenAI-compatible model (built-in transforms where it fails); the key is never logged.
    paraphrase_url: str | None = None
    paraphrase_model: str | None = None
    paraphrase_api_key: str = "sk-llmwatch-paraphrase"

    def client(self, url: str, api_key: str) -> Any:
        """An OpenAI client for one of the run's endpoints (the candidate, the judge, the rewording
        model), each with the run's timeout and retries."""
        import openai

        return openai.AsyncOpenAI(
            base_url=openai_base_url(url), api_key=api_key, timeout=self.timeout_s, max_retries=self.max_retries
        )

    @property
    def variant_repeat(self) -> int:
        """Attempts per rewording: --repeat, or --min-repeat with early stopping (rewordings never decide a verdict)."""
        return min(self.min_repeat, self.repeat) if self.early_stop else self.repeat


def z_for(confidence: float) -> float:
    """Two-sided normal quantile for a confidence level (0.95 -> 1.96)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def decided(attempts: Sequence[Attempt], line: float, z: float) -> bool:
    """The case's verdict against `line` is settled: its Wilson interval lies wholly on one side."""
    judged = [a for a in attempts if a.result != "error"]
    if not judged:
        return False
    lo, hi = wilson_interval(sum(1 for a in judged if a.result == "pass"), len(judged), z)
    return hi < line or lo > line


def decision_lines(
    suite: RegressSuite, baseline: RegressRun | None, *, threshold: float, pass_threshold: float
) -> dict[str, float]:
    """Per case, the pass rate that decides its verdict: below it is a regression (or a failing case)."""
    lines = {c.id: pass_threshold for c in suite.cases}
    if baseline is not None:
        for c in baseline.cases:
            if c.id in lines and c.pass_rate is not None:
                lines[c.id] = c.pass_rate - threshold
    return lines


def openai_base_url(url: str) -> str:
    """The openai client wants the /v1 root; users give either the server or the /v1 root.

    Both forms resolve as `--upstream` does for the proxy (config.normalize_upstream), so one
    URL means the same server in `llmwatch proxy` and `llmwatch regress`.
    """
    return normalize_upstream(url) + "/v1"


def _sample_for(
    case: SuiteCase,
    repeat: int,
    body: dict[str, Any],
    response: dict[str, Any] | None,
    *,
    status: int,
    latency_ms: float,
    version: str | None,
    error: str | None,
    cost: float | None,
) -> Sample:
    usage = (response or {}).get("usage") or {}
    choices = (response or {}).get("choices") or []
    finish = choices[0].get("finish_reason") if choices and isinstance(choices[0], dict) else None
    return Sample(
        id=f"{case.id}#{repeat}",
        timestamp=datetime.now(timezone.utc),
        model=body["model"],
        response_model=(response or {}).get("model"),
        model_version=version,
        status=status,
        error_type=error,
        latency_ms=latency_ms,
        usage=Usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens")),
        finish_reason=finish,
        cost_usd=cost,
        request=body,
        response=response if response is not None else {},
        sample_reason="regress",
    )


Variants = dict[str, list[tuple[list[dict[str, Any]], Rewording]]]


def case_rewordings(case: SuiteCase, k: int) -> list[tuple[list[dict[str, Any]], Rewording]]:
    """The case's K rewordings (last user message only), seeded by its id: the same on every run."""
    return reword_messages(case.messages(), k, case.id) if k > 0 else []


@dataclass
class PreparedRewordings:
    variants: Variants
    source: str = "built-in"
    fallbacks: int = 0
    errors: Counter[str] = field(default_factory=Counter)


async def prepare_rewordings(suite: RegressSuite, s: RunSettings) -> PreparedRewordings:
    """Every case's rewordings: built in, or asked of --paraphrase-model with the built-in ones as fallback.

    One call per case asks for K rewordings as a JSON array; each is kept only if it passes the
    guards of `paraphrase.accept_model_rewordings`, and a failed call, an unusable reply or a
    refused candidate is made up with built-in rewordings and counted, never an error of the run.
    """
    if s.paraphrases <= 0:
        return PreparedRewordings({c.id: [] for c in suite.cases})
    if not (s.paraphrase_url and s.paraphrase_model):
        return PreparedRewordings({c.id: case_rewordings(c, s.paraphrases) for c in suite.cases})
    import openai

    model = s.paraphrase_model
    client = s.client(s.paraphrase_url, s.paraphrase_api_key)
    gate = asyncio.Semaphore(s.concurrency)
    prepared = PreparedRewordings({}, source=f"model:{model}")

    async def one(case: SuiteCase) -> None:
        messages = case.messages()
        text = last_user_text(messages)
        if text is None:
            prepared.variants[case.id] = []
            return
        candidates: list[str] = []
        problems: list[str] = []
        try:
            async with gate:
                reply = await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": model_prompt(text, s.paraphrases)}],
                    temperature=0,
                    # Seeded by the case id, for servers that honour it: the same rewordings on every run.
                    seed=int(hashlib.sha256(case.id.encode()).hexdigest()[:8], 16),
                )
            candidates = parse_model_reply(reply.choices[0].message.content or "")
        except openai.APIError as exc:
            problems.append(f"call failed ({type(exc).__name__})")
        except (ValueError, IndexError, AttributeError, TypeError, KeyError) as exc:
            # TypeError: a 200 whose body has no choices (`choices: null` reads as None, not a list).
            problems.append(f"unusable reply ({str(exc)[:80]})")
        kept, refused = accept_model_rewordings(text, candidates, s.paraphrases, case.id, model)
        problems += refused
        if len(candidates) < s.paraphrases and not problems:
            problems.append("fewer rewordings than asked")
        if any(r.transforms != (f"model:{model}",) for r in kept):
            prepared.fallbacks += 1
            prepared.errors.update(problems)
            # The reason and the case, never the key or the endpoint's reply.
            log.warning("paraphrase_model_fallback", case=case.id, reasons=sorted(set(problems)))
        prepared.variants[case.id] = [(with_last_user_text(messages, r.text), r) for r in kept]

    try:
        await asyncio.gather(*(one(c) for c in suite.cases))
    finally:
        await client.close()
    return prepared


@dataclass
class _Call:
    response: dict[str, Any] | None
    version: str | None
    status: int
    error: str | None
    latency_ms: float
    cost: float | None


def masked(text: str, key: str | None) -> str:
    """`text` without `key`: an endpoint's error words are kept (they say what is wrong), not the
    key some quote back ("Incorrect API key provided: <the key>"); masked before any truncation."""
    return text.replace(key, "***") if key else text


async def _call(
    client: Any, s: RunSettings, messages: list[dict[str, Any]], params: dict[str, Any], prices: PriceTable
) -> _Call:
    import openai

    t0 = time.perf_counter()
    response: dict[str, Any] | None = None
    version = None
    status, error = 200, None
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model=s.model, messages=messages, extra_body=params or None
        )
        version = raw.headers.get("x-model-version")
        response = raw.parse().model_dump(mode="json")
    except openai.APIStatusError as exc:
        status, error = exc.status_code, f"HTTP {exc.status_code}: {masked(str(exc), s.api_key)[:200]}"
    except openai.APIError as exc:
        status, error = 0, f"{type(exc).__name__}: {masked(str(exc), s.api_key)[:200]}"
    latency_ms = (time.perf_counter() - t0) * 1000.0
    if response is None:
        return _Call(None, None, status, error, latency_ms, None)
    usage = response.get("usage") or {}
    details = usage_details(usage)
    prompt_tokens = token_count(usage.get("prompt_tokens"))
    tokens = TokenCounts(
        None if prompt_tokens is None else prompt_tokens + details.uncounted_input,
        token_count(usage.get("completion_tokens")),
        details.cached_input,
        details.cache_write,
        details.reasoning,
    )
    priced = prices.price(s.model, tokens)
    return _Call(response, version, status, None, latency_ms, None if priced is None else priced.usd)


def _answer_of(response: dict[str, Any]) -> str:
    choices = response.get("choices") or []
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def dynamic_turns(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indexes of the user messages after which dynamic replay calls the candidate, the last one included.

    A user message followed by a recorded assistant answer is a turn (that answer is replaced by the
    candidate's own); user messages in a row are sent together; recorded answers after the last
    user message are dropped, since the final answer is the one scored.
    """
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        return []
    last = users[-1]
    return [i for i in users if i != last and messages[i + 1].get("role") == "assistant"] + [last]


async def _replay(
    case: SuiteCase,
    messages: list[dict[str, Any]],
    s: RunSettings,
    client: Any,
    prices: PriceTable,
) -> tuple[_Call, list[dict[str, Any]], list[str]]:
    """The candidate's final call: static (the transcript as written) or dynamic (its own answers fed back).

    Returns the final call, the messages it was sent, and the answers fed back to earlier turns.
    A failed call at an earlier turn ends the replay: that failure is the attempt's result.
    """
    if s.multi_turn == "static" or any(m.get("role") == "tool" for m in messages):
        # A tool exchange cannot be replayed without the tools: such a case runs as written.
        return await _call(client, s, messages, case.params, prices), messages, []
    turns = dynamic_turns(messages)
    history: list[dict[str, Any]] = []
    fed: list[str] = []
    latency, cost = 0.0, 0.0
    priced = True
    last_turn = turns[-1]
    for i, m in enumerate(messages[: last_turn + 1]):
        if m.get("role") == "assistant":
            continue  # a recorded answer: the candidate's own takes its place
        history.append(m)
        if i in turns:
            result = await _call(client, s, list(history), case.params, prices)
            latency += result.latency_ms
            if result.cost is None:
                priced = False
            else:
                cost += result.cost
            if result.response is None or i == last_turn:
                result.latency_ms = latency
                result.cost = cost if priced and result.response is not None else None
                if result.error is not None and i != last_turn:
                    result.error = f"turn {len(fed) + 1} of {len(turns)}: {result.error}"
                return result, history, fed
            answer = _answer_of(result.response)
            fed.append(answer)
            history.append({"role": "assistant", "content": answer})
    raise AssertionError("unreachable: the last turn returns")  # pragma: no cover


async def _attempt(
    case: SuiteCase,
    repeat: int,
    suite: RegressSuite,
    s: RunSettings,
    client: Any,
    judge: Any,
    prices: PriceTable,
    *,
    messages: list[dict[str, Any]] | None = None,
    variant: int = 0,
) -> Attempt:
    from llmwatch.scorers.checks.judge import judge_answer

    call, sent, fed = await _replay(case, messages if messages is not None else case.messages(), s, client, prices)
    turns = len(fed) + 1
    if call.response is None:
        return Attempt(
            case_id=case.id,
            repeat=repeat,
            result="upstream_error",
            score=0.0,
            status=call.status,
            error=call.error,
            latency_ms=call.latency_ms,
            variant=variant,
            turns=turns,
            turn_answers=[a[:1000] for a in fed],
        )
    body = {"model": s.model, "messages": sent, **case.params}
    sample = _sample_for(
        case,
        repeat,
        body,
        call.response,
        status=call.status,
        latency_ms=call.latency_ms,
        version=call.version,
        error=None,
        cost=call.cost,
    )
    results = []
    for check in suite.checks[case.id]:
        outcome = run_check(check.run, sample)
        results.append(
            CheckResult(
                name=check.name,
                kind=check.kind,
                result=outcome.result,
                value=outcome.value,
                details=dict(outcome.details),
            )
        )
    # regress() refuses a judge URL without a judge model, so both are set or neither.
    if judge is not None and s.judge_model is not None:
        outcome = await judge_answer(
            judge,
            s.judge_model,
            extract_prompt_text(body),
            sample.answer_text(),
            rubric=case.rubric,
            reference=case.reference,
            min_score=s.judge_min_score,
        )
        results.append(
            CheckResult(
                name="judge", kind="judge", result=outcome.result, value=outcome.value, details=dict(outcome.details)
            )
        )
    verdicts = [r for r in results if r.result in ("pass", "fail")]
    if not verdicts:
        result, score = "error", None
    else:
        result = "pass" if all(r.result == "pass" for r in verdicts) else "fail"
        score = sum((r.value if r.value is not None else float(r.result == "pass")) for r in verdicts) / len(verdicts)
    return Attempt(
        case_id=case.id,
        repeat=repeat,
        result=result,
        score=score,
        status=call.status,
        model_version=call.version,
        latency_ms=call.latency_ms,
        cost_usd=call.cost,
        answer=sample.answer_text()[:2000],
        checks=results,
        variant=variant,
        turns=turns,
        turn_answers=[a[:1000] for a in fed],
    )


async def run_attempts(
    suite: RegressSuite,
    s: RunSettings,
    *,
    progress: bool | None = None,
    lines: Mapping[str, float] | None = None,
    variants: Variants | None = None,
) -> list[Attempt]:
    from tqdm import tqdm

    from llmwatch.core.config import Price

    prices = s.prices or PriceTable(
        {k: (v if isinstance(v, Price) else Price.model_validate(v)) for k, v in (s.pricing or {}).items()}
    )
    client = s.client(s.upstream, s.api_key)
    judge = s.client(s.judge_url, s.judge_api_key) if s.judge_url else None
    gate = asyncio.Semaphore(s.concurrency)
    if variants is None:
        variants = {c.id: case_rewordings(c, s.paraphrases) for c in suite.cases}
    total = len(suite.cases) * s.repeat + sum(len(v) for v in variants.values()) * s.variant_repeat
    bar = tqdm(
        total=total,
        unit="call",
        desc="regress",
        disable=not sys.stderr.isatty() if progress is None else not progress,
        file=sys.stderr,
    )

    async def one(case: SuiteCase, repeat: int, variant: int = 0) -> Attempt:
        messages = variants[case.id][variant - 1][0] if variant else None
        async with gate:
            attempt = await _attempt(case, repeat, suite, s, client, judge, prices, messages=messages, variant=variant)
        bar.update(1)
        return attempt

    async def sequential(case: SuiteCase) -> list[Attempt]:
        line = (lines or {}).get(case.id, s.pass_threshold)
        z = z_for(s.confidence)
        done = list(await asyncio.gather(*(one(case, i) for i in range(min(s.min_repeat, s.repeat)))))
        # One at a time after the first batch: every call not made is one the verdict did not need.
        while len(done) < s.repeat and not decided(done, line, z):
            done.append(await one(case, len(done)))
        return done

    reworded = [
        one(c, i, v) for c in suite.cases for v in range(1, len(variants[c.id]) + 1) for i in range(s.variant_repeat)
    ]
    try:
        if s.early_stop:
            per_case, extra = await asyncio.gather(
                asyncio.gather(*(sequential(c) for c in suite.cases)), asyncio.gather(*reworded)
            )
            return [a for items in per_case for a in items] + list(extra)
        return list(await asyncio.gather(*(one(c, i) for c in suite.cases for i in range(s.repeat)), *reworded))
    finally:
        bar.close()
        await client.close()
        if judge is not None:
            await judge.close()


# --- summarising and comparing -------------------------------------------------------------------


def summarize_cases(
    suite: RegressSuite, attempts: Sequence[Attempt], *, confidence: float = 0.95, repeat: int | None = None
) -> tuple[list[CaseSummary], list[CategorySummary]]:
    z = z_for(confidence)
    by_case: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        by_case[a.case_id].append(a)
    cases = []
    for case in suite.cases:
        items = by_case.get(case.id, [])
        judged = [a for a in items if a.result != "error"]
        n_pass = sum(1 for a in judged if a.result == "pass")
        scores = [a.score for a in judged if a.score is not None]
        failing: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        for a in items:
            for r in a.checks:
                if r.result == "fail":
                    failing[r.name] += 1
                elif r.result == "error":
                    errors[r.name] += 1
            if a.result == "upstream_error":
                failing["(call failed)"] += 1
        lo, hi = wilson_interval(n_pass, len(judged), z) if judged else (None, None)
        cases.append(
            CaseSummary(
                id=case.id,
                category=case.category,
                attempts=len(items),
                n_pass=n_pass,
                n_judged=len(judged),
                n_error=len(items) - len(judged),
                n_upstream_error=sum(1 for a in items if a.result == "upstream_error"),
                pass_rate=n_pass / len(judged) if judged else None,
                mean_score=float(np.mean(scores)) if scores else None,
                variance=float(np.var(scores)) if scores else None,
                failing_checks=dict(failing.most_common()),
                check_errors=dict(errors.most_common()),
                ci_low=lo,
                ci_high=hi,
                pass_k=(n_pass == len(judged)) if judged else None,
                # Flaky = passed and failed at least once. (It once also asked the Wilson interval
                # to exclude 0 and 1, which it always does when 0 < k < n: a dead condition.)
                flaky=0 < n_pass < len(judged),
                stopped_early=repeat is not None and len(items) < repeat,
            )
        )
    cats: dict[str, list[CaseSummary]] = defaultdict(list)
    for c in cases:
        cats[c.category].append(c)
    categories = []
    for name, group in sorted(cats.items()):
        rates = [c.pass_rate for c in group if c.pass_rate is not None]
        variances = [c.variance for c in group if c.variance is not None]
        all_pass = [c.pass_k for c in group if c.pass_k is not None]
        categories.append(
            CategorySummary(
                category=name,
                cases=len(group),
                attempts=sum(c.attempts for c in group),
                mean_pass_rate=float(np.mean(rates)) if rates else None,
                mean_variance=float(np.mean(variances)) if variances else None,
                pass_k_rate=sum(all_pass) / len(all_pass) if all_pass else None,
            )
        )
    return cases, categories


def compare_runs(
    current: Sequence[CaseSummary],
    baseline: RegressRun,
    baseline_path: str,
    *,
    threshold: float = 0.2,
    alpha: float = 0.05,
    correction: str = "holm",
) -> Comparison:
    base = {c.id: c for c in baseline.cases}
    verdicts: list[CaseVerdict] = []
    tested: list[tuple[CaseVerdict, float]] = []
    for cur in current:
        old = base.get(cur.id)
        b_counts = (old.n_pass, old.n_judged) if old else (0, 0)
        counts = (cur.n_pass, cur.n_judged)
        # A case with judged attempts has a pass rate; the None checks say so to the type checker.
        if old is None or not old.n_judged or not cur.n_judged or old.pass_rate is None or cur.pass_rate is None:
            verdicts.append(
                CaseVerdict(
                    id=cur.id,
                    category=cur.category,
                    baseline_pass_rate=old.pass_rate if old else None,
                    pass_rate=cur.pass_rate,
                    baseline_counts=b_counts,
                    counts=counts,
                    delta=None,
                    verdict="insufficient",
                )
            )
            continue
        result = stats.compare_proportions(old.n_pass, old.n_judged, cur.n_pass, cur.n_judged, alternative="less")
        rise = stats.compare_proportions(old.n_pass, old.n_judged, cur.n_pass, cur.n_judged, alternative="greater")
        v = CaseVerdict(
            id=cur.id,
            category=cur.category,
            baseline_pass_rate=old.pass_rate,
            pass_rate=cur.pass_rate,
            baseline_counts=b_counts,
            counts=counts,
            delta=cur.pass_rate - old.pass_rate,
            test=result.test,
            p_value=result.p_value,
            p_improved=rise.p_value,
            verdict="stable",
        )
        verdicts.append(v)
        tested.append((v, result.p_value))
    if tested:

        def adjust(ps: list[float]) -> list[float]:
            return list(stats.adjust_pvalues(ps, method=correction)) if correction != "none" else ps

        adjusted = adjust([p for _, p in tested])
        adjusted_rise = adjust([v.p_improved if v.p_improved is not None else 1.0 for v, _ in tested])
        for (v, _), p_adj, p_rise in zip(tested, adjusted, adjusted_rise):
            v.p_adjusted = p_adj
            v.p_adjusted_improved = p_rise
            if v.delta is not None and -v.delta > threshold and p_adj < alpha:
                v.verdict = "regressed"
            elif v.delta is not None and v.delta > threshold and p_rise < alpha:
                v.verdict = "improved"
    return Comparison(
        baseline_path=baseline_path,
        baseline_created_at=baseline.created_at,
        baseline_versions=baseline.model_versions,
        threshold=threshold,
        alpha=alpha,
        correction=correction,
        cases=verdicts,
    )


def _variant_score(variant: int, items: Sequence[Attempt], pass_threshold: float) -> VariantScore:
    judged = [a for a in items if a.result != "error"]
    n_pass = sum(1 for a in judged if a.result == "pass")
    scores = [a.score for a in judged if a.score is not None]
    rate = n_pass / len(judged) if judged else None
    return VariantScore(
        variant=variant,
        attempts=len(items),
        n_pass=n_pass,
        n_judged=len(judged),
        pass_rate=rate,
        mean_score=float(np.mean(scores)) if scores else None,
        passed=None if rate is None else rate >= pass_threshold,
    )


def case_spreads(
    suite: RegressSuite,
    attempts: Sequence[Attempt],
    k: int,
    *,
    pass_threshold: float,
    texts: Mapping[str, Sequence[Rewording]] | None = None,
) -> list[CaseSpread]:
    """Per case, the mean score of the original and of each rewording, and their spread.

    The spread is over the wordings' mean scores (each the mean of its attempts), so repeats
    average out sampling noise before wordings are compared. A wording with no scored attempt
    is listed but left out of the spread; a case flips when a rewording's pass verdict (pass
    rate >= `pass_threshold`) differs from the original's.
    """
    by: dict[tuple[str, int], list[Attempt]] = defaultdict(list)
    for a in attempts:
        by[(a.case_id, a.variant)].append(a)
    out = []
    for case in suite.cases:
        variants = []
        for v in range(k + 1):
            score = _variant_score(v, by.get((case.id, v), []), pass_threshold)
            if v and texts is not None and v <= len(texts.get(case.id, ())):
                r = texts[case.id][v - 1]
                score.text, score.transforms = r.text[:500], list(r.transforms)
            variants.append(score)
        means = [x.mean_score for x in variants if x.mean_score is not None]
        original = variants[0].passed
        out.append(
            CaseSpread(
                id=case.id,
                category=case.category,
                variants=variants,
                score_min=min(means) if means else None,
                score_max=max(means) if means else None,
                score_range=max(means) - min(means) if len(means) >= 2 else None,
                score_std=float(np.std(means)) if len(means) >= 2 else None,
                flips=original is not None and any(x.passed is not None and x.passed != original for x in variants[1:]),
            )
        )
    return out


def version_spreads(
    suite: RegressSuite, attempts: Sequence[Attempt], k: int, *, pass_threshold: float, confidence: float
) -> list[VersionSpread]:
    """Per served version, the mean spread over cases (normal interval) and the share of cases that flip (Wilson).

    Only attempts served by that version count, so a run whose endpoint switched versions
    midway is not pooled; a case counts at a version when two or more of its wordings scored there.
    """
    z = z_for(confidence)
    versions = sorted({a.model_version or "unknown" for a in attempts})
    out = []
    for version in versions:
        mine = [a for a in attempts if (a.model_version or "unknown") == version]
        spreads = [c for c in case_spreads(suite, mine, k, pass_threshold=pass_threshold) if c.score_range is not None]
        ranges = [c.score_range for c in spreads if c.score_range is not None]
        stds = [c.score_std for c in spreads if c.score_std is not None]
        flipped = sum(c.flips for c in spreads)
        mean = float(np.mean(ranges)) if ranges else None
        half = z * float(np.std(ranges, ddof=1)) / len(ranges) ** 0.5 if len(ranges) >= 2 else None
        out.append(
            VersionSpread(
                model_version=version,
                cases=len(spreads),
                mean_range=mean,
                range_ci=(max(0.0, mean - half), mean + half) if mean is not None and half is not None else None,
                mean_std=float(np.mean(stds)) if stds else None,
                n_flipped=flipped,
                flip_share=flipped / len(spreads) if spreads else None,
                flip_ci=wilson_interval(flipped, len(spreads), z) if spreads else None,
            )
        )
    return out


def paraphrase_report(
    suite: RegressSuite, s: RunSettings, attempts: Sequence[Attempt], prepared: PreparedRewordings | None = None
) -> ParaphraseReport:
    if prepared is None:
        prepared = PreparedRewordings({c.id: case_rewordings(c, s.paraphrases) for c in suite.cases})
    texts = {cid: [r for _, r in items] for cid, items in prepared.variants.items()}
    cases = case_spreads(suite, attempts, s.paraphrases, pass_threshold=s.pass_threshold, texts=texts)
    judged = [c for c in cases if c.score_range is not None]
    share = sum(c.flips for c in judged) / len(judged) if judged else 0.0
    return ParaphraseReport(
        k=s.paraphrases,
        pass_threshold=s.pass_threshold,
        confidence=s.confidence,
        max_flip_share=s.paraphrase_max_flips,
        gate_failed=s.paraphrase_max_flips is not None and share > s.paraphrase_max_flips,
        cases=cases,
        versions=version_spreads(
            suite, attempts, s.paraphrases, pass_threshold=s.pass_threshold, confidence=s.confidence
        ),
        source=prepared.source,
        model_fallbacks=prepared.fallbacks,
        model_errors=dict(prepared.errors.most_common()),
    )


def build_run(
    suite: RegressSuite,
    s: RunSettings,
    attempts: Sequence[Attempt],
    duration_s: float,
    prepared: PreparedRewordings | None = None,
) -> RegressRun:
    # Pass rates, verdicts and the baseline comparison are the case as written: rewordings only measure spread.
    originals = [a for a in attempts if a.variant == 0]
    cases, categories = summarize_cases(suite, originals, confidence=s.confidence, repeat=s.repeat)
    costs = [a.cost_usd for a in attempts if a.cost_usd is not None]
    ok = [a.latency_ms for a in attempts if a.result != "upstream_error"]
    latency = {f"p{q}": float(v) for q, v in zip((50, 90, 95, 99), np.percentile(ok, (50, 90, 95, 99)))} if ok else {}
    return RegressRun(
        created_at=datetime.now(timezone.utc),
        suite_path=suite.path,
        suite_checksum=suite.checksum,
        n_cases=len(suite.cases),
        upstream=s.upstream,
        model=s.model,
        repeat=s.repeat,
        judge_model=s.judge_model if s.judge_url else None,
        model_versions=sorted({a.model_version for a in attempts if a.model_version}),
        duration_s=round(duration_s, 3),
        cost_per_1k=1000.0 * sum(costs) / len(costs) if costs else None,
        latency_ms=latency,
        cases=cases,
        categories=categories,
        confidence=s.confidence,
        early_stop=s.early_stop,
        calls=len(originals),
        calls_saved=len(suite.cases) * s.repeat - len(originals),
        multi_turn=s.multi_turn,
        upstream_calls=sum(a.turns for a in attempts),
        paraphrases=paraphrase_report(suite, s, attempts, prepared) if s.paraphrases > 0 else None,
        attempts=list(attempts),
    )


def write_run(run: RegressRun, path: str | os.PathLike[str]) -> Path:
    return atomic_write_bytes(
        path, orjson.dumps(run.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2)
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def format_run(run: RegressRun) -> str:
    lines = [
        f"llmwatch regress: suite {run.suite_path} (sha256:{run.suite_checksum[:12]}, {run.n_cases} cases) x {run.repeat} repeats "
        f"against {run.upstream} model {run.model} (served version(s): {', '.join(run.model_versions) or '-'})"
        + (f"; judge {run.judge_model}" if run.judge_model else ""),
    ]
    cmp = run.comparison
    verdicts = {v.id: v for v in cmp.cases} if cmp else {}
    if cmp:
        lines.append(
            f"baseline: {cmp.baseline_path} ({cmp.baseline_created_at:%Y-%m-%d %H:%M:%SZ}, version(s) {', '.join(cmp.baseline_versions) or '-'}); "
            f"regressed = drop > {cmp.threshold * 100:.0f} points and adjusted p < {cmp.alpha:g} ({cmp.correction} over {sum(v.p_value is not None for v in cmp.cases)} cases); "
            f"improved = rise > {cmp.threshold * 100:.0f} points and the rise's own adjusted p < {cmp.alpha:g}; p_adj is the drop test's, the rise's follows an improved verdict"
        )
    width = max([4] + [len(c.id) for c in run.cases])
    cw = max([8] + [len(c.category) for c in run.cases])
    head = f"  {'case':<{width}} {'category':<{cw}} {'n':>4} {'pass':>7} {'pass^k':>6} {'var':>7}"
    if cmp:
        head += f" {'baseline':>9} {'delta':>7} {'p_adj':>8}  verdict"
    lines += ["", head]
    for c in run.cases:
        passk = "-" if c.pass_k is None else ("yes" if c.pass_k else "no")
        line = f"  {c.id:<{width}} {c.category:<{cw}} {c.n_judged:>4} {_pct(c.pass_rate):>7} {passk:>6} {('-' if c.variance is None else f'{c.variance:.3f}'):>7}"
        if cmp:
            v = verdicts.get(c.id)
            if v is not None:
                delta = "-" if v.delta is None else f"{v.delta * 100:+.0f}"
                p = "-" if v.p_adjusted is None else f"{v.p_adjusted:.3g}"
                line += f" {_pct(v.baseline_pass_rate):>9} {delta:>7} {p:>8}  {_verdict_cell(v)}"
        if c.flaky:
            line += f"  FLAKY {interval_text(c.ci_low, c.ci_high, run.confidence, '.1%')}"
        if c.n_error:
            line += f"  ({c.n_error} attempt(s) unjudged: {', '.join(f'{k} error x{n}' for k, n in c.check_errors.items())})"
        lines.append(line)
    lines += ["", f"  {'category':<{cw}} {'cases':>5} {'attempts':>8} {'mean pass':>9} {'pass^k':>7} {'mean var':>9}"]
    for g in run.categories:
        lines.append(
            f"  {g.category:<{cw}} {g.cases:>5} {g.attempts:>8} {_pct(g.mean_pass_rate):>9} {_pct(g.pass_k_rate):>7} {('-' if g.mean_variance is None else f'{g.mean_variance:.3f}'):>9}"
        )
    flaky = [c.id for c in run.cases if c.flaky]
    if flaky:
        lines.append(f"\n  flaky (passed and failed at least once in their repeats): {_ids(flaky)}")
    if run.early_stop:
        lines.append(
            f"  early stopping at {run.confidence:.0%} confidence: {run.calls} calls instead of {run.calls + run.calls_saved} "
            f"({sum(c.stopped_early for c in run.cases)} of {run.n_cases} cases decided before {run.repeat} repeats)"
        )
    lines += _format_extras(run, width)
    cost = "-" if run.cost_per_1k is None else f"{run.cost_per_1k:.4f}"
    lat = "/".join(f"{run.latency_ms[k]:.0f}" for k in ("p50", "p95")) if run.latency_ms else "-"
    calls = sum(c.attempts for c in run.cases)
    extra = f" ({run.upstream_calls} chat calls with rewordings and turns)" if run.upstream_calls > calls else ""
    lines.append(
        f"\n  {calls} calls{extra} in {run.duration_s:.1f} s; USD per 1k requests {cost}; latency p50/p95 {lat} ms"
    )
    if cmp:
        regressed = cmp.regressed
        if regressed:
            lines += [
                "",
                f"REGRESSED: {len(regressed)} of {len(cmp.cases)} case(s) dropped by more than {cmp.threshold * 100:.0f} points with adjusted p < {cmp.alpha:g}:",
            ]
            summaries = {c.id: c for c in run.cases}
            for v in regressed:
                fails = summaries[v.id].failing_checks
                why = ", ".join(f"{k} x{n}" for k, n in fails.items()) or "-"
                lines.append(
                    f"  - {v.id} ({v.category}): pass rate {_pct(v.baseline_pass_rate)} -> {_pct(v.pass_rate)} "
                    f"({v.baseline_counts[0]}/{v.baseline_counts[1]} -> {v.counts[0]}/{v.counts[1]}, {v.test}, adjusted p = {v.p_adjusted:.3g}); failing checks: {why}"
                )
        else:
            lines += ["", f"OK: no case regressed against {cmp.baseline_path}"]
            blind = cmp.blind_spot()
            if blind is not None:
                best, needed, repeats = blind
                lines.append(
                    f"  but none could have: at these attempts even a case falling to 0 passes gives p {best:.3g}, and "
                    f"{'Holm over ' + str(len([c for c in cmp.cases if c.verdict != 'insufficient'])) + ' cases needs' if cmp.correction != 'none' else 'the test needs'} "
                    f"p < {needed:.3g}; repeat each case more, baseline too: --repeat {repeats or '200+'} at least for a case that fell "
                    "from always to never passing to be found, more for smaller drops"
                )
        lines += _improved_lines(cmp)
    return "\n".join(lines)


def _verdict_cell(v: CaseVerdict) -> str:
    # p_adj is the drop test's: an improved case names its own test's p beside its verdict.
    if v.verdict == "improved" and v.p_adjusted_improved is not None:
        return f"improved (rise: adjusted p {v.p_adjusted_improved:.3g})"
    return v.verdict.upper() if v.verdict == "regressed" else v.verdict


def _improved_lines(cmp: Comparison) -> list[str]:
    """The cases that improved, said beside the verdict and not only in a table row: a better version is news too."""
    improved = [v for v in cmp.cases if v.verdict == "improved"]
    if not improved:
        return []
    return [
        f"IMPROVED: {len(improved)} case(s) rose by more than {cmp.threshold * 100:.0f} points with adjusted p < {cmp.alpha:g} (does not change the exit code):",
        *(
            f"  + {v.id} ({v.category}): pass rate {_pct(v.baseline_pass_rate)} -> {_pct(v.pass_rate)} "
            f"({v.baseline_counts[0]}/{v.baseline_counts[1]} -> {v.counts[0]}/{v.counts[1]}, adjusted p = {v.p_adjusted_improved:.3g})"
            for v in improved
        ),
    ]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _format_extras(run: RegressRun, width: int) -> list[str]:
    lines = format_paraphrases(run.paraphrases, width) if run.paraphrases is not None else []
    if run.multi_turn == "dynamic":
        lines.append(
            "\n  multi-turn cases replayed dynamically: the scripted user turns, with the candidate's own answers fed back"
        )
    return lines


def format_paraphrases(report: ParaphraseReport, width: int) -> list[str]:
    lines = [
        "",
        f"  prompt sensitivity: {report.k} rewording(s) of each case's last user message; "
        f"spread of the wordings' mean scores; a verdict flips when a rewording's pass rate crosses {report.pass_threshold:.0%}",
        f"  {'case':<{width}} {'min':>6} {'max':>6} {'range':>6} {'std':>6}  verdicts",
    ]
    for c in report.cases:
        original = c.variants[0].passed
        verdicts = " ".join("-" if v.passed is None else ("pass" if v.passed else "fail") for v in c.variants)
        flag = "  FLIPS" if c.flips else ""
        lines.append(
            f"  {c.id:<{width}} {_num(c.score_min):>6} {_num(c.score_max):>6} {_num(c.score_range):>6} {_num(c.score_std):>6}  "
            f"{verdicts} (original {'-' if original is None else ('pass' if original else 'fail')}){flag}"
        )
    for v in report.versions:
        rng = "" if v.range_ci is None else f" ({report.confidence:.0%} CI {v.range_ci[0]:.3f}-{v.range_ci[1]:.3f})"
        flips = (
            "-"
            if v.flip_share is None or v.flip_ci is None
            else f"{v.n_flipped} of {v.cases} = {v.flip_share:.1%} ({report.confidence:.0%} CI {v.flip_ci[0]:.1%}-{v.flip_ci[1]:.1%})"
        )
        lines.append(
            f"  version {v.model_version}: {v.cases} case(s); mean range {_num(v.mean_range)}{rng}, mean std {_num(v.mean_std)}; "
            f"verdict flips in {flips}"
        )
    if report.source != "built-in":
        why = "; ".join(f"{k} x{n}" for k, n in report.model_errors.items()) or "-"
        lines.append(
            f"  rewordings from {report.source}; built-in ones made up for {report.model_fallbacks} case(s) ({why})"
        )
    if report.max_flip_share is not None:
        state = "FAILED" if report.gate_failed else "ok"
        lines.append(f"  paraphrase gate (--paraphrase-max-flips {report.max_flip_share:g}): {state}")
    return lines


def check_settings(settings: RunSettings, threshold: float) -> None:
    """Refuse bad options before the suite is read or any call made (exit 2)."""
    if settings.repeat < 1:
        raise RegressError("--repeat must be at least 1")
    if settings.concurrency < 1:
        raise RegressError("--concurrency must be at least 1")
    if bool(settings.judge_url) != bool(settings.judge_model):
        raise RegressError("the judge needs both --judge-url and --judge-model")
    if settings.judge_url:
        # Else every attempt's judge call fails: the judge check is `error` on every case, a typo
        # found only in the report after the whole suite ran.
        _require_http_url("--judge-url", settings.judge_url)
    if not 0 <= threshold < 1:
        raise RegressError(f"--threshold must be in [0, 1), got {threshold}")
    if not 0 < settings.confidence < 1:
        raise RegressError(f"--confidence must be in (0, 1), e.g. 0.95, got {settings.confidence}")
    if settings.early_stop and settings.min_repeat < 1:
        raise RegressError("--min-repeat must be at least 1")
    if not 0 < settings.pass_threshold < 1:
        raise RegressError(f"--pass-threshold must be in (0, 1), got {settings.pass_threshold}")
    _check_paraphrase_settings(settings)
    if not 1 <= settings.max_turns <= MAX_TURNS:
        raise RegressError(f"--max-turns must be 1 to {MAX_TURNS}, got {settings.max_turns}")


def _check_paraphrase_settings(settings: RunSettings) -> None:
    """check_settings' part for --paraphrases and its options."""
    if not 0 <= settings.paraphrases <= MAX_PARAPHRASES:
        raise RegressError(
            f"--paraphrases must be 0 to {MAX_PARAPHRASES} (each rewording costs as many calls as the case), got {settings.paraphrases}"
        )
    if settings.paraphrase_max_flips is not None:
        if not settings.paraphrases:
            raise RegressError("--paraphrase-max-flips needs --paraphrases K (K >= 1): there is nothing to flip")
        if not 0 <= settings.paraphrase_max_flips < 1:
            raise RegressError(f"--paraphrase-max-flips must be in [0, 1), got {settings.paraphrase_max_flips}")
    if bool(settings.paraphrase_url) != bool(settings.paraphrase_model):
        raise RegressError("rewording by a model needs both --paraphrase-url and --paraphrase-model")
    if settings.paraphrase_url and not settings.paraphrases:
        raise RegressError("--paraphrase-url needs --paraphrases K (K >= 1): how many rewordings to ask for")
    if settings.paraphrase_url:
        # Else every case's call fails and built-in rewordings stand in, the typo only a count in the report.
        _require_http_url("--paraphrase-url", settings.paraphrase_url)


def _require_http_url(option: str, url: str) -> None:
    """Refuse a value of `option` that is not an http(s) URL with a host, naming the option.

    The value is shown without its credentials (`user:pw@`, with or without a scheme) and without
    its query and fragment, where keys travel too (`?api-key=`)."""
    try:
        parts = urlsplit(url)
        # `.port` raises ValueError for a port that is no number.
        ok = (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and not re.search(r"\s", url)
            and (parts.port is None or parts.port >= 0)
        )
    except ValueError:
        ok = False
    if not ok:
        shown = re.split(r"[?#]", url, maxsplit=1)[0]
        if "@" in shown:
            scheme = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", shown)
            shown = (scheme.group(0) if scheme else "") + "***@" + shown.rsplit("@", 1)[1]
        raise RegressError(f"{option}: expected an http(s) URL such as http://127.0.0.1:8000, got {shown!r}")


def regress(
    suite_path: str,
    settings: RunSettings,
    *,
    baseline_path: str | None = None,
    out_path: str | None = None,
    threshold: float = 0.2,
    alpha: float = 0.05,
    correction: str = "holm",
    progress: bool | None = None,
) -> tuple[RegressRun, int]:
    """Run the suite; (run, exit code): 0 no regression, 1 regression. RegressError for exit 2."""
    check_settings(settings, threshold)
    suite = load_suite(suite_path)
    if settings.multi_turn == "dynamic":
        check_turns(suite, settings.max_turns)
    baseline = None
    if baseline_path is not None:
        baseline = load_run(baseline_path)
        # Before any call: a refused comparison must not cost a full run.
        check_same_suite(suite, baseline, baseline_path)
        if baseline.multi_turn != settings.multi_turn:
            raise RegressError(
                f"the baseline run {baseline_path} replayed multi-turn cases {baseline.multi_turn}, this run would replay them "
                f"{settings.multi_turn}: their pass rates are not comparable. Run with --multi-turn {baseline.multi_turn}, "
                f"or make a new baseline with --multi-turn {settings.multi_turn}"
            )
    started = time.perf_counter()
    lines = decision_lines(suite, baseline, threshold=threshold, pass_threshold=settings.pass_threshold)
    prepared = asyncio.run(prepare_rewordings(suite, settings))
    attempts = asyncio.run(run_attempts(suite, settings, progress=progress, lines=lines, variants=prepared.variants))
    if attempts and all(a.result == "upstream_error" for a in attempts):
        raise RegressError(
            f"no call to {openai_base_url(settings.upstream)} succeeded (first error: {attempts[0].error}); is the endpoint up and the model name right?"
        )
    run = build_run(suite, settings, attempts, time.perf_counter() - started, prepared)
    if baseline is not None and baseline_path is not None:
        run.comparison = compare_runs(
            run.cases, baseline, baseline_path, threshold=threshold, alpha=alpha, correction=correction
        )
    if out_path:
        write_run(run, out_path)
    code = 1 if run.comparison is not None and run.comparison.regressed else 0
    if run.paraphrases is not None and run.paraphrases.gate_failed:
        code = 1  # only with --paraphrase-max-flips: by default rewordings are reported, never a failure
    log.info(
        "regress_done",
        cases=len(suite.cases),
        calls=len(attempts),
        regressed=len(run.comparison.regressed) if run.comparison else None,
    )
    return run, code
