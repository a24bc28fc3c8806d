"""The proxy's "call finished" event: one record per captured call, for every component that follows calls.

The proxy analyses a call once, after the client has its whole answer (its metrics and the
intake's sampling decision are its own steps), then publishes one `CallFinished`. The components
that act on finished calls subscribe to the runtime's `CallEvents` in their factories (OTLP export
makes a span, the shadow parent offers the call to its candidates), so adding one touches its own
folder and not the proxy. Subscribers run on the proxy's event loop: each must decide and hand off
in microseconds, never wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from llmwatch.core.component import Event

if TYPE_CHECKING:
    from llmwatch.collectors.receivers.proxy.capture import CallFacts, Exchange


@dataclass(frozen=True, slots=True)
class CallFinished:
    exchange: Exchange  # the bytes and headers as relayed (never changed by a subscriber)
    facts: CallFacts  # what the capture analysis read of them
    version: str | None  # the model version the call is labelled with
    cost_usd: float | None  # None when the model is not priced or reported no tokens
    sampled: str | None  # the sampling reason (rate, error, slow, ...); None when not sampled


class CallEvents(Event[CallFinished]):
    """The event the proxy publishes; provided to factories by the runtime (`ctx.get(CallEvents)`)."""

    def __init__(self, on_error: Callable[[Callable[[CallFinished], None], Exception], None] | None = None) -> None:
        super().__init__(on_error)
        # Assembling a stream's answer costs a pass over its chunks: done only when a subscriber
        # reads it (spans carry it); sampled calls assemble it later, in the pipeline thread.
        self.wants_answer = False

    def subscribe(self, subscriber: Callable[[CallFinished], None], *, wants_answer: bool = False) -> None:
        super().subscribe(subscriber)
        self.wants_answer = self.wants_answer or wants_answer
