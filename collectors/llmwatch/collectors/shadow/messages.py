"""What the shadow mirror's two processes send each other over their pipes (pickled).

Parent -> child: `MirrorJob` (one call to mirror), `StopMirror`. Child -> parent: `MirrorStats`
(what changed: counters, gauges, spend, ended mirrors), `PairLines` (pairs for the parent's pair
sinks), `ScoreLines` (the consistency probe's verdicts), `MirrorReady`, `MirrorClosed`. See llmwatch.collectors.shadow.parent for the design.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmwatch.collectors.receivers.proxy.capture import Exchange


@dataclass(frozen=True, slots=True)
class MirrorJob:
    candidate: int  # index in shadow.candidates
    # The primary's call as captured; the child analyses it again (the parsed bodies are not sent:
    # half the pickling, and pickling is the proxy process's share of the mirror's cost).
    exchange: Exchange
    version: str | None
    cost: float | None
    reserved_usd: float
    # With a spend cap: the most output tokens the candidate may answer with, sent as its limit,
    # so that the reservation is a true worst case (None: no cap, the request goes as it is).
    max_output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class StopMirror:
    timeout: float  # how long mirrors in flight may still take


@dataclass(slots=True)
class MirrorStats:
    """What changed in the child since its last message; applied in this order by the parent."""

    settles: list[tuple[int, float, float]] = field(default_factory=list)  # (candidate, reserved, actual USD)
    counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    gauges: dict[tuple[str, str], float] = field(default_factory=dict)  # (metric, candidate) -> value
    ended: dict[int, int] = field(default_factory=dict)  # candidate -> mirrors that freed their slot
    finished: int = 0  # mirrors that ended, pair written or not
    written: int = 0


@dataclass(frozen=True, slots=True)
class PairLines:
    """Pairs for the parent's pair sinks (Kafka): (candidate, pair id, JSON line)."""

    lines: list[tuple[int, str, bytes]]


@dataclass(frozen=True, slots=True)
class ScoreLines:
    """The consistency probe's verdicts as `Score.to_json()` lines, for the parent's score sinks (online drift)."""

    lines: list[bytes]


@dataclass(frozen=True, slots=True)
class MirrorReady:
    pass


@dataclass(frozen=True, slots=True)
class MirrorClosed:
    pass
