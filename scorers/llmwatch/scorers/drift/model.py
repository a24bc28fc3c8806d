"""The drift report's vocabulary: settings and signals, shared by drift.py and families.py (no cycle)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("inputs", "behaviour", "performance")
# Prometheus alert per family (dashboards/alerts/llmwatch-rules.yaml); behaviour keeps the old name.
ALERTS = {
    "behaviour": "LLMWatchDriftDetected",
    "performance": "LLMWatchPerformanceRegression",
    "inputs": "LLMWatchTrafficChanged",
}


def family_of(signal: str) -> str:
    """The family of a signal name as exported in metrics: `input:*` inputs, `perf:*` performance."""
    if signal.startswith("input:"):
        return "inputs"
    if signal.startswith("perf:"):
        return "performance"
    return "behaviour"


@dataclass(frozen=True)
class DriftSettings:
    alpha: float = 0.05
    min_samples: int = 30
    correction: str = "holm"
    # Families whose drift makes `llmwatch drift` exit 1. `inputs` can be named but is not by
    # default: a change in what users ask is news, not a regression of the model.
    fail_on: tuple[str, ...] = ("behaviour", "performance")
    # Material minimums, in the units a user thinks in (carried in the baseline, see `minimums`):
    min_pass_rate_change: float = 0.01  # pass rate, absolute points (0.01 = 1 point)
    min_relative_change: float = 0.05  # answer length etc.: fraction of the baseline median
    min_score_change: float = 0.01  # continuous check values (similarities): absolute, cosine units
    min_embedding_distance: float = 0.0  # 1 - cosine between answer-embedding centroids; 0: the test decides
    min_ks_distance: float = 0.05  # inputs: prompt length, KS D
    min_mix_change: float = 0.05  # inputs: total variation distance of a mix (route, category, model, language)
    min_cramers_v: float = 0.03  # kept for compatibility of old settings files; unused by the families
    # Performance regresses when p50 or p95 per token is more than this fraction higher (and the
    # test says it is not noise). 20 %: what a user notices and what hourly load rarely moves per token.
    performance_margin: float = 0.20
    # Behaviour is compared only where inputs overlap: below this share of current traffic in
    # strata the baseline knows, behaviour is `insufficient`, not `drift`.
    min_overlap: float = 0.5
    # The report says "matched prompts" when at least this share of current samples falls in
    # prompt strata (prompts the baseline saw at least 5 times); the tests are the same.
    match_fraction: float = 0.5
    # Prompt embeddings, when the rows carry them (scoring.embeddings on at freeze and drift time):
    # a current prompt at least this cosine from a baseline prompt is matched to it (paired tests).
    near_duplicate_cosine: float = 0.95
    # inputs: prompt-embedding classifier separation (2 * AUC - 1) that counts as a shift.
    min_prompt_separation: float = 0.1
    # Behaviour on unmatched prompts is compared only while the unmatched current prompts differ
    # from the baseline's within strata by less than this separation (or not significantly);
    # beyond it only matched prompts are comparable. 0.15: random halves of one prompt set reach
    # at most 0.12 (60 splits of the AlpacaEval prompts), a shift of prompt sources 0.16-0.22.
    max_unmatched_separation: float = 0.15
    mmd_permutations: int = 200  # first round; more while the p-value could still matter
    max_permutations: int = 10_000
    seed: int = 0
    # Bootstrap draws for the effects' 95 % intervals (stats.stratified.effect_interval); 0: none.
    interval_draws: int = 400

    def minimums(self) -> dict[str, float]:
        """What a baseline records: runs with other minimums are not comparable with it."""
        return {
            "min_pass_rate_change": self.min_pass_rate_change,
            "min_relative_change": self.min_relative_change,
            "min_score_change": self.min_score_change,
            "min_embedding_distance": self.min_embedding_distance,
            "min_ks_distance": self.min_ks_distance,
            "min_mix_change": self.min_mix_change,
            "min_prompt_separation": self.min_prompt_separation,
            "near_duplicate_cosine": self.near_duplicate_cosine,
            "max_unmatched_separation": self.max_unmatched_separation,
            "performance_margin": self.performance_margin,
        }


@dataclass
class Signal:
    name: str
    route: str
    test: str
    statistic: float
    p_value: float
    effect_size: float
    n_baseline: int
    n_current: int
    p_adjusted: float = math.nan
    verdict: str = "insufficient"
    direction: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    family: str = "behaviour"
    # The part of the traffic where the change is largest (category, or route and category).
    stratum: str = ""
    # Current samples the test effectively rests on (matched, or Kish's n after reweighting).
    n_effective: float = math.nan
    # False for context figures (raw latency totals): shown, never decide a verdict.
    decisive: bool = True
    # What `effect_size` measures (EFFECT_KINDS: difference, relative change, distance,
    # separation) and in which unit, and its 95 % interval [low, high] where one is meaningful
    # (None for distances and separations: they have no sign, and their size is what the test tested).
    effect_kind: str = ""
    effect_unit: str = ""
    effect_ci: list[float] | None = None


# The kinds of effect a drift or canary report mixes, and how each reads (the text's legend).
EFFECT_KINDS = {
    "difference": "current minus baseline, in the unit named",
    "relative change": "(current - baseline) / baseline, e.g. +0.25 = 25 % higher",
    "distance": "how far apart two distributions are, >= 0, no sign",
    "separation": "how well a classifier tells the two sides apart, 2 * AUC - 1, 0 = not at all",
}


# The text tables' short form of (kind, unit) per signal, explained by EFFECT_LEGEND.
_SHORT = {"difference": "diff", "relative change": "rel", "distance": "dist", "separation": "sep"}
EFFECT_LEGEND = (
    "effect: diff = current minus baseline (pass rate and share: 0.01 = 1 point; score: check units; "
    "slope: pass share per turn); rel = relative change, +0.25 = 25 % higher (median; p50|p95: the larger of "
    "p50 and p95, the smaller when lower; p95: where the tail test decided); dist = distance between the two distributions, >= 0, no sign (1-cos: answer-embedding "
    "centroids; TVD: total variation of a mix); sep = 2*AUC-1 of a classifier telling them apart; "
    "[95 % interval]: seeded bootstrap (turn_decay: the z test's normal interval); none for dist, sep and a failure-mode share (its mode is the one that moved most)"
)


@dataclass(frozen=True)
class Effect:
    """What a signal's `effect_size` measures, given where each family computes it (families.py):
    every Signal the families make is built with one, so no signal goes out without its description.

    `kind` is one of EFFECT_KINDS, `unit` the JSON's and HTML's `effect_unit`, `label` the text
    table's short unit (explained by EFFECT_LEGEND)."""

    kind: str
    unit: str
    label: str

    def __post_init__(self) -> None:
        if self.kind not in EFFECT_KINDS:
            raise ValueError(f"effect kind {self.kind!r} is not one of {sorted(EFFECT_KINDS)}")
        _LABELS[self.unit] = self.label


# The text tables' short unit per effect unit, filled as families.py declares its effects.
_LABELS: dict[str, str] = {}


def corrected_tests(sig: Signal) -> int:
    """How many tests of a signal entered the multiple-testing correction: a performance signal
    has two (its location and tail tests, `detail.location` and `detail.tail`), others one."""
    if math.isnan(sig.p_adjusted):
        return 0
    return max(
        1, sum(isinstance(sig.detail.get(t), dict) and "p_adjusted" in sig.detail[t] for t in ("location", "tail"))
    )


def context_tests(sig: Signal) -> int:
    """How many tests of a context row (never corrected, never deciding) ran."""
    if sig.decisive or math.isnan(sig.p_value) or not math.isnan(sig.p_adjusted):
        return 0
    return max(1, sum(isinstance(sig.detail.get(t), dict) for t in ("location", "tail")))


def effect_label(sig: Signal) -> str:
    """`diff pass rate`, `rel p50|p95`, `dist TVD`: what a text table's effect figure is."""
    return f"{_SHORT.get(sig.effect_kind, '')} {_LABELS.get(sig.effect_unit, '')}".strip()


def format_interval(ci: list[float] | None) -> str:
    """`[-0.388, -0.185]`, or `-` where no interval is meaningful (or none could be drawn)."""
    return "-" if not ci else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def effect_text(sig: Signal) -> str:
    """`rel median -0.452 [-0.548, -0.303]`: the effect as the text table's three columns say it."""
    if math.isnan(sig.effect_size):
        return ""
    ci = f" {format_interval(sig.effect_ci)}" if sig.effect_ci else ""
    return f"{effect_label(sig)} {sig.effect_size:+.3f}{ci}".strip()
