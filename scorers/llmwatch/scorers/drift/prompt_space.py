"""Prompt embeddings for drift: which inputs are comparable, and did the inputs move.

Rows carry the prompt's all-MiniLM-L6-v2 vector when embeddings are on (rows.py). This module
turns those vectors into what the drift families need; everything here is a deterministic
function of the rows (and `seed`), so what is fitted on a baseline's rows is frozen with it:

* `semantic_clusters`: spherical k-means on the baseline's prompt vectors. Prompts on one topic
  land in one cluster even when they share no word (the lexical SimHash cannot do that).
* `near_duplicates`: a current prompt whose cosine with a baseline prompt is at least the
  threshold is treated as that prompt (templates with a changed name, retries with a typo,
  rephrased popular questions), so its answer is compared paired with the baseline's.
* `classifier_test`: can a linear classifier tell baseline prompts from current ones? A ridge
  discriminant fitted on one half, its scores on the other half rank-tested, both ways,
  Bonferroni over the halves (`TEST_FOLDS`): the p-value is analytic and can go as low as Holm
  needs - no permutations.
* `CrossFitRidge`: a ridge map from the prompt vector to a behaviour value (answer length, a
  similarity, the answer vector), fitted on the baseline in folds. A baseline row gets the
  prediction of the model that did not see its fold, a current row that of the fold model chosen
  by its prompt hash, so a change of topic moves the prediction, not the residual. The answer
  embedding test uses it split-sample (2 folds, each tested alone); the 1-d adjustment of answer
  length and scores (`residualizer`, 5 folds) is pooled, which is not exact but fired in none of
  160 A/A splits of real outputs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from llmwatch.scorers.stats.stratified import Stratified, van_elteren

FOLDS = 5


def fold_of(key: str, folds: int = FOLDS) -> int:
    """A stable fold for a prompt hash: the same prompt is in the same fold on both sides."""
    return int(hashlib.blake2b(key.encode(), digest_size=4).hexdigest(), 16) % folds


def semantic_clusters(X: np.ndarray, k: int, *, seed: int = 0, iterations: int = 30) -> np.ndarray:
    """Unit-length cluster centres (k, dim) of unit vectors `X`: spherical k-means with k-means++ seeding."""
    rng = np.random.default_rng(seed)
    centres = X[[int(rng.integers(len(X)))]]
    for _ in range(1, k):
        d = np.maximum(1.0 - (X @ centres.T).max(1), 0.0)
        centres = np.vstack(
            [centres, X[int(rng.choice(len(X), p=d / d.sum()))] if d.sum() > 0 else X[int(rng.integers(len(X)))]]
        )
    for _ in range(iterations):
        assign = (X @ centres.T).argmax(1)
        moved = np.stack([X[assign == j].sum(0) if (assign == j).any() else centres[j] for j in range(k)])
        moved /= np.maximum(np.linalg.norm(moved, axis=1, keepdims=True), 1e-12)
        if np.allclose(moved, centres, atol=1e-6):
            break
        centres = moved
    return centres


def near_duplicates(
    current: np.ndarray, baseline: np.ndarray, threshold: float, *, block: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """For each current vector, the index of its most similar baseline vector and that cosine."""
    best = np.zeros(len(current), dtype=int)
    cos = np.full(len(current), -1.0)
    for start in range(0, len(current), block):
        sims = current[start : start + block] @ baseline.T
        best[start : start + block] = sims.argmax(1)
        cos[start : start + block] = sims.max(1)
    return best, cos


def _ridge(X: np.ndarray, Y: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(weights, intercept) of a ridge regression of Y (n, m) on X (n, d); the intercept is not penalised."""
    mx, my = X.mean(0), Y.mean(0)
    Xc = X - mx
    d = X.shape[1]
    if len(X) < d:
        # Dual form: an n x n solve instead of d x d when there are fewer rows than dimensions.
        alpha = np.linalg.solve(Xc @ Xc.T + lam * np.eye(len(X)), Y - my)
        W = Xc.T @ alpha
    else:
        W = np.linalg.solve(Xc.T @ Xc + lam * np.eye(d), Xc.T @ (Y - my))
    return W, my - mx @ W


# Ridge penalty per row (the vectors are unit length, so X'X has trace n). Measured on the 805
# AlpacaEval prompts (gpt4_0613, 5 folds), held-out R^2 of log answer length from the prompt
# vector: 0.32 at 0.001, 0.36 at 0.003, 0.31 at 0.01, 0.20 at 0.03, 0.09 at 0.1; of the answer
# vector: 0.34, 0.33, 0.25, 0.15, 0.06.
RIDGE_PER_ROW = 0.003
# The same for hashed-words vectors (rows.hashed_words_vector, 1,024 dims): they are sparse and
# nearly orthogonal between prompts, so they want more shrinkage. Measured on the 805 AlpacaEval
# prompts (gpt4_0613, 3 mix-shift splits, classifier separation): 0.20-0.26 at 0.03 per row,
# 0.18-0.24 at 0.003; 0.1 and 1.0 as 0.03.
HASHED_RIDGE_PER_ROW = 0.03


@dataclass
class CrossFitRidge:
    """Ridge maps prompt vector -> target, one per fold of the baseline (see the module doc)."""

    models: list[tuple[np.ndarray, np.ndarray]]
    folds: int

    @classmethod
    def fit(
        cls, X: np.ndarray, Y: np.ndarray, keys: Sequence[str], *, folds: int = FOLDS, penalty: float = RIDGE_PER_ROW
    ) -> "CrossFitRidge | None":
        f = np.array([fold_of(k, folds) for k in keys])
        models = []
        for j in range(folds):
            train = f != j
            if train.sum() < 20:
                return None
            models.append(_ridge(X[train], Y[train], penalty * float(train.sum())))
        return cls(models, folds)

    def predict(self, X: np.ndarray, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(predictions, folds): each row predicted by the model that left its fold out."""
        f = np.array([fold_of(k, self.folds) for k in keys], dtype=int)
        out = np.zeros((len(X), self.models[0][0].shape[1]))
        for j, (W, b) in enumerate(self.models):
            idx = f == j
            if idx.any():
                out[idx] = X[idx] @ W + b
        return out, f


# Split-sample tests: one half fits, the other is tested, and the other way round; the two
# p-values are combined by Bonferroni. Pooling the held-out scores of K folds into one rank test
# looks more powerful but is not valid: each fold's model was fitted on the other folds' rows,
# so the folds are not independent (measured: answer-embedding residual MMD pooled over 5 folds
# fired in 4 of 80 A/A splits from p-values of about 0.004 - ten times its level).
TEST_FOLDS = 2


def classifier_test(
    Xb: np.ndarray,
    Xc: np.ndarray,
    kb: Sequence[str],
    kc: Sequence[str],
    *,
    folds: int = TEST_FOLDS,
    strata: tuple[Sequence[str], Sequence[str]] | None = None,
    penalty: float = RIDGE_PER_ROW,
) -> Stratified | None:
    """Two-sample test on prompt vectors: a ridge discriminant fitted on one half, its scores on the
    other half ranked (van Elteren within strata), both ways, Bonferroni over the halves.

    Halves follow the prompt hash, so a prompt asked on both sides is never scored by a model that
    saw it. Effect: 2 * AUC - 1 over the held-out scores (0 indistinguishable, 1 disjoint).
    With `strata` (each side's stratum per row) the scores are ranked within fold and stratum:
    the question becomes "do prompts differ *inside* the strata?", which a change in the mix of
    strata alone does not make true.
    """
    sb_all, sc_all = strata if strata is not None else ([""] * len(Xb), [""] * len(Xc))
    st = np.asarray(list(sb_all) + list(sc_all))
    X = np.vstack([Xb, Xc])
    y = np.concatenate([-np.ones(len(Xb)) / len(Xb), np.ones(len(Xc)) / len(Xc)]) * len(X) / 2  # balanced labels
    f = np.array([fold_of(k, folds) for k in (*kb, *kc)])
    side = np.concatenate([np.zeros(len(Xb), bool), np.ones(len(Xc), bool)])
    auc_num = auc_den = 0.0
    p_values: list[float] = []
    statistic = 0.0
    for j in range(folds):
        base: dict[str, list[float]] = {}
        cur: dict[str, list[float]] = {}
        test, train = f == j, f != j
        if side[train].all() or not side[train].any() or not side[test].any() or side[test].all():
            continue
        W, b = _ridge(X[train], y[train][:, None], penalty * float(train.sum()))
        score = (X[test] @ W + b)[:, 0]
        for k in np.unique(st[test]):
            cell = st[test] == k
            sb, sc = score[cell & ~side[test]], score[cell & side[test]]
            if not len(sb) or not len(sc):
                continue
            base[f"fold {j} {k}"], cur[f"fold {j} {k}"] = sb.tolist(), sc.tolist()
            # AUC by ranks (ties half).
            ranks = _ranks(np.concatenate([sb, sc]))
            auc_num += ranks[len(sb) :].sum() - len(sc) * (len(sc) + 1) / 2
            auc_den += len(sb) * len(sc)
        res = van_elteren(base, cur) if base else None
        if res is not None:
            p_values.append(res.p_value)
            statistic = max(statistic, res.statistic)
    if not p_values:
        return None
    auc = auc_num / auc_den if auc_den else 0.5
    # Two-sided p-values although a shift shows as current scoring higher: conservative, never liberal.
    p = min(1.0, len(p_values) * min(p_values))
    return Stratified(
        "classifier_two_sample",
        statistic,
        p,
        2 * auc - 1,
        len(Xb),
        len(Xc),
        len(p_values),
        "",
        {"auc": round(auc, 4), "halves": len(p_values)},
    )


def _ranks(v: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(v)


def residualizer(
    X: np.ndarray, y: np.ndarray, keys: Sequence[str], *, penalty: float = RIDGE_PER_ROW
) -> Callable[[np.ndarray, Sequence[str]], np.ndarray] | None:
    """Fitted on baseline rows (prompt vectors X, 1-d target y): returns what maps rows to y - f(prompt) + mean f."""
    model = CrossFitRidge.fit(X, y[:, None], keys, penalty=penalty)
    if model is None:
        return None
    level = float(model.predict(X, keys)[0].mean())

    def adjust(Xn: np.ndarray, kn: Sequence[str]) -> np.ndarray:
        return model.predict(Xn, kn)[0][:, 0] - level

    return adjust
