"""Prompt sensitivity: does rephrasing the same request change the quality of the answer?

From live samples, per model version:

1. **Phrasings.** Samples of one route whose normalised request is the same
   (`stability.prompt_hash`: roles and whitespace-collapsed text, output format, tool names) are
   one phrasing asked again: a re-ask, not a rephrasing. They are collapsed first into one value,
   the mean of their sample scores, so the answer's own randomness on re-asks (the sampling
   stability figure, and the consistency probe's) is averaged down, not counted as sensitivity.
2. **Clusters.** Phrasings of the same request are grouped into near-duplicate clusters, by the
   request's text (every message, roles kept), route by route:

   * with an embedding function (the report's MiniLM model, when `scoring.embeddings` is on and
     the model loads; otherwise the lexical rule below, with a `sensitivity_lexical_fallback` log):
     leader clustering in a fixed order (phrasings sorted by their hash), a phrasing joining the
     first leader whose cosine is at least `cosine_threshold` (0.9) through
     `drift.prompt_space.near_duplicates`, or becoming a leader. The texts are embedded 2,048 at
     a time and only the leaders are kept (float32): memory grows with the clusters, not the
     phrasings, and past 200,000 leaders a phrasing that matches none is left out, counted in
     the figure's `method` (it could gather no rephrasing);
   * without (the rules-only path): phrasings with the same *normalised token set*
     (lower case, words only, order and repeats ignored) are one cluster: case, punctuation,
     spacing and word order changes are caught, synonyms are not.

   Only clusters with two distinct phrasings or more count.
3. **The figure.** Over the k counted clusters (cluster c has m_c >= 2 phrasing values y_cp,
   scores in 0..1):

       d_c = mean over the pairs p < q of |y_cp - y_cq|      (2 / (m_c (m_c - 1)) sum_{p<q} ...)
       sensitivity = (1 / k) sum_c d_c

   the expected quality difference between two rephrasings of one request, in score units
   (the spread measure of prompt-sensitivity studies such as ProSA's PromptSensiScore, over live
   traffic): 0 when every rephrasing of a request is answered equally well (robust), up to 1
   when one phrasing always passes and another always fails. Every request counts once.
   Against it, `between_spread`: the same mean absolute difference between the means of two
   *different* clusters (how much quality differs from request to request), and `within_share`:
   the within-cluster share of score variance from a one-way random-effects analysis of variance
   (MSW / (MSW + max(0, (MSB - MSW) / n0)), one minus ICC(1)): near 1 when phrasing explains
   as much as the request does. The share is shown, not used as the figure: where requests are
   all about equally hard, a robust version's small sampling noise alone makes it near 1.
   Phrasing values still carry the answers' sampling noise (divided by their re-asks), so a
   version with noisy answers has a floor above 0: read it beside the sampling stability figure.
4. **Interval.** A 95% percentile bootstrap that resamples *clusters* (the unit: phrasings of
   one request are not independent), `draws` multinomial draws from a seeded generator, so the
   same samples give the same interval. `verdict`: `insufficient` below `min_clusters` (3)
   clusters, else `measured`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import structlog

from llmwatch.core.wire import content_to_text
from llmwatch.scorers.evaluation.matrix import ScoredSample, request_messages
from llmwatch.scorers.evaluation.stability import prompt_hash

__all__ = [
    "COSINE_THRESHOLD",
    "MIN_CLUSTERS",
    "PromptSensitivity",
    "lexical_key",
    "prompt_sensitivity",
    "replace_widest",
    "request_text",
    "sensitivity_figure",
    "sensitivity_text",
    "version_sensitivity",
]

log = structlog.get_logger(__name__)

COSINE_THRESHOLD = 0.9
MIN_CLUSTERS = 3
_WORD = re.compile(r"[^\W_]+")
_BLOCK = 256  # phrasings compared with the earlier leaders in one matrix product
EMBED_BLOCK = 2048  # texts per call of the embedding function
MAX_LEADERS = 200_000  # leaders held (float32, 1.5 KB each at 384 dimensions); past it no new leader
_LEADER_CHUNK = 4096  # leaders per stored chunk (and per product with a block of rows)

Embed = Callable[[list[str]], Any]


@dataclass(frozen=True)
class PromptSensitivity:
    model_version: str
    verdict: str  # measured | insufficient
    sensitivity: float | None  # mean absolute quality difference between two rephrasings, 0..1
    ci: tuple[float, float] | None
    clusters: int  # clusters with two distinct phrasings or more (they inform the figure)
    phrasings: int  # distinct phrasings in those clusters
    samples: int  # samples behind those phrasings (re-asks included)
    within_share: float | None = None  # within-cluster share of score variance (1 - ICC(1))
    between_spread: float | None = None  # mean absolute difference between two requests' means
    # The clusters with the widest spread of phrasing means: {"prompt", "phrasings", "min", "max"}.
    widest: list[dict[str, Any]] = field(default_factory=list)
    method: str = "mean absolute score difference between rephrasings of one request; 95% cluster bootstrap, 1000 draws"


def request_text(request: Any) -> str:
    """Every message of the request as `role: text` lines (the text clustering compares)."""
    return "\n".join(f"{m.get('role', 'user')}: {content_to_text(m.get('content'))}" for m in request_messages(request))


def lexical_key(text: str) -> str:
    """The normalised token set: phrasings that differ in case, punctuation, spacing or word order share it."""
    words = sorted({w.lower() for w in _WORD.findall(text)})
    return hashlib.blake2b(" ".join(words).encode(), digest_size=12).hexdigest()


def _clusters(
    texts: Sequence[str],
    embed: Embed | None,
    threshold: float,
    lexical: Callable[[str], Any] = lexical_key,
    *,
    embed_block: int = EMBED_BLOCK,
    max_leaders: int | None = None,
) -> tuple[list[int], int]:
    """A cluster index per text (texts in a fixed order; the result is deterministic), and how many
    texts matched no leader once `max_leaders` (default MAX_LEADERS) leaders were held (each a
    cluster of its own).
    `lexical`: the key that groups texts without embeddings (the streamed report passes keys
    already made)."""
    if embed is None:
        ids: dict[Any, int] = {}
        return [ids.setdefault(lexical(t), len(ids)) for t in texts], 0
    from llmwatch.scorers.drift.prompt_space import near_duplicates

    cap = MAX_LEADERS if max_leaders is None else max_leaders
    # Leader clustering, a block of rows at a time: one product of the block against the leaders
    # found before it, then each row against the few leaders its own block made. The same
    # clusters as comparing row by row (each row's most similar leader so far; ties to the
    # earlier one), without copying the leaders for every row: that was quadratic with a large
    # constant (2,000 distinct phrasings took 16 s, 4,000 took 48 s).
    #
    # Bounded memory: the texts are embedded `embed_block` at a time and each block's vectors are
    # dropped once its rows are placed; only the leaders (the clusters' first members) are kept,
    # as float32 (1.5 KB a leader at 384 dimensions) in fixed chunks, so what is held grows with
    # the clusters, not with the phrasings. Holding every vector (a float64 copy, its normalised
    # copy and a leaders matrix as large) took about 10 KB a phrasing: 5 GB at a million samples.
    # Past `max_leaders` leaders (200,000: 293 MB) a text that matches no leader is a cluster of
    # its own without leading: later rephrasings of it cannot join it (they are counted and said
    # in the figure's method), so the memory holds whatever the input.
    #
    # The cosines are computed in float64 against the float32 leaders: they differ from the
    # all-float64 computation by about 1e-7, and with the real model a text's vector also depends
    # by about 1e-7 on the batch it is embedded with (its padding), so a pair within that of the
    # threshold could fall the other way than when every text was embedded in one call. With an
    # embedder that gives a text the same vector whatever its batch, and no cosine that close to
    # the threshold, the clusters are the same as before.
    chunks: list[np.ndarray] = []  # leaders, float32, _LEADER_CHUNK rows each (the last one filling)
    n_leaders = 0
    unled = 0
    n_clusters = 0
    out: list[int] = []
    for at in range(0, len(texts), embed_block):
        try:
            X = np.asarray(embed(list(texts[at : at + embed_block])), dtype=float)
        except Exception as exc:  # the model or its extra missing: the lexical clusters, said in the log
            log.warning("sensitivity_lexical_fallback", error=f"{type(exc).__name__}: {exc}")
            return _clusters(texts, None, threshold)
        X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
        # The whole embedded block against the leaders held before it, a chunk at a time (each
        # chunk made float64 once per block); later sets of leaders win only when strictly closer,
        # so a tie stays with the earlier leader.
        best = np.full(len(X), -1)
        cos = np.full(len(X), -np.inf)
        for c, chunk in enumerate(chunks):
            held = chunk[: min(_LEADER_CHUNK, n_leaders - c * _LEADER_CHUNK)].astype(float)
            _closer(best, cos, *near_duplicates(X, held, threshold, block=_BLOCK * 2), c * _LEADER_CHUNK)
            del held
        # The leaders this block makes (their cluster index: n_leaders + their row here).
        fresh = np.empty((min(len(X), max(0, cap - n_leaders)), X.shape[1]), dtype=np.float32)
        n_fresh = 0
        for start in range(0, len(X), _BLOCK):
            rows = X[start : start + _BLOCK]
            stop = start + len(rows)
            before = n_fresh
            if before:  # against the leaders earlier rows of this block made
                b, s = near_duplicates(rows, fresh[:before].astype(float), threshold)
                _closer(best[start:stop], cos[start:stop], b, s, n_leaders)
            for j in range(len(rows)):
                b_j, cos_j = int(best[start + j]), float(cos[start + j])
                if n_fresh > before:  # and those its own rows made, one at a time
                    sims = fresh[before:n_fresh] @ rows[j]
                    k = int(sims.argmax())
                    if sims[k] > cos_j:
                        b_j, cos_j = n_leaders + before + k, float(sims[k])
                if b_j >= 0 and cos_j >= threshold:
                    out.append(b_j)
                    continue
                out.append(n_clusters)
                n_clusters += 1
                if n_fresh < len(fresh):  # leaders come before any unled cluster: index = cluster
                    fresh[n_fresh] = rows[j]
                    n_fresh += 1
                else:
                    unled += 1
        for k in range(n_fresh):  # into the chunks, a new one when the last is full
            if n_leaders % _LEADER_CHUNK == 0:
                chunks.append(np.empty((_LEADER_CHUNK, X.shape[1]), dtype=np.float32))
            chunks[-1][n_leaders % _LEADER_CHUNK] = fresh[k]
            n_leaders += 1
        del X, fresh
    return out, unled


def _closer(best: np.ndarray, cos: np.ndarray, b: np.ndarray, s: np.ndarray, offset: int) -> None:
    """Where `s` (cosines with a later set of leaders, `b` their index from `offset`) is strictly
    higher than `cos`, take it (in place)."""
    better = s > cos
    best[better] = b[better] + offset
    cos[better] = s[better]


def _pairwise(v: np.ndarray) -> float:
    """Mean absolute difference over the pairs of `v` (len >= 2), by sorting: O(m log m)."""
    x = np.sort(v)
    m = len(x)
    return float((2.0 * np.arange(1, m + 1) - m - 1) @ x * 2.0 / (m * (m - 1)))


def sensitivity_figure(
    values: Sequence[Sequence[float]], *, draws: int = 1000, seed: int = 0, confidence: float = 0.95
) -> tuple[float | None, tuple[float, float] | None, float | None, float | None]:
    """(sensitivity, interval, within_share, between_spread) of phrasing values grouped by cluster
    (see the module doc). Clusters with fewer than two values are left out; None below two clusters."""
    groups = [np.asarray(v, dtype=float) for v in values if len(v) >= 2]
    k = len(groups)
    if k < 2:
        return None, None, None, None
    d = np.array([_pairwise(g) for g in groups])
    rng = np.random.default_rng(seed)
    boot = []
    for start in range(0, draws, 256):
        n = min(256, draws - start)
        boot.append(d[rng.integers(0, k, size=(n, k))].mean(1))
    tail = (1.0 - confidence) / 2.0
    dist = np.concatenate(boot)
    ci = (float(np.quantile(dist, tail)), float(np.quantile(dist, 1.0 - tail)))
    return float(d.mean()), ci, _within_share(groups), _pairwise(np.array([g.mean() for g in groups]))


def _within_share(groups: Sequence[np.ndarray]) -> float:
    """MSW / (MSW + max(0, (MSB - MSW) / n0)); 0 when every value is the same."""
    k = len(groups)
    m = np.array([len(g) for g in groups], dtype=float)
    n = m.sum()
    grand = sum(float(g.sum()) for g in groups) / n
    msw = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / (n - k)
    msb = sum(len(g) * (float(g.mean()) - grand) ** 2 for g in groups) / (k - 1)
    n0 = (n - float((m * m).sum()) / n) / (k - 1)
    between = max(0.0, (msb - msw) / n0)
    total = msw + between
    return msw / total if total > 1e-15 else 0.0


def prompt_sensitivity(
    rows: Sequence[ScoredSample],
    values: Mapping[str, Mapping[str, float]] | None = None,
    *,
    embed: Embed | None = None,
    cosine_threshold: float = COSINE_THRESHOLD,
    min_clusters: int = MIN_CLUSTERS,
    draws: int = 1000,
    seed: int = 0,
) -> list[PromptSensitivity]:
    """Per version, the prompt sensitivity of its scored samples (see the module doc).

    A sample's score is the mean of its check values over the checks that judged every sample of
    its cluster (from `turns.check_values(scores)`, so a check that ran on some phrasings only
    cannot pose as sensitivity); given no values, or none in common, the matrix score.
    """
    by_version: dict[str, list[ScoredSample]] = defaultdict(list)
    for row in rows:
        by_version[row.version].append(row)
    out = []
    for version, items in sorted(by_version.items()):
        # A phrasing is one request on one route: a completion and a chat of the same text are
        # different requests, clustered apart.
        by_phrasing: dict[tuple[str, Any], list[ScoredSample]] = defaultdict(list)
        phrasing_text: dict[tuple[str, Any], str] = {}
        for r in items:
            key = (r.sample.route, prompt_hash(r.sample.request))
            by_phrasing[key].append(r)
            phrasing_text.setdefault(key, request_text(r.sample.request))
        figure, widest = version_sensitivity(
            version,
            by_phrasing,
            phrasing_text.__getitem__,
            (lambda r: values.get(r.sample.id, {})) if values is not None else None,
            lambda r: r.score,
            embed=embed,
            cosine_threshold=cosine_threshold,
            min_clusters=min_clusters,
            draws=draws,
            seed=seed,
        )
        out.append(replace_widest(figure, {k: phrasing_text[k] for k in widest}, widest))
    return out


def version_sensitivity(
    version: str,
    by_phrasing: Mapping[tuple[str, Any], Sequence[Any]],
    cluster_text: Callable[[tuple[str, Any]], Any],
    values_of: Callable[[Any], Mapping[str, float]] | None,
    score_of: Callable[[Any], float | None],
    *,
    embed: Embed | None = None,
    lexical: Callable[[str], Any] = lexical_key,
    cosine_threshold: float = COSINE_THRESHOLD,
    min_clusters: int = MIN_CLUSTERS,
    draws: int = 1000,
    seed: int = 0,
) -> tuple[PromptSensitivity, list[tuple[str, Any]]]:
    """One version's figure from its phrasings: (route, prompt hash) -> its samples (any record:
    `values_of` and `score_of` read them), and the keys of the widest clusters' first phrasings,
    whose texts the caller puts in `widest` (`replace_widest`). Keys sort as the prompt hashes do;
    `cluster_text` gives what a phrasing is clustered by (its text, or its lexical key already
    made, with `lexical` the identity)."""
    members: dict[tuple[str, int], list[tuple[str, Any]]] = defaultdict(list)
    unled = 0
    for route in sorted({route for route, _ in by_phrasing}):
        keys = sorted(k for k in by_phrasing if k[0] == route)
        texts = [cluster_text(k) for k in keys]
        ids, route_unled = _clusters(texts, embed, cosine_threshold, lexical)
        unled += route_unled
        for key, c in zip(keys, ids):
            members[(route, c)].append(key)
        del texts, ids
    phrasing_scores: dict[tuple[str, Any], list[float]] = {}
    for ks in members.values():
        if len(ks) < 2:
            continue
        common = _common([r for k in ks for r in by_phrasing[k]], values_of)
        for k in ks:
            scores = [x for x in (_score(r, values_of, score_of, common) for r in by_phrasing[k]) if x is not None]
            if scores:
                phrasing_scores[k] = scores
    clusters = [kept for ks in members.values() if len(kept := [k for k in ks if k in phrasing_scores]) >= 2]
    means = [[float(np.mean(phrasing_scores[k])) for k in ks] for ks in clusters]
    n_samples = sum(len(phrasing_scores[k]) for ks in clusters for k in ks)
    if len(clusters) < max(2, min_clusters):
        return _say_unled(
            PromptSensitivity(
                version, "insufficient", None, None, len(clusters), sum(len(ks) for ks in clusters), n_samples
            ),
            unled,
        ), []
    figure, ci, share, between = sensitivity_figure(means, draws=draws, seed=seed)
    order = sorted(range(len(clusters)), key=lambda i: (min(means[i]) - max(means[i]), clusters[i][0]))
    widest: list[dict[str, Any]] = [
        {"prompt": "", "phrasings": len(clusters[i]), "min": min(means[i]), "max": max(means[i])} for i in order[:3]
    ]
    return _say_unled(
        PromptSensitivity(
            model_version=version,
            verdict="measured" if figure is not None else "insufficient",
            sensitivity=figure,
            ci=ci,
            clusters=len(clusters),
            phrasings=sum(len(ks) for ks in clusters),
            samples=n_samples,
            within_share=share,
            between_spread=between,
            widest=widest,
        ),
        unled,
    ), [clusters[i][0] for i in order[:3]]


def _say_unled(figure: PromptSensitivity, unled: int) -> PromptSensitivity:
    """`figure` with its method saying how many phrasings came past the leaders' cap (none: as is)."""
    if not unled:
        return figure
    note = (
        f"; {unled} phrasings matched none of the first {MAX_LEADERS:,} leaders and were left out "
        "(past that cap a phrasing leads no cluster, so its rephrasings cannot join it)"
    )
    return dataclasses.replace(figure, method=figure.method + note)


def replace_widest(
    figure: PromptSensitivity, texts: Mapping[tuple[str, Any], str], keys: Sequence[tuple[str, Any]]
) -> PromptSensitivity:
    """`figure` with the texts of its widest clusters (first 120 characters)."""
    if not keys:
        return figure
    widest = [{**w, "prompt": texts[k][:120]} for w, k in zip(figure.widest, keys)]
    return dataclasses.replace(figure, widest=widest)


def _common(rows: Sequence[Any], values_of: Callable[[Any], Mapping[str, float]] | None) -> set[str]:
    """The checks that judged every sample of a cluster (that judged it at all)."""
    if values_of is None:
        return set()
    sets = [set(values_of(r)) for r in rows]
    sets = [x for x in sets if x]
    return set.intersection(*sets) if sets else set()


def _score(
    row: Any,
    values_of: Callable[[Any], Mapping[str, float]] | None,
    score_of: Callable[[Any], float | None],
    common: set[str],
) -> float | None:
    if values_of is None or not common:
        return score_of(row)
    mine = [v for c, v in values_of(row).items() if c in common]
    return sum(mine) / len(mine) if mine else None


def sensitivity_text(items: Sequence[PromptSensitivity]) -> list[str]:
    """The report's lines for the prompt sensitivity section."""

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    lines = [
        "Prompt sensitivity (mean score difference between two rephrasings of one request; 0 robust; "
        "95% cluster-bootstrap interval; against the difference between two requests)"
    ]
    if not items:
        lines.append("  (none: no scored sample)")
    for d in items:
        ci = f"[{f(d.ci[0])}, {f(d.ci[1])}]" if d.ci else "-"
        lines.append(
            f"  version {d.model_version:<10} sensitivity {f(d.sensitivity)} {ci} {d.verdict:<12} "
            f"between requests {f(d.between_spread)}, within share {f(d.within_share)}; "
            f"{d.clusters} clusters of rephrasings, {d.phrasings} phrasings, {d.samples} samples"
            + (
                f" (too few to measure: {MIN_CLUSTERS} or more requests each asked in two phrasings or more are needed)"
                if d.verdict == "insufficient"
                else ""
            )
        )
    return lines
