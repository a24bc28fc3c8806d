"""Resampling consistency: does a version give the same answer when asked the same thing again?

The `consistency:` probe (llmwatch.collectors.shadow.consistency) re-sends a sampled share of
live calls, unchanged, to the same upstream and model and writes each (answer, re-answer) as a
pair record (candidate `consistency`). This module compares the two answers and summarises per
version.

Agreement of one pair, by the first rule that applies:

* **structured**: the request asked for JSON (`response_format`) or both answers parse as JSON
  objects or arrays: agree when the parsed values are equal (key order and whitespace aside);
* **embedding**: when an embedding function is given (the report's MiniLM model): agree when the
  cosine of the two answers is at least `cosine_threshold` (0.9);
* **lexical**: agree when the Jaccard similarity of the answers' word sets (lower case, words of
  2+ letters) is at least `lexical_threshold` (0.6).

A pair where either call failed (error, status >= 400, empty answer) is not compared
(`unanswered`). **Confident but unstable**: the pair disagrees, the first answer does not hedge
(no "I think", "might", "not sure", "it depends", ... ; see `HEDGES`) and passed every rule check
that judged it: an answer that looks sure and correct, and that the model does not stand by.

Per version (of the first answer): consistency rate = agreeing / compared, with a Wilson 95%
interval (llmwatch.scorers.stats.proportions), and the confident-but-unstable count and share.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import orjson

from llmwatch.core.pairs import Pair, PairScore
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.suite import json_mode
from llmwatch.scorers.stats.proportions import wilson_interval

__all__ = [
    "CONSISTENCY_CANDIDATE",
    "HEDGES",
    "ConsistencyRow",
    "Verdict",
    "compare_answers",
    "consistency_rows",
    "consistency_scores",
    "consistency_text",
    "hedges",
    "verdict_score",
]

CONSISTENCY_CANDIDATE = "consistency"
COSINE_THRESHOLD = 0.9
LEXICAL_THRESHOLD = 0.6
HEDGES = re.compile(
    r"(?i)\b(?:i think|i believe|i guess|i'm not sure|i am not sure|not sure|not certain|i'm not certain|"
    r"might|may be|maybe|perhaps|possibly|probably|likely|unclear|it depends|depending on|"
    r"could be|i don't know|i do not know|hard to say|as far as i know|if i recall)\b"
)
_WORD = re.compile(r"[a-z0-9][a-z0-9']+")

Embed = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Verdict:
    compared: bool  # False: one of the calls failed or answered nothing
    agree: bool
    method: str  # structured | embedding | lexical | unanswered
    similarity: float
    confident_unstable: bool


def hedges(text: str) -> bool:
    return HEDGES.search(text) is not None


def _json_value(text: str) -> Any:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, (dict, list)) else None


def _lexical(a: str, b: str) -> float:
    wa, wb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    if not wa and not wb:
        return 1.0
    return len(wa & wb) / len(wa | wb)


def _answered(sample: Sample) -> bool:
    return sample.status < 400 and not sample.error_type


def _passes_rules(scores: Sequence[PairScore]) -> bool:
    return all(s.result != "fail" for s in scores)


def compare_answers(
    first: Sample,
    second: Sample,
    first_scores: Sequence[PairScore] = (),
    *,
    embed: Embed | None = None,
    cosine_threshold: float = COSINE_THRESHOLD,
    lexical_threshold: float = LEXICAL_THRESHOLD,
) -> Verdict:
    """Whether `second` (the re-ask) gives the same answer as `first`."""
    a, b = first.answer_text(), second.answer_text()
    if not (_answered(first) and _answered(second)) or not a.strip() or not b.strip():
        return Verdict(False, False, "unanswered", math.nan, False)
    ja, jb = _json_value(a), _json_value(b)
    if json_mode(first.request) or (ja is not None and jb is not None):
        if ja is None and jb is None:
            agree = a.strip() == b.strip()  # JSON asked for, neither is JSON: the same text or not
        else:
            agree = ja is not None and ja == jb
        method, similarity = "structured", 1.0 if agree else 0.0
    elif embed is not None:
        vectors = np.asarray(embed([a, b]), dtype=float)
        na, nb = np.linalg.norm(vectors[0]), np.linalg.norm(vectors[1])
        similarity = float(vectors[0] @ vectors[1] / (na * nb)) if na > 0 and nb > 0 else 0.0
        agree, method = similarity >= cosine_threshold, "embedding"
    else:
        similarity = _lexical(a, b)
        agree, method = similarity >= lexical_threshold, "lexical"
    confident_unstable = not agree and not hedges(a) and _passes_rules(first_scores)
    return Verdict(True, agree, method, similarity, confident_unstable)


@dataclass(frozen=True)
class ConsistencyRow:
    model_version: str
    pairs: int
    compared: int
    agree: int
    rate: float | None
    ci: tuple[float, float] | None
    confident_unstable: int
    confident_unstable_rate: float | None
    methods: dict[str, int]
    interval: str = "Wilson 95%"


def consistency_rows(pairs: Iterable[Pair], *, embed: Embed | None = None) -> list[ConsistencyRow]:
    """Per version of the first answer: the consistency rate with its interval, and the flags."""
    acc: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"pairs": 0, "compared": 0, "agree": 0, "cu": 0, "methods": defaultdict(int)}
    )
    for pair in pairs:
        if pair.candidate != CONSISTENCY_CANDIDATE:
            continue
        version = pair.primary.model_version or "unknown"
        v = compare_answers(pair.primary, pair.shadow, pair.primary_scores, embed=embed)
        a = acc[version]
        a["pairs"] += 1
        a["methods"][v.method] += 1
        if v.compared:
            a["compared"] += 1
            a["agree"] += int(v.agree)
            a["cu"] += int(v.confident_unstable)
    rows = []
    for version, a in sorted(acc.items()):
        n, k = a["compared"], a["agree"]
        rows.append(
            ConsistencyRow(
                model_version=version,
                pairs=a["pairs"],
                compared=n,
                agree=k,
                rate=k / n if n else None,
                ci=wilson_interval(k, n) if n else None,
                confident_unstable=a["cu"],
                confident_unstable_rate=a["cu"] / n if n else None,
                methods=dict(a["methods"]),
            )
        )
    return rows


def consistency_scores(pairs: Iterable[Pair], *, embed: Embed | None = None) -> list[Score]:
    """Each compared re-ask as a `consistency` check result on the first answer's sample.

    The probe decides on the request id's hash like the sampler, so with `consistency.rate` at or
    below `sampling.rate` every re-asked call is also a stored sample with this id: `llmwatch drift`
    and `baseline freeze` (`--consistency PAIRS`) join these to the samples, which gives the
    behaviour family a `pass_rate:consistency` signal and the `confident_unstable` failure mode.
    """
    out = []
    for pair in pairs:
        if pair.candidate != CONSISTENCY_CANDIDATE:
            continue
        v = compare_answers(pair.primary, pair.shadow, pair.primary_scores, embed=embed)
        if v.compared:
            out.append(verdict_score(pair.primary, v))
    return out


def probe_verdicts(pairs: Iterable[Pair]) -> tuple[list[Score], dict[str, str]]:
    """`consistency_scores` of the probe's pairs and each re-asked sample's re-ask answer by id
    (the last pair's, for an id re-asked twice), one pair at a time: what `suite build
    --consistency` joins to the samples, without a list of Pairs (two whole Samples each; issue 29)."""
    scores: list[Score] = []
    re_asks: dict[str, str] = {}
    for pair in pairs:
        if pair.candidate != CONSISTENCY_CANDIDATE:
            continue
        v = compare_answers(pair.primary, pair.shadow, pair.primary_scores)
        if v.compared:
            scores.append(verdict_score(pair.primary, v))
        re_asks[pair.primary.id] = pair.shadow.answer_text()
    return scores, re_asks


def verdict_score(first: Sample, v: Verdict) -> Score:
    """A compared re-ask's verdict as the `consistency` check result on the first answer's sample.

    The same record offline (`consistency_scores`) and online (the probe's child sends it to the
    scorer's drift windows): pass when the answers agree, value the similarity.
    """
    return Score(
        sample_id=first.id,
        check=CONSISTENCY_CANDIDATE,
        kind=CONSISTENCY_CANDIDATE,
        result="pass" if v.agree else "fail",
        value=min(1.0, max(0.0, v.similarity)),
        details={"method": v.method, "confident_unstable": v.confident_unstable},
        model=first.model,
        model_version=first.model_version,
        route=first.route,
        sample_timestamp=first.timestamp,
    )


def consistency_text(rows: Sequence[ConsistencyRow]) -> list[str]:
    lines = ["Resampling consistency (same request asked twice; Wilson 95% interval)"]
    if not rows:
        lines.append("  (none: no consistency pairs; enable `consistency:` and pass --consistency DIR)")
    for r in rows:
        rate = "-" if r.rate is None else f"{r.rate:.3f}"
        ci = f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}]" if r.ci else "-"
        cu = "-" if r.confident_unstable_rate is None else f"{r.confident_unstable_rate:.3f}"
        lines.append(
            f"  version {r.model_version:<10} consistency {rate} {ci}  confident-but-unstable {r.confident_unstable} ({cu})  "
            f"{r.compared} compared of {r.pairs} pairs  {', '.join(f'{m} {n}' for m, n in sorted(r.methods.items()))}"
        )
    return lines
