"""How a simulated version behaves over a conversation and when asked again (issue 26).

Kept apart from server.py, which calls `conversation_profile` and `answer_rng` once per chat
request. Version A has no traits: its answers do not depend on the turn, and a request that
carries a `seed` gets the same answer every time it is sent. Version B:

* decays over turns: its refusal and off-topic rates grow by `turn_decay` per user message
  after the first (capped at `max_rate`), so later turns fail the checks more often;
* changes its answer when asked again: a request it has already answered (same content) gets,
  with probability `reask_flip`, another draw of its answer (same profile, so the same quality
  on average: other paragraphs, another length, maybe a refusal) instead of the one its seed
  gives (see `answer_rng`: deterministic per `--seed`, whatever the arrival order).
"""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Sequence
from weakref import WeakKeyDictionary

import orjson

__all__ = [
    "TRAITS",
    "StabilityTraits",
    "answer_rng",
    "conversation_profile",
    "phrasing_profile",
    "plain_form",
    "rephrase",
]


@dataclass(frozen=True)
class StabilityTraits:
    turn_decay: float = 0.0  # added to the refusal and off-topic rates per turn after the first
    max_rate: float = 0.6
    reask_flip: float = 0.0  # chance that a repeated request gets another draw of its answer
    phrasing: float = 0.0  # added to the refusal and off-topic rates for a prompt not in plain form


TRAITS: dict[str, StabilityTraits] = {"B": StabilityTraits(turn_decay=0.07, reask_flip=0.5, phrasing=0.4)}


def _user_turns(messages: Sequence[Any]) -> int:
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "user")


def conversation_profile(profile: Any, messages: Sequence[Any]) -> Any:
    """`profile` as it answers at this turn of a conversation (a SimProfile, maybe replaced)."""
    traits = TRAITS.get(profile.name)
    if traits is None or traits.turn_decay <= 0:
        return profile
    extra = traits.turn_decay * max(0, _user_turns(messages) - 1)
    if extra <= 0:
        return profile
    return replace(
        profile,
        refusal_rate=min(traits.max_rate, profile.refusal_rate + extra),
        off_topic_rate=min(traits.max_rate, profile.off_topic_rate + extra),
    )


def plain_form(text: str) -> bool:
    """Written as a careful user writes: a capital first letter, not all capitals, a final . ? or !."""
    t = text.strip()
    letters = [c for c in t if c.isalpha()]
    if not letters:
        return True
    return letters[0].isupper() and not (len(letters) > 3 and t.isupper()) and t[-1] in ".?!"


def phrasing_profile(profile: Any, messages: Sequence[Any]) -> Any:
    """`profile` as it answers this phrasing of the request (a version with `phrasing` > 0 only)."""
    traits = TRAITS.get(profile.name)
    if traits is None or traits.phrasing <= 0:
        return profile
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if not isinstance(content, str) or plain_form(content):
        return profile
    return replace(
        profile,
        refusal_rate=min(traits.max_rate, profile.refusal_rate + traits.phrasing),
        off_topic_rate=min(traits.max_rate, profile.off_topic_rate + traits.phrasing),
    )


def rephrase(text: str, k: int) -> str:
    """The k-th deterministic surface rewording of `text` (k = 0: the text itself): what a traffic
    generator sends as near-duplicates of one request. Same words, so one cluster lexically."""
    t = text.strip()
    body = t.rstrip(".?!")
    end = t[len(body) :] or "?"
    words = body.split()
    variants = [
        t,
        t.lower(),  # lower case
        body,  # no final punctuation
        body.upper() + end,  # capitals
        (" ".join(words[len(words) // 2 :] + words[: len(words) // 2]) + end) if len(words) > 1 else t,  # word order
    ]
    return variants[k % len(variants)]


class _Asked:
    """How often each request content was asked (bounded), and a salt from the simulator's seed."""

    def __init__(self, salt: int) -> None:
        self.salt = salt
        self.counts: OrderedDict[bytes, int] = OrderedDict()

    def ask(self, digest: bytes) -> int:
        k = self.counts.pop(digest, -1) + 1
        self.counts[digest] = k
        while len(self.counts) > _MEMORY:
            self.counts.popitem(last=False)
        return k


_MEMORY = 100_000
_ASKED: WeakKeyDictionary[random.Random, _Asked] = WeakKeyDictionary()
_TRANSPORT = ("stream", "stream_options")


def answer_rng(
    profile: Any, rng: random.Random, body: dict[str, Any], sequence: random.Random
) -> tuple[Any, random.Random]:
    """The (profile, rng) a chat answer is drawn with: a version that flips sometimes answers a
    request it was already asked differently, whatever its seed.

    The k-th repeat of one request content (transport fields aside) flips with a probability of
    `reask_flip`, decided by a hash of the content, k and a salt drawn once from the simulator's
    `--seed` sequence: the same run answers the same whatever the order requests arrive in, and a
    first ask is never flipped (the version's ordinary quality does not change).
    """
    traits = TRAITS.get(profile.name)
    if traits is None or traits.reask_flip <= 0:
        return profile, rng
    asked = _ASKED.get(sequence)
    if asked is None:
        asked = _ASKED[sequence] = _Asked(sequence.getrandbits(64))
    content = {k: v for k, v in body.items() if k not in _TRANSPORT}
    digest = hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()
    k = asked.ask(digest)
    if k == 0:
        return profile, rng
    draw = random.Random(
        int.from_bytes(
            hashlib.blake2b(
                digest + k.to_bytes(8, "little") + asked.salt.to_bytes(8, "little"), digest_size=8
            ).digest(),
            "little",
        )
    )
    if draw.random() >= traits.reask_flip:
        return profile, rng
    return profile, draw
