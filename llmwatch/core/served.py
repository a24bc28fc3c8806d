"""Which version a model is served as, call after call: what counts as a change.

Shared by the served-version sentinel on the proxy's side (collectors/llmwatch/collectors/sentinel.py) and the drift
windows in the scorer (scorers/llmwatch/scorers/drift/online.py), so that both call the same calls a change.

A served version is a tuple of parts (model_version, response model, system_fingerprint, or a
subset). Two rules keep a change meaningful:

- A part a call does not tell (None: no fingerprint in a Responses-API answer, an error) keeps its
  last known value: saying nothing is no change.
- A version seen within the last `remember_s` is not new. Providers serve one version from
  backends with different fingerprints at once, so calls alternate between them; only the first
  appearance of each is a change. A return to a version not seen for longer is a change again.
"""

from __future__ import annotations

from typing import Literal

Parts = tuple[str | None, ...]
Seen = Literal["same", "first", "known", "new"]

# Versions remembered per key: enough for the backends of one version plus the one before.
MAX_KNOWN = 8


class ServedVersion:
    """The served version of one key (a request model, a model_version window). Not thread-safe."""

    __slots__ = ("told", "current", "_known", "remember_s")

    def __init__(self, remember_s: float) -> None:
        self.remember_s = remember_s
        self.told: Parts | None = None  # the last call's parts as it told them: the cheap comparison
        self.current: Parts | None = None  # what they add up to with what earlier calls told
        self._known: dict[Parts, float] = {}  # version -> when last served (monotonic seconds)

    def see(self, told: Parts, now: float) -> tuple[Seen, Parts | None]:
        """Take one call's parts; (what it was, the version before it)."""
        if told == self.told:
            return "same", self.current
        previous = self.current
        merged = told if previous is None else tuple(n if n is not None else o for n, o in zip(told, previous))
        self.told = told
        if merged == previous:
            return "same", previous
        if previous is not None:
            self._known[previous] = now  # served until now
        self.current = merged
        cutoff = now - self.remember_s
        seen_at = self._known.get(merged)
        self._known[merged] = now
        if previous is None:
            return "first", None
        if seen_at is not None and seen_at >= cutoff:
            return "known", previous
        if len(self._known) > MAX_KNOWN:
            # Forget what went longest unserved (never the two just used).
            for parts, _ in sorted(self._known.items(), key=lambda item: item[1])[: len(self._known) - MAX_KNOWN]:
                if parts not in (merged, previous):
                    del self._known[parts]
        return "new", previous
