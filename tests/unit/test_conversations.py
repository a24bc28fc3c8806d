"""Conversations without client help: a chat whose history extends the previous call's is one
conversation; the turn is the number of user messages; memory stays bounded."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from llmwatch.core.records import Sample
from llmwatch.scorers.pipeline.conversations import ConversationTracker, declared_conversation, link_samples


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
