"""Conversations without client help: a chat whose history extends the previous call's is one
conversation; the turn is the number of user messages; memory stays bounded."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from llmwatch.core.records import Sample
from llmwatch.scorers.pipeline.conversations import (
    ConversationTracker,
    declared_conversation,
    history_digests,
    link_samples,
)


def chat(*turns: tuple[str, str | None]) -> list[dict[str, str]]:
    """[(question, answer-or-None), ...] as the messages a chat client sends."""
    out = [{"role": "system", "content": "You are helpful."}]
    for question, answer in turns:
        out.append({"role": "user", "content": question})
        if answer is not None:
            out.append({"role": "assistant", "content": answer})
    return out


def test_a_request_that_extends_the_previous_history_continues_its_conversation() -> None:
    t = ConversationTracker()
    c1, turn1 = t.observe(chat(("hi", None)), now=0, call_id="a", answer="hello there")
    c2, turn2 = t.observe(chat(("hi", "hello there"), ("how are you", None)), now=1, call_id="b", answer="fine")
    c3, turn3 = t.observe(
        chat(("hi", "hello there"), ("how are you", "fine"), ("bye", None)), now=2, call_id="c", answer="bye"
    )
    assert c1 == c2 == c3 and c1.startswith("h-")
    assert (turn1, turn2, turn3) == (1, 2, 3)
    assert t.linked == 2 and t.started == 1


def test_two_chats_that_open_with_the_same_words_stay_apart_when_their_answers_differ() -> None:
    t = ConversationTracker()
    a, _ = t.observe(chat(("hi", None)), now=0, call_id="a", answer="answer one")
    b, _ = t.observe(chat(("hi", None)), now=0, call_id="b", answer="answer two")
    a2, _ = t.observe(chat(("hi", "answer one"), ("next", None)), now=1, call_id="c")
    b2, _ = t.observe(chat(("hi", "answer two"), ("next", None)), now=1, call_id="d")
    assert a != b
    assert (a2, b2) == (a, b)


def test_a_chat_whose_first_turn_went_unseen_does_not_join_another_that_opened_alike() -> None:
    # The proxy follows only sampled calls: chat B's first turn was not sampled, its second was.
    # Chat A opened with the same words and its first turn was; B's history carries B's own
    # answer, so it is not A's continuation, though their opening requests hash alike.
    t = ConversationTracker()
    a1, _ = t.observe(chat(("hi", None)), now=0, call_id="a1", answer="answer for A")
    b2, _ = t.observe(chat(("hi", "answer for B"), ("next", None)), now=1, call_id="b2", answer="more for B")
    a2, _ = t.observe(chat(("hi", "answer for A"), ("next", None)), now=2, call_id="a2")
    b3, _ = t.observe(chat(("hi", "answer for B"), ("next", "more for B"), ("last", None)), now=3, call_id="b3")
    assert b2 != a1 and a2 == a1 and b3 == b2


def test_a_call_whose_answer_has_no_text_is_still_continued_by_its_request() -> None:
    # An answer that is a tool call alone has no text to key on: the call is stored by its request
    # alone, and the next request (the tool call, then its result) is found by the part before it.
    t = ConversationTracker()
    c1, _ = t.observe(chat(("what is the weather", None)), now=0, call_id="a", answer=None)
    history = [
        *chat(("what is the weather", None)),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
    ]
    c2, turn = t.observe(history, now=1, call_id="b")
    assert c2 == c1 and turn == 1


def test_a_reasoning_answer_links_whether_the_client_resends_its_thinking_or_strips_it() -> None:
    answer = "<think>The user greets me; greet back.</think>\n\nHello! How can I help?"
    for resent in (answer, "Hello! How can I help?"):
        t = ConversationTracker()
        c1, _ = t.observe(chat(("hi", None)), now=0, call_id="a", answer=answer)
        # Another chat opened alike, answered differently: the stripped answer must not be matched
        # by the request-only hash instead.
        t.observe(chat(("hi", None)), now=0, call_id="x", answer="<think>hm</think>Hi there.")
        c2, turn = t.observe(chat(("hi", resent), ("and?", None)), now=1, call_id="b")
        assert (c2, turn) == (c1, 2), resent


def test_a_predecessor_never_seen_still_links_to_an_older_turn() -> None:
    t = ConversationTracker()
    c1, _ = t.observe(chat(("q1", None)), now=0, call_id="a", answer="r1")
    # turn 2 went to another replica; turn 3 arrives here
    c3, turn = t.observe(chat(("q1", "r1"), ("q2", "r2"), ("q3", None)), now=2, call_id="c")
    assert c3 == c1 and turn == 3


def test_a_declared_id_wins_and_is_stored_hashed() -> None:
    t = ConversationTracker()
    c, _ = t.observe(chat(("hi", None)), now=0, call_id="a", declared="session-secret-123")
    assert c == declared_conversation("session-secret-123")
    assert "secret" not in c and c.startswith("x-")


def test_memory_is_bounded_and_entries_expire() -> None:
    t = ConversationTracker(max_entries=16, ttl_s=10)
    for i in range(100):
        t.observe(chat((f"question {i}", None)), now=i, call_id=str(i), answer=f"answer {i}")
    assert len(t) <= 16
    old, _ = t.observe(chat(("question 99", "answer 99"), ("more", None)), now=99 + 11, call_id="late")
    assert t.started == 101  # expired: a new conversation, not question 99's


def test_old_sample_files_are_linked_offline_in_time_order() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def sample(i: int, messages: list[dict[str, str]], answer: str) -> Sample:
        return Sample.model_validate(
            {
                "id": f"s{i}",
                "timestamp": (t0 + timedelta(seconds=i)).isoformat(),
                "model": "m",
                "status": 200,
                "latency_ms": 1,
                "request": {"messages": messages},
                "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]},
            }
        )

    s2 = sample(2, chat(("q", "r"), ("q2", None)), "r2")
    s1 = sample(1, chat(("q", None)), "r")
    assert s1.conversation_id is None and s1.turn is None  # a file written before the fields existed
    out = link_samples([s2, s1])
    assert out[0].conversation_id == out[1].conversation_id is not None
    assert (out[1].turn, out[0].turn) == (1, 2)


def test_a_history_of_odd_shapes_is_still_a_conversation() -> None:
    # Multi-part content, tool calls and results, a non-dict entry: hashed, never raised on.
    t = ConversationTracker()
    first = [
        {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}, {"type": "image_url"}]},
    ]
    c1, _ = t.observe(first, now=0, call_id="a")
    second = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "function": {"name": "weather"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "18C"},
        "not a message",
    ]
    c2, turn = t.observe(second, now=1, call_id="b")
    assert c2 == c1 and turn == 1  # a tool round trip stays in the same turn


def _reference_digests(
    messages: list[object], answer: str | None
) -> tuple[bytes, tuple[tuple[bytes, bytes], ...], bytes | None]:
    """The framing the tracker has always hashed, spelled out: one length-prefixed frame
    `len(role):role:len(text):text` per message (lengths of the role in characters, of the
    stripped text in UTF-8 bytes; an assistant's text after its last `</think>`), so that ids
    stay the same across versions and replicas."""
    from llmwatch.core.wire import content_to_text

    def frame(role: object, text: str) -> bytes:
        t = text.strip().encode("utf-8", "surrogatepass")
        name = str(role)
        return b"%d:%s:%d:%s" % (len(name), name.encode("utf-8", "surrogatepass"), len(t), t)

    h = hashlib.blake2b(digest_size=16)
    at_assistant = []
    for m in messages:
        if type(m) is not dict:
            continue
        role = m.get("role", "user")
        text = content_to_text(m.get("content"))
        if role == "assistant":
            text = text.rsplit("</think>", 1)[-1]  # an answer is hashed without its reasoning
            before = h.digest()
            h.update(frame(role, text))
            at_assistant.append((h.digest(), before))
        else:
            h.update(frame(role, text))
    answered = None
    if answer:
        copy = h.copy()
        copy.update(frame("assistant", answer.rsplit("</think>", 1)[-1]))
        answered = copy.digest()
    return h.digest(), tuple(at_assistant), answered


_roles = st.one_of(
    st.sampled_from(["system", "user", "assistant", "tool", "développeur", "ユーザー"]),
    st.text(max_size=8),
    st.none(),
    st.integers(-5, 5),
)
_contents = st.one_of(
    st.text(max_size=40),
    st.builds(lambda a, b: f"{a}</think>{b}", st.text(max_size=10), st.text(max_size=10)),
    st.none(),
    st.lists(
        st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)}), st.text(max_size=5)),
        max_size=3,
    ),
)
_messages = st.lists(
    st.one_of(
        st.fixed_dictionaries({"role": _roles, "content": _contents}),
        st.fixed_dictionaries({"content": _contents}),  # no role: a user message
        st.text(max_size=5),  # not a message
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    messages=_messages,
    answer=st.one_of(
        st.none(),
        st.text(max_size=40),
        st.builds(lambda a, b: f"<think>{a}</think>{b}", st.text(max_size=10), st.text(max_size=10)),
    ),
)
def test_the_hashed_framing_is_unchanged_for_any_history(messages: list[object], answer: str | None) -> None:
    # The tracker's framing is inlined and its role heads cached for speed (the proxy hashes every
    # chat call); the digests must still be exactly the documented frames', or conversation ids
    # would change between versions, replicas and the offline linker.
    full, at_assistant, answered, turn = history_digests(messages, answer)
    assert (full, at_assistant, answered) == _reference_digests(messages, answer)
    assert turn == max(1, sum(1 for m in messages if type(m) is dict and m.get("role", "user") == "user"))
