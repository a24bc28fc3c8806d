"""Scores decided after their sample was scored: the consistency probe's verdicts.

A re-ask is answered seconds after the call it repeats, in the probe's mirror child
(collectors/llmwatch/collectors/shadow/child.py), while the call's sample goes through the
pipeline to the scorer child. The runtime provides one `LateScores` event to every factory: the
probe publishes its verdicts on it (as `Score.to_json()` lines, `check="consistency"`), and the
scorer component hands them to its child, whose drift windows join each to its sample
(scorers/llmwatch/scorers/drift/online.py), so that online drift tests `pass_rate:consistency`
with the other behaviour signals. Publishers call it on the proxy's event loop: a subscriber only
hands the lines off, never waits.
"""

from __future__ import annotations

from llmwatch.core.component import Event

__all__ = ["LateScores"]


class LateScores(Event[list[bytes]]):
    """Published with `Score.to_json()` lines; provided to factories by the runtime (`ctx.find(LateScores)`)."""
