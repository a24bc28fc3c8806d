"""The demo summary's stability lines: the three figures of issue 26 per version, from the run's files.

After the agent has stopped, every sample, score and consistency pair of the run is on disk under
the data directory. From them, per version: the turn decay slope with its cluster-bootstrap
interval (evaluation/turns.py), the consistency rate with its Wilson interval (the `consistency:`
probe's pairs, evaluation/consistency.py), and the prompt sensitivity with its cluster-bootstrap
interval (evaluation/sensitivity.py, rephrasings clustered lexically: the summary does not load a
second embedding model). A figure that could not be computed says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

__all__ = ["StabilityFigures", "counted", "stability_figures", "stability_lines"]


@dataclass(frozen=True)
class StabilityFigures:
    turn_decay: list[Any]  # TurnDecay per version
    consistency: list[Any]  # ConsistencyRow per version
    sensitivity: list[Any]  # PromptSensitivity per version


def stability_figures(data_dir: Path, matrix: Any) -> StabilityFigures:
    """The three figures over the samples, scores and consistency pairs under `data_dir`."""
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.pairs import Pair
    from llmwatch.core.scores import Score
    from llmwatch.scorers.evaluation.consistency import consistency_rows
    from llmwatch.scorers.evaluation.matrix import build_categories, score_samples
    from llmwatch.scorers.evaluation.sensitivity import prompt_sensitivity
    from llmwatch.scorers.evaluation.turns import check_values, turn_decay
    from llmwatch.scorers.pipeline.conversations import link_samples

    samples_dir, scores_dir, pairs_dir = data_dir / "samples", data_dir / "scores", data_dir / "consistency" / "pairs"
    samples = list(read_records(samples_dir)) if samples_dir.is_dir() else []
    scores = list(read_records(scores_dir, Score, prefix="scores")) if scores_dir.is_dir() else []
    pairs = list(read_records(pairs_dir, Pair, prefix="pairs")) if pairs_dir.is_dir() else []
    if any(s.conversation_id is None and s.operation == "chat" for s in samples):
        samples = link_samples(samples)
    rows = score_samples(samples, scores, build_categories(matrix, None), matrix.default_category)
    values = check_values(scores)
    return StabilityFigures(turn_decay(rows, values), consistency_rows(pairs), prompt_sensitivity(rows, values))


def counted(n: float, noun: str, many: str = "") -> str:
    """`1 sample`, `0 samples`, `2 re-asks`: a count the demo prints, its noun agreeing with it
    (`many`: the plural where it is not the noun plus s)."""
    k = int(round(n))
    return f"{k} {noun if k == 1 else many or noun + 's'}"


def _ci(ci: Sequence[float] | None, fmt: str) -> str:
    return f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]" if ci else "[-]"


def stability_lines(figures: StabilityFigures, versions: Sequence[str]) -> list[str]:
    """One line per version naming its three stability figures (B should be worse than A on each)."""
    decay = {d.model_version: d for d in figures.turn_decay}
    consistency = {r.model_version: r for r in figures.consistency}
    sensitivity = {p.model_version: p for p in figures.sensitivity}
    lines = [
        "  stability per version (95% intervals): turn decay = quality change per extra turn within a "
        "conversation; consistency = share of re-asks answered the same; prompt sensitivity = quality "
        "difference between rephrasings of one request (0 robust)"
    ]
    for v in versions:
        d, c, p = decay.get(v), consistency.get(v), sensitivity.get(v)
        turn = (
            f"turn decay {d.slope:+.3f}/turn {_ci(d.ci, '+.3f')} ({counted(d.conversations, 'conversation')})"
            if d is not None and d.slope is not None
            else "turn decay n/a (too few multi-turn conversations scored)"
        )
        cons = (
            f"consistency {c.rate:.2f} {_ci(c.ci, '.2f')} ({counted(c.compared, 're-ask')})"
            if c is not None and c.rate is not None
            else "consistency n/a (no re-ask compared)"
        )
        sens = (
            f"prompt sensitivity {p.sensitivity:.3f} {_ci(p.ci, '.3f')} ({counted(p.clusters, 'request')} rephrased)"
            if p is not None and p.sensitivity is not None
            else "prompt sensitivity n/a (too few rephrased requests scored)"
        )
        lines.append(f"    version {v:<4} {turn}; {cons}; {sens}")
    return lines
