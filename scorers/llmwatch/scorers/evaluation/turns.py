"""Quality by turn within conversations, and its decay slope, per model version.

A sample's quality at its turn is the mean value of the checks that judged it (pass 1, fail 0,
continuous checks their value), over one fixed set of checks per version: those that judged
samples at every turn 1..10 the version has. Not the evaluation matrix's score: that takes each
category's own checks, and a conversation's first turn is in another category
(`instruction_following`, `code`) than its later ones (`multi_turn_dialogue`), so a change of
checks would pose as a change over turns. Given no check results, the matrix score is used.
Its conversation and turn are the sample's own fields
(`conversation_id`, `turn`: set by the proxy, or linked offline by
llmwatch.scorers.pipeline.conversations.link_samples for files written without them); a sample
with no conversation is a conversation of one.

Per version:

* `by_turn`: the mean score at turns 1, 2, ..., 9 and 10+ with a 95% cluster-bootstrap interval
  (conversations resampled, llmwatch.scorers.stats.clustered);
* `slope`: the within-conversation least-squares slope of score on turn over turns 1..10 (score
  per extra turn; negative = the model gets worse as a conversation goes on), its 95% cluster
  bootstrap interval, and `verdict`: `decays` when the whole interval is below 0, `improves` when
  above, `flat` otherwise, `insufficient` below 3 conversations with two turns or more.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from llmwatch.core.scores import Score
from llmwatch.scorers.evaluation.matrix import ScoredSample, user_turns
from llmwatch.scorers.stats.clustered import cluster_bootstrap_slope

__all__ = ["MAX_TURN", "TurnDecay", "check_values", "turn_bucket", "turn_decay", "turn_decay_text"]

MAX_TURN = 10


def turn_bucket(turn: int) -> str:
    return str(turn) if turn < MAX_TURN else f"{MAX_TURN}+"


@dataclass(frozen=True)
class TurnDecay:
    model_version: str
    verdict: str  # decays | improves | flat | insufficient
    slope: float | None  # score per turn, within conversations
    ci: tuple[float, float] | None
    stderr: float | None
    conversations: int  # conversations with two turns or more within 1..10 (they inform the slope)
    conversations_total: int
    samples: int
    by_turn: dict[str, dict[str, float]] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)  # the checks averaged ([]: the matrix score)
    method: str = "within-conversation OLS slope, turns 1-10; 95% cluster (conversation) Poisson bootstrap, 1000 draws"


def _turn_of(row: ScoredSample) -> int:
    return row.sample.turn if row.sample.turn is not None else max(1, user_turns(row.sample.request))


def check_values(scores: Iterable[Score]) -> dict[str, dict[str, float]]:
    """sample id -> check -> value of every verdict (pass 1, fail 0, or the continuous value)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for sc in scores:
        if sc.result in ("pass", "fail"):
            out[sc.sample_id][sc.check] = sc.value if sc.value is not None else (1.0 if sc.result == "pass" else 0.0)
    return out


def _common_checks(items: Sequence[tuple[ScoredSample, int]], values: Mapping[str, Mapping[str, float]]) -> set[str]:
    per_turn: dict[str, set[str]] = defaultdict(set)
    for row, turn in items:
        per_turn[turn_bucket(turn)].update(values.get(row.sample.id, ()))
    sets = list(per_turn.values())
    return set.intersection(*sets) if sets else set()


def turn_decay(
    rows: Sequence[ScoredSample],
    values: Mapping[str, Mapping[str, float]] | None = None,
    *,
    draws: int = 1000,
    seed: int = 0,
) -> list[TurnDecay]:
    """Per version: quality by turn and the decay slope; `values` from `check_values(scores)`."""
    chats: dict[str, list[tuple[ScoredSample, int]]] = defaultdict(list)
    for row in rows:
        if row.sample.operation == "chat":
            chats[row.version].append((row, _turn_of(row)))
    by_version: dict[str, list[tuple[str, int, float]]] = {}
    used: dict[str, list[str]] = {}
    for version, items in chats.items():
        common = _common_checks(items, values) if values is not None else set()
        used[version] = sorted(common)
        points = []
        for row, turn in items:
            if values is not None:
                mine = [v for c, v in values.get(row.sample.id, {}).items() if c in common]
                score = sum(mine) / len(mine) if mine else None
            else:
                score = row.score
            if score is not None:
                points.append((row.sample.conversation_id or f"sample:{row.sample.id}", turn, score))
        if points:
            by_version[version] = points
    out = []
    for version, points in sorted(by_version.items()):
        # The buckets use every turn; the slope only turns 1..10, where conversations are many.
        buckets = cluster_bootstrap_slope(
            [c for c, _, _ in points],
            [t for _, t, _ in points],
            [s for _, _, s in points],
            bucket=[turn_bucket(t) for _, t, _ in points],
            draws=draws,
            seed=seed,
        )
        within = [p for p in points if p[1] <= MAX_TURN]
        fit = cluster_bootstrap_slope(
            [c for c, _, _ in within], [t for _, t, _ in within], [s for _, _, s in within], draws=draws, seed=seed
        )
        out.append(decay_of(version, fit, buckets, len(points), used.get(version, [])))
    return out


def decay_of(version: str, fit: Any, buckets: Any, samples: int, checks: list[str]) -> TurnDecay:
    """A version's TurnDecay from its two cluster-bootstrap fits: `fit` over turns 1..MAX_TURN (the
    slope and its verdict), `buckets` over every turn (quality by turn); the list and streamed
    reports both build it here."""
    if fit.slope is None or fit.ci is None:
        verdict = "insufficient"
    elif fit.ci[1] < 0:
        verdict = "decays"
    elif fit.ci[0] > 0:
        verdict = "improves"
    else:
        verdict = "flat"
    return TurnDecay(
        model_version=version,
        verdict=verdict,
        slope=fit.slope,
        ci=fit.ci,
        stderr=fit.stderr,
        conversations=fit.clusters,
        conversations_total=buckets.clusters_total,
        samples=samples,
        by_turn=buckets.by_x,
        checks=checks,
    )


def turn_decay_text(items: Sequence[TurnDecay]) -> list[str]:
    """The report's lines for the turn decay section."""

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:+.4f}"

    lines = ["Quality by turn within conversations (score per extra turn, 95% cluster-bootstrap interval)"]
    if not items:
        lines.append("  (none: no scored chat sample)")
    for d in items:
        ci = f"[{f(d.ci[0])}, {f(d.ci[1])}]" if d.ci else "-"
        lines.append(
            f"  version {d.model_version:<10} slope {f(d.slope)} {ci} {d.verdict:<12} "
            f"{d.conversations} conversations with 2+ turns of {d.conversations_total}, {d.samples} samples"
        )
        if d.by_turn:
            lines.append(
                "    by turn: "
                + "  ".join(
                    f"{t}: {v['mean']:.3f} [{v['lo']:.3f}, {v['hi']:.3f}] n={v['n']}" for t, v in d.by_turn.items()
                )
            )
    return lines
