"""Paired statistics of shadow evaluation: the primary's and a candidate's answers to the same prompts.

Pairing removes the variance between prompts: each request is its own control, so a change of a
few points in a pass rate shows up in far fewer calls than two independent windows need
(bench/shadow_power.py measures how many fewer). Plain functions over `Pair` records, no I/O.

Per candidate the report has, for every check (and every check within every category):
win / tie / loss counts (win = the candidate passes where the primary fails), the paired
pass-rate difference with a confidence interval, and McNemar's exact test on the disagreements;
for continuous signals (check values, latency, TTFT, output tokens, cost): Wilcoxon's
signed-rank test on the paired differences and an interval of the ratio (Fieller's for means, the
paired bootstrap for p95s); the
similarity of the two answers. One multiple-testing correction (Holm) runs over the family of
"is the candidate worse" p-values of the verdict signals.

The verdict is a non-inferiority decision with the configured margins (config `shadow.margins`):
a signal is `not_worse` when its one-sided (1 - alpha) confidence bound stays inside the margin,
`worse` when the candidate is significantly worse (Holm-adjusted p < alpha) and its point
estimate is beyond the margin, and `inconclusive` otherwise (then the pairs needed are estimated).
"""

from __future__ import annotations

import math
import re
from array import array
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any, Iterable, Sequence

import numpy as np
from scipy import stats as _sps

from llmwatch.core.pairs import Pair
from llmwatch.scorers.checks.offline import Codes
from llmwatch.scorers.evaluation.config import ShadowMargins
from llmwatch.scorers.stats.paired import (
    bootstrap_ratio,
    fieller_ratio,
    mcnemar_worse_p,
    paired_difference_ci,
    wilcoxon_worse_p,
)
from llmwatch.scorers.stats.proportions import bounded_mean_interval
from llmwatch.scorers.stats.twosample import adjust_pvalues

NOT_WORSE = "not_worse"
WORSE = "worse"
INCONCLUSIVE = "inconclusive"
# Below this many usable pairs a signal is not judged at all (its interval means nothing yet).
MIN_PAIRS = 10
# Below this many pairs the paired-bootstrap p95 ratio interval misses more often than it says
# (nominal 10 %, measured at a true ratio of 1, docs/design/statistics.md): 19 % at 10 pairs and
# 15 % at 15; from 25 pairs it errs wide. Percentile-t on the log scale and BCa did no better, so
# such rows are flagged. A ratio of means has Fieller's interval (stats.paired.fieller_ratio),
# which keeps its level from 10 pairs: no flag.
RATIO_MIN_PAIRS = {"p95": 25}


def ratio_too_narrow(stat: str) -> str:
    """What a ratio row on too few pairs says beside its interval."""
    return f"fewer than {RATIO_MIN_PAIRS[stat]} pairs: this interval is too narrow"


_SIMILARITY_CHARS = 2000


_WS = re.compile(r"\s+")


def normalized_similarity(a: str, b: str) -> float:
    """0..1 similarity of two answers after case and whitespace are normalised (difflib ratio)."""
    a = _WS.sub(" ", a.lower()).strip()[:_SIMILARITY_CHARS]
    b = _WS.sub(" ", b.lower()).strip()[:_SIMILARITY_CHARS]
    if not a and not b:
        return 1.0
    return SequenceMatcher(None, a, b, autojunk=False).ratio()


# The version of a side whose sample carries no model_version.
UNKNOWN_VERSION = "unknown"


@dataclass
class Row:
    """One line of the comparison table."""

    signal: str  # e.g. check:refusal, latency_p95, error_rate
    category: str  # "*" for all pairs
    n: int
    primary: float | None  # pass rate, p95 ms, mean USD...
    shadow: float | None
    effect: float | None  # difference (rates, points) or ratio (latency, cost)
    ci_low: float | None
    ci_high: float | None
    p_worse: float | None
    p_adjusted: float | None = None
    wins: int | None = None
    ties: int | None = None
    losses: int | None = None
    margin: float | None = None
    verdict: str | None = None  # only on verdict signals
    needed: int | None = None
    note: str = ""
    # A bootstrap p95 ratio interval over fewer than RATIO_MIN_PAIRS pairs: it misses more often than it says.
    interval_too_narrow: bool = False
    # Internal: how to judge the row (rate difference or ratio); not in the JSON.
    kind: str = field(default="info", repr=False)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "kind"}
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


@dataclass
class CandidateReport:
    candidate: str
    pairs: int
    rows: list[Row]
    similarity: dict[str, float | None]
    verdict: str
    worse_on: list[str]
    needed: int | None
    # Pairs by (primary version, candidate version), most first.
    versions: list[tuple[str, str, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "pairs": self.pairs,
            "verdict": self.verdict,
            "worse_on": self.worse_on,
            "pairs_needed": self.needed,
            "similarity": self.similarity,
            "versions": [{"primary": a, "candidate": b, "pairs": n} for a, b, n in self.versions],
            "same_version_pairs": self.same_version_pairs,
            "rows": [r.as_dict() for r in self.rows],
        }

    @property
    def same_version_pairs(self) -> int:
        """Pairs whose primary already served the candidate's version: they compare it with itself."""
        return sum(n for a, b, n in self.versions if a == b != UNKNOWN_VERSION)

    @property
    def unknown_version_pairs(self) -> int:
        """Pairs with no model_version on a side: whether they compare a version with itself is not known."""
        return sum(n for a, b, n in self.versions if UNKNOWN_VERSION in (a, b))

    def versions_text(self) -> str:
        """What the candidate was compared with, and a warning when some pairs compare a version with itself."""
        if not self.versions:
            return ""
        shown = ", ".join(f"primary {a} / candidate {b}: {n} pairs" for a, b, n in self.versions)
        same, unknown = self.same_version_pairs, self.unknown_version_pairs
        # Two sides without a model_version are not the same version: said as not known, never as
        # "the primary already served the candidate's version" (400 of 400 pairs, before).
        notes = [f"versions compared: {shown}"]
        if same:
            notes.append(
                f"{same} of {self.pairs} pairs had the same version on both sides "
                "(the primary already served the candidate's version), which pulls every difference towards none"
            )
        if unknown:
            notes.append(
                f"{unknown} of {self.pairs} pairs carry no model_version on one side or both: "
                "whether they compare a version with itself is not known"
            )
        return "; ".join(notes)


def _z(p: float) -> float:
    return float(_sps.norm.ppf(p))


_RESULT_CODES = {"pass": 0, "fail": 1}


def _check_rows(
    cols: "PairColumns",
    keep: np.ndarray,
    category: str,
    confidence: float,
    margin_points: float,
    alpha: float,
    power: float,
) -> list[Row]:
    """Per check: paired pass/fail table, McNemar, pass-rate difference; Wilcoxon on values.

    `keep`: which of the candidate's check entries (one per shadow score with a primary score of
    the same check, in pair order) count: those of the pairs in the table."""
    check = np.frombuffer(cols.e_check, dtype=np.int32)[keep]
    a_all = np.frombuffer(cols.e_primary, dtype=np.int8)[keep]
    b_all = np.frombuffer(cols.e_shadow, dtype=np.int8)[keep]
    pv_all = np.frombuffer(cols.e_primary_value, dtype=float)[keep]
    sv_all = np.frombuffer(cols.e_shadow_value, dtype=float)[keep]
    rows = []
    for name in sorted(cols.checks.names[c] for c in np.unique(check).tolist()):
        mine = check == cols.checks.index[name]
        a, b = a_all[mine], b_all[mine]
        verdicts = (a <= 1) & (b <= 1)
        n = int(verdicts.sum())
        if n == 0:
            continue
        a, b = a[verdicts], b[verdicts]
        wins = int(((a == 1) & (b == 0)).sum())
        losses = int(((a == 0) & (b == 1)).sum())
        p_rate = int((a == 0).sum()) / n
        s_rate = int((b == 0).sum()) / n
        diff, lo, hi = paired_difference_ci(wins, losses, n, confidence)
        row = Row(
            signal=f"check:{name}",
            category=category,
            n=n,
            primary=p_rate * 100,
            shadow=s_rate * 100,
            effect=diff * 100,
            ci_low=lo * 100,
            ci_high=hi * 100,
            p_worse=mcnemar_worse_p(wins, losses),
            wins=wins,
            ties=n - wins - losses,
            losses=losses,
            margin=-margin_points,
            kind="rate",
        )
        discordance = max((wins + losses) / n, 1.0 / n)
        row.needed = _needed(discordance, margin_points / 100.0, alpha, power)
        rows.append(row)
        pv, sv = pv_all[mine], sv_all[mine]
        both = ~np.isnan(pv) & ~np.isnan(sv)
        values = np.stack([pv[both], sv[both]], axis=1).reshape(-1, 2)
        # Continuous values only: a 0/1 value says no more than the pass/fail row above.
        if len(values) >= MIN_PAIRS and np.ptp(values) > 0 and not np.isin(values, (0.0, 1.0)).all():
            d = values[:, 1] - values[:, 0]
            rows.append(
                Row(
                    signal=f"value:{name}",
                    category=category,
                    n=len(values),
                    primary=float(values[:, 0].mean()),
                    shadow=float(values[:, 1].mean()),
                    effect=float(d.mean()),
                    ci_low=None,
                    ci_high=None,
                    p_worse=wilcoxon_worse_p(d, higher_is_worse=False),
                    wins=int((d > 0).sum()),
                    ties=int((d == 0).sum()),
                    losses=int((d < 0).sum()),
                )
            )
    return rows


def _needed(variance_per_pair: float, margin: float, alpha: float, power: float) -> int:
    """Pairs for the one-sided (1 - alpha) bound to clear `margin` with `power`, if the truth is no difference."""
    if margin <= 0:
        return 0
    return int(math.ceil((_z(1 - alpha) + _z(power)) ** 2 * variance_per_pair / margin**2))


def _failed(sample: Any) -> bool:
    return sample.error_type is not None or sample.status >= 400


def _ratio_row(
    signal: str,
    prim: np.ndarray,
    shad: np.ndarray,
    stat: str,
    confidence: float,
    margin_ratio: float | None,
    alpha: float,
    power: float,
    unit_note: str,
) -> Row | None:
    n = len(prim)
    if n < 2:
        return None
    # Means: Fieller's interval; a p95 has no such pivot, so the paired bootstrap (flagged on few pairs).
    point, lo, hi = (
        fieller_ratio(prim, shad, confidence) if stat == "mean" else bootstrap_ratio(prim, shad, stat, confidence)
    )
    base = float(np.percentile(prim, 95) if stat == "p95" else prim.mean())
    cand = float(np.percentile(shad, 95) if stat == "p95" else shad.mean())
    d = shad - prim
    row = Row(
        signal=signal,
        category="*",
        n=n,
        primary=base,
        shadow=cand,
        effect=point,
        ci_low=lo,
        ci_high=hi,
        p_worse=wilcoxon_worse_p(d, higher_is_worse=True),
        wins=int((d < 0).sum()),
        ties=int((d == 0).sum()),
        losses=int((d > 0).sum()),
        margin=margin_ratio,
        kind="ratio" if margin_ratio is not None else "info",
        note=unit_note,
        interval_too_narrow=n < RATIO_MIN_PAIRS.get(stat, 0),
    )
    if margin_ratio is not None and margin_ratio > 1 and math.isfinite(hi) and math.isfinite(lo):
        # Spread of the log ratio per pair, from the bootstrap interval; sized for a true ratio of 1.
        se = (math.log(max(hi, 1e-12)) - math.log(max(lo, 1e-12))) / (2 * _z(0.5 + confidence / 2))
        row.needed = _needed(se * se * n, math.log(margin_ratio), alpha, power)
    return row


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


class PairColumns:
    """What `compare` reads of one candidate's pairs, as typed columns: tens of bytes a pair.

    A Pair holds two whole Samples (tens of KB as Python objects); `shadow report` adds each pair
    here as it streams and drops it (issue 29). The answers' similarity is computed on the way."""

    def __init__(self) -> None:
        self.candidate: str | None = None
        self.n = 0
        # (primary version, candidate version) -> pairs: what the candidate was compared with.
        self.versions: dict[tuple[str, str], int] = {}
        self.primary_failed = 0
        self.shadow_failed = 0
        self.wins = 0  # error rate: the primary failed, the candidate did not
        self.losses = 0
        self.checks = Codes()
        self.categories = Codes()
        # Per pair where both sides answered ("ok"), in order:
        self.category = array("i")  # -1: none
        self.latency = array("d")  # primary, shadow, interleaved
        self.ttft = array("d")  # both sides known, interleaved
        self.tokens = array("d")
        self.cost = array("d")
        self.similarity = array("d")
        # Per check entry of the ok pairs (each shadow score with a primary score of its check):
        self.e_pair = array("q")  # index among the ok pairs
        self.e_check = array("i")
        self.e_primary = array("b")  # 0 pass, 1 fail, 2 anything else
        self.e_shadow = array("b")
        self.e_primary_value = array("d")  # NaN: none
        self.e_shadow_value = array("d")

    def add(self, pair: Pair) -> None:
        if self.candidate is None:
            self.candidate = pair.candidate
        self.n += 1
        key = (pair.primary.model_version or UNKNOWN_VERSION, pair.shadow.model_version or UNKNOWN_VERSION)
        self.versions[key] = self.versions.get(key, 0) + 1
        pf, sf = _failed(pair.primary), _failed(pair.shadow)
        self.primary_failed += pf
        self.shadow_failed += sf
        self.wins += pf and not sf
        self.losses += sf and not pf
        if pf or sf:
            return
        p, s = pair.primary, pair.shadow
        k = len(self.category)
        self.category.append(self.categories.code(pair.category) if pair.category else -1)
        self.latency.extend((p.latency_ms, s.latency_ms))
        if p.ttft_ms is not None and s.ttft_ms is not None:
            self.ttft.extend((p.ttft_ms, s.ttft_ms))
        if p.usage.output_tokens is not None and s.usage.output_tokens is not None:
            self.tokens.extend((p.usage.output_tokens, s.usage.output_tokens))
        if p.cost_usd is not None and s.cost_usd is not None:
            self.cost.extend((p.cost_usd, s.cost_usd))
        self.similarity.append(normalized_similarity(p.answer_text(), s.answer_text()))
        primary = {sc.check: sc for sc in pair.primary_scores}
        for sc in pair.shadow_scores:
            ps = primary.get(sc.check)
            if ps is None:
                continue
            self.e_pair.append(k)
            self.e_check.append(self.checks.code(sc.check))
            self.e_primary.append(_RESULT_CODES.get(ps.result, 2))
            self.e_shadow.append(_RESULT_CODES.get(sc.result, 2))
            self.e_primary_value.append(_nan(ps.value))
            self.e_shadow_value.append(_nan(sc.value))


def _pairs_of(values: array) -> np.ndarray:
    return np.frombuffer(values, dtype=float).reshape(-1, 2)


def compare(
    pairs: Sequence[Pair], margins: ShadowMargins, *, alpha: float = 0.05, power: float = 0.95
) -> CandidateReport:
    """The comparison table and the verdict of one candidate's pairs."""
    cols = PairColumns()
    for pair in pairs:
        cols.add(pair)
    return compare_columns(cols, margins, alpha=alpha, power=power)


def compare_columns(
    cols: PairColumns, margins: ShadowMargins, *, alpha: float = 0.05, power: float = 0.95
) -> CandidateReport:
    """`compare` over the columns of one candidate's pairs (`PairColumns`, filled as they stream)."""
    candidate = cols.candidate if cols.candidate is not None else "?"
    # Two-sided (1 - 2 alpha) intervals: each bound is a one-sided (1 - alpha) bound.
    confidence = 1.0 - 2.0 * alpha
    rows: list[Row] = []
    n = cols.n
    # Error rate: a failed candidate call is a loss whatever the checks say.
    wins, losses = cols.wins, cols.losses
    if n:
        diff, lo, hi = paired_difference_ci(losses, wins, n, confidence)  # candidate minus primary error rate
        er = Row(
            signal="error_rate",
            category="*",
            n=n,
            primary=cols.primary_failed / n * 100,
            shadow=cols.shadow_failed / n * 100,
            effect=diff * 100,
            ci_low=lo * 100,
            ci_high=hi * 100,
            p_worse=mcnemar_worse_p(wins, losses),
            wins=wins,
            ties=n - wins - losses,
            losses=losses,
            margin=margins.error_rate_points,
            kind="rate_up",
        )
        er.needed = _needed(max((wins + losses) / n, 1.0 / n), margins.error_rate_points / 100.0, alpha, power)
        rows.append(er)
    every = np.ones(len(cols.e_check), dtype=bool)
    rows.extend(_check_rows(cols, every, "*", confidence, margins.pass_rate_points, alpha, power))
    lat = _pairs_of(cols.latency)
    row = _ratio_row(
        "latency_p95", lat[:, 0], lat[:, 1], "p95", confidence, margins.p95_latency_ratio, alpha, power, "ms"
    )
    if row:
        rows.append(row)
    ttft = _pairs_of(cols.ttft)
    row = _ratio_row("ttft_p95", ttft[:, 0], ttft[:, 1], "p95", confidence, margins.p95_ttft_ratio, alpha, power, "ms")
    if row:
        rows.append(row)
    toks = _pairs_of(cols.tokens)
    row = _ratio_row("output_tokens_mean", toks[:, 0], toks[:, 1], "mean", confidence, None, alpha, power, "tokens")
    if row:
        rows.append(row)
    cost = _pairs_of(cols.cost)
    row = _ratio_row("cost_mean", cost[:, 0], cost[:, 1], "mean", confidence, margins.cost_ratio, alpha, power, "USD")
    if row:
        rows.append(row)
    # Per category: the same check table within each category (reported, adjusted on their own).
    pair_category = np.frombuffer(cols.category, dtype=np.int32)
    entry_category = pair_category[np.frombuffer(cols.e_pair, dtype=np.int64)]
    category_rows: list[Row] = []
    for cat in sorted(cols.categories.names):
        category_rows.extend(
            _check_rows(
                cols,
                entry_category == cols.categories.index[cat],
                cat,
                confidence,
                margins.pass_rate_points,
                alpha,
                power,
            )
        )
    verdict_rows = [r for r in rows if r.kind in ("rate", "rate_up", "ratio")]
    _holm(verdict_rows)
    _holm([r for r in rows if r.kind == "info"] + category_rows)
    worse_on: list[str] = []
    needed: list[int] = []
    for r in verdict_rows:
        r.verdict = _judge(r, alpha)
        if r.verdict == WORSE:
            worse_on.append(r.signal)
        elif r.verdict == INCONCLUSIVE and r.needed is not None:
            needed.append(max(r.needed, MIN_PAIRS))
    for r in category_rows:
        r.verdict = _judge(r, alpha)
    rows.extend(category_rows)
    if worse_on:
        overall = WORSE
    elif n >= MIN_PAIRS and verdict_rows and all(r.verdict == NOT_WORSE for r in verdict_rows):
        overall = NOT_WORSE
    else:
        overall = INCONCLUSIVE
        if n < MIN_PAIRS:
            needed.append(MIN_PAIRS)
    sims = np.frombuffer(cols.similarity, dtype=float)
    # The level travels with the interval: the JSON reader sees which interval it was given.
    similarity: dict[str, float | None] = {
        "mean": None,
        "ci_low": None,
        "ci_high": None,
        "confidence": confidence,
        "n": len(sims),
    }
    if len(sims):
        # Similarities pile up at 1 (identical answers), where a t-interval claims certainty.
        mean, lo, hi = bounded_mean_interval(sims, confidence)
        similarity = {"mean": mean, "ci_low": lo, "ci_high": hi, "confidence": confidence, "n": len(sims)}
    return CandidateReport(
        candidate,
        n,
        rows,
        similarity,
        overall,
        worse_on,
        max(needed) if overall == INCONCLUSIVE and needed else None,
        versions=[(a, b, k) for (a, b), k in sorted(cols.versions.items(), key=lambda kv: (-kv[1], kv[0]))],
    )


def _holm(rows: list[Row]) -> None:
    ps = [r.p_worse for r in rows if r.p_worse is not None]
    adjusted = iter(adjust_pvalues(ps, method="holm")) if ps else iter(())
    for r in rows:
        if r.p_worse is not None:
            r.p_adjusted = next(adjusted)


def _judge(r: Row, alpha: float) -> str | None:
    if r.margin is None or r.effect is None or r.ci_low is None or r.ci_high is None:
        return None
    if r.n < MIN_PAIRS:
        return INCONCLUSIVE
    significant = r.p_adjusted is not None and r.p_adjusted < alpha
    if r.kind == "rate":  # candidate minus primary pass rate, points; margin is negative
        if significant and r.effect < r.margin:
            return WORSE
        return NOT_WORSE if r.ci_low >= r.margin else INCONCLUSIVE
    if r.kind == "rate_up":  # candidate minus primary error rate, points; margin positive
        if significant and r.effect > r.margin:
            return WORSE
        return NOT_WORSE if r.ci_high <= r.margin else INCONCLUSIVE
    if r.kind == "ratio":
        if significant and r.effect > r.margin:
            return WORSE
        return NOT_WORSE if r.ci_high <= r.margin else INCONCLUSIVE
    return None


def by_candidate(pairs: Iterable[Pair]) -> dict[str, list[Pair]]:
    out: dict[str, list[Pair]] = {}
    for pair in pairs:
        out.setdefault(pair.candidate, []).append(pair)
    return out
