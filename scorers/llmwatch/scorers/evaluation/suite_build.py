"""`llmwatch suite build|add|show`: a private, frozen regression suite made from captured traffic.

The material is what the sidecar already stores: redacted samples and their scores. A suite is
written in the format `llmwatch regress` reads (scorers/llmwatch/scorers/evaluation/regress.py, one case per line), with a
manifest beside it (`<name>.manifest.json`) that says which samples each case came from.

How cases are picked (`build_cases`):

1. Candidates: generative samples with a user turn. A prompt that is mostly redaction
   placeholders (`[EMAIL]`, `[PHONE]`, ...; more than `PLACEHOLDER_SHARE` of its words or characters) says
   nothing a model could be tested on: it is left out and counted. Redacted text is copied as
   it is, never restored.
2. Near-duplicates collapse into one candidate: normalised text (case, digits, punctuation and
   spacing folded) compared as word 3-gram shingles with Jaccard >= `text_threshold`, or, with
   the embeddings extra, cosine similarity of the prompts' embeddings >= `embedding_threshold`.
   A candidate keeps every sample of its cluster (the manifest lists them).
3. Each candidate gets the matrix category of its first sample, its failure modes (a check that
   failed, refused, truncated, errored; `confident_unstable`: with `--consistency`, the
   consistency probe's re-ask disagreed with a sure answer that passed the rule checks, the
   hidden error; its manifest entry keeps both answers as context) and its edge reasons (among the longest prompts, a rare
   route or model, a prompt not in Latin script).
4. The suite's size is shared among categories by live traffic share (`mix="traffic"`) or by
   traffic share times the matrix weight (`mix="weighted"`), largest remainder. Inside each
   category the failure and edge quotas come first, the rest is typical traffic; a category
   short of candidates gives its seats to the others in proportion.

Acceptance criteria per case: the rule checks that gave the case's samples a verdict, with the
params the scoring config gave them; a reference answer from a sample of the cluster that passed
every check, when there is one; the category's rubric for a judge. A case without any applied
rule check still gets `not_empty_or_truncated`, so every case says what a good answer is.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import secrets
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, NamedTuple, Sequence

import numpy as np
import orjson

from llmwatch.core.errors import LlmwatchError
from llmwatch.core.jsonio import atomic_write_bytes, check_schema, read_document
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.core.wire import content_to_text
from llmwatch.scorers.checks.config import CheckSpec
from llmwatch.scorers.checks.registry import CHECK_KINDS
from llmwatch.scorers.evaluation.matrix import Category, categorize, request_messages
from llmwatch.scorers.evaluation.regress import RegressError, SuiteCase, load_suite, parse_suite, suite_checksum
from llmwatch.scorers.pipeline.pii import PLACEHOLDERS

MANIFEST_SCHEMA = "llmwatch.suite-manifest/v1"
PLACEHOLDER_SHARE = 0.5
GENERATIVE = ("chat", "text_completion", "generate_content", "responses")
# Request fields a case keeps: they shape the answer. `seed` is left out on purpose: repeats of a
# case must be able to differ, or a pass rate means nothing.
KEPT_PARAMS = (
    "response_format",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "tools",
    "tool_choice",
)
ROLES = ("system", "developer", "user", "assistant", "tool")

RUBRICS: dict[str, str] = {
    "extraction": "5: valid JSON with every requested field, values taken from the input; 3: valid JSON with a field missing or wrong; 1: not JSON or invented values.",
    "code": "5: correct, runnable code or fix that addresses the question; 3: right idea with a bug or a gap; 1: wrong, off-topic or refused.",
    "multi_turn_dialogue": "5: answers the last turn using what was said before; 3: answers the last turn but ignores the context; 1: off-topic or contradicts the conversation.",
    "long_document_summary": "5: faithful summary of the main points, nothing invented; 3: misses a main point; 1: unfaithful or not a summary.",
    "instruction_following": "5: does exactly what was asked, complete and on topic; 3: partly does it; 1: ignores the instruction, refuses a fair request or goes off-topic.",
}
DEFAULT_RUBRIC = "5: a complete, correct, on-topic answer to the request; 3: partly correct or incomplete; 1: wrong, off-topic, empty or a refusal of a fair request."

_PLACEHOLDER_RE = re.compile("|".join(re.escape(p) for p in sorted(set(PLACEHOLDERS.values()))))
_WORD_RE = re.compile(r"\w+")


class SuiteBuildError(LlmwatchError, ValueError):
    """The material or the options cannot make a suite (exit 2); the message says why and the fix."""


# --- per-sample facts ------------------------------------------------------------------------


def prompt_messages(sample: Sample) -> list[dict[str, Any]]:
    """The request's conversation as regress sends it: known roles, text content."""
    out = []
    for m in request_messages(sample.request):
        role = m.get("role", "user")
        if role not in ROLES:
            continue
        text = content_to_text(m.get("content"))
        out.append({"role": role, "content": text})
    return out


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def placeholder_share(text: str) -> float:
    """How much of the prompt is redaction placeholders: the larger of their share of its words
    (a placeholder counts as one word) and of its non-space characters. Either alone misses a
    case: "[EMAIL] [PHONE] thanks" by characters, "mail [EMAIL] or call [PHONE]" by words."""
    found = _PLACEHOLDER_RE.findall(text)
    rest = _PLACEHOLDER_RE.sub(" ", text)
    words = len(found) + len(_WORD_RE.findall(rest))
    chars = sum(len(p) for p in found) + sum(1 for c in rest if not c.isspace())
    if not words or not chars:
        return 1.0
    return max(len(found) / words, sum(len(p) for p in found) / chars)


def normalise(text: str) -> str:
    # Near-duplicates differ in case, numbers, punctuation and spacing ("order 123" / "Order 456!").
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"\d+", "0", text)
    return " ".join(_WORD_RE.findall(text))


def shingles(text: str, k: int = 3) -> frozenset[str]:
    words = normalise(text).split()
    if len(words) < k:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + k]) for i in range(len(words) - k + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def non_latin(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    if len(letters) < 8:
        return False
    other = sum(1 for c in letters if not ("LATIN" in unicodedata.name(c, "") or c.isascii()))
    return other / len(letters) > 0.3


class Verdict(NamedTuple):
    """What a suite needs of a Score: one shared tuple per (check, kind, result), not a Score per sample."""

    check: str
    kind: str
    result: str
    # The one detail a failure mode reads: the consistency probe's confident-but-unstable flag.
    confident_unstable: bool = False


def failure_modes(sample: Sample, scores: Sequence[Score | Verdict]) -> list[str]:
    modes: set[str] = set()
    if sample.status == 0 or sample.status >= 400 or sample.error_type:
        modes.add("errored")
    if sample.finish_reason == "length":
        modes.add("truncated")
    for sc in scores:
        if sc.result != "fail":
            continue
        if sc.kind == "refusal":
            modes.add("refused")
        elif sc.kind == "not_empty_or_truncated":
            modes.add("truncated")
        elif sc.kind == "tool_call":
            modes.add("tool_calls")
        elif sc.kind == "consistency":
            # The probe's verdict (scorers/evaluation/consistency.py): a re-ask that disagreed with a
            # hedged answer, or one a rule check failed, is no hidden error (the hedge or the other
            # check's mode says it); a sure, passing answer the model did not give again is.
            flagged = sc.confident_unstable if isinstance(sc, Verdict) else sc.details.get("confident_unstable")
            if flagged:
                modes.add("confident_unstable")
        else:
            modes.add(f"failed:{sc.check}")
    return sorted(modes)


# --- candidates --------------------------------------------------------------------------------


@dataclass(slots=True)
class Member:
    """A sample of a candidate's cluster: what the manifest and the edge rules read, not the Sample."""

    id: str
    timestamp: datetime
    route: str
    model: str | None
    model_version: str | None
    seq: int  # position in the input: the tie-break of (timestamp, id), as a stable sort has it


@dataclass
class Candidate:
    key: str  # sha256 of the normalised prompt: the case id's stable part
    category: str
    messages: list[dict[str, Any]]
    text: str
    params: dict[str, Any]
    samples: list[Member] = field(default_factory=list)
    scores: dict[str, Sequence[Verdict]] = field(default_factory=dict)
    failure_modes: set[str] = field(default_factory=set)
    edge_reasons: set[str] = field(default_factory=set)
    # Confident-but-unstable samples of the cluster: (sample id, the answer, the re-ask's answer).
    re_asks: list[tuple[str, str, str]] = field(default_factory=list)
    shingles: frozenset[str] = frozenset()
    source: str = "typical"
    # Set by `_unique_ids` when another candidate has the same category and key: two prompts that
    # differ only by a number ("variant 50" / "variant 15") normalise alike, and embeddings may
    # still keep them apart.
    suffix: str = ""
    # The latest answer of the cluster that passed every check that judged it (the case's reference).
    reference: str | None = None

    @property
    def case_id(self) -> str:
        return f"{self.category}-{self.key[:12]}{self.suffix}"


@dataclass
class Material:
    candidates: list[Candidate]
    traffic: Counter[str]  # category -> samples (after the placeholder-only ones are left out)
    n_samples: int
    n_placeholder_only: int
    n_not_generative: int
    n_duplicates: int
    comparisons: int = 0  # similarity computations made to collapse near-duplicates (pinned by a test)


def _params(sample: Sample) -> dict[str, Any]:
    req = sample.request if isinstance(sample.request, dict) else {}
    return {k: req[k] for k in KEPT_PARAMS if k in req and req[k] is not None}


# MinHash LSH over the word 3-gram shingles: a prompt is compared (exact Jaccard) only with the
# representatives that share a band, not with every one that shares a shingle (a common template
# phrase made that quadratic). 20 bands of 4 rows: a pair at Jaccard 0.7 shares a band with
# probability 1 - (1 - 0.7**4)**20 = 0.996, at 0.8 0.99998, at 0.3 0.15, at 0.1 0.002.
#
# A band whose four minima all fall on a phrase most prompts share (a template: "please answer the
# question below") puts many dissimilar representatives in one bucket; comparing with all of them
# is quadratic again. A bucket keeps its first `LSH_BUCKET_CAP` representatives: a crowded bucket
# says little about similarity, and a true near-duplicate (Jaccard >= 0.7) shares about 5 of the
# 20 bands, almost always one that is not crowded. Each prompt thus costs at most 20 x 32 comparisons.
LSH_BANDS, LSH_ROWS = 20, 4
LSH_BUCKET_CAP = 32
_SEEDS = np.random.default_rng(0x5EED).integers(0, 2**63, size=LSH_BANDS * LSH_ROWS, dtype=np.uint64)
_BAND_SALT = np.arange(1, LSH_BANDS + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    # splitmix64's finaliser (uint64 arithmetic wraps): a cheap, well-spread, deterministic hash.
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def band_keys(sh: frozenset[str]) -> list[int]:
    """The LSH bucket of each band of the MinHash signature of `sh` (stable across processes)."""
    h = np.fromiter(
        (int.from_bytes(hashlib.blake2b(x.encode(), digest_size=8).digest(), "little") for x in sh),
        dtype=np.uint64,
        count=len(sh),
    )
    sig = _mix(h[None, :] ^ _SEEDS[:, None]).min(axis=1).reshape(LSH_BANDS, LSH_ROWS)
    key = _BAND_SALT.copy()
    for r in range(LSH_ROWS):
        key = _mix(key ^ sig[:, r])
    return [int(k) for k in key]


@dataclass
class _Group:
    """Samples whose prompts normalise alike (text rule) or one sample (embeddings rule)."""

    first: tuple[datetime, str, int]  # (timestamp, id, seq) of its earliest sample
    norm: str
    messages: list[dict[str, Any]]
    text: str
    params: dict[str, Any]
    category: str
    members: list[Member] = field(default_factory=list)
    failure_modes: set[str] = field(default_factory=set)
    reference: tuple[tuple[datetime, str, int], str] | None = None
    # (order, sample id, the answer, the re-ask's answer) of its confident-but-unstable samples.
    re_asks: list[tuple[tuple[datetime, str, int], str, str, str]] = field(default_factory=list)


def _cluster_text(groups: Sequence[_Group], text_threshold: float) -> tuple[list[list[int]], int]:
    """Indices of `groups` (in time order) collapsed greedily, as one pass over the samples in time
    order would: a prompt joins the most similar earlier representative at Jaccard >= threshold
    (ties: the earliest), else it becomes one. Returns the clusters and the comparisons made."""
    clusters: list[list[int]] = []
    rep_shingles: list[frozenset[str]] = []
    buckets: dict[int, list[int]] = defaultdict(list)
    comparisons = 0
    for i, g in enumerate(groups):
        sh = shingles(g.norm)
        keys = band_keys(sh)
        best, best_j = 0.0, -1
        for j in sorted({j for k in keys for j in buckets.get(k, ())}):
            comparisons += 1
            score = jaccard(sh, rep_shingles[j])
            if score > best:
                best, best_j = score, j
        if best_j >= 0 and best >= text_threshold:
            clusters[best_j].append(i)
            continue
        for k in keys:
            bucket = buckets[k]
            if len(bucket) < LSH_BUCKET_CAP:
                bucket.append(len(clusters))
        rep_shingles.append(sh)
        clusters.append([i])
    return clusters, comparisons


def _cluster_embeddings(texts: Sequence[str], embedding_threshold: float) -> tuple[list[list[int]], int]:
    """Greedy clustering by cosine similarity to the representatives so far (one matrix-vector
    product per prompt over a contiguous matrix of representatives)."""
    import numpy as np

    from llmwatch.scorers.checks.embeddings import Embedder

    clusters: list[list[int]] = []
    if not texts:
        return clusters, 0
    vectors = Embedder().encode(list(texts))
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    reps = np.empty_like(vectors)
    comparisons = 0
    for i in range(len(texts)):
        k = len(clusters)
        if k:
            sims = reps[:k] @ vectors[i]
            comparisons += k
            j = int(np.argmax(sims))
            if sims[j] >= embedding_threshold:
                clusters[j].append(i)
                continue
        reps[k] = vectors[i]
        clusters.append([i])
    return clusters, comparisons


_OK_STATUS = range(1, 400)


def _verdicts(scores: Iterable[Score]) -> dict[str, tuple[Verdict, ...]]:
    """Per sample id, the verdicts (pass or fail) of its scores: shared tuples, a few bytes a sample."""
    shared: dict[tuple[str, str, str, bool], Verdict] = {}
    out: dict[str, list[Verdict]] = defaultdict(list)
    for sc in scores:
        if sc.result not in ("pass", "fail"):
            continue  # neither a failure mode nor an applied check
        flag = bool(sc.kind == "consistency" and sc.details.get("confident_unstable"))
        v = shared.setdefault((sc.check, sc.kind, sc.result, flag), Verdict(sc.check, sc.kind, sc.result, flag))
        out[sc.sample_id].append(v)
    return {k: tuple(v) for k, v in out.items()}


def gather(
    samples: Iterable[Sample],
    scores: Iterable[Score],
    categories: Sequence[Category],
    *,
    default_category: str = "uncategorized",
    similarity: Literal["text", "embeddings"] = "text",
    text_threshold: float = 0.7,
    embedding_threshold: float = 0.92,
    re_asks: Mapping[str, str] | None = None,
) -> Material:
    """The candidates of `samples` (any order; taken in (timestamp, id) order), in one pass.

    `scores` are read first and kept as shared verdict tuples; `samples` may be a stream
    (read_records): no Sample is kept. With the text rule, samples whose prompts normalise alike
    always share a cluster, so they are grouped as they arrive (a compact `Member` each) and only
    the distinct normalised prompts are clustered, in the order of their earliest sample, which is
    the order a pass over the sorted samples would meet them. The embeddings rule clusters every
    prompt on its own (paraphrases that normalise alike may stay apart), so it keeps one group per
    sample with its text.

    `re_asks`: the consistency probe's re-ask answer by sample id (`--consistency`), kept as
    context for the confident-but-unstable cases.
    """
    verdicts = _verdicts(scores)
    groups: dict[Any, _Group] = {}
    n_samples = n_placeholder = n_other = n_items = 0
    traffic: Counter[str] = Counter()
    interned: dict[str, str] = {}
    for seq, sample in enumerate(samples):
        n_samples += 1
        messages = prompt_messages(sample)
        if sample.operation not in GENERATIVE or not any(
            m["role"] == "user" and m["content"].strip() for m in messages
        ):
            n_other += 1
            continue
        text = prompt_text(messages)
        if placeholder_share(text) > PLACEHOLDER_SHARE:
            n_placeholder += 1
            continue
        n_items += 1
        category = categorize(sample, categories, default_category)
        traffic[category] += 1
        norm = normalise(text)
        order = (sample.timestamp, sample.id, seq)
        gkey: Any = norm if similarity == "text" else seq
        group = groups.get(gkey)
        if group is None:
            group = groups[gkey] = _Group(order, norm, messages, text, _params(sample), category)
        elif order < group.first:
            group.first, group.messages, group.text = order, messages, text
            group.params, group.category = _params(sample), category
        route, model, version = (
            interned.setdefault(x, x) if x is not None else None
            for x in (sample.route, sample.model, sample.model_version)
        )
        group.members.append(Member(sample.id, sample.timestamp, route or sample.route, model, version, seq))
        mine = verdicts.get(sample.id, ())
        modes = failure_modes(sample, mine)
        group.failure_modes.update(modes)
        if re_asks and "confident_unstable" in modes and sample.id in re_asks:
            group.re_asks.append((order, sample.id, sample.answer_text(), re_asks[sample.id]))
        if (
            (group.reference is None or order > group.reference[0])
            and sample.status in _OK_STATUS
            and _passed_all(mine)
        ):
            answer = sample.answer_text()
            if answer.strip():
                group.reference = (order, answer)
    ordered = sorted(groups.values(), key=lambda g: g.first)
    del groups
    if similarity == "embeddings":
        clusters, comparisons = _cluster_embeddings([g.text for g in ordered], embedding_threshold)
    else:
        clusters, comparisons = _cluster_text(ordered, text_threshold)
    candidates: list[Candidate] = []
    for members in clusters:
        rep = ordered[members[0]]
        cand = Candidate(
            key=hashlib.sha256(rep.norm.encode()).hexdigest(),
            category=rep.category,
            messages=rep.messages,
            text=rep.text,
            params=rep.params,
            shingles=shingles(rep.text),
        )
        refs = [ref for i in members if (ref := ordered[i].reference) is not None]
        if refs:
            cand.reference = max(refs, key=lambda r: r[0])[1]
        for i in members:
            cand.samples.extend(ordered[i].members)
            cand.failure_modes.update(ordered[i].failure_modes)
        cand.samples.sort(key=lambda m: (m.timestamp, m.id, m.seq))  # members arrive in input order
        unstable = sorted((r for i in members for r in ordered[i].re_asks), key=lambda r: r[0])
        cand.re_asks = [(sid, answer, re_ask) for _, sid, answer, re_ask in unstable]
        for m in cand.samples:
            cand.scores[m.id] = verdicts.get(m.id, ())
        candidates.append(cand)
    _mark_edges(candidates)
    _unique_ids(candidates)
    return Material(candidates, traffic, n_samples, n_placeholder, n_other, n_items - len(candidates), comparisons)


def _unique_ids(candidates: Sequence[Candidate]) -> None:
    """Give every candidate its own case id, deterministically.

    The id's stable part is the hash of the normalised prompt (digits folded), so a suite built
    again from the same traffic has the same ids. The first candidate (in time order) of a
    colliding id keeps it; each later one gets `-` and 8 hex digits of the hash of its exact
    prompt text (and a counter in the unlikely case that this collides too).
    """
    seen: set[str] = set()
    for cand in candidates:
        if cand.case_id not in seen:
            seen.add(cand.case_id)
            continue
        cand.suffix = "-" + hashlib.sha256(cand.text.encode()).hexdigest()[:8]
        base, n = cand.suffix, 2
        while cand.case_id in seen:
            cand.suffix = f"{base}-{n}"
            n += 1
        seen.add(cand.case_id)


def _validated(data: bytes, target: str | Path, manifest: Mapping[str, Any]) -> None:
    """Refuse, before anything is written, a suite `regress` would refuse or a manifest that disagrees.

    The same parser and validator as `llmwatch regress` (regress.parse_suite), over the bytes about
    to be written.
    """
    try:
        suite = parse_suite(data.splitlines(), target)
    except RegressError as exc:
        raise SuiteBuildError(
            f"the suite made for {target} would not be valid, so nothing was written: {exc}"
        ) from None
    ids = [c.id for c in suite.cases]
    listed = set(manifest.get("cases", {}))
    if set(ids) - listed or suite.checksum != manifest.get("checksum"):
        raise SuiteBuildError(
            f"the manifest made for {target} does not describe its suite (cases not listed: "
            f"{', '.join(sorted(set(ids) - listed)) or 'none'}), so nothing was written"
        )


def _write_both(target: str | Path, data: bytes, manifest: Mapping[str, Any]) -> tuple[Path, Path]:
    """The suite and its manifest, each atomically; if the second cannot be written, the first is undone.

    The earlier suite is kept under a second name (a hard link) while the new one is written, and
    renamed back if the manifest fails: the same file returns, its mode and times untouched, and
    the undo needs no free space. (Written back from its bytes, it came back with the data-file
    mode, and on a disk too full for that copy it was lost.) Where hard links are not supported,
    the bytes are written back as before."""
    mpath = manifest_path(target)
    path = Path(target)
    kept: Path | None = None
    before: bytes | None = None
    if path.exists():
        kept = path.with_name(f".{path.name}.{secrets.token_hex(8)}.before")
        try:
            os.link(path, kept, follow_symlinks=False)
        except OSError:
            kept, before = None, path.read_bytes()
    try:
        written = atomic_write_bytes(target, data)
        try:
            atomic_write_bytes(mpath, orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
        except BaseException:
            if kept is not None:
                # Forgotten first: if even the rename back fails, the earlier suite stays under that name.
                earlier, kept = kept, None
                os.replace(earlier, path)
            elif before is not None:
                atomic_write_bytes(target, before)
            else:
                path.unlink(missing_ok=True)
            raise
    finally:
        if kept is not None:
            kept.unlink(missing_ok=True)
    return written, mpath


def _mark_edges(candidates: Sequence[Candidate]) -> None:
    if not candidates:
        return
    lengths = sorted(len(c.text) for c in candidates)
    # The longest tenth of distinct prompts (at least one), and only if it stands out.
    cut = lengths[max(0, math.ceil(len(lengths) * 0.9) - 1)]
    routes = Counter(s.route for c in candidates for s in c.samples)
    models = Counter(s.model or "" for c in candidates for s in c.samples)
    total = sum(routes.values())
    for c in candidates:
        if len(c.text) >= cut and len(c.text) > lengths[len(lengths) // 2]:
            c.edge_reasons.add("long_prompt")
        if any(routes[s.route] / total < 0.05 for s in c.samples):
            c.edge_reasons.add("rare_route")
        if any(models[s.model or ""] / total < 0.05 for s in c.samples):
            c.edge_reasons.add("rare_model")
        if non_latin(c.text):
            c.edge_reasons.add("other_language")


# --- selection ---------------------------------------------------------------------------------


def apportion(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Largest-remainder apportionment of `total` seats by `shares` (ties by name, reproducible)."""
    weight = sum(shares.values())
    if total <= 0 or weight <= 0:
        return {k: 0 for k in shares}
    exact = {k: total * v / weight for k, v in shares.items()}
    seats = {k: int(math.floor(x)) for k, x in exact.items()}
    rest = total - sum(seats.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - seats[k]), k))[:rest]:
        seats[k] += 1
    return seats


def _fill(targets: dict[str, int], available: Mapping[str, int]) -> dict[str, int]:
    """`targets` capped by `available`; the seats a category cannot fill go to the others by share."""
    seats = {k: min(targets.get(k, 0), available.get(k, 0)) for k in targets}
    for _ in range(len(targets) + 1):
        missing = sum(targets.values()) - sum(seats.values())
        room = {k: available.get(k, 0) - seats[k] for k in seats if available.get(k, 0) > seats[k]}
        if missing <= 0 or not room:
            break
        extra = apportion(missing, {k: float(max(targets.get(k, 0), 1)) for k in room})
        for k, n in extra.items():
            seats[k] += min(n, room[k])
    return seats


def _take(
    rng: random.Random, items: list[Candidate], n: int, source: str, taken: set[str], chosen: list[Candidate]
) -> None:
    """Up to `n` of `items` not yet taken, at random, marked with where they came from."""
    items = [c for c in items if c.key not in taken]
    rng.shuffle(items)
    for c in items[: max(n, 0)]:
        c.source = source
        taken.add(c.key)
        chosen.append(c)


def check_build_options(size: int, failure_quota: float, edge_quota: float) -> None:
    """Refuse bad `suite build` options; the CLI calls it before reading the samples (minutes on a large window)."""
    if size < 1:
        raise SuiteBuildError("--size must be at least 1")
    if not (0 <= failure_quota <= 1 and 0 <= edge_quota <= 1 and failure_quota + edge_quota <= 1):
        raise SuiteBuildError(
            f"--failure-quota ({failure_quota}) and --edge-quota ({edge_quota}) must each be in [0, 1] and add up to at most 1"
        )


def select(
    material: Material,
    categories: Sequence[Category],
    *,
    size: int,
    failure_quota: float,
    edge_quota: float,
    seed: int | None,
    mix: Literal["traffic", "weighted"] = "traffic",
    exclude: Iterable[str] = (),
) -> list[Candidate]:
    check_build_options(size, failure_quota, edge_quota)
    rng = random.Random(seed)
    skip = set(exclude)
    pool = [c for c in material.candidates if c.case_id not in skip]
    weights = {c.name: c.weight for c in categories}
    shares = {
        k: n * (weights.get(k, min(weights.values(), default=1.0)) if mix == "weighted" else 1.0)
        for k, n in material.traffic.items()
    }
    by_cat: dict[str, list[Candidate]] = defaultdict(list)
    for c in pool:
        by_cat[c.category].append(c)
    size = min(size, len(pool))
    targets = _fill(apportion(size, shares), {k: len(v) for k, v in by_cat.items()})
    failures = {k: [c for c in v if c.failure_modes] for k, v in by_cat.items()}
    edges = {k: [c for c in v if c.edge_reasons and not c.failure_modes] for k, v in by_cat.items()}
    n_fail = _fill(
        apportion(round(size * failure_quota), targets), {k: min(len(failures.get(k, [])), targets[k]) for k in targets}
    )
    n_edge = _fill(
        apportion(round(size * edge_quota), targets),
        {k: min(len(edges.get(k, [])), targets[k] - n_fail[k]) for k in targets},
    )
    chosen: list[Candidate] = []
    for k in sorted(targets):
        taken: set[str] = set()
        _take(rng, failures.get(k, []), n_fail[k], "failure", taken, chosen)
        # Edge cases: the most unusual first (most reasons), then at random.
        ranked = sorted(edges.get(k, []), key=lambda c: -len(c.edge_reasons))
        _take(rng, ranked[: max(n_edge[k] * 3, n_edge[k])], n_edge[k], "edge", taken, chosen)
        _take(
            rng,
            [c for c in by_cat[k] if not c.failure_modes],
            targets[k] - n_fail[k] - n_edge[k],
            "typical",
            taken,
            chosen,
        )
        # Short of typical traffic: the remaining seats go to the category's other candidates.
        _take(rng, by_cat[k], targets[k] - len(taken), "typical", taken, chosen)
    return chosen


# --- cases, manifest -------------------------------------------------------------------------


def rule_specs(checks: Sequence[CheckSpec]) -> dict[str, CheckSpec]:
    """The configured checks a suite case can carry: rule kinds only (regress runs one answer at a time)."""
    out = {}
    for spec in checks:
        entry = CHECK_KINDS.get(spec.kind)
        if entry is not None and entry.family == "rule":
            out[spec.name] = spec
    return out


def _passed_all(scores: Sequence[Score | Verdict]) -> bool:
    verdicts = [s for s in scores if s.result in ("pass", "fail")]
    return bool(verdicts) and all(s.result == "pass" for s in verdicts)


def make_case(cand: Candidate, specs: Mapping[str, CheckSpec]) -> dict[str, Any]:
    applied = sorted(
        {
            sc.check
            for sid in cand.scores
            for sc in cand.scores[sid]
            if sc.result in ("pass", "fail") and sc.check in specs
        }
    )
    checks = []
    for name in applied:
        spec = specs[name]
        entry: dict[str, Any] = {"kind": spec.kind, "name": name}
        if spec.params:
            entry["params"] = spec.params
        checks.append(entry)
    if not checks:
        checks.append({"kind": "not_empty_or_truncated"})
    reference = cand.reference  # the latest passing answer (gather)
    user_only = len(cand.messages) == 1 and cand.messages[0]["role"] == "user"
    case: dict[str, Any] = {
        "id": cand.case_id,
        "category": cand.category,
        "input": cand.messages[0]["content"] if user_only else cand.messages,
    }
    if cand.params:
        case["params"] = cand.params
    case["checks"] = checks
    if reference is not None:
        case["reference"] = reference
    case["rubric"] = RUBRICS.get(cand.category, DEFAULT_RUBRIC)
    SuiteCase.model_validate(case)  # what regress will read: refuse here, not at run time
    return case


def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def manifest_entry(cand: Candidate) -> dict[str, Any]:
    times = [s.timestamp for s in cand.samples]
    return {
        "category": cand.category,
        "source": cand.source,
        "failure_modes": sorted(cand.failure_modes),
        "edge_reasons": sorted(cand.edge_reasons),
        "sample_ids": [s.id for s in cand.samples],
        "first_seen": _iso(min(times)),
        "last_seen": _iso(max(times)),
        "model_versions": sorted({s.model_version or "unknown" for s in cand.samples}),
        "models": sorted({s.model or "unknown" for s in cand.samples}),
        "routes": sorted({s.route for s in cand.samples}),
        # The hidden error as it was seen: the sure answer, and what the model said when asked again.
        **(
            {"re_asks": [{"sample_id": sid, "answer": a, "re_ask": b} for sid, a, b in cand.re_asks]}
            if cand.re_asks
            else {}
        ),
    }


def manifest_path(suite_path: str | Path) -> Path:
    p = Path(suite_path)
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    return p.with_name(stem + ".manifest.json")


def _lines(cases: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(c) + b"\n" for c in cases)


@dataclass
class BuildResult:
    suite_path: Path
    manifest_path: Path
    manifest: dict[str, Any]


def build(
    material: Material,
    categories: Sequence[Category],
    checks: Sequence[CheckSpec],
    out: str | Path,
    *,
    size: int = 200,
    failure_quota: float = 0.2,
    edge_quota: float = 0.1,
    seed: int | None = None,
    mix: Literal["traffic", "weighted"] = "traffic",
    sources: Mapping[str, str] | None = None,
) -> BuildResult:
    if not material.candidates:
        raise SuiteBuildError(
            f"no usable prompt in {material.n_samples} samples ({material.n_placeholder_only} mostly redaction placeholders, "
            f"{material.n_not_generative} not a generative call with a user turn); capture more traffic first"
        )
    chosen = select(
        material, categories, size=size, failure_quota=failure_quota, edge_quota=edge_quota, seed=seed, mix=mix
    )
    specs = rule_specs(checks)
    cases = [make_case(c, specs) for c in chosen]
    data = _lines(cases)
    checksum = suite_checksum([orjson.loads(line) for line in data.splitlines()])
    total = sum(material.traffic.values())
    suite_mix = Counter(c.category for c in chosen)
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "version": 1,
        "checksum": checksum,
        "created_at": _iso(datetime.now(timezone.utc)),
        "history": [
            {
                "version": 1,
                "checksum": checksum,
                "added": [c["id"] for c in cases],
                "at": _iso(datetime.now(timezone.utc)),
            }
        ],
        "options": {"size": size, "failure_quota": failure_quota, "edge_quota": edge_quota, "seed": seed, "mix": mix},
        "sources": dict(sources or {}),
        "counts": {
            "samples": material.n_samples,
            "placeholder_only": material.n_placeholder_only,
            "not_generative": material.n_not_generative,
            "near_duplicates_collapsed": material.n_duplicates,
            "candidates": len(material.candidates),
            "cases": len(cases),
        },
        "category_mix": {
            k: {
                "traffic": round(material.traffic[k] / total, 4) if total else 0.0,
                "suite": round(suite_mix[k] / len(cases), 4),
            }
            for k in sorted(set(material.traffic) | set(suite_mix))
        },
        "cases": {c.case_id: manifest_entry(c) for c in chosen},
    }
    _validated(data, out, manifest)
    target, mpath = _write_both(out, data, manifest)
    return BuildResult(target, mpath, manifest)


def load_manifest(suite_path: str | Path) -> dict[str, Any]:
    path = manifest_path(suite_path)
    data = read_document(
        path,
        what="suite manifest",
        error=SuiteBuildError,
        missing="a suite made by `llmwatch suite build` has its manifest beside it",
    )
    check_schema(
        data, MANIFEST_SCHEMA, name=f"suite manifest {path}", kind="an llmwatch suite manifest", error=SuiteBuildError
    )
    return data


def add(
    suite_path: str | Path,
    material: Material,
    checks: Sequence[CheckSpec],
    *,
    failed_only: bool = False,
    max_new: int | None = None,
    text_threshold: float = 0.7,
    sources: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Append new failures (and, unless `failed_only`, new edge cases) to a suite; old lines stay byte-identical."""
    suite = load_suite(suite_path)  # refuses a damaged suite before anything is written
    manifest = load_manifest(suite_path)
    old = Path(suite_path).read_bytes()
    if old and not old.endswith(b"\n"):
        old += b"\n"
    known_ids = {c.id for c in suite.cases}
    known_shingles = [
        shingles(
            prompt_text(
                [{"content": c.input}]
                if isinstance(c.input, str)
                else [{"content": content_to_text(m.content)} for m in c.input]
            )
        )
        for c in suite.cases
    ]
    specs = rule_specs(checks)
    fresh = []
    for cand in material.candidates:
        wanted = bool(cand.failure_modes) or (not failed_only and bool(cand.edge_reasons))
        if not wanted or cand.case_id in known_ids:
            continue
        if any(jaccard(cand.shingles, sh) >= text_threshold for sh in known_shingles):
            continue  # already covered by a case
        cand.source = "failure" if cand.failure_modes else "edge"
        fresh.append(cand)
        known_ids.add(cand.case_id)
        known_shingles.append(cand.shingles)
        if max_new is not None and len(fresh) >= max_new:
            break
    if not fresh:
        return [], manifest
    new_cases = [make_case(c, specs) for c in fresh]
    data = old + _lines(new_cases)
    checksum = suite_checksum([orjson.loads(line) for line in data.splitlines() if line.strip()])
    now = _iso(datetime.now(timezone.utc))
    manifest["version"] = int(manifest.get("version", 1)) + 1
    manifest["checksum"] = checksum
    manifest.setdefault("history", []).append(
        {"version": manifest["version"], "checksum": checksum, "added": [c["id"] for c in new_cases], "at": now}
    )
    manifest.setdefault("cases", {}).update({c.case_id: manifest_entry(c) for c in fresh})
    manifest.setdefault("counts", {})["cases"] = len(suite.cases) + len(new_cases)
    if sources:
        manifest.setdefault("sources", {}).update({f"add-v{manifest['version']}:{k}": v for k, v in sources.items()})
    _validated(data, suite_path, manifest)
    _write_both(suite_path, data, manifest)
    return [c["id"] for c in new_cases], manifest


def show(suite_path: str | Path) -> dict[str, Any]:
    """Counts by category, failure mode and source, for a person to review before freezing."""
    suite = load_suite(suite_path)
    try:
        manifest: dict[str, Any] | None = load_manifest(suite_path)
    except SuiteBuildError:
        manifest = None  # a hand-written suite: categories only
    entries = (manifest or {}).get("cases", {})
    by_category: Counter[str] = Counter(c.category for c in suite.cases)
    by_source: Counter[str] = Counter()
    by_failure: Counter[str] = Counter()
    by_edge: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    with_reference = sum(1 for c in suite.cases if c.reference)
    for c in suite.cases:
        entry = entries.get(c.id)
        if entry is None:
            by_source["hand-written"] += 1
            continue
        by_source[entry.get("source", "typical")] += 1
        for mode in entry.get("failure_modes", []):
            by_failure[mode] += 1
        for reason in entry.get("edge_reasons", []):
            by_edge[reason] += 1
        for v in entry.get("model_versions", []):
            versions[v] += 1
    return {
        "suite": str(suite_path),
        "checksum": suite.checksum,
        "version": (manifest or {}).get("version"),
        "cases": len(suite.cases),
        "with_reference": with_reference,
        "by_category": dict(sorted(by_category.items())),
        "by_source": dict(sorted(by_source.items())),
        "by_failure_mode": dict(sorted(by_failure.items())),
        "by_edge_reason": dict(sorted(by_edge.items())),
        "by_model_version": dict(sorted(versions.items())),
        "excluded": (manifest or {}).get("counts", {}),
    }


def format_show(info: Mapping[str, Any]) -> str:
    lines = [
        f"suite {info['suite']}: {info['cases']} cases, version {info['version'] or '-'}, sha256:{info['checksum'][:12]}, {info['with_reference']} with a reference answer"
    ]
    for title, key in (
        ("category", "by_category"),
        ("source", "by_source"),
        ("failure mode", "by_failure_mode"),
        ("edge reason", "by_edge_reason"),
        ("model version", "by_model_version"),
    ):
        counts = info[key]
        if counts:
            lines.append(f"  by {title}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if any(info[key] for key in ("by_failure_mode", "by_edge_reason", "by_model_version")):
        # "30 cases" above "failed:answer_relevance 23, refused 16" read as 39 failing cases of 30.
        lines.append(
            "  (failure mode, edge reason and model version count the cases where any of the samples a case"
            " stands for showed it: one case can count under several)"
        )
    ex = info.get("excluded") or {}
    if ex:
        lines.append(
            f"  left out when built: {ex.get('placeholder_only', 0)} mostly-placeholder prompts, {ex.get('near_duplicates_collapsed', 0)} near-duplicates collapsed, "
            f"{ex.get('not_generative', 0)} not generative"
        )
    return "\n".join(lines)
