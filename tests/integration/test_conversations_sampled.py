"""Conversations under partial sampling: the proxy follows only the calls that become samples.

A chat client resends its whole history, so a sampled turn finds an earlier *sampled* turn by the
same prefix hashes that would have found the unsampled turn just before it. These tests hold the
proxy to that: through a real agent and the simulator, with three calls in ten sampled, every
chat's samples carry one conversation id of their own and their turn numbers, and the tracker
remembers only sampled calls (hashing every call's history was the proxy's largest per-call cost
for long chats).
"""

from __future__ import annotations

import json
from collections import defaultdict

import aiohttp
import pytest
from helpers.agents import metric, proxy_url, read_samples, scrape, wait_until

CHATS, TURNS = 16, 8


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def opening(chat: int, same_opening: bool) -> str:
    # With same_opening, an app's fixed first message: every chat opens with the same words.
    return "How do I start?" if same_opening else f"chat {chat} opens here: how do I start?"


async def ask(
    session: aiohttp.ClientSession, base: str, messages: list[dict], seed: int, chat: int, stream: bool = False
) -> str:
    body: dict = {"model": "sim-gpt-4o-mini", "messages": messages, "seed": seed}
    if stream:
        # With usage in the stream, the proxy reads it for metrics without putting the answer together.
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    # The category header says which chat a sample came from (it plays no part in linking).
    headers = {"x-llmwatch-category": f"chat-{chat}"}
    async with session.post(f"{base}/v1/chat/completions", json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        if not stream:
            return (await resp.json())["choices"][0]["message"]["content"]
        # A streaming client puts the answer together from the events' deltas, and resends it.
        parts = []
        for line in (await resp.read()).decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices") or []:
                    parts.append((choice.get("delta") or {}).get("content") or "")
        return "".join(parts)


async def first_seeds(upstream: str, same_opening: bool) -> list[int]:
    """A seed per chat whose first answer no other chat gets: two chats that open alike and get
    the same first answer are the same conversation as far as their histories tell (the
    simulator draws answers from a small pool), and no tracker could keep them apart."""
    seeds: list[int] = []
    answers: set[str] = set()
    async with aiohttp.ClientSession() as session:
        for seed in range(1, 400):  # bounded: the pool gives 16 distinct answers well before
            chat = len(seeds)
            answer = await ask(
                session, upstream, [SYSTEM, {"role": "user", "content": opening(chat, same_opening)}], seed, chat
            )
            if answer not in answers:
                answers.add(answer)
                seeds.append(seed)
                if len(seeds) == CHATS:
                    return seeds
    raise AssertionError(f"the simulator gave {len(seeds)} distinct first answers in 400 seeds")


async def run_chats(base: str, seeds: list[int], same_opening: bool, stream: bool) -> None:
    """CHATS chats of TURNS turns, each resending its whole history."""
    async with aiohttp.ClientSession() as session:
        for chat in range(CHATS):
            messages = [SYSTEM]
            for turn in range(1, TURNS + 1):
                question = opening(chat, same_opening) if turn == 1 else f"And then, step {turn}?"
                messages.append({"role": "user", "content": question})
                seed = seeds[chat] if turn == 1 else chat * 100 + turn
                answer = await ask(session, base, messages, seed, chat, stream)
                messages.append({"role": "assistant", "content": answer})


def chat_of(sample: dict) -> int:
    return int(sample["metadata"]["category"].removeprefix("chat-"))


@pytest.mark.parametrize(
    ("same_opening", "stream"),
    [(False, False), (True, False), (True, True)],
    ids=["own-openings", "same-opening", "same-opening-streams"],
)
async def test_sampled_turns_of_one_chat_share_its_id_and_the_tracker_keeps_only_samples(
    sim, make_agent, same_opening: bool, stream: bool
):
    """With `same_opening`, every chat opens with the same words (an app's fixed first message):
    a chat whose first turn was not sampled must not join another whose first turn was, streamed
    or not (a stream's answer is read for the sampled calls)."""
    agent = await make_agent(sim.url, sampling={"rate": 0.3})
    # The simulator streams the answer it gives unstreamed for the same seed.
    await run_chats(proxy_url(agent), await first_seeds(sim.url, same_opening), same_opening, stream)
    agent.proxy.flush()
    selected = metric(await scrape(agent), "llmwatch_samples_total")
    await wait_until(lambda: agent.pipeline.processed >= selected, timeout=60)
    samples = read_samples(agent)
    assert len(samples) == selected
    assert CHATS * TURNS * 0.1 < len(samples) < CHATS * TURNS * 0.6  # partial sampling, as configured

    ids_by_chat: dict[int, set[str]] = defaultdict(set)
    for s in samples:
        ids_by_chat[chat_of(s)].add(s["conversation_id"])
        # The turn needs no memory: the number of user messages in the request.
        assert s["turn"] == sum(1 for m in s["request"]["messages"] if m["role"] == "user")
    # One id per chat, whichever of its turns were sampled, and no two chats merged.
    assert all(len(ids) == 1 for ids in ids_by_chat.values()), ids_by_chat
    assert len({next(iter(ids)) for ids in ids_by_chat.values()}) == len(ids_by_chat)
    # At least one chat had several turns sampled, or linking was not put to the test.
    turns_sampled = defaultdict(int)
    for s in samples:
        turns_sampled[chat_of(s)] += 1
    assert max(turns_sampled.values()) >= 2

    # Two hashes per followed call at most (its history, and its history with the answer): only
    # the sampled calls were followed, not all of the chat calls.
    assert 0 < len(agent.proxy.conversations) <= 2 * len(samples) < CHATS * TURNS
