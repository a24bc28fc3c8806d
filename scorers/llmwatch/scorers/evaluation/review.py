"""Blind human review of two model versions: export paired tasks, import reviews, unblind, agree.

Export (`llmwatch review export`) draws a stratified sample of live traffic of two versions:

* failing: any check failed on either answer;
* edge: request text or answer length outside the 10th-90th percentile of the candidates, a
  finish reason other than `stop`, or a request with tools;
* typical: everything else.

Quotas are 50% typical, 25% edge, 25% failing of `--n`; a stratum short of pairs gives its share
to the others. Answers are paired on the same normalised prompt when both versions answered it,
else within the same task category (same stratum first). Each task shows the two answers as
candidates "A" and "B" in an order drawn per task, and nothing else that names a model
(no model, version, sample id, fingerprint). The mapping goes to a key file beside the tasks
(`tasks.jsonl` -> `tasks.key.json`), which also records the tasks file's SHA-256, so the key
cannot be applied to other tasks by mistake, and any judge-check value of each answer for the
calibration table.

Import (`llmwatch review import`) validates every review line (errors name line and field),
unblinds, and computes per criterion Krippendorff's alpha (ordinal by default, or interval)
over all reviewers, and Cohen's quadratic-weighted kappa for every pair of reviewers on the
items both rated. A task is disputed when two reviewers' scores for the same candidate and
criterion differ by 2 or more, or one prefers A and another B (a tie disputes nothing). The
preferred candidate is the review's `preferred` field, else the one with the higher mean score.
Higher scores are better on every criterion (hallucination 5 = none).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import combinations
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from llmwatch.core.errors import describe_validation_error
from llmwatch.core.jsonio import atomic_write_bytes, read_file_bytes, read_model
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score
from llmwatch.core.wire import content_to_text
from llmwatch.scorers.evaluation.matrix import Category, categorize, request_messages, request_text
from llmwatch.scorers.evaluation.stability import prompt_hash
from llmwatch.scorers.stats.agreement import cohen_kappa, krippendorff_alpha

__all__ = [
    "ReviewError",
    "export_tasks",
    "export_pair_tasks",
    "export_judge_tasks",
    "import_reviews",
    "key_path_for",
    "format_import",
    "dispute_reasons",
    "preference",
    "load_tasks",
    "load_reviews",
    "Review",
    "ReviewTask",
]

TASK_SCHEMA = "llmwatch.review-task/v1"
KEY_SCHEMA = "llmwatch.review-key/v1"
REPORT_SCHEMA = "llmwatch.review-report/v1"
DEFAULT_CRITERIA = ("accuracy", "completeness", "hallucination")
STRATA = ("typical", "edge", "failing")
QUOTAS = {"typical": 0.5, "edge": 0.25, "failing": 0.25}
Label = Literal["A", "B"]
LABELS: tuple[Label, ...] = ("A", "B")
INSTRUCTIONS = (
    "Two answers, A and B, to the same kind of request. Score each answer on every criterion from 1 (worst) "
    "to 5 (best); for hallucination, 5 means nothing invented. Optionally say which you prefer "
    '("preferred": "A", "B" or "tie"). The models behind A and B are hidden on purpose.'
)


class ReviewError(RecordError):
    """Review input that cannot be used; the message names the file, line and field."""

    label = ""  # the CLI has always printed these as "llmwatch: <message>", without "bad input: "


# --- records -----------------------------------------------------------------------------------


class Candidate(BaseModel):
    answer: str
    prompt: list[dict[str, str]] | None = None  # only when the two candidates answered different prompts


class ReviewTask(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    schema_: str = Field(default=TASK_SCHEMA, alias="schema")
    task_id: str
    category: str
    stratum: str
    same_prompt: bool
    prompt: list[dict[str, str]] | None = None
    candidates: dict[str, Candidate]
    criteria: list[str]
    scale: tuple[int, int] = (1, 5)
    instructions: str = INSTRUCTIONS


class KeyEntry(BaseModel):
    model_version: str
    sample_id: str
    judge: float | None = None


class ReviewKey(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    schema_: str = Field(default=KEY_SCHEMA, alias="schema")
    created_at: datetime
    tasks_file: str
    tasks_sha256: str
    versions: list[str]
    seed: int | None
    criteria: list[str]
    tasks: dict[str, dict[str, KeyEntry]]


class Review(BaseModel):
    # Reviewing tools add their own fields (timestamps, ids); only these are read.
    model_config = ConfigDict(extra="ignore")
    task_id: str = Field(min_length=1)
    category: str | None = None
    candidates: list[Literal["A", "B"]] = Field(min_length=2, max_length=2)
    scores: dict[Literal["A", "B"], dict[str, StrictInt]]
    judge: str = Field(min_length=1)
    blind: bool
    preferred: Literal["A", "B", "tie"] | None = None
    comment: str | None = None


def key_path_for(tasks_path: str | os.PathLike[str]) -> Path:
    """tasks.jsonl -> tasks.key.json, in the same directory."""
    p = Path(tasks_path)
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    return p.with_name(stem + ".key.json")


# --- export ------------------------------------------------------------------------------------


@dataclass
class ExportSummary:
    tasks_path: Path
    key_path: Path
    n_tasks: int
    by_stratum: dict[str, int]
    same_prompt: int
    available: dict[str, int]


def _messages_for_review(request: Any) -> list[dict[str, str]]:
    return [
        {"role": str(m.get("role", "user")), "content": content_to_text(m.get("content"))}
        for m in request_messages(request)
    ]


def _percentile_edges(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(np.percentile(arr, 10)), float(np.percentile(arr, 90))


_SEVERITY = {s: i for i, s in enumerate(STRATA)}


@dataclass
class ExportScan:
    """What a blind round is drawn from, a few dozen bytes per sample (issue 29): one pass over the
    samples keeps, per reviewable sample of the two versions, its position in the input, version,
    category, prompt hash, prompt and answer lengths and whether it is unusual; the scores add
    which samples failed a check and their judge values. No Sample is kept: the chosen ones are read
    again by position (`export_from_scan`). Sample ids are held as their in-process hashes.
    """

    versions: tuple[str, str]
    n_samples: int = 0
    found: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ids: set[int] = field(default_factory=set)  # hash of every sample id (scores of other samples are not read)
    seq: array = field(default_factory=lambda: array("q"))  # pool: the sample's position in the input
    id_hash: array = field(default_factory=lambda: array("q"))
    version: array = field(default_factory=lambda: array("b"))  # 0 or 1: index in `versions`
    category: array = field(default_factory=lambda: array("i"))  # index in `category_names`
    prompt: array = field(default_factory=lambda: array("q"))  # prompt hash, first 64 bits
    prompt_len: array = field(default_factory=lambda: array("q"))
    answer_len: array = field(default_factory=lambda: array("q"))
    unusual: array = field(default_factory=lambda: array("b"))
    category_names: list[str] = field(default_factory=list)
    failing: set[int] = field(default_factory=set)  # id hashes with a failed check
    judge: dict[int, float] = field(default_factory=dict)
    score_checks: set[str] = field(default_factory=set)  # checks of the scores of these samples

    def add_samples(self, samples: Iterable[Sample], categories: Sequence[Category], default_category: str) -> None:
        codes: dict[str, int] = {name: i for i, name in enumerate(self.category_names)}
        for s in samples:
            self.n_samples += 1
            h = hash(s.id)
            self.ids.add(h)
            version = s.model_version or "unknown"
            self.found[version] += 1
            if version not in self.versions or not (0 < s.status < 400):
                continue
            answer = s.answer_text()
            if not answer.strip():
                continue
            name = categorize(s, categories, default_category)
            code = codes.get(name)
            if code is None:
                code = codes[name] = len(self.category_names)
                self.category_names.append(name)
            tools = isinstance(s.request, dict) and bool(s.request.get("tools"))
            self.seq.append(self.n_samples - 1)
            self.id_hash.append(h)
            self.version.append(self.versions.index(version))
            self.category.append(code)
            self.prompt.append(int(prompt_hash(s.request)[:16], 16) - 2**63)
            self.prompt_len.append(len(request_text(s.request)))
            self.answer_len.append(len(answer))
            self.unusual.append(s.finish_reason not in (None, "stop") or tools)

    def add_scores(self, scores: Iterable[Score]) -> None:
        for sc in scores:
            h = hash(sc.sample_id)
            if h not in self.ids:
                continue
            self.score_checks.add(sc.check)
            if sc.result == "fail":
                self.failing.add(h)
            if sc.kind == "judge" and sc.value is not None:
                self.judge[h] = sc.value

    def strata(self) -> list[str]:
        """Each pool sample's stratum: failing, edge (lengths outside the 10th-90th percentile of
        the pool, a finish reason other than stop, tools) or typical."""
        n = len(self.seq)
        if not n:
            return []
        plo, phi = _percentile_edges(np.frombuffer(self.prompt_len, dtype=np.int64))
        alo, ahi = _percentile_edges(np.frombuffer(self.answer_len, dtype=np.int64))
        out = []
        for i in range(n):
            pl, al = self.prompt_len[i], self.answer_len[i]
            # Strict inequalities: with few distinct lengths the percentiles are the lengths themselves.
            if self.id_hash[i] in self.failing:
                out.append("failing")
            elif pl < plo or pl > phi or al < alo or al > ahi or self.unusual[i]:
                out.append("edge")
            else:
                out.append("typical")
        return out


def _pairs(scan: ExportScan, strata: Sequence[str], rng: random.Random) -> list[tuple[int, int, bool]]:
    """Pool indices paired: the same prompt when both versions answered it, else within a category."""
    first = [i for i in range(len(scan.seq)) if scan.version[i] == 0]
    second = [i for i in range(len(scan.seq)) if scan.version[i] == 1]
    rng.shuffle(first)
    rng.shuffle(second)
    out: list[tuple[int, int, bool]] = []
    used: set[int] = set()
    by_prompt: dict[int, list[int]] = defaultdict(list)
    for i in second:
        by_prompt[scan.prompt[i]].append(i)
    for i in first:
        partners = by_prompt.get(scan.prompt[i])
        while partners and partners[-1] in used:
            partners.pop()
        if partners:
            other = partners.pop()
            used.update((i, other))
            out.append((i, other, True))
    del by_prompt
    rest_a: dict[str, list[int]] = defaultdict(list)
    rest_b: dict[str, list[int]] = defaultdict(list)
    for i in first:
        if i not in used:
            rest_a[scan.category_names[scan.category[i]]].append(i)
    for i in second:
        if i not in used:
            rest_b[scan.category_names[scan.category[i]]].append(i)
    for category in sorted(rest_a):
        a_side = sorted(rest_a[category], key=lambda i: -_SEVERITY[strata[i]])
        b_side = sorted(rest_b.get(category, []), key=lambda i: -_SEVERITY[strata[i]])
        out.extend((x, y, False) for x, y in zip(a_side, b_side))
    return out


def _select(pairs: list[tuple[int, int, bool]], strata: Sequence[str], n: int) -> list[tuple[int, int, bool, str]]:
    by_stratum: dict[str, list[tuple[int, int, bool]]] = defaultdict(list)
    for p in pairs:
        by_stratum[max((strata[p[0]], strata[p[1]]), key=_SEVERITY.__getitem__)].append(p)
    for items in by_stratum.values():
        items.sort(key=lambda p: not p[2])  # same-prompt pairs first: the fairest comparison
    want = {s: int(round(n * q)) for s, q in QUOTAS.items()}
    want["typical"] = n - want["edge"] - want["failing"]
    chosen: list[tuple[int, int, bool, str]] = []
    for s in STRATA:
        take = by_stratum[s][: want[s]]
        chosen.extend((*p, s) for p in take)
        del by_stratum[s][: len(take)]
    for s in STRATA:
        items = by_stratum[s][: max(n - len(chosen), 0)]
        chosen.extend((*p, s) for p in items)
    return chosen


def export_tasks(
    samples: Sequence[Sample],
    scores: Sequence[Score],
    categories: Sequence[Category],
    *,
    versions: tuple[str, str],
    n: int,
    out_path: str | os.PathLike[str],
    seed: int | None = None,
    criteria: Sequence[str] = DEFAULT_CRITERIA,
    default_category: str = "uncategorized",
) -> ExportSummary:
    """`export_from_scan` over samples and scores in memory."""
    scan = ExportScan(versions)
    scan.add_samples(samples, categories, default_category)
    scan.add_scores(scores)
    return export_from_scan(
        scan, lambda: samples, versions=versions, n=n, out_path=out_path, seed=seed, criteria=criteria
    )


def export_from_scan(
    scan: ExportScan,
    reread: Callable[[], Iterable[Sample]],
    *,
    versions: tuple[str, str],
    n: int,
    out_path: str | os.PathLike[str],
    seed: int | None = None,
    criteria: Sequence[str] = DEFAULT_CRITERIA,
) -> ExportSummary:
    """Draw the round from `scan` and write it; `reread` yields the same samples again, in the same
    order, and only the chosen ones (at most 2 * n) are kept from it."""
    if versions[0] == versions[1]:
        raise ReviewError(f"--versions needs two different versions, got {versions[0]!r} twice")
    if n < 1:
        raise ReviewError("--n must be at least 1")
    for side, v in enumerate(versions):
        if side not in scan.version:
            raise ReviewError(
                f"no reviewable sample (successful, with an answer) of version {v!r}; versions in the samples: {', '.join(f'{k} ({n})' for k, n in sorted(scan.found.items())) or 'none'}"
            )
    strata = scan.strata()
    rng = random.Random(seed)
    chosen = _select(_pairs(scan, strata, rng), strata, n)
    if not chosen:
        raise ReviewError(
            f"no pair of answers of versions {versions[0]!r} and {versions[1]!r} in the same task category"
        )
    rng.shuffle(chosen)
    tasks_path, key_path = _round_paths(out_path)
    wanted = {scan.seq[i] for a, b, _, _ in chosen for i in (a, b)}
    kept: dict[int, Sample] = {}
    for position, sample in enumerate(reread()):
        if position in wanted:
            kept[position] = sample
    if len(kept) != len(wanted):
        raise ReviewError("the samples changed while the review round was drawn from them; run the export again")
    lines = []
    key_tasks: dict[str, dict[str, KeyEntry]] = {}
    counts: dict[str, int] = defaultdict(int)
    same = 0
    for i, (a, b, same_prompt, stratum) in enumerate(chosen, start=1):
        task_id = f"T-{i:04d}"
        order = [a, b] if rng.random() < 0.5 else [b, a]
        cands = {}
        for label, c in zip(LABELS, order):
            sample = kept[scan.seq[c]]
            cands[label] = Candidate(
                answer=sample.answer_text(), prompt=None if same_prompt else _messages_for_review(sample.request)
            )
        task = ReviewTask(
            task_id=task_id,
            category=scan.category_names[scan.category[a]],
            stratum=stratum,
            same_prompt=same_prompt,
            prompt=_messages_for_review(kept[scan.seq[a]].request) if same_prompt else None,
            candidates=cands,
            criteria=list(criteria),
        )
        lines.append(orjson.dumps(task.model_dump(mode="json", by_alias=True, exclude_none=True)))
        key_tasks[task_id] = {
            label: KeyEntry(
                model_version=versions[scan.version[c]],
                sample_id=kept[scan.seq[c]].id,
                judge=scan.judge.get(scan.id_hash[c]),
            )
            for label, c in zip(LABELS, order)
        }
        counts[stratum] += 1
        same += same_prompt
    _write_round(tasks_path, key_path, lines, key_tasks, versions=list(versions), seed=seed, criteria=criteria)
    available: defaultdict[str, int] = defaultdict(int)
    for stratum in strata:
        available[stratum] += 1
    return ExportSummary(tasks_path, key_path, len(chosen), dict(counts), same, dict(available))


def _round_paths(out_path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The tasks file and its key; refused when a key is already there (it unblinds an earlier round)."""
    tasks_path = Path(out_path)
    key_path = key_path_for(tasks_path)
    if key_path.exists():
        raise ReviewError(
            f"{key_path} already exists: it unblinds an earlier round; choose another --out (or remove it once that round is imported)"
        )
    return tasks_path, key_path


def _write_round(
    tasks_path: Path,
    key_path: Path,
    lines: list[bytes],
    key_tasks: dict[str, dict[str, KeyEntry]],
    *,
    versions: list[str],
    seed: int | None,
    criteria: Sequence[str],
) -> None:
    """The blind tasks file, then the key that unblinds it, which pins the tasks file's checksum; if the
    key cannot be written (a full disk), the tasks file is put back as it was: tasks without their key
    were left behind, a round nobody could unblind."""
    body = b"\n".join(lines) + b"\n"
    before = tasks_path.read_bytes() if tasks_path.is_file() else None
    atomic_write_bytes(tasks_path, body)
    try:
        _write_key(tasks_path, key_path, body, key_tasks, versions=versions, seed=seed, criteria=criteria)
    except BaseException:
        if before is None:
            tasks_path.unlink(missing_ok=True)
        else:
            atomic_write_bytes(tasks_path, before)
        raise


def _write_key(
    tasks_path: Path,
    key_path: Path,
    body: bytes,
    key_tasks: dict[str, dict[str, KeyEntry]],
    *,
    versions: list[str],
    seed: int | None,
    criteria: Sequence[str],
) -> None:
    key = ReviewKey(
        created_at=datetime.now(timezone.utc),
        tasks_file=tasks_path.name,
        tasks_sha256=hashlib.sha256(body).hexdigest(),
        versions=versions,
        seed=seed,
        criteria=list(criteria),
        tasks=key_tasks,
    )
    atomic_write_bytes(key_path, orjson.dumps(key.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2))


def export_pair_tasks(
    pairs: Sequence[Any],
    *,
    n: int,
    out_path: str | os.PathLike[str],
    seed: int | None = None,
    criteria: Sequence[str] = DEFAULT_CRITERIA,
    default_category: str = "uncategorized",
) -> ExportSummary:
    """Blind tasks from shadow-evaluation pairs (`llmwatch.pair/v1`): both answers to one prompt.

    The two sides are the key's versions `primary` and the candidate's name (a candidate can serve
    the same model_version label as the primary). Pairs where a side failed or gave no answer are
    left out; pairs where the two sides disagree on a check are the `failing` stratum, up to its quota.
    """
    if n < 1:
        raise ReviewError("--n must be at least 1")
    names = sorted({p.candidate for p in pairs})
    if len(names) != 1:
        raise ReviewError(
            f"--pairs holds pairs of {len(names)} candidates ({', '.join(names) or 'none'}); export one at a time with --candidate"
        )
    candidate = names[0]
    if candidate == "primary":
        raise ReviewError(
            "a candidate named 'primary' cannot be told from the primary in a review; rename it in shadow.candidates"
        )
    usable = []
    for p in pairs:
        if not all(0 < s.status < 400 and s.answer_text().strip() for s in (p.primary, p.shadow)):
            continue
        prim = {sc.check: sc.result for sc in p.primary_scores}
        disagree = any(
            prim.get(sc.check) in ("pass", "fail") and sc.result in ("pass", "fail") and prim[sc.check] != sc.result
            for sc in p.shadow_scores
        )
        usable.append((p, "failing" if disagree else "typical"))
    if not usable:
        raise ReviewError("no reviewable pair (both sides answered, status < 400)")
    rng = random.Random(seed)
    rng.shuffle(usable)
    failing = [u for u in usable if u[1] == "failing"][: max(1, int(n * QUOTAS["failing"]))]
    rest = [u for u in usable if u not in failing]
    chosen = (failing + rest)[:n]
    rng.shuffle(chosen)
    tasks_path, key_path = _round_paths(out_path)
    lines = []
    key_tasks: dict[str, dict[str, KeyEntry]] = {}
    counts: dict[str, int] = defaultdict(int)
    for i, (pair, stratum) in enumerate(chosen, start=1):
        task_id = f"T-{i:04d}"
        sides = [("primary", pair.primary), (candidate, pair.shadow)]
        if rng.random() < 0.5:
            sides.reverse()
        task = ReviewTask(
            task_id=task_id,
            category=pair.category or default_category,
            stratum=stratum,
            same_prompt=True,
            prompt=_messages_for_review(pair.primary.request),
            candidates={label: Candidate(answer=sample.answer_text()) for label, (_, sample) in zip(LABELS, sides)},
            criteria=list(criteria),
        )
        lines.append(orjson.dumps(task.model_dump(mode="json", by_alias=True, exclude_none=True)))
        key_tasks[task_id] = {
            label: KeyEntry(model_version=version, sample_id=sample.id)
            for label, (version, sample) in zip(LABELS, sides)
        }
        counts[stratum] += 1
    _write_round(tasks_path, key_path, lines, key_tasks, versions=["primary", candidate], seed=seed, criteria=criteria)
    available: dict[str, int] = defaultdict(int)
    for _, stratum in usable:
        available[stratum] += 1
    return ExportSummary(tasks_path, key_path, len(chosen), dict(counts), len(chosen), dict(available))


JUDGE_INSTRUCTIONS = (
    "Two answers, A and B, each to its own request: rate each on its own, they are not compared. Score each "
    "answer on every criterion from 1 (worst) to 5 (best); on a pass/fail criterion give 5 for pass and 1 for "
    "fail. The criteria: {criteria}"
)


def export_judge_tasks(
    samples: Sequence[Sample],
    *,
    n: int,
    out_path: str | os.PathLike[str],
    seed: int | None = None,
) -> ExportSummary:
    """Blind tasks from the live judge's spot checks (`<data_dir>/judge/spot-check-*.jsonl`).

    Each spot-checked sample carries the criteria it was judged on (`metadata.judge_criteria`) and
    its category (`metadata.judge_category`). People rate every answer on those criteria, 1-5,
    without seeing the judge's verdicts; `llmwatch judge calibrate` joins the two. Two samples of
    the same category and criteria share a task (as candidates A and B, each with its own prompt)
    because a task holds two answers; an odd one out pairs within its criteria across categories.
    """
    if n < 1:
        raise ReviewError("--n must be at least 1")
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[Sample, list[dict[str, Any]]]]] = defaultdict(list)
    for s in samples:
        meta = s.metadata if isinstance(s.metadata, dict) else {}
        criteria = meta.get("judge_criteria")
        if not isinstance(criteria, list) or not criteria or not s.answer_text().strip():
            continue
        specs = [c for c in criteria if isinstance(c, dict) and isinstance(c.get("name"), str)]
        if not specs:
            continue
        category = str(meta.get("judge_category") or "uncategorized")
        groups[(category, tuple(c["name"] for c in specs))].append((s, specs))
    if not groups:
        raise ReviewError(
            "no spot-checked sample with an answer and its judge criteria; is judge.spot_check_rate above 0, and did the judge run?"
        )
    rng = random.Random(seed)
    chosen: list[tuple[str, tuple[Sample, list[dict[str, Any]]], tuple[Sample, list[dict[str, Any]]]]] = []
    leftovers: dict[tuple[str, ...], list[tuple[str, tuple[Sample, list[dict[str, Any]]]]]] = defaultdict(list)
    for (category, names), items in sorted(groups.items()):
        rng.shuffle(items)
        for i in range(0, len(items) - 1, 2):
            chosen.append((category, items[i], items[i + 1]))
        if len(items) % 2:
            leftovers[names].append((category, items[-1]))
    for _names, odd in sorted(leftovers.items()):
        for i in range(0, len(odd) - 1, 2):
            chosen.append((odd[i][0], odd[i][1], odd[i + 1][1]))
    if not chosen:
        raise ReviewError("fewer than two spot-checked samples with the same criteria: nothing to pair into a task")
    rng.shuffle(chosen)
    chosen = chosen[: max(1, (n + 1) // 2)]
    tasks_path, key_path = _round_paths(out_path)
    lines = []
    key_tasks: dict[str, dict[str, KeyEntry]] = {}
    counts: dict[str, int] = defaultdict(int)
    all_criteria: list[str] = []
    versions: list[str] = []
    for i, (category, first, second) in enumerate(chosen, start=1):
        task_id = f"T-{i:04d}"
        specs = first[1]
        criterion_names = [str(c["name"]) for c in specs]
        all_criteria.extend(c for c in criterion_names if c not in all_criteria)
        described = "; ".join(f"{c['name']}: {c.get('description', '')}".strip() for c in specs)
        task = ReviewTask(
            task_id=task_id,
            category=category,
            stratum="spot_check",
            same_prompt=False,
            candidates={
                label: Candidate(answer=s.answer_text(), prompt=_messages_for_review(s.request))
                for label, (s, _) in zip(LABELS, (first, second))
            },
            criteria=criterion_names,
            instructions=JUDGE_INSTRUCTIONS.format(criteria=described),
        )
        lines.append(orjson.dumps(task.model_dump(mode="json", by_alias=True, exclude_none=True)))
        key_tasks[task_id] = {
            label: KeyEntry(model_version=s.model_version or "unknown", sample_id=s.id)
            for label, (s, _) in zip(LABELS, (first, second))
        }
        for s, _ in (first, second):
            if (s.model_version or "unknown") not in versions:
                versions.append(s.model_version or "unknown")
        counts["spot_check"] += 1
    _write_round(tasks_path, key_path, lines, key_tasks, versions=versions, seed=seed, criteria=all_criteria)
    available = sum(len(v) for v in groups.values())
    return ExportSummary(tasks_path, key_path, len(chosen), dict(counts), 0, {"spot_check": available})


# --- import ------------------------------------------------------------------------------------


def _read_lines(path: Path, what: str) -> list[tuple[int, Any]]:
    raw = read_file_bytes(path, what=what, error=ReviewError, directory="give the .jsonl file itself")
    out = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((lineno, orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            raise ReviewError(f"{path}:{lineno}: not valid JSON ({exc}); each line must be one JSON object") from None
    return out


def load_tasks(path: str | os.PathLike[str]) -> tuple[dict[str, ReviewTask], str]:
    source = Path(path)
    tasks = {}
    for lineno, data in _read_lines(source, "tasks file"):
        try:
            task = ReviewTask.model_validate(data)
        except ValidationError as exc:
            raise ReviewError(f"{source}:{lineno}: {describe_validation_error(exc)}") from None
        tasks[task.task_id] = task
    return tasks, hashlib.sha256(source.read_bytes()).hexdigest()


def load_key(path: str | os.PathLike[str]) -> ReviewKey:
    return read_model(
        path,
        ReviewKey,
        what="key file",
        error=ReviewError,
        schema=KEY_SCHEMA,
        kind="an llmwatch review key",
        missing="it was written next to the tasks by `llmwatch review export`",
    )


def load_tasks_and_key(
    tasks_path: str | os.PathLike[str], key_path: str | os.PathLike[str] | None = None
) -> tuple[dict[str, ReviewTask], ReviewKey, str | os.PathLike[str]]:
    """A round's tasks, its key and the key's path (by default the key exported next to the tasks),
    refused when the key was written for another tasks file: for the readers of reviews against a
    judge (calibration, pairwise verdicts)."""
    tasks, digest = load_tasks(tasks_path)
    key_file = key_path or key_path_for(tasks_path)
    key = load_key(key_file)
    if key.tasks_sha256 != digest:
        raise ReviewError(
            f"key file {key_file} was written for another tasks file than {tasks_path} (sha256 differs); give the key exported with it (--key)"
        )
    return tasks, key, key_file


def load_reviews(path: str | os.PathLike[str], tasks: Mapping[str, ReviewTask]) -> list[Review]:  # noqa: C901
    """Every review line validated against its task; all problems reported at once (up to 20)."""
    source = Path(path)
    errors: list[str] = []
    reviews: list[Review] = []
    seen: dict[tuple[str, str], int] = {}
    for lineno, data in _read_lines(source, "reviews file"):
        where = f"{source}:{lineno}"
        if not isinstance(data, dict):
            errors.append(f"{where}: expected a JSON object, got {type(data).__name__}")
            continue
        if data.get("schema") == TASK_SCHEMA:
            # The tasks file given twice: one line that says so, not four missing fields per task.
            raise ReviewError(
                f"{where}: a review task (written by `llmwatch review export`), not a review; give the reviewers' "
                "verdicts (`llmwatch review serve --out`, or one review per line as docs/guide/review.md shows) to --reviews"
            )
        try:
            review = Review.model_validate(data)
        except ValidationError as exc:
            errors.append(f"{where}: {describe_validation_error(exc)}")
            continue
        task = tasks.get(review.task_id)
        if task is None:
            errors.append(f"{where}: field 'task_id': unknown task {review.task_id!r} (not in the tasks file)")
            continue
        if review.category is not None and review.category != task.category:
            errors.append(
                f"{where}: field 'category': {review.category!r} but task {review.task_id} is {task.category!r}; is this review for another tasks file?"
            )
        if sorted(review.candidates) != sorted(task.candidates):
            errors.append(f"{where}: field 'candidates': expected {sorted(task.candidates)}, got {review.candidates}")
        lo, hi = task.scale
        # The task's labels are plain text; the review's are the two it can hold.
        scores_by_label: dict[str, dict[str, int]] = {str(k): v for k, v in review.scores.items()}
        for label in task.candidates:
            given = scores_by_label.get(label)
            if given is None:
                errors.append(f"{where}: field 'scores.{label}': missing; score every candidate")
                continue
            for criterion in task.criteria:
                if criterion not in given:
                    errors.append(
                        f"{where}: field 'scores.{label}.{criterion}': missing; criteria of this task: {', '.join(task.criteria)}"
                    )
                elif not lo <= given[criterion] <= hi:
                    errors.append(
                        f"{where}: field 'scores.{label}.{criterion}': {given[criterion]} is outside the scale {lo}..{hi}"
                    )
            for extra in sorted(set(given) - set(task.criteria)):
                errors.append(
                    f"{where}: field 'scores.{label}.{extra}': unknown criterion; criteria of this task: {', '.join(task.criteria)}"
                )
        dup = (review.task_id, review.judge)
        if dup in seen:
            errors.append(
                f"{where}: field 'judge': reviewer {review.judge!r} already reviewed {review.task_id} on line {seen[dup]}"
            )
        seen[dup] = lineno
        reviews.append(review)
        if len(errors) >= 20:
            break
    if errors:
        raise ReviewError(f"{len(errors)} problem(s) in {source}:\n  " + "\n  ".join(errors))
    if not reviews:
        raise ReviewError(f"{source} holds no reviews")
    return reviews


def _preference(review: Review, criteria: Sequence[str]) -> Label | Literal["tie"]:
    if review.preferred is not None:
        return review.preferred
    means = {label: sum(review.scores[label][c] for c in criteria) / len(criteria) for label in LABELS}
    if means["A"] == means["B"]:
        return "tie"
    return "A" if means["A"] > means["B"] else "B"


def preference(review: Review, criteria: Sequence[str]) -> Label | Literal["tie"]:
    """ "A", "B" or "tie": the review's `preferred`, else the candidate with the higher mean score."""
    return _preference(review, criteria)


def dispute_reasons(reviews: Sequence[Review], criteria: Sequence[str]) -> list[dict[str, Any]]:
    """Why the reviews of one task disagree (empty: they do not): a score gap of 2 or more on a
    candidate and criterion, or one reviewer preferring A and another B. Shared by `review import`
    and the review app's arbitration queue, so that both call the same tasks disputed."""
    if len(reviews) < 2:
        return []
    reasons: list[dict[str, Any]] = []
    for label in LABELS:
        for c in criteria:
            given = {r.judge: r.scores[label][c] for r in reviews}
            if max(given.values()) - min(given.values()) >= 2:
                reasons.append({"kind": "score_gap", "candidate": label, "criterion": c, "scores": given})
    prefs = {r.judge: _preference(r, criteria) for r in reviews}
    if {"A", "B"} <= set(prefs.values()):
        reasons.append({"kind": "preference", "preferences": prefs})
    return reasons


def agreement_reading(alpha: float | None) -> str:
    """Krippendorff's own bounds for his alpha (Content Analysis, 2004, 241): data are relied on at
    0.800 or more, drawn on for tentative conclusions from 0.667, and not relied on below. The
    figure alone (-0.046 when reviewers scored at random) read like a measurement to build on."""
    if alpha is None:
        return "not computable (fewer than two reviews of an item, or no variation)"
    if alpha >= 0.8:
        return "reliable (alpha >= 0.800)"
    if alpha >= 0.667:
        return "tentative conclusions only (0.667 <= alpha < 0.800)"
    return "unreliable (alpha < 0.667): the reviewers disagree too much for their scores on it to decide"


def _nan_to_none(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def import_reviews(  # noqa: C901
    tasks_path: str | os.PathLike[str],
    key_path: str | os.PathLike[str],
    reviews_path: str | os.PathLike[str],
    *,
    level: Literal["ordinal", "interval"] = "ordinal",
    arbitration_path: str | os.PathLike[str] | None = None,
    judge_scores: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """`judge_scores` (sample id -> judge value) override the values recorded in the key at export."""
    tasks, tasks_digest = load_tasks(tasks_path)
    if not tasks:
        raise ReviewError(f"tasks file {tasks_path} holds no tasks")
    key = load_key(key_path)
    if key.tasks_sha256 != tasks_digest:
        raise ReviewError(
            f"key file {key_path} belongs to another tasks file ({key.tasks_file}, sha256 {key.tasks_sha256[:12]}…), not to {tasks_path} (sha256 {tasks_digest[:12]}…)"
        )
    missing = sorted(set(tasks) - set(key.tasks))
    if missing:
        raise ReviewError(f"key file {key_path} has no mapping for task(s) {', '.join(missing[:5])}")
    all_reviews = load_reviews(reviews_path, tasks)
    not_blind = [r for r in all_reviews if not r.blind]
    reviews = [r for r in all_reviews if r.blind]
    criteria = list(key.criteria)
    reviewers = sorted({r.judge for r in reviews})
    lo, hi = next(iter(tasks.values())).scale
    scale = list(range(lo, hi + 1))

    # Agreement: a rated item is (task, candidate), per criterion.
    ratings: dict[str, dict[tuple[str, str], dict[str, int]]] = {c: defaultdict(dict) for c in criteria}
    for r in reviews:
        for label in LABELS:
            for c in criteria:
                ratings[c][(r.task_id, label)][r.judge] = r.scores[label][c]
    agreement = {}
    for c in criteria:
        units = [[item.get(j) for j in reviewers] for item in ratings[c].values()]
        pairs = {}
        for j1, j2 in combinations(reviewers, 2):
            common = [item for item in ratings[c].values() if j1 in item and j2 in item]
            if len(common) >= 2:
                kappa = cohen_kappa([i[j1] for i in common], [i[j2] for i in common], scale, "quadratic")
                pairs[f"{j1}|{j2}"] = {"kappa_quadratic": _nan_to_none(kappa), "n": len(common)}
        alpha = _nan_to_none(krippendorff_alpha(units, level))
        agreement[c] = {
            "krippendorff_alpha": alpha,
            "reading": agreement_reading(alpha),
            "level": level,
            "n_items": sum(1 for u in units if sum(v is not None for v in u) >= 2),
            "cohen_kappa": pairs,
        }

    # Disputes, for arbitration (still blind: no version in the file).
    by_task: dict[str, list[Review]] = defaultdict(list)
    for r in reviews:
        by_task[r.task_id].append(r)
    disputes = []
    for task_id, rs in sorted(by_task.items()):
        reasons = dispute_reasons(rs, criteria)
        if reasons:
            prefs = {r.judge: _preference(r, criteria) for r in rs}
            task = tasks[task_id]
            disputes.append(
                {
                    "task_id": task_id,
                    "category": task.category,
                    "reasons": reasons,
                    "reviews": [
                        {"judge": r.judge, "scores": r.scores, "preferred": prefs[r.judge], "comment": r.comment}
                        for r in rs
                    ],
                    "task": task.model_dump(mode="json", by_alias=True, exclude_none=True),
                }
            )
    arb = (
        Path(arbitration_path)
        if arbitration_path
        # `.disputes.jsonl`: the tasks awaiting arbitration. (It was `.arbitration.jsonl`, next to the
        # review app's `.arbitrated.jsonl` verdicts: two names a reader could not tell apart.)
        else Path(reviews_path).with_name(Path(reviews_path).stem + ".disputes.jsonl")
    )
    atomic_write_bytes(arb, b"".join(orjson.dumps(d) + b"\n" for d in disputes))

    # Unblinded human scores per version and category.
    acc: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    prefs_v: dict[str, dict[str, int]] = {v: {"wins": 0, "ties": 0, "losses": 0} for v in key.versions}
    human_item: dict[tuple[str, str], list[float]] = defaultdict(list)
    net: dict[str, int] = {}  # per task: its reviews preferring the first version minus the second
    for r in reviews:
        mapping = key.tasks[r.task_id]
        category = tasks[r.task_id].category
        for label in LABELS:
            version = mapping[label].model_version
            for c in criteria:
                acc[(version, category, c)].append(r.scores[label][c])
                acc[(version, "all", c)].append(r.scores[label][c])
            human_item[(r.task_id, label)].append(sum(r.scores[label][c] for c in criteria) / len(criteria))
        pref = _preference(r, criteria)
        for label in LABELS:
            version = mapping[label].model_version
            prefs_v.setdefault(version, {"wins": 0, "ties": 0, "losses": 0})
            prefs_v[version]["ties" if pref == "tie" else "wins" if pref == label else "losses"] += 1
        # Only a task of the round's two versions, one a side, says which of them people preferred (a
        # spot-check round holds one version, or three, and may pair a version with itself).
        if len(key.versions) == 2 and {mapping[label].model_version for label in LABELS} == set(key.versions):
            net.setdefault(r.task_id, 0)
            if pref != "tie":
                net[r.task_id] += 1 if mapping[pref].model_version == key.versions[0] else -1
    human: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for (version, category, c), values in sorted(acc.items()):
        human[version][category][c] = {"mean": float(np.mean(values)), "n": len(values)}
    for version in human:
        for category in human[version]:
            cells = human[version][category]
            cells["mean"] = {"mean": float(np.mean([cells[c]["mean"] for c in criteria])), "n": cells[criteria[0]]["n"]}

    # Judge check vs humans.
    pairs_j: list[tuple[float, float]] = []
    for (task_id, side), side_scores in human_item.items():
        entry = key.tasks[task_id][side]
        judge_value = judge_scores.get(entry.sample_id, entry.judge) if judge_scores is not None else entry.judge
        if judge_value is not None:
            pairs_j.append((judge_value, float(np.mean(side_scores))))
    calibration = None
    if pairs_j:
        from scipy import stats as sps

        xs, ys = [p[0] for p in pairs_j], [p[1] for p in pairs_j]
        varied = len(set(xs)) > 1 and len(set(ys)) > 1 and len(xs) >= 3
        table: dict[str, list[float]] = defaultdict(list)
        for x, y in pairs_j:
            table[f"{1 + 4 * x:.0f}"].append(y)  # judge value back on its 1-5 scale
        calibration = {
            "n": len(pairs_j),
            "pearson": float(sps.pearsonr(xs, ys).statistic) if varied else None,
            "spearman": float(sps.spearmanr(xs, ys).statistic) if varied else None,
            "by_judge_score": {k: {"n": len(v), "human_mean": float(np.mean(v))} for k, v in sorted(table.items())},
        }
    return {
        "schema": REPORT_SCHEMA,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "tasks": len(tasks),
        "reviews": len(reviews),
        "excluded_not_blind": [{"task_id": r.task_id, "judge": r.judge} for r in not_blind],
        "reviewers": reviewers,
        "criteria": criteria,
        "versions": key.versions,
        "agreement": agreement,
        "disputed": [d["task_id"] for d in disputes],
        "disputes_file": str(arb),
        "arbitration_file": str(arb),  # the key's earlier name, kept for scripts that read it
        "human_scores": {v: dict(c) for v, c in human.items()},
        "preferences": prefs_v,
        "preference_test": preference_test(net, tuple(key.versions)) if len(key.versions) == 2 else None,
        "judge_calibration": calibration,
    }


def preference_test(net: Mapping[str, int], versions: Sequence[str], alpha: float = 0.05) -> dict[str, Any]:
    """Which version people preferred, task by task, with a two-sided sign test.

    A task counts once, for the version most of its reviews preferred (even when as many preferred
    each): reviews of one task share its prompt and answers, so counting each review as a trial
    would overstate the evidence. Wins and losses per review alone (59 against 48 when reviewers
    chose at random) read as a preference."""
    from scipy.stats import binomtest

    first, second = (sum(1 for v in net.values() if v > 0), sum(1 for v in net.values() if v < 0))
    decided = first + second
    p = float(binomtest(first, decided, 0.5).pvalue) if decided else None
    if p is not None and p < alpha:
        verdict = f"{versions[0] if first > second else versions[1]} preferred"
    else:
        verdict = "no clear preference"
    return {
        "unit": "task (the version most of its reviews preferred)",
        "preferred": {versions[0]: first, versions[1]: second},
        "even": len(net) - decided,
        "test": "two-sided sign test",
        "p_value": p,
        "alpha": alpha,
        "verdict": verdict,
    }


def _f(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def format_import(report: Mapping[str, Any]) -> str:
    crit = report["criteria"]
    lines = [
        f"llmwatch review: {report['reviews']} blind reviews of {report['tasks']} tasks by {len(report['reviewers'])} reviewer(s) ({', '.join(report['reviewers'])}); versions {' vs '.join(report['versions'])}",
    ]
    if report["excluded_not_blind"]:
        lines.append(f"  excluded {len(report['excluded_not_blind'])} review(s) marked blind: false")
    lines += ["", "Agreement per criterion"]
    for c in crit:
        a = report["agreement"][c]
        kappas = (
            ", ".join(f"{pair} {_f(k['kappa_quadratic'])} (n {k['n']})" for pair, k in a["cohen_kappa"].items()) or "-"
        )
        lines.append(
            f"  {c:<16} Krippendorff alpha ({a['level']}) {_f(a['krippendorff_alpha'])} over {a['n_items']} items; Cohen kappa (quadratic) {kappas}"
        )
        lines.append(f"  {'':<16} {a.get('reading') or agreement_reading(a['krippendorff_alpha'])}")
    vw = max([7] + [len(v) for v in report["human_scores"]])
    cw = max([8] + [len(c) for cats in report["human_scores"].values() for c in cats])
    lines += [
        "",
        "Human scores (mean, 1-5) per version and category",
        "  "
        + f"{'version':<{vw}} {'category':<{cw}} "
        + " ".join(f"{c[:13]:>13}" for c in [*crit, "mean"])
        + "      n",
    ]
    for version, cats in report["human_scores"].items():
        for category, cells in sorted(cats.items(), key=lambda kv: (kv[0] != "all", kv[0])):
            lines.append(
                "  "
                + f"{version:<{vw}} {category:<{cw}} "
                + " ".join(f"{cells[c]['mean']:>13.2f}" for c in [*crit, "mean"])
                + f" {cells['mean']['n']:>6}"
            )
    lines += ["", "Preferences (per review)"]
    for version, p in report["preferences"].items():
        lines.append(f"  version {version:<10} wins {p['wins']}, ties {p['ties']}, losses {p['losses']}")
    test = report.get("preference_test")
    if test:
        counts = ", ".join(f"{v} in {n}" for v, n in test["preferred"].items())
        lines.append(
            f"  per task (the version most of its reviews preferred): {counts}, even {test['even']}; "
            f"sign test p {_f(test['p_value'], '.3g')}: {test['verdict']} (alpha {test['alpha']:g})"
        )
    cal = report["judge_calibration"]
    if cal:
        lines += [
            "",
            f"Judge check vs human mean score: n {cal['n']}, Pearson {_f(cal['pearson'])}, Spearman {_f(cal['spearman'])}",
        ]
        for k, v in cal["by_judge_score"].items():
            lines.append(f"  judge {k}: human mean {v['human_mean']:.2f} (n {v['n']})")
    disputed = report["disputed"]
    lines += [
        "",
        f"Disputed: {len(disputed)} task(s){': ' + ', '.join(disputed) if disputed else ''} -> {report['disputes_file']}",
    ]
    return "\n".join(lines)
