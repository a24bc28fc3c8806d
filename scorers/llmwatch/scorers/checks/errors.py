"""Scores that are mostly `error`: a check that could not run is not a verdict, and must not pass as data.

An `error` score says the check could not judge the sample (the scorer was stopped before its
embedding model loaded, the model could not be read, a judge timed out). A window of such scores
has no pass rate: frozen into a baseline it freezes nothing, and a drift over it tests nothing,
both silently. So `baseline freeze` and `drift` refuse (exit 2) and `report` warns when scores
are **mostly errors**: more than half (`MOSTLY_ERRORS`) of one check's scores for one model
version are `error`. The message names each such check and version, and the fix: score the
samples again with `llmwatch score`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from llmwatch.core.errors import LlmwatchError
from llmwatch.core.scores import Score

__all__ = [
    "MOSTLY_ERRORS",
    "ErrorShare",
    "ErrorTally",
    "MostlyErrors",
    "mostly_errors",
    "mostly_errors_message",
    "refuse_mostly_errors",
]

# "Mostly": strictly more than this share of a (check, version)'s scores are `error`.
MOSTLY_ERRORS = 0.5


class MostlyErrors(LlmwatchError, ValueError):
    """The scores given are mostly `error` results (exit 2); the message names the checks and the fix."""


@dataclass(frozen=True)
class ErrorShare:
    check: str
    model_version: str
    errors: int
    total: int

    @property
    def share(self) -> float:
        return self.errors / self.total if self.total else 0.0


class ErrorTally:
    """Error and total counts per (check, version), one score at a time: a stream needs no list of scores."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])

    def add(self, sc: Score) -> None:
        cell = self.counts[(sc.check, sc.model_version or "unknown")]
        cell[0] += sc.result == "error"
        cell[1] += 1

    def shares(self, threshold: float = MOSTLY_ERRORS) -> list[ErrorShare]:
        """Every (check, version) whose scores are more than `threshold` `error`, sorted by version and check."""
        out = [
            ErrorShare(check, version, e, n)
            for (check, version), (e, n) in self.counts.items()
            if n and e / n > threshold
        ]
        return sorted(out, key=lambda s: (s.model_version, s.check))


def mostly_errors(scores: Iterable[Score], threshold: float = MOSTLY_ERRORS) -> list[ErrorShare]:
    """Every (check, version) whose scores are more than `threshold` `error`, sorted by version and check."""
    tally = ErrorTally()
    for sc in scores:
        tally.add(sc)
    return tally.shares(threshold)


def mostly_errors_message(shares: list[ErrorShare], *, samples: str, scores: str | None) -> str:
    """One message: which checks, how many errors, what an `error` is, and the command that fixes it."""
    where = f"the scores in {scores}" if scores else "the scores computed now"
    listed = ", ".join(
        f"{s.check} {s.errors} of {s.total} ({s.share:.0%}) for version {s.model_version}" for s in shares
    )
    if scores:
        fix = (
            f"score the samples again: `llmwatch score --in {samples} --out NEW_SCORES.jsonl`, "
            "then pass --scores NEW_SCORES.jsonl"
        )
    else:
        fix = "look at the scorer's log for why the checks failed (the embedding model, a judge), then run again"
    return (
        f"{where} are mostly `error` (more than {MOSTLY_ERRORS:.0%} of a check's scores): {listed}. "
        "An `error` is a check that could not run (e.g. the proxy was stopped before the scorer had loaded "
        f"its model), not a verdict, so there is no pass rate to use. Fix: {fix}"
    )


def refuse_mostly_errors(
    scores: Iterable[Score] | ErrorTally, *, samples: str, scores_path: str | None, purpose: str
) -> None:
    """Raise MostlyErrors (exit 2) when the scores for `purpose` (or a tally of them) are mostly `error`."""
    shares = scores.shares() if isinstance(scores, ErrorTally) else mostly_errors(scores)
    if shares:
        raise MostlyErrors(
            f"refusing to use them for {purpose}: " + mostly_errors_message(shares, samples=samples, scores=scores_path)
        )
