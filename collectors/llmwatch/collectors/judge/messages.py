"""What the judge's two processes send each other over their multiprocessing queues (pickled)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class JudgeJob:
    """One sample to judge on its rubric's criteria (parent -> child; None asks the child to stop)."""

    line: bytes  # Sample.to_json(), redacted as stored samples are
    category: str
    criteria: list[dict[str, object]]  # JudgeCriterion.model_dump()


@dataclass(slots=True)
class JudgeReport:
    """What happened in the child since its last report (child -> parent)."""

    taken: int = 0  # jobs read from the queue
    scores: list[bytes] = field(default_factory=list)  # Score.to_json() of each verdict (error included)
    spot: list[bytes] = field(default_factory=list)  # spot-checked samples, for people to rate
    skipped: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    spend_usd: float = 0.0
    inflight: int = 0


@dataclass(frozen=True, slots=True)
class JudgeReady:
    pass


@dataclass(frozen=True, slots=True)
class JudgeFatal:
    error: str
