"""Drift in three families, each answering its own on-call question.

* `inputs` - did what users ask change? Prompt length (KS), and the mix of categories, routes,
  models and languages (chi-square; material when the total variation distance is at least
  `min_mix_change`). Verdict `stable` | `shifted` | `insufficient`. Never a regression by itself.
* `behaviour` - does the model answer comparable inputs differently? Compared inside strata so
  that the mix does not count. A prompt the baseline saw at least 5 times (normalised-text hash)
  is a stratum of its own - matched prompts, the tightest comparison: Cochran-Mantel-Haenszel
  over 1:1 pairs is McNemar's test, van Elteren over pairs a signed-rank-type test - and every
  other sample is compared within its category (and route):
    - Cochran-Mantel-Haenszel for pass rates;
    - van Elteren (stratified Wilcoxon rank-sum) for answer length and continuous scores;
    - per-category chi-square, summed, for failure modes;
    - MMD on answer embeddings with labels permuted only within strata (the answer compared
      conditionally on the prompt), permutations adaptive up to 10 000.
    - `turn_decay`: the within-conversation slope of quality on turn, against the baseline's,
      conversations resampled (present only where there is multi-turn traffic).
  Effects are weighted by the baseline's stratum mix. Below `min_overlap` of current traffic in
  strata the baseline knows, behaviour is `insufficient`. The category with the clearest change
  is named in `stratum`; a change confined to it counts as material when that category's own
  effect passes the minimum and its own test is significant (Bonferroni over the categories).
* `performance` - is it slower or dearer per unit of work? Time per output token (TPOT), TTFT
  within input-length buckets, cost per 1k tokens, each stratified like behaviour, each with two
  tests: van Elteren for its location and a stratified exceedance test for its tail (`upper_tail`:
  current values above the pooled p95 within strata, one-sided). Both tests are against the
  margin, not against no change: they compare the current values divided by 1 +
  `performance_margin` (20 %) with the baseline's (H0: at most the margin slower), because load
  moves latency every hour without any version change and a +10 % is always "significant". A
  regression needs the location test against the margin significant with the current side higher
  and p50 or p95 more than the margin higher, or the tail test against it significant and p95
  more than the margin higher. The row shows the test that decided (`detail.decided_by`; the
  location test where none did), its statistic, and its effect: the p95 change for the tail test;
  for the location test the larger of the p50 and p95 changes where z >= 0, the smaller where
  z < 0; a slower change inside the margin reads z = 0, p = 1; so statistic, effect and
  direction never take opposite signs. The tests against no change are kept as context
  (`detail.location/tail.unshifted_*`). The raw totals (latency_ms, ttft_ms, cost_usd) are shown
  as context (`decisive: false`) and never decide.

Multiple testing: Holm over the decisive signals of the families that can fail the run
(`fail_on`) together, so the chance of a false exit 1 stays at `alpha`; each other family is
corrected on its own. A performance signal counts as two hypotheses there, its two tests.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llmwatch.scorers.drift.features import RouteStats
from llmwatch.scorers.drift.model import FAMILIES, DriftSettings, Effect, Signal
from llmwatch.scorers.drift.prompt_space import (
    HASHED_RIDGE_PER_ROW,
    RIDGE_PER_ROW,
    TEST_FOLDS,
    CrossFitRidge,
    classifier_test,
    near_duplicates,
    residualizer,
    semantic_clusters,
)
from llmwatch.scorers.drift.rows import HASHED_WORDS, MINILM, UNCATEGORIZED, Row, sketch_bits, space_of, unpack_vectors
from llmwatch.scorers.stats import twosample as stats
from llmwatch.scorers.stats.clustered import cluster_bootstrap_slope
from llmwatch.scorers.stats.stratified import (
    Stratified,
    cmh,
    effect_interval,
    quantile_change_intervals,
    reweighted_quantiles,
    stratified_chi2,
    stratified_mmd,
    upper_tail,
    van_elteren,
)

Keyed = list[tuple[str, str, Row]]  # (stratum, prompt hash, row)
TURN_DECAY_MAX_TURN = 10
Z95 = 1.959963984540054


def _rows(routes: Mapping[str, RouteStats], multi_route: bool, label: Callable[[Row], str]) -> Keyed:
    return [
        (f"{route} {label(row)}" if multi_route else label(row), row.prompt_hash, row)
        for route, rs in sorted(routes.items())
        for row in rs.rows
    ]


def _prompt_features(rows: Sequence[Row], centre: float, scale: float) -> np.ndarray:
    # Content words (128 +-1 bits) and the prompt's log length, weighted so that a length twice
    # the spread weighs about as much as two unrelated sketches.
    bits = np.stack([sketch_bits(r.prompt_sketch) for r in rows])
    length = np.array([math.log1p(r.prompt_tokens or 0.0) for r in rows])
    return np.hstack([bits, (8.0 * (length - centre) / scale)[:, None]])


def prompt_clusters(
    base: Sequence[Row], *, seed: int = 0, most: int = 8, per_cluster: int = 150
) -> Callable[[Row], str] | None:
    """Strata for traffic without category tags: k-means on prompt sketches, fitted on the baseline only.

    A deterministic function of the baseline's rows, so it is frozen with the baseline: the same
    prompt lands in the same cluster in every later comparison. None when the baseline is too
    small for two clusters of `per_cluster` prompts.
    """
    k = min(most, len(base) // per_cluster)
    if k < 2:
        return None
    logs = np.array([math.log1p(r.prompt_tokens or 0.0) for r in base])
    centre, scale = float(np.median(logs)), float(np.std(logs)) or 1.0
    X = _prompt_features(base, centre, scale)
    rng = np.random.default_rng(seed)
    centres = X[[int(rng.integers(len(X)))]]
    for _ in range(1, k):  # k-means++
        d = ((X[:, None, :] - centres[None]) ** 2).sum(-1).min(1)
        centres = np.vstack(
            [centres, X[int(rng.choice(len(X), p=d / d.sum()))] if d.sum() > 0 else X[int(rng.integers(len(X)))]]
        )
    for _ in range(25):
        assign = ((X[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
        moved = np.stack([X[assign == j].mean(0) if (assign == j).any() else centres[j] for j in range(k)])
        if np.allclose(moved, centres):
            break
        centres = moved

    def label(row: Row) -> str:
        x = _prompt_features([row], centre, scale)[0]
        return f"cluster-{int(((centres - x) ** 2).sum(1).argmin())}"

    return label


class PromptVectors:
    """The rows' prompt embeddings, unpacked once per comparison (None for a row without one)."""

    def __init__(self, rows: Sequence[Row], space: str = MINILM) -> None:
        # Only the vectors of one space: a MiniLM vector and a hashed-words vector are not comparable.
        have = [r for r in rows if space_of(r) == space]
        self.space = space
        self.penalty = HASHED_RIDGE_PER_ROW if space == HASHED_WORDS else RIDGE_PER_ROW
        X = unpack_vectors(have) if have else np.zeros((0, 0))
        self._by_row = {id(r): X[i] for i, r in enumerate(have)}

    def of(self, row: Row) -> np.ndarray | None:
        return self._by_row.get(id(row))

    def share(self, rows: Sequence[Row]) -> float:
        return sum(id(r) in self._by_row for r in rows) / len(rows) if rows else 0.0


# Prompt embeddings are used when at least this share of the rows on each side carry one (the
# rest, empty prompts, form a stratum of their own); otherwise matching and strata stay lexical.
SEMANTIC_SHARE = 0.9
# Near-duplicate threshold on hashed-words vectors (drift.near_duplicate_cosine is MiniLM's). Word
# overlap cannot tell a rewording from a different question that shares its words, so only
# near-verbatim prompts (a template with a changed name or number, a typo) may count as the same.
HASHED_NEAR_DUPLICATE_COSINE = 0.9


def semantic_prompt_clusters(
    base: Sequence[Row], vectors: PromptVectors, *, seed: int = 0, most: int = 8, per_cluster: int = 150
) -> Callable[[Row], str] | None:
    """Strata for untagged traffic from prompt embeddings: spherical k-means on the baseline's prompts only.

    Like the lexical clusters, a deterministic function of the baseline's rows (frozen with it);
    unlike them, prompts on one topic share a cluster without sharing a word.
    """
    X = np.stack([v for r in base if (v := vectors.of(r)) is not None]) if base else np.zeros((0, 0))
    k = min(most, len(X) // per_cluster)
    if k < 2:
        return None
    centres = semantic_clusters(X, k, seed=seed)

    def label(row: Row) -> str:
        v = vectors.of(row)
        return "topic-none" if v is None else f"topic-{int((centres @ v).argmax())}"

    return label


def _insufficient(
    name: str, family: str, effect: Effect, test: str, nb: int, nc: int, route: str, **detail: Any
) -> Signal:
    return Signal(
        name,
        route,
        test,
        math.nan,
        math.nan,
        math.nan,
        nb,
        nc,
        family=family,
        detail=dict(detail),
        effect_kind=effect.kind,
        effect_unit=effect.unit,
    )


def _from(name: str, family: str, effect: Effect, route: str, r: Stratified, **detail: Any) -> Signal:
    return Signal(
        name,
        route,
        r.test,
        float(r.statistic),
        float(r.p_value),
        float(r.effect),
        r.n_baseline,
        r.n_current,
        family=family,
        stratum=r.worst_stratum,
        detail={"strata": r.n_strata, **r.detail, **detail},
        effect_kind=effect.kind,
        effect_unit=effect.unit,
    )


def higher_or_lower(change: float) -> str:
    """The direction of a signed figure, "" where it did not move (or is not a number): a row of the
    text table without one read as either way, a score that fell beside one that rose."""
    return "higher" if change > 0 else "lower" if change < 0 else ""


# ---------------------------------------------------------------------------- inputs

# What each family's effect_size is, declared beside the code that computes it (model.Effect):
# every signal is built with one, so a new signal cannot go out without its description.
MEDIAN_CHANGE = Effect("relative change", "median, of the baseline's", "median")  # prompt and answer length
MIX_DISTANCE = Effect("distance", "total variation of the mix", "TVD")
SEPARATION = Effect("separation", "2 * AUC - 1", "")


def _tvd(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in set(a) | set(b)) if na and nb else 0.0


def prompt_signal_name(space: str) -> str:
    """`input:prompt_embedding` on MiniLM vectors, `input:prompt_words` on hashed words (a different test power)."""
    return "input:prompt_words" if space == HASHED_WORDS else "input:prompt_embedding"


def _prompt_embedding(base: Keyed, cur: Keyed, vectors: PromptVectors, s: DriftSettings, route: str) -> Signal:
    """Did what users ask move in meaning? A cross-fitted classifier between baseline and current prompts."""
    name = prompt_signal_name(vectors.space)
    pb = [(h, v) for _, h, r in base if (v := vectors.of(r)) is not None]
    pc = [(h, v) for _, h, r in cur if (v := vectors.of(r)) is not None]
    res = (
        classifier_test(
            np.stack([v for _, v in pb]),
            np.stack([v for _, v in pc]),
            [h for h, _ in pb],
            [h for h, _ in pc],
            penalty=vectors.penalty,
        )
        if len(pb) >= s.min_samples and len(pc) >= s.min_samples
        else None
    )
    if res is None:
        return _insufficient(name, "inputs", SEPARATION, "classifier_two_sample", len(pb), len(pc), route)
    sig = _from(
        name,
        "inputs",
        SEPARATION,
        route,
        res,
        min_effect=s.min_prompt_separation,
        effect_unit="2 * AUC - 1",
        prompt_space=vectors.space,
    )
    sig.direction = (
        ("prompts differ in wording" if vectors.space == HASHED_WORDS else "prompts differ in meaning")
        if sig.effect_size > 0
        else ""
    )
    return sig


def _inputs(
    base: Keyed,
    cur: Keyed,
    s: DriftSettings,
    route: str,
    multi_route: bool,
    *,
    clustered: bool = False,
    vectors: PromptVectors | None = None,
) -> list[Signal]:
    out: list[Signal] = []
    bl = [r.prompt_tokens for _, _, r in base if r.prompt_tokens is not None]
    cl = [r.prompt_tokens for _, _, r in cur if r.prompt_tokens is not None]
    if len(bl) >= s.min_samples and len(cl) >= s.min_samples:
        res = stats.compare_distributions(bl, cl)
        sig = Signal(
            "input:prompt_tokens",
            route,
            res.test,
            float(res.statistic),
            float(res.p_value),
            float(res.effect_size),
            res.n_baseline,
            res.n_current,
            family="inputs",
            detail=dict(res.detail),
            effect_kind=MEDIAN_CHANGE.kind,
            effect_unit=MEDIAN_CHANGE.unit,
        )
        sig.detail["min_effect"] = s.min_ks_distance
        # The median's move (the effect is relative to it, NaN for a baseline median of 0).
        sig.direction = higher_or_lower(float(res.detail["median_shift"]))
        out.append(sig)
    else:
        out.append(_insufficient("input:prompt_tokens", "inputs", MEDIAN_CHANGE, "ks", len(bl), len(cl), route))
    mixes: dict[str, Callable[[str, Row], str | None]] = {
        "category": lambda st, r: r.category,
        "model": lambda st, r: r.model,
        "language": lambda st, r: r.language,
    }
    if multi_route:
        mixes["route"] = lambda st, r: st.rsplit(" ", 1)[0]
    if clustered:
        mixes["prompt_cluster"] = lambda st, r: st.rsplit(" ", 1)[-1]
    for mix, key in mixes.items():
        bc = Counter(v for st, _, r in base if (v := key(st, r)) is not None)
        cc = Counter(v for st, _, r in cur if (v := key(st, r)) is not None)
        if len(set(bc) | set(cc)) < 2:
            continue  # one value everywhere: nothing can shift
        name = f"input:mix:{mix}"
        if sum(bc.values()) < s.min_samples or sum(cc.values()) < s.min_samples:
            out.append(
                _insufficient(
                    name, "inputs", MIX_DISTANCE, "chi2_categorical", sum(bc.values()), sum(cc.values()), route
                )
            )
            continue
        res = stats.compare_categorical(dict(bc), dict(cc))
        tvd = _tvd(bc, cc)
        shares = {
            k: [round(bc.get(k, 0) / sum(bc.values()), 4), round(cc.get(k, 0) / sum(cc.values()), 4)]
            for k in sorted(set(bc) | set(cc))
        }
        top = max(shares, key=lambda k: abs(shares[k][1] - shares[k][0]))
        out.append(
            Signal(
                name,
                route,
                res.test,
                float(res.statistic),
                float(res.p_value),
                tvd,
                res.n_baseline,
                res.n_current,
                family="inputs",
                stratum=top,
                detail={
                    "total_variation": round(tvd, 4),
                    "shares_baseline_current": shares,
                    "min_effect": s.min_mix_change,
                },
                effect_kind=MIX_DISTANCE.kind,
                effect_unit=MIX_DISTANCE.unit,
            )
        )
    if vectors is not None:
        out.append(_prompt_embedding(base, cur, vectors, s, route))
    return out


# ---------------------------------------------------------------------------- behaviour

PASS_RATE = Effect("difference", "pass rate (0.01 = 1 point)", "pass rate")
MODE_SHARE = Effect("difference", "share of the failure mode named (0.01 = 1 point)", "mode share")
SCORE_SHIFT = Effect("difference", "median score (check units)", "score")
TURN_SLOPE = Effect("difference", "slope, check pass share per turn", "slope")
ANSWER_DISTANCE = Effect("distance", "1 - cosine of the answer-embedding centroids", "1-cos")


def _by(rows: Keyed, key: Callable[[str, str], str], value: Callable[[Row], float | None]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for st, h, r in rows:
        v = value(r)
        if v is not None:
            out[key(st, h)].append(float(v))
    return out


def _tables(
    rows_b: Keyed, rows_c: Keyed, key: Callable[[str, str], str], check: str
) -> dict[str, tuple[int, int, int, int]]:
    cells: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for side, rows in ((0, rows_b), (2, rows_c)):
        for st, h, r in rows:
            if check in r.checks:
                c = cells[key(st, h)]
                c[side] += r.checks[check]
                c[side + 1] += 1
    return {k: (v[0], v[1], v[2], v[3]) for k, v in cells.items()}


def _passed(check: str) -> Callable[[Row], float | None]:
    return lambda r: float(r.checks[check]) if check in r.checks else None


def _interval(
    base: Mapping[str, Sequence[float]], cur: Mapping[str, Sequence[float]], kind: str, s: DriftSettings
) -> list[float] | None:
    """The effect's 95 % bootstrap interval, seeded with the settings' seed (the same run, the same interval)."""
    ci = effect_interval(base, cur, kind, draws=s.interval_draws, seed=s.seed) if s.interval_draws else None
    return None if ci is None else [round(ci[0], 6), round(ci[1], 6)]


def _score_of(check: str) -> Callable[[Row], float | None]:
    return lambda r: r.scores.get(check)


def _given_prompt(
    base: Keyed, cur: Keyed, vectors: PromptVectors | None, value: Callable[[Row], float | None], log: bool
) -> Callable[[Row], float | None]:
    """`value` with what the prompt predicts of it taken out (ridge on the prompt embedding, fitted
    on the baseline, cross-fitted): `value - f(prompt) + mean f` (on log1p for lengths).

    Within a prompt cluster the topics still differ, and answer length follows the topic: a
    current window of chattier questions has longer answers without any change of the model.
    Compared after the prompt's share is taken out, a change of topic moves the prediction, not
    the value compared. Rows without a prompt vector keep their value.
    """
    if vectors is None:
        return value
    pts = [(v, h, y) for _, h, r in base if (y := value(r)) is not None and (v := vectors.of(r)) is not None]
    if len(pts) < 100:
        return value
    ys = np.array([y for _, _, y in pts], dtype=float)
    offset = residualizer(
        np.stack([v for v, _, _ in pts]),
        np.log1p(np.maximum(ys, 0.0)) if log else ys,
        [h for _, h, _ in pts],
        penalty=vectors.penalty,
    )
    if offset is None:
        return value
    adjusted: dict[int, float] = {}
    for rows in (base, cur):
        have = [(r, h, v, y) for _, h, r in rows if (y := value(r)) is not None and (v := vectors.of(r)) is not None]
        if not have:
            continue
        offs = offset(np.stack([v for _, _, v, _ in have]), [h for _, h, _, _ in have])
        for (r, _, _, y), o in zip(have, offs):
            adjusted[id(r)] = float(np.expm1(np.log1p(max(y, 0.0)) - o)) if log else float(y - o)
    return lambda r: adjusted.get(id(r), value(r))


def _behaviour(  # noqa: C901
    base: Keyed,
    cur: Keyed,
    bstats: Mapping[str, RouteStats],
    cstats: Mapping[str, RouteStats],
    s: DriftSettings,
    route: str,
    needed_p: float,
    vectors: PromptVectors | None = None,
    alias: Mapping[str, str] | None = None,
) -> tuple[list[Signal], dict[str, Any]]:
    base_strata = Counter(st for st, _, _ in base)
    known = {st for st, n in base_strata.items() if n >= 5}
    # Prompts seen on both sides are strata of their own (matched prompts: the tightest
    # comparison there is); every other sample is compared within its category.
    base_hashes = Counter(h for _, h, _ in base)
    # A prompt asked on both sides is its own stratum, even once each (1:1 pairs: the paired
    # test of a successor version on the same prompt set).
    frequent = set(base_hashes) & {h for _, h, _ in cur}
    matched = sum(h in base_hashes for _, h, _ in cur) / len(cur) if cur else 0.0
    in_prompts = sum(h in frequent for _, h, _ in cur) / len(cur) if cur else 0.0
    by_stratum: Callable[[str, str], str] = lambda st, h: st  # noqa: E731
    key: Callable[[str, str], str] = lambda st, h: f"prompt {h}" if h in frequent else st  # noqa: E731
    c_rows = [t for t in cur if t[1] in frequent or t[0] in known]
    b_rows = base
    # Prompts that differ in meaning *inside* the strata (a topic shift within a cluster or
    # category) make an unmatched comparison measure the topic: then only matched prompts
    # (identical or near-duplicate) are comparable inputs.
    within = (
        _within_strata_shift(base, [t for t in cur if t[1] not in frequent], vectors, s)
        if vectors is not None
        else None
    )
    matched_only = within is not None and within["shifted"]
    if matched_only:
        c_rows = [t for t in cur if t[1] in frequent]
        b_rows = [t for t in base if t[1] in frequent]
    overlap = len(c_rows) / len(cur) if cur else 0.0
    paired = in_prompts >= s.match_fraction
    info = {
        "comparison": "matched prompts"
        if paired
        else "within strata"
        if not in_prompts
        else "within strata and matched prompts",
        "overlap": round(overlap, 4),
        "matched_fraction": round(matched, 4),
        "in_prompt_strata": round(in_prompts, 4),
        "strata_baseline": dict(sorted(base_strata.items())),
        "strata_current": dict(sorted(Counter(st for st, _, _ in cur).items())),
        "prompts_within_strata": within,
        "matched_only": matched_only,
    }
    if matched_only:
        info["comparison"] = "matched prompts only (prompts differ within strata)"
    out: list[Signal] = []
    short = overlap < s.min_overlap
    m = s.min_samples
    # The per-stratum view that names where a change is looks at the same rows the tests do.
    nb_rows, nc_rows = (b_rows, c_rows) if matched_only else (base, cur)

    def finish(sig: Signal, naming: Stratified | None, n_eff: float) -> Signal:
        # The pooled test decides; the per-category view names where the change is.
        if naming is not None and naming.worst_stratum:
            sig.stratum = naming.worst_stratum
            for k in ("worst_stratum_p", "worst_stratum_effect", "worst_stratum_shift"):
                if k in naming.detail:
                    sig.detail[k.replace("worst_", "")] = naming.detail[k]
            sig.detail["strata_named_among"] = naming.n_strata
        sig.n_effective = round(n_eff, 1)
        sig.detail["comparison"] = info["comparison"]
        return sig

    checks = sorted({c for _, _, r in base for c in r.checks})
    for check in checks:
        name = f"pass_rate:{check}"
        tables = _tables(b_rows, c_rows, key, check)
        nb, nc = sum(t[1] for t in tables.values()), sum(t[3] for t in tables.values() if t[1])
        res = cmh(tables) if not short else None
        if res is None or res.n_baseline < m or res.n_current < m:
            out.append(
                _insufficient(
                    name,
                    "behaviour",
                    PASS_RATE,
                    "cmh",
                    nb,
                    nc,
                    route,
                    reason="inputs barely overlap the baseline's" if short else "too few samples",
                )
            )
            continue
        sig = finish(
            _from(name, "behaviour", PASS_RATE, route, res, min_effect=s.min_pass_rate_change),
            cmh(_tables(nb_rows, nc_rows, by_stratum, check)),
            res.n_current,
        )
        # No difference names no direction (a check every answer passed on both sides).
        sig.direction = "better" if sig.effect_size > 0 else "worse" if sig.effect_size < 0 else ""
        passed = _passed(check)
        sig.effect_ci = _interval(_by(b_rows, key, passed), _by(c_rows, key, passed), "rate_difference", s)
        out.append(sig)
    continuous: list[tuple[str, Callable[[Row], float | None], float, bool]] = [
        ("output_tokens", lambda r: r.output_tokens, s.min_relative_change, True)
    ]  # relative: MEDIAN_CHANGE, else SCORE_SHIFT
    for check in sorted({c for _, _, r in base for c in r.scores}):
        continuous.append((f"score:{check}", _score_of(check), s.min_score_change, False))
    for name, raw, minimum, relative in continuous:
        value = _given_prompt(base, cur, vectors, raw, relative)
        bv, cv = _by(b_rows, key, value), _by(c_rows, key, value)
        res = van_elteren(bv, cv) if not short else None
        if res is None or res.n_baseline < m or res.n_current < m:
            out.append(
                _insufficient(
                    name,
                    "behaviour",
                    MEDIAN_CHANGE if relative else SCORE_SHIFT,
                    "van_elteren",
                    sum(map(len, bv.values())),
                    sum(map(len, cv.values())),
                    route,
                    reason="inputs barely overlap the baseline's" if short else "too few samples",
                )
            )
            continue
        if not relative:
            res.effect = float(res.detail["median_shift"])  # similarities: absolute change, in cosine units
        _, _, ess = reweighted_quantiles(bv, cv, (0.5,))
        naming = van_elteren(_by(nb_rows, by_stratum, value), _by(nc_rows, by_stratum, value))
        if naming is not None and not relative and "worst_stratum_shift" in naming.detail:
            naming.detail["worst_stratum_effect"] = naming.detail["worst_stratum_shift"]
        sig = finish(
            _from(
                name,
                "behaviour",
                MEDIAN_CHANGE if relative else SCORE_SHIFT,
                route,
                res,
                min_effect=minimum,
                effect_unit="fraction of median" if relative else "absolute",
                **(
                    {"given_prompt": "value less what the prompt embedding predicts (ridge, fitted on the baseline)"}
                    if value is not raw
                    else {}
                ),
            ),
            naming,
            ess,
        )
        sig.direction = higher_or_lower(sig.effect_size)
        sig.effect_ci = _interval(bv, cv, "relative_median_shift" if relative else "median_shift", s)
        out.append(sig)
    # Failure modes over every sample (errors included).
    fb: dict[str, Counter[str]] = defaultdict(Counter)
    fc: dict[str, Counter[str]] = defaultdict(Counter)
    # Per category, even where prompts match: a chi-square per prompt with a few answers is meaningless.
    for rows, target in ((b_rows, fb), (c_rows, fc)):
        for st, _h, r in rows:
            target[st][r.failure_mode] += 1
    res = stratified_chi2(fb, fc) if not short else None
    if res is None or res.n_baseline < m or res.n_current < m:
        out.append(
            _insufficient(
                "failure_modes",
                "behaviour",
                MODE_SHARE,
                "stratified_chi2",
                sum(sum(c.values()) for c in fb.values()),
                sum(sum(c.values()) for c in fc.values()),
                route,
            )
        )
    else:
        sig = finish(
            _from("failure_modes", "behaviour", MODE_SHARE, route, res, min_effect=s.min_pass_rate_change),
            stratified_chi2(_count_modes(nb_rows, by_stratum), _count_modes(nc_rows, by_stratum)),
            res.n_current,
        )
        # The effect is the change of one mode's share (detail "mode"): -0.08 is good news for
        # `refusal` and bad news for `ok`, so the row names the mode with its direction.
        moved = higher_or_lower(sig.effect_size)
        sig.direction = f"{sig.detail['mode']} share {moved}" if moved and sig.detail.get("mode") else ""
        out.append(sig)
    pv_b = {r.prompt_hash: v for _, _, r in base if vectors is not None and (v := vectors.of(r)) is not None}
    pv_c = {r.prompt_hash: v for _, _, r in cur if vectors is not None and (v := vectors.of(r)) is not None}
    # The answer embedding given the prompt (a 384 -> 384 ridge map) was built and measured on
    # MiniLM prompt vectors only; on hashed words (answer vectors without prompt vectors, e.g.
    # scores cached before prompts were) it keeps the stratified test on the raw answers.
    given = vectors is not None and vectors.space == MINILM
    out.append(
        _embedding(
            bstats,
            cstats,
            s,
            route,
            needed_p,
            short,
            frequent,
            {h: st for st, h, _ in (*base, *cur)},
            alias or {},
            (pv_b, pv_c) if given else None,
            matched_only,
        )
    )
    decay = _turn_decay(base, cur, s, route)
    if decay is not None:
        out.append(decay)
    return out, info


def _turn_points(rows: Keyed) -> tuple[list[str], list[int], list[float]]:
    cluster: list[str] = []
    turns: list[int] = []
    values: list[float] = []
    for _, _, r in rows:
        if r.ok and r.checks and r.conversation and r.turn is not None and r.turn <= TURN_DECAY_MAX_TURN:
            cluster.append(r.conversation)
            turns.append(r.turn)
            values.append(sum(r.checks.values()) / len(r.checks))
    return cluster, turns, values


def _turn_decay(base: Keyed, cur: Keyed, s: DriftSettings, route: str) -> Signal | None:
    """`turn_decay`: does quality fall faster (or slower) over a conversation's turns than it did?

    Each side's within-conversation slope of the sample's check pass share on its turn (1..10),
    with its cluster-bootstrap standard error (conversations resampled,
    llmwatch.scorers.stats.clustered); z = (current - baseline) / sqrt(se_b^2 + se_c^2), two-sided
    normal p. Effect: the change of slope, score per turn. Absent when neither side has a sample
    past turn 1 (no multi-turn traffic, or rows frozen before they kept turns).
    """
    pb, pc = _turn_points(base), _turn_points(cur)
    if not any(t > 1 for t in pb[1]) and not any(t > 1 for t in pc[1]):
        return None
    fb = cluster_bootstrap_slope(*pb, draws=500, seed=s.seed)
    fc = cluster_bootstrap_slope(*pc, draws=500, seed=s.seed)
    nb, nc = len(pb[0]), len(pc[0])
    if fb.slope is None or fc.slope is None or not fb.stderr or not fc.stderr or min(nb, nc) < s.min_samples:
        return _insufficient(
            "turn_decay",
            "behaviour",
            TURN_SLOPE,
            "cluster bootstrap z",
            nb,
            nc,
            route,
            reason="too few conversations with two turns or more",
            conversations_baseline=fb.clusters,
            conversations_current=fc.clusters,
        )
    diff = fc.slope - fb.slope
    se = math.sqrt(fb.stderr**2 + fc.stderr**2)
    z = diff / se
    p = float(math.erfc(abs(z) / math.sqrt(2.0)))
    return Signal(
        "turn_decay",
        route,
        "cluster bootstrap z",
        float(z),
        p,
        float(diff),
        nb,
        nc,
        direction="decays faster" if diff < 0 else "decays slower" if diff > 0 else "",
        # The interval of the same normal approximation the test uses.
        effect_ci=[round(diff - Z95 * se, 6), round(diff + Z95 * se, 6)],
        family="behaviour",
        detail={
            "baseline_slope": fb.slope,
            "current_slope": fc.slope,
            "baseline_ci": fb.ci,
            "current_ci": fc.ci,
            "conversations_baseline": fb.clusters,
            "conversations_current": fc.clusters,
            "unit": "check pass share per turn, within conversations, turns 1-10",
        },
        effect_kind=TURN_SLOPE.kind,
        effect_unit=TURN_SLOPE.unit,
    )


def _within_strata_shift(base: Keyed, cur: Keyed, vectors: PromptVectors, s: DriftSettings) -> dict[str, Any] | None:
    """Do the unmatched current prompts (`cur`) differ in meaning from the baseline's inside the strata?

    The prompt classifier, ranked within strata. `shifted` when significant at `alpha` and at
    least `max_unmatched_separation`: unmatched samples of one stratum then answer different
    questions, and comparing them would measure the topic. Matched prompts are left out: they
    are compared pair by pair whatever the rest does.
    """
    pb = [(st, h, v) for st, h, r in base if (v := vectors.of(r)) is not None]
    pc = [(st, h, v) for st, h, r in cur if (v := vectors.of(r)) is not None]
    if len(pb) < s.min_samples or len(pc) < s.min_samples:
        return None
    res = classifier_test(
        np.stack([v for _, _, v in pb]),
        np.stack([v for _, _, v in pc]),
        [h for _, h, _ in pb],
        [h for _, h, _ in pc],
        strata=([st for st, _, _ in pb], [st for st, _, _ in pc]),
        penalty=vectors.penalty,
    )
    if res is None:
        return None
    return {
        "separation": round(float(res.effect), 4),
        "p_value": float(f"{res.p_value:.3g}"),
        "shifted": bool(res.p_value < s.alpha and res.effect >= s.max_unmatched_separation),
    }


def _count_modes(rows: Keyed, key: Callable[[str, str], str]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for st, h, r in rows:
        out[key(st, h)][r.failure_mode] += 1
    return out


def _embedding(
    bstats: Mapping[str, RouteStats],
    cstats: Mapping[str, RouteStats],
    s: DriftSettings,
    route: str,
    needed_p: float,
    short: bool,
    frequent: set[str],
    strata: Mapping[str, str],
    alias: Mapping[str, str] | None = None,
    prompt_vectors: tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]] | None = None,
    matched_only: bool = False,
) -> Signal:
    """Answer embeddings compared within strata: a matched prompt, else the category.

    Answers to different questions differ by topic; comparing them across a changed mix measures
    the mix (issue 14: 7-10x more than a model change). The permutations stay inside strata.
    With prompt embeddings the answers are compared as residuals, answer - f(prompt), f a ridge
    map fitted on the baseline (cross-fitted, permutations within folds too): within a prompt
    cluster the topics still differ, and the residual is what the topic does not explain.
    """
    alias = alias or {}
    bx: list[list[float]] = []
    cx: list[list[float]] = []
    entries: tuple[list[tuple[str, str]], list[tuple[str, str]]] = ([], [])
    own: tuple[list[str], list[str]] = ([], [])  # each entry's own prompt hash (before near-duplicate matching)
    for routes, xs, es, hs in ((bstats, bx, entries[0], own[0]), (cstats, cx, entries[1], own[1])):
        for _route, st in sorted(routes.items()):
            e = st.embedding
            if e is None:
                continue
            cats = e.strata if len(e.strata) == len(e.reservoir) else [""] * len(e.reservoir)
            prompts = e.prompts if len(e.prompts) == len(e.reservoir) else [""] * len(e.reservoir)
            xs.extend(e.reservoir)
            hs.extend(prompts)
            # The stratum of the row with the same prompt (category or prompt cluster); a
            # near-duplicate of a baseline prompt is that prompt.
            es.extend(
                (strata.get(alias.get(h, h), f"{_route} {c}"), alias.get(h, h) if routes is cstats else h)
                for c, h in zip(cats, prompts)
            )
    # A prompt is its own stratum when both embedding reservoirs hold an answer to it; an answer
    # whose partner is not in the other reservoir stays in its category rather than being dropped.
    paired = {h for _, h in entries[0] if h in frequent} & {h for _, h in entries[1]}
    bk = [f"prompt {h}" if h in paired else c for c, h in entries[0]]
    ck = [f"prompt {h}" if h in paired else c for c, h in entries[1]]
    unfit = "no answer embeddings" if not bx or not cx else "inputs barely overlap the baseline's" if short else None
    if unfit is not None:
        return _insufficient(
            "embedding",
            "behaviour",
            ANSWER_DISTANCE,
            "mmd_stratified_permutation",
            len(bx),
            len(cx),
            route,
            reason=unfit,
        )
    shared = set(bk) & set(ck)
    if matched_only:
        shared = {k for k in shared if k.startswith("prompt ")}
    X = np.asarray([v for v, k in zip(bx, bk) if k in shared], dtype=np.float64)
    Y = np.asarray([v for v, k in zip(cx, ck) if k in shared], dtype=np.float64)
    sx, sy = [k for k in bk if k in shared], [k for k in ck if k in shared]
    if len(X) < s.min_samples or len(Y) < s.min_samples:
        return _insufficient(
            "embedding",
            "behaviour",
            ANSWER_DISTANCE,
            "mmd_stratified_permutation",
            len(X),
            len(Y),
            route,
            reason="too few samples in shared strata",
        )
    raw = (X, Y, sx, sy)
    how = "permutations within matched prompts and categories"
    if prompt_vectors is not None:
        hb = [h for (_, h), k in zip(entries[0], bk) if k in shared]
        hc = [h for h, k in zip(own[1], ck) if k in shared]
        fold_keys_c = [alias.get(h, h) for h in hc]
        pb = [prompt_vectors[0].get(h) for h in hb]
        pc = [prompt_vectors[1].get(h) for h in hc]
        kb = [p is not None for p in pb]
        kc = [p is not None for p in pc]
        if sum(kb) >= s.min_samples and sum(kc) >= s.min_samples:
            Pb = np.stack([p for p in pb if p is not None])
            Pc = np.stack([p for p in pc if p is not None])
            Xk, Yk = X[kb], Y[kc]
            hbk = [h for h, k in zip(hb, kb) if k]
            # Split-sample (see prompt_space.TEST_FOLDS): the map is fitted on one half of the
            # baseline and the other half is tested with the current answers of its prompts.
            model = CrossFitRidge.fit(Pb, Xk, hbk, folds=TEST_FOLDS)
            if model is not None:
                pred_b, fb = model.predict(Pb, hbk)
                pred_c, fc = model.predict(Pc, [h for h, k in zip(fold_keys_c, kc) if k])
                Rb, Rc = Xk - pred_b, Yk - pred_c
                skb = [k for k, keep in zip(sx, kb) if keep]
                skc = [k for k, keep in zip(sy, kc) if keep]
                halves = []
                for j in range(TEST_FOLDS):
                    ib, ic = np.flatnonzero(fb == j), np.flatnonzero(fc == j)
                    if len(ib) >= s.min_samples // 2 and len(ic) >= s.min_samples // 2:
                        halves.append(
                            stratified_mmd(
                                Rb[ib],
                                Rc[ic],
                                [skb[i] for i in ib],
                                [skc[i] for i in ic],
                                needed=needed_p / TEST_FOLDS,
                                seed=s.seed + j,
                                start=s.mmd_permutations,
                                most=s.max_permutations,
                            )
                        )
                if halves:
                    best = min(halves, key=lambda h: h.p_value)
                    res = stats.TestResult(
                        "mmd_residual_split",
                        best.statistic,
                        min(1.0, TEST_FOLDS * best.p_value),
                        best.effect_size,
                        len(X),
                        len(Y),
                        {
                            "permutations": sum(h.detail["permutations"] for h in halves),
                            "halves": len(halves),
                            "p_halves": [float(f"{h.p_value:.3g}") for h in halves],
                        },
                    )
                    how = "residuals after the prompt embedding (ridge fitted on one half of the baseline, the other half tested, Bonferroni over both), permutations within matched prompts and strata"
                    return _embedding_signal(res, raw, route, s, how)
    res = stratified_mmd(X, Y, sx, sy, needed=needed_p, seed=s.seed, start=s.mmd_permutations, most=s.max_permutations)
    return _embedding_signal(res, raw, route, s, how)


def _embedding_signal(
    res: stats.TestResult,
    raw: tuple[np.ndarray, np.ndarray, list[str], list[str]],
    route: str,
    s: DriftSettings,
    how: str,
) -> Signal:
    X, Y, sx, sy = raw
    # Effect: 1 - cosine between the centroids, each side's stratum centroids weighted by the baseline's mix.
    weights = Counter(sx)
    cb = sum(weights[k] * X[[i for i, v in enumerate(sx) if v == k]].mean(0) for k in weights)
    cc = sum(weights[k] * Y[[i for i, v in enumerate(sy) if v == k]].mean(0) for k in weights if k in set(sy))
    nb, nc = float(np.linalg.norm(cb)), float(np.linalg.norm(cc))
    cos = float(np.dot(cb, cc) / (nb * nc)) if nb and nc else 1.0
    return Signal(
        "embedding",
        route,
        res.test,
        float(res.statistic),
        float(res.p_value),
        1.0 - cos,
        res.n_baseline,
        res.n_current,
        family="behaviour",
        n_effective=float(len(Y)),
        detail={
            **res.detail,
            "centroid_cosine": round(cos, 4),
            "min_effect": s.min_embedding_distance,
            "comparison": how,
        },
        effect_kind=ANSWER_DISTANCE.kind,
        effect_unit=ANSWER_DISTANCE.unit,
    )


# ---------------------------------------------------------------------------- performance

# The location test's effect: the quantile change in the direction its z found, so that z, effect
# and direction agree (current minus baseline, as everywhere in the report): the larger of the p50
# and p95 changes where the current side ranks higher (z >= 0), the smaller where it ranks lower.
QUANTILE_CHANGE = Effect(
    "relative change", "larger of p50 and p95 (the smaller when lower), of the baseline's", "p50|p95"
)
# The tail test's effect, where it decided: the p95 change.
P95_CHANGE = Effect("relative change", "p95, of the baseline's", "p95")
LOCATION, TAIL = "location", "tail"


@dataclass
class PerformanceTests:
    """A performance signal's two tests and the effects each would show, until the correction
    decides which one the row shows (`_decide_performance`)."""

    location: Stratified
    tail: Stratified | None
    r50: float
    r95: float
    intervals: dict[str, list[float] | None]


def _bucket(r: Row) -> str:
    return f"input~2^{int(math.log2(r.prompt_tokens + 1))}" if r.prompt_tokens is not None else "input unknown"


def _performance(
    base: Keyed, cur: Keyed, s: DriftSettings, route: str, short: bool
) -> tuple[list[Signal], dict[str, PerformanceTests]]:
    """Each figure with two tests against the margin: van Elteren for its location, `upper_tail`
    for its p95. A slower median shows in the first; a tail that grew while the median stayed or
    fell only in the second (median -13 %, p95 +95 % reads z = -4.4 on the location test)."""
    out: list[Signal] = []
    tests: dict[str, PerformanceTests] = {}
    m = s.min_samples
    figures: list[tuple[str, Callable[[Row], float | None], Callable[[str, str, Row], str], bool]] = [
        ("perf:latency_per_token_ms", lambda r: r.ms_per_token, lambda st, h, r: st, True),
        ("perf:ttft_ms_by_input_length", lambda r: r.ttft_ms, lambda st, h, r: _bucket(r), True),
        ("perf:cost_per_1k_tokens", lambda r: r.cost_per_1k, lambda st, h, r: st, True),
        ("perf:latency_ms", lambda r: r.latency_ms, lambda st, h, r: "all", False),
        ("perf:ttft_ms", lambda r: r.ttft_ms, lambda st, h, r: "all", False),
        ("perf:cost_usd", lambda r: r.cost_usd, lambda st, h, r: "all", False),
    ]
    for name, value, key, decisive in figures:
        bv: dict[str, list[float]] = defaultdict(list)
        cv: dict[str, list[float]] = defaultdict(list)
        for rows, target in ((base, bv), (cur, cv)):
            for st, h, r in rows:
                v = value(r)
                if v is not None:
                    target[key(st, h, r)].append(float(v))
        nb, nc = sum(map(len, bv.values())), sum(map(len, cv.values()))
        if nb == 0 and nc == 0:
            continue  # the figure is not recorded at all (e.g. no TTFT without streaming, no prices)
        plain = van_elteren(bv, cv)
        if plain is None or plain.n_baseline < m or plain.n_current < m:
            sig = _insufficient(name, "performance", QUANTILE_CHANGE, "van_elteren", nb, nc, route)
            sig.decisive = decisive
            out.append(sig)
            continue
        # The margin is part of both tests (a shifted null): the current values divided by
        # 1 + margin against the baseline's, H0 "at most the margin slower". A point estimate
        # beyond the margin is not enough: from a few hundred samples a reweighted p95 moves
        # by more than 20 % on its own, and a real +10 % (load) is always "significant", so
        # +10 % read drift in 38 % of 300 x 300 windows (bench/drift_perf_tail.py).
        beyond = {k: [v / (1 + s.performance_margin) for v in vs] for k, vs in cv.items()}
        res = _against_margin(plain, van_elteren(bv, beyond))
        (b50, b95), (c50, c95), ess = reweighted_quantiles(bv, cv, (0.5, 0.95))
        r50 = c50 / b50 - 1 if b50 else 0.0
        r95 = c95 / b95 - 1 if b95 else 0.0
        sig = _from(
            name,
            "performance",
            QUANTILE_CHANGE,
            route,
            res,
            p50=[round(b50, 4), round(c50, 4)],
            p95=[round(b95, 4), round(c95, 4)],
            p50_change=round(r50, 4),
            p95_change=round(r95, 4),
            margin=s.performance_margin,
            reweighted="to the baseline's stratum mix" if decisive else "no",
        )
        tail = upper_tail(bv, beyond)
        sig.detail[LOCATION] = {
            "test": res.test,
            "statistic": round(float(res.statistic), 4),
            "p": float(res.p_value),
            # Context: the same test against no change (not corrected, never deciding).
            "unshifted_statistic": round(float(plain.statistic), 4),
            "unshifted_p": float(plain.p_value),
        }
        if tail is not None:
            unshifted = upper_tail(bv, cv)
            sig.detail[TAIL] = {
                "test": tail.test,
                "statistic": round(float(tail.statistic), 4),
                "p": float(tail.p_value),
                "current_above": tail.detail["current_above"],
                "baseline_above": tail.detail["baseline_above"],
                **(
                    {
                        "unshifted_statistic": round(float(unshifted.statistic), 4),
                        "unshifted_p": float(unshifted.p_value),
                    }
                    if unshifted is not None
                    else {}
                ),
            }
        sig.n_effective = round(ess, 1)
        sig.decisive = decisive
        if not decisive:
            sig.stratum = ""  # raw totals are not stratified
        ci = (
            quantile_change_intervals(bv, cv, draws=s.interval_draws, seed=s.seed)
            if s.interval_draws
            else dict.fromkeys(("quantile_change", "quantile_fall", "p95_change"))
        )
        intervals = {k: None if v is None else [round(v[0], 6), round(v[1], 6)] for k, v in ci.items()}
        tests[name] = PerformanceTests(res, tail, r50, r95, intervals)
        _show_location(sig, tests[name])
        out.append(sig)
    return out, tests


def _against_margin(plain: Stratified, up: Stratified | None) -> Stratified:
    """The location test against the margin, as one two-sided hypothesis for the correction.

    `up` is van Elteren on the current values divided by 1 + margin: its z > 0 says the current
    side is slower than the margin allows, and that z (with its p-value) is the test's. A slower
    change inside the margin is no finding: z = 0, p = 1 (the shifted z, negative there, would
    stand against the effect's sign). A faster side keeps the plain z, read as before (a canary
    faster per token is named better; it never fails a run)."""
    if up is not None and up.statistic > 0:
        return replace(plain, statistic=up.statistic, p_value=up.p_value)
    if plain.statistic < 0:
        return plain
    return replace(plain, statistic=0.0, p_value=1.0)


def _show_location(sig: Signal, t: PerformanceTests) -> None:
    """The row shows the location test: the p50/p95 change in the direction of its z.

    Ranks and two quantiles need not agree near z = 0 (in 5 % of unchanged 300-sample windows
    both quantiles moved against z): the effect is then 0, neither quantile moved the way the
    test found, and the interval is clamped alike, never a sign against the statistic's."""
    up = t.location.statistic >= 0
    sig.test, sig.statistic, sig.p_value = t.location.test, float(t.location.statistic), float(t.location.p_value)
    clamp: Callable[..., float] = max if up else min
    sig.effect_size = clamp(t.r50, t.r95, 0.0)
    ci = t.intervals["quantile_change" if up else "quantile_fall"]
    sig.effect_ci = None if ci is None else [clamp(ci[0], 0.0), clamp(ci[1], 0.0)]
    sig.effect_kind, sig.effect_unit = QUANTILE_CHANGE.kind, QUANTILE_CHANGE.unit
    sig.direction = higher_or_lower(sig.effect_size)  # an unchanged figure said "lower"


def _decide_performance(sig: Signal, t: PerformanceTests, p_location: float, p_tail: float, s: DriftSettings) -> str:
    """Which test finds a regression, "" if neither; the row then shows that test.

    `p_location` and `p_tail` are the tests' p-values as the verdict reads them (adjusted, or
    raw for context rows), both tests against the margin (`_performance`). A regression: the
    location test significant with the current side higher and p50 or p95 more than the margin
    higher; or the tail test significant (it is one-sided: heavier) and p95 more than the margin
    higher. Each row's statistic, effect and direction are the deciding test's, so they share one
    sign.
    """
    # The row already shows the location test (`_performance`); only the tail's win changes it.
    margin = s.performance_margin
    if p_location < s.alpha and t.location.statistic > 0 and max(t.r50, t.r95) > margin:
        return LOCATION
    if t.tail is not None and p_tail < s.alpha and t.tail.statistic > 0 and t.r95 > margin:
        sig.test, sig.statistic, sig.p_value = t.tail.test, float(t.tail.statistic), float(t.tail.p_value)
        sig.effect_size, sig.effect_ci = t.r95, t.intervals["p95_change"]
        sig.effect_kind, sig.effect_unit = P95_CHANGE.kind, P95_CHANGE.unit
        sig.direction = higher_or_lower(sig.effect_size)
        return TAIL
    return ""


def _tests_of(sig: Signal, perf_tests: Mapping[str, PerformanceTests]) -> PerformanceTests | None:
    """A performance signal's two tests; None for a signal of another family."""
    return perf_tests.get(sig.name) if sig.family == "performance" else None


def _performance_verdict(sig: Signal, t: PerformanceTests, p_location: float, p_tail: float, s: DriftSettings) -> bool:
    """Decide a decisive performance signal from its two adjusted p-values; True: a regression."""
    which = _decide_performance(sig, t, p_location, p_tail, s)
    sig.detail[LOCATION]["p_adjusted"] = p_location
    if TAIL in sig.detail:
        sig.detail[TAIL]["p_adjusted"] = p_tail
    # The row's adjusted p-value is its shown test's (the location test's unless the tail decided).
    sig.p_adjusted = p_tail if which == TAIL else p_location
    sig.detail["decided_by"] = which
    return bool(which)


# ---------------------------------------------------------------------------- all together


def _material(sig: Signal, s: DriftSettings) -> bool:
    """The pooled effect is material, or the named stratum's own effect is (and is no accident there).

    A change confined to one category is diluted in the pooled, mix-weighted effect; it still
    counts when that category alone shows it significantly (Bonferroni over the categories).
    """
    if _material_effect(sig, sig.effect_size, s):
        return True
    p, effect, among = (
        sig.detail.get("stratum_p"),
        sig.detail.get("stratum_effect"),
        sig.detail.get("strata_named_among", 1),
    )
    return (
        sig.family == "behaviour"
        and p is not None
        and effect is not None
        and p * max(1, among) < s.alpha
        and _material_effect(sig, effect, s)
    )


def _material_effect(sig: Signal, effect: float, s: DriftSettings) -> bool:
    if sig.family == "inputs":
        if sig.name in ("input:prompt_embedding", "input:prompt_words"):
            return effect >= s.min_prompt_separation
        return sig.statistic >= s.min_ks_distance if sig.name == "input:prompt_tokens" else effect >= s.min_mix_change
    if sig.name.startswith("pass_rate:") or sig.name == "failure_modes":
        return abs(effect) >= s.min_pass_rate_change
    if sig.name == "embedding":
        return effect >= s.min_embedding_distance
    if sig.name == "turn_decay":
        # The pass share a conversation gains or loses by turn 10 because of the change.
        return abs(effect) * (TURN_DECAY_MAX_TURN - 1) >= s.min_pass_rate_change
    if sig.name.startswith("score:"):
        return abs(effect) >= s.min_score_change
    return abs(effect) >= s.min_relative_change


def family_signals(  # noqa: C901
    baseline_routes: Mapping[str, RouteStats], current_routes: Mapping[str, RouteStats], s: DriftSettings
) -> tuple[list[Signal], dict[str, dict[str, Any]]]:
    """Every signal of the three families, decided; and per family its verdict and context."""
    all_routes = {r for r, st in baseline_routes.items() if st.rows} | {
        r for r, st in current_routes.items() if st.rows
    }
    multi = len(all_routes) > 1
    route = next(iter(all_routes)) if len(all_routes) == 1 else "*"
    # Strata: the category tags where the traffic has them; otherwise prompt clusters frozen with
    # the baseline, so that untagged traffic is still compared like with like.
    base_rows = [r for rs in baseline_routes.values() for r in rs.rows]
    cur_rows = [r for rs in current_routes.values() for r in rs.rows]
    # Prompt embeddings when both sides carry them (embeddings on at freeze and at drift time):
    # semantic clusters, near-duplicate matching, the inputs embedding signal, behaviour given the
    # prompt. Without them everything below is lexical, as before.
    # Without embeddings (embeddings off, the slim install) rows carry hashed-words vectors instead,
    # and the same machinery runs on them. A baseline and a window of different spaces are not
    # compared on vectors (the baseline keeps no prompt text to recompute them): lexical, with a note.
    space_b, space_c = _vector_space(base_rows), _vector_space(cur_rows)
    vectors = PromptVectors([*base_rows, *cur_rows], space_b) if space_b and space_b == space_c else None
    mismatch = bool(space_b and space_c and space_b != space_c)
    near_cosine = (
        s.near_duplicate_cosine if vectors is None or vectors.space == MINILM else HASHED_NEAR_DUPLICATE_COSINE
    )
    clusters = None
    if base_rows and all(r.category == UNCATEGORIZED for r in base_rows):
        clusters = (
            semantic_prompt_clusters(base_rows, vectors, seed=s.seed) if vectors is not None else None
        ) or prompt_clusters(base_rows, seed=s.seed)
    label: Callable[[Row], str] = clusters or (lambda r: r.category)
    base, cur = _rows(baseline_routes, multi, label), _rows(current_routes, multi, label)
    alias = _near_duplicates(base_rows, cur_rows, vectors, near_cosine) if vectors is not None else {}
    cur = [(st, alias.get(h, h), r) for st, h, r in cur]
    fams: dict[str, dict[str, Any]] = {f: {"verdict": "insufficient", "signals": []} for f in FAMILIES}
    if not base:
        for f in FAMILIES:
            fams[f]["reason"] = (
                "the baseline has no per-sample rows (frozen by an older llmwatch); refreeze it with `llmwatch baseline freeze`"
            )
        return [], fams
    if not cur:
        return [], fams
    # A rough count of the tests the decisive group will hold, for the adaptive permutations:
    # they stop once the embedding p-value cannot reach what Holm's first step needs.
    decisive_guess = (
        3 + len({c for _, _, r in base for c in r.checks}) + len({c for _, _, r in base for c in r.scores}) + 3
    )
    signals = _inputs(base, cur, s, route, multi, clustered=clusters is not None, vectors=vectors)
    behaviour, info = _behaviour(
        base, cur, baseline_routes, current_routes, s, route, s.alpha / decisive_guess, vectors, alias
    )
    base_hashes = {r.prompt_hash for r in base_rows}
    info["exact_match_fraction"] = round(sum(r.prompt_hash in base_hashes for r in cur_rows) / len(cur_rows), 4)
    info["near_duplicate_fraction"] = round(sum(r.prompt_hash in alias for r in cur_rows) / len(cur_rows), 4)
    if vectors is not None and vectors.space == HASHED_WORDS:
        info["prompt_space"] = f"hashed words (no prompt embeddings; near duplicates at cosine >= {near_cosine})"
    elif vectors is not None:
        info["prompt_space"] = f"prompt embeddings (near duplicates at cosine >= {near_cosine})"
    elif mismatch:
        info["prompt_space"] = (
            f"lexical (normalised-text hash, SimHash clusters): the baseline's prompt vectors are {space_b}, the window's {space_c}, and vectors "
            f"of two spaces are not compared; freeze and run drift with the same scoring.embeddings setting"
        )
    else:
        info["prompt_space"] = "lexical (normalised-text hash, SimHash clusters)"
    signals += behaviour
    performance, perf_tests = _performance(base, cur, s, route, info["overlap"] < s.min_overlap)
    signals += performance
    # Holm: the decisive signals of the failing families together, each other family alone. A
    # performance signal brings two hypotheses, its location test and its tail test: both enter
    # the correction, so adding the tail test costs the other signals some power, not the run alpha.
    fail_on = [f for f in FAMILIES if f in s.fail_on]
    groups = [[g for g in signals if g.family in fail_on and g.decisive]] + [
        [g for g in signals if g.family == f and g.decisive] for f in FAMILIES if f not in fail_on
    ]
    for group in groups:
        tested = [g for g in group if not math.isnan(g.p_value)]
        if not tested:
            continue
        hypotheses = [(g, LOCATION, g.p_value) for g in tested] + [
            (g, TAIL, t.tail.p_value)
            for g in tested
            if (t := _tests_of(g, perf_tests)) is not None and t.tail is not None
        ]
        adjusted = stats.adjust_pvalues([p for _, _, p in hypotheses], method=s.correction)
        p_adj = {(id(g), which): float(p) for (g, which, _), p in zip(hypotheses, adjusted)}
        for sig in tested:
            t = _tests_of(sig, perf_tests)
            if t is not None:
                hit = _performance_verdict(sig, t, p_adj[(id(sig), LOCATION)], p_adj.get((id(sig), TAIL), math.nan), s)
            else:
                sig.p_adjusted = p_adj[(id(sig), LOCATION)]
                hit = sig.p_adjusted < s.alpha and _material(sig, s)
            sig.verdict = ("shifted" if sig.family == "inputs" else "drift") if hit else "stable"
    for sig in signals:
        if not sig.decisive and not math.isnan(sig.p_value):
            # Context: raw p-value, "changed" beyond the margin, never a verdict of the family.
            t = _tests_of(sig, perf_tests)
            if t is not None:
                which = _decide_performance(
                    sig, t, t.location.p_value, math.nan if t.tail is None else t.tail.p_value, s
                )
                sig.detail["decided_by"] = which
                changed = bool(which)
            else:
                changed = sig.p_value < s.alpha and _material(sig, s)
            sig.verdict = "changed" if changed else "stable"
    for f in FAMILIES:
        mine = [g for g in signals if g.family == f]
        decided = [g for g in mine if g.decisive and not math.isnan(g.p_adjusted)]
        bad = "shifted" if f == "inputs" else "drift"
        if any(g.verdict == bad for g in decided):
            verdict = bad
        elif decided and not (f == "behaviour" and info["overlap"] < s.min_overlap):
            verdict = "stable"
        else:
            verdict = "insufficient"
        fams[f] = {"verdict": verdict, "signals": [g.name for g in _ranked(mine)]}
        if not any(g.decisive for g in mine):
            fams[f]["reason"] = "nothing to compare: the samples record none of the figures that decide this family"
            fams[f]["recorded"] = False
    fams["behaviour"].update(
        {
            k: info[k]
            for k in (
                "comparison",
                "overlap",
                "matched_fraction",
                "in_prompt_strata",
                "exact_match_fraction",
                "near_duplicate_fraction",
                "prompt_space",
                "prompts_within_strata",
            )
        }
    )
    fams["inputs"].update({k: info[k] for k in ("strata_baseline", "strata_current")})
    if fams["behaviour"]["verdict"] == "insufficient" and info["overlap"] < s.min_overlap:
        if info["matched_only"]:
            fams["behaviour"]["reason"] = (
                f"the prompts differ in meaning within strata (prompt separation {info['prompts_within_strata']['separation']:.2f}), so only matched prompts are "
                f"comparable, and only {info['overlap']:.0%} of current samples repeat or nearly repeat a baseline prompt (at least {s.min_overlap:.0%} needed)"
            )
        else:
            fams["behaviour"]["reason"] = (
                f"only {info['overlap']:.0%} of current samples fall in strata the baseline knows (at least {s.min_overlap:.0%} needed)"
            )
    return _ranked(signals), fams


def _vector_space(rows: Sequence[Row]) -> str:
    """The prompt-vector space that at least SEMANTIC_SHARE of the rows carry, "" if none does."""
    if not rows:
        return ""
    spaces = Counter(space_of(r) for r in rows)
    best, n = spaces.most_common(1)[0]
    return best if best and n / len(rows) >= SEMANTIC_SHARE else ""


def _near_duplicates(
    base_rows: Sequence[Row], cur_rows: Sequence[Row], vectors: PromptVectors, threshold: float
) -> dict[str, str]:
    """Current prompt hash -> the hash of the baseline prompt it nearly duplicates (cosine >= threshold).

    Only prompts the baseline never saw verbatim are matched; an exact match always wins.
    """
    known = {r.prompt_hash for r in base_rows}
    bvec = [(r.prompt_hash, v) for r in base_rows if (v := vectors.of(r)) is not None]
    cand: dict[str, np.ndarray] = {}
    for r in cur_rows:
        if r.prompt_hash not in known and r.prompt_hash not in cand and (v := vectors.of(r)) is not None:
            cand[r.prompt_hash] = v
    if not cand or not bvec:
        return {}
    best, cos = near_duplicates(np.stack(list(cand.values())), np.stack([v for _, v in bvec]), threshold)
    return {h: bvec[i][0] for h, i, c in zip(cand, best, cos) if c >= threshold}


def _ranked(signals: Sequence[Signal]) -> list[Signal]:
    order = {"drift": 0, "shifted": 1, "changed": 2, "stable": 3, "insufficient": 4}
    return sorted(
        signals,
        key=lambda g: (
            order.get(g.verdict, 5),
            math.isnan(g.p_adjusted),
            g.p_adjusted if not math.isnan(g.p_adjusted) else 1.0,
            -abs(g.effect_size) if not math.isnan(g.effect_size) else 0.0,
        ),
    )
