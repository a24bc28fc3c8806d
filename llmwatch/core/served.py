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
- More than `max_changes` new versions within `flap_window_s` is no series of changes but one
  fact: the key is flapping (`ServedVersion` below). Until it has been calm for `flap_window_s`,
  no change of it counts as one: no drift window restarts, no action runs, once per call or at all.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Literal

Parts = tuple[str | None, ...]
# same: nothing changed; first: the first version of a key; known: back to a version served within
# remember_s (another backend of it); new: a real change; flapping: the change that made the key
# flapping (more than `max_changes` new versions within `flap_window_s`); unsettled: a change while
# it flaps (no change of its own: nobody can say which version is "the" version).
Seen = Literal["same", "first", "known", "new", "flapping", "unsettled"]

# Versions remembered per key, all served within remember_s. Backends of one version rarely
# number more than a handful; past this many the key is flapping anyway (see `see`), so a
# rotation through more fingerprints than remembered is never read as a change per call.
MAX_KNOWN = 64


# How much of a version part (response model, fingerprint, version header) is taken from an
# upstream: real ones are under 64 characters. Past it, or with characters that are not printable,
# the text is cut and given a hash of the whole, so distinct long values stay distinct while every
# place the text flows (log lines, metric labels, the command's environment, the webhook) stays small.
MAX_PART_CHARS = 128
_KEEP = MAX_PART_CHARS - 17


def bounded_text(text: str | None) -> str | None:
    """`text` as llmwatch passes a version part on: at most MAX_PART_CHARS printable characters."""
    if text is None or (len(text) <= MAX_PART_CHARS and text.isprintable()):
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    head = "".join(c if c.isprintable() else "?" for c in text[:_KEEP])
    return f"{head}~{digest}"


class ServedVersion:
    """The served version of one key (a request model, a model_version window). Not thread-safe.

    Storms: a provider rotating through more fingerprints than anyone can tell apart, or making up
    one per call, would make every call a "new" version, restart every drift window and run every
    action. Past `max_changes` new versions within `flap_window_s` the key is *flapping*: `see`
    says so once ("flapping"), calls it "unsettled" while it lasts, and the key becomes stable again
    after `flap_window_s` without any change (`is_flapping`). Memory stays bounded: at most
    MAX_KNOWN versions, the expired ones (older than remember_s) forgotten first.
    """

    __slots__ = (
        "told",
        "current",
        "_known",
        "remember_s",
        "max_changes",
        "flap_window_s",
        "_changes",
        "_last_change",
        "_flapping",
    )

    def __init__(self, remember_s: float, *, max_changes: int = 3, flap_window_s: float = 600.0) -> None:
        self.remember_s = remember_s
        self.max_changes = max_changes
        self.flap_window_s = flap_window_s
        self.told: Parts | None = None  # the last call's parts as it told them: the cheap comparison
        self.current: Parts | None = None  # what they add up to with what earlier calls told
        self._known: dict[Parts, float] = {}  # version -> when last served (monotonic seconds)
        self._changes: deque[float] = deque()  # times of the recent "new" changes
        self._last_change = float("-inf")  # any change of `current`, known ones included
        self._flapping = False

    def is_flapping(self, now: float) -> bool:
        """Flapping until `flap_window_s` has passed without any change."""
        return self._flapping and now - self._last_change < self.flap_window_s

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
        calm = now - self._last_change >= self.flap_window_s
        self._last_change = now
        cutoff = now - self.remember_s
        seen_at = self._known.get(merged)
        self._known[merged] = now
        self._forget(cutoff, keep=(merged, previous))
        if previous is None:
            return "first", None
        if self._flapping:
            if not calm:
                return "unsettled", previous
            self._flapping = False  # a change after a calm flap_window_s is judged afresh
            self._changes.clear()
        if seen_at is not None and seen_at >= cutoff:
            return "known", previous
        changes = self._changes
        changes.append(now)
        while changes and changes[0] < now - self.flap_window_s:
            changes.popleft()
        if len(changes) > self.max_changes:
            self._flapping = True
            return "flapping", previous
        return "new", previous

    def known_count(self) -> int:
        return len(self._known)

    def _forget(self, cutoff: float, keep: tuple[Parts | None, Parts | None]) -> None:
        known = self._known
        if len(known) <= MAX_KNOWN:
            return
        # Expired versions first (a return to them is a change anyway), then the longest unserved.
        for parts in [p for p, at in known.items() if at < cutoff and p not in keep]:
            del known[parts]
        if len(known) > MAX_KNOWN:
            for parts, _ in sorted(known.items(), key=lambda item: item[1])[: len(known) - MAX_KNOWN]:
                if parts not in keep:
                    del known[parts]
