"""A mirror's worst-case cost: what the spend cap reserves before a mirror is sent.

The reservation must hold whatever the candidate answers, so it is taken on bounds, not on the
primary's token counts: the request body's bytes as input tokens (a byte-level BPE token is at
least one byte of text, and the JSON around the text is longer than the few tokens each message
adds), and the request's own output limit, capped at the candidate's `max_output_tokens`, which
the mirror then sends as the limit (`limit_request`), so a candidate that honours it cannot spend
past its reservation.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Mapping

from llmwatch.collectors.shadow.config import ShadowCandidate

# The request field that limits the answer's length, per route (chat also reads max_completion_tokens).
_LIMIT_FIELDS = {
    "/v1/chat/completions": "max_tokens",
    "/v1/completions": "max_tokens",
    "/v1/responses": "max_output_tokens",
}


def _limit_field(route: str, request: Mapping[str, Any]) -> str:
    if route == "/v1/chat/completions" and "max_completion_tokens" in request:
        return "max_completion_tokens"
    return _LIMIT_FIELDS.get(route, "max_tokens")


def spend_bounds(
    route: str, body: bytes | None, request: Any, input_tokens: int | None, spec: ShadowCandidate
) -> tuple[int, int]:
    """(input, output) tokens a mirror can cost at most, for a reservation that holds whatever the candidate answers."""
    in_bound = max(len(body or b""), input_tokens or 0)
    asked = request.get(_limit_field(route, request)) if isinstance(request, dict) else None
    ceiling = spec.max_output_tokens
    if isinstance(asked, int) and not isinstance(asked, bool) and 0 < asked < ceiling:
        return in_bound, asked
    return in_bound, ceiling


def limit_request(route: str, request: dict[str, Any], max_output_tokens: int) -> None:
    """Send the reservation's output bound as the request's limit (the client's own when it was lower)."""
    request[_limit_field(route, request)] = max_output_tokens


class HourlySpend:
    """A USD-per-hour cap that holds under concurrency: reserve the worst case first, settle after.

    `reserve` holds a call's worst-case cost against the last hour's spend plus what calls in
    flight hold; a call that would pass the cap is refused before it is sent. `settle` gives the
    reservation back and books what the call really cost. Not thread-safe: one event loop owns
    it (the shadow mirror's parent, the judge's child).
    """

    def __init__(self, cap: float | None) -> None:
        self.cap = cap
        self.spent: deque[tuple[float, float]] = deque()
        self.spent_sum = 0.0
        self.reserved = 0.0

    def reserve(self, now: float, usd: float) -> bool:
        """Hold `usd` of the hourly budget for one call; False when the cap would be passed."""
        spent = self.spent
        while spent and spent[0][0] < now - 3600.0:
            self.spent_sum -= spent.popleft()[1]
        if self.cap is not None and self.spent_sum + self.reserved + usd > self.cap:
            return False
        self.reserved += usd
        return True

    def settle(self, reserved: float, actual: float, now: float | None = None) -> None:
        self.reserved = max(0.0, self.reserved - reserved)
        if actual > 0:
            self.spent.append((time.monotonic() if now is None else now, actual))
            self.spent_sum += actual

    def reset(self) -> None:
        """Calls in flight will never report (their process died): their reservations go."""
        self.reserved = 0.0
