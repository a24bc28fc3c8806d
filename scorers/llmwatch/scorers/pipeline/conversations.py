"""Which conversation a chat call belongs to, and which turn of it, with no help from the client.

A client that sends `x-llmwatch-conversation-id` (or, over OTLP, `gen_ai.conversation.id`) names
its conversation: the id is stored hashed (`x-` + 16 hex digits of SHA-256), because clients put
session and user tokens there, and the same value gives the same id on every replica.

Otherwise the chain of requests is followed: a chat client sends the whole history every time, so
the request of turn k+1 is the request of turn k, plus the assistant's answer, plus the new user
message (or tool results). The tracker hashes the messages incrementally (one pass, O(total text)),
remembers the hash of each call's full message list (and, when the answer is known, of the list
with the answer appended) with the conversation it belongs to, and looks a new call up by the hash
of its messages up to each assistant message (latest first): a hit continues that conversation, a
miss starts one. The hash without that assistant message is a match only where the call that
stored it had no known answer (no answer text): else two chats that open with the same words would
join whenever the second one's first turn went unseen. The memory is bounded: at most `max_entries` hashes, least recently used evicted
first, none older than `ttl_s`.

`turn` is the number of user messages in the request (1 = the first question): it needs no memory,
so it is right even when the tracker missed the call's predecessor (another replica, a restart).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Iterable, Sequence

from pydantic import Field

from llmwatch.core.config import Section
from llmwatch.core.wire import content_to_text

__all__ = [
    "ConversationTracker",
    "ConversationsSection",
    "HistoryDigests",
    "declared_conversation",
    "history_digests",
    "link_samples",
    "user_count",
]


class ConversationsSection(Section):
    # Follow chat histories to group sampled calls into conversations (in the proxy, for each
    # sampled call of a captured chat route: its history holds every earlier turn, sampled or not).
    enabled: bool = True
    # Hashes remembered (two per sampled call at most, ~150 bytes each): 200,000 is ~30 MB.
    max_entries: int = Field(200_000, ge=16, le=50_000_000)
    # A conversation with no sampled call for longer than this starts again as a new one.
    ttl_s: float = Field(3600.0, gt=0)


def declared_conversation(value: str) -> str:
    """The stored id of a conversation id the client sent: hashed, never the value itself."""
    return "x-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def user_count(messages: Sequence[Any]) -> int:
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role", "user") == "user")


def _frame(role: Any, text: str) -> bytes:
    # Length-prefixed, so ("ab", "c") and ("a", "bc") never hash alike. Surrounding whitespace is
    # not the client's history: some clients strip the answer before sending it back.
    t = text.strip().encode("utf-8", "surrogatepass")
    return b"%s%d:%s" % (_role_prefix(role), len(t), t)


# The `len(role):role:` head of a frame for the few roles clients send: the proxy frames two to
# three messages per chat call, and formatting the role each time was a third of the framing.
_ROLE_PREFIXES: dict[str, bytes] = {}
_MAX_ROLE_PREFIXES = 64  # a client's invented roles must not grow it without bound


def _role_prefix(role: Any) -> bytes:
    if type(role) is str:
        prefix = _ROLE_PREFIXES.get(role)
        if prefix is not None:
            return prefix
    name = str(role)
    prefix = b"%d:%s:" % (len(name), name.encode("utf-8", "surrogatepass"))
    if type(role) is str and len(_ROLE_PREFIXES) < _MAX_ROLE_PREFIXES:
        _ROLE_PREFIXES[role] = prefix
    return prefix


class ConversationTracker:
    """Chains chat calls into conversations; bounded memory. One thread (the proxy's event loop)."""

    def __init__(self, max_entries: int = 200_000, ttl_s: float = 3600.0) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        # hash -> (conversation, last seen, whether the call that stored it also stored its answer's hash)
        self._seen: OrderedDict[bytes, tuple[str, float, bool]] = OrderedDict()
        self.linked = 0  # calls that continued a known conversation
        self.started = 0  # calls that started one

    def __len__(self) -> int:
        return len(self._seen)

    def _get(self, key: bytes, now: float, *, unanswered_only: bool = False) -> str | None:
        hit = self._seen.get(key)
        if hit is None:
            return None
        if now - hit[1] > self.ttl_s:
            del self._seen[key]
            return None
        if unanswered_only and hit[2]:
            return None
        return hit[0]

    def _put(self, key: bytes, conversation: str, now: float, answered: bool = False) -> None:
        seen = self._seen
        seen[key] = (conversation, now, answered)
        seen.move_to_end(key)
        if len(seen) > self.max_entries:
            while len(seen) > self.max_entries:
                seen.popitem(last=False)
        # Drop expired entries from the old end, a few per call: memory follows live traffic.
        # `seen` is never empty here (it holds `key`, which is not expired).
        ttl = self.ttl_s
        if now - next(iter(seen.values()))[1] > ttl:
            seen.popitem(last=False)
            if now - next(iter(seen.values()))[1] > ttl:
                seen.popitem(last=False)

    def observe(
        self,
        messages: Sequence[Any],
        *,
        now: float,
        call_id: str,
        declared: str | None = None,
        answer: str | None = None,
    ) -> tuple[str, int]:
        """(conversation id, turn) of one chat call; remembers it for the calls that continue it."""
        return self.observe_digests(history_digests(messages, answer), now=now, call_id=call_id, declared=declared)

    def observe_digests(
        self, digests: HistoryDigests, *, now: float, call_id: str, declared: str | None = None
    ) -> tuple[str, int]:
        """`observe` of a call whose history was hashed earlier (`history_digests`): offline
        commands hash each sample as they stream it and link them later, in time order."""
        full, at_assistant, answered, turn = digests
        conversation: str | None = None
        if declared:
            conversation = declared_conversation(declared)
        else:
            # Latest assistant first: the direct predecessor, then older ones (a predecessor not
            # sampled, or that this replica never saw).
            for with_answer, before in reversed(at_assistant):
                # A request-only hash links only where its call's answer is unknown (no text):
                # where it is known, the call's successor carries that answer and is found by it.
                # Else a chat opening with the same words as another would join it whenever its
                # own first turn went unseen, as it mostly does when only sampled calls are
                # followed (the proxy) or only samples are linked (offline).
                conversation = self._get(with_answer, now) or self._get(before, now, unanswered_only=True)
                if conversation is not None:
                    break
            if conversation is not None:
                self.linked += 1
            else:
                self.started += 1
                conversation = "h-" + hashlib.blake2b(full + call_id.encode(), digest_size=8).hexdigest()
        self._put(full, conversation, now, answered is not None)
        if answered is not None:
            # The next call's history ends with this answer: keying on it too keeps two
            # conversations that opened with the same words apart.
            self._put(answered, conversation, now)
        return conversation, turn


def _visible(answer: str) -> str:
    """An answer as a client may resend it: without the reasoning a model wrote before `</think>`
    (reasoning models served with their thinking in the content). Clients differ in whether they
    strip it before resending; hashed without it on both sides, the chain holds either way."""
    return answer.rsplit("</think>", 1)[-1]


# (digest of the whole message list, per assistant message (digest with it, digest before it),
# digest of the list with the answer appended or None, turn): what `observe` looks up and keeps.
HistoryDigests = tuple[bytes, tuple[tuple[bytes, bytes], ...], bytes | None, int]


def history_digests(messages: Sequence[Any], answer: str | None = None) -> HistoryDigests:
    """The digests `ConversationTracker.observe` needs of one call, hashed once (O(text))."""
    h = hashlib.blake2b(digest_size=16)
    update = h.update
    prefixes = _ROLE_PREFIXES
    users = 0
    # For each assistant message i: the digests of messages[:i+1] (the history with that
    # answer, the stronger key) and of messages[:i] (the request that got it).
    at_assistant: list[tuple[bytes, bytes]] = []
    for m in messages:
        if type(m) is not dict:
            continue
        role = m.get("role", "user")
        content = m.get("content")
        text = content if type(content) is str else content_to_text(content)
        # `_frame`, inlined: this loop runs for every message of every chat call the proxy sees.
        t = text.strip().encode("utf-8", "surrogatepass")
        prefix = prefixes.get(role) if type(role) is str else None
        if prefix is None:
            prefix = _role_prefix(role)
        if role == "assistant":
            if b"</think>" in t:
                t = _visible(text).strip().encode("utf-8", "surrogatepass")
            before = h.digest()
            update(b"%s%d:%s" % (prefix, len(t), t))
            at_assistant.append((h.digest(), before))
        else:
            users += role == "user"
            update(b"%s%d:%s" % (prefix, len(t), t))
    answered = None
    if answer:
        copy = h.copy()
        copy.update(_frame("assistant", _visible(answer)))
        answered = copy.digest()
    return h.digest(), tuple(at_assistant), answered, max(1, users)


def link_samples(samples: Iterable[Any], tracker: ConversationTracker | None = None) -> list[Any]:
    """Conversation ids and turns for samples written without them (older files, imports).

    Samples are taken in time order; a sample that has `conversation_id` keeps it. Returns the
    samples (copies where a field was filled), in their original order.
    """
    from llmwatch.scorers.evaluation.matrix import request_messages

    items = list(samples)
    tracker = tracker or ConversationTracker(max_entries=max(16, 2 * len(items) + 16), ttl_s=float("inf"))
    order = sorted(range(len(items)), key=lambda i: items[i].timestamp)
    out = list(items)
    for i in order:
        s = items[i]
        if s.conversation_id is not None and s.turn is not None:
            continue
        messages = request_messages(s.request)
        if not messages:
            continue
        conversation, turn = tracker.observe(
            messages,
            now=s.timestamp.timestamp(),
            call_id=s.id,
            declared=None,
            answer=s.answer_text() or None,
        )
        out[i] = s.model_copy(update={"conversation_id": s.conversation_id or conversation, "turn": s.turn or turn})
    return out
