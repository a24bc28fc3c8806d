"""Conversations under partial sampling: the proxy follows only the calls that become samples.

A chat client resends its whole history, so a sampled turn finds an earlier *sampled* turn by the
same prefix hashes that would have found the unsampled turn just before it. These tests hold the
proxy to that: through a real agent and the simulator, with three calls in ten sampled, every
chat's samples carry one conversation id of their own and their turn numbers, and the tracker
remembers only sampled calls (hashing every call's history was the proxy's largest per-call cost
for long chats).
"""

from __future__ import annotations

from collections import defaultdict

import aiohttp
from helpers.agents import metric, proxy_url, read_samples, scrape, wait_until

CHATS, TURNS = 16, 8


async def run_chats(base: str) -> None:
    async with aiohttp.ClientSession() as session:
        for chat in range(CHATS):
            # The opening question names the chat, so a sample says which chat it came from.
            messages = [{"role": "system", "content": "You are a helpful assistant."}]
            for turn in range(1, TURNS + 1):
                question = f"chat {chat} opens here: how do I start?" if turn == 1 else f"And then, step {turn}?"
                messages.append({"role": "user", "content": question})
                body = {"model": "sim-gpt-4o-mini", "messages": messages, "seed": chat * 100 + turn}
                async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    answer = (await resp.json())["choices"][0]["message"]["content"]
                messages.append({"role": "assistant", "content": answer})


def chat_of(sample: dict) -> int:
    opening = next(m["content"] for m in sample["request"]["messages"] if m["role"] == "user")
    return int(opening.split(" ")[1])


async def test_sampled_turns_of_one_chat_share_its_id_and_the_tracker_keeps_only_samples(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 0.3})
    await run_chats(proxy_url(agent))
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
