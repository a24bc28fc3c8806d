"""CPU per chat call of the proxy's conversation tracker (llmwatch.scorers.pipeline.conversations).

    .venv/bin/python bench/conversation_tracker.py [--turns 10] [--chars 400] [--calls 20000]

Replays chats of `--turns` turns whose messages are `--chars` characters long, each call with its
whole history, as a chat client sends them, and prints microseconds per call (mean over the run).
"""

from __future__ import annotations

import argparse
import time

from llmwatch.scorers.pipeline.conversations import ConversationTracker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--chars", type=int, default=400)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    tracker = ConversationTracker()
    filler = ("lorem ipsum dolor sit amet " * (args.chars // 27 + 1))[: args.chars]
    calls = 0
    spent = 0.0
    chat = 0
    while calls < args.calls:
        messages: list[dict[str, str]] = [{"role": "system", "content": "You are helpful."}]
        for turn in range(args.turns):
            messages.append({"role": "user", "content": f"{chat} {turn} {filler}"})
            answer = f"answer {chat} {turn} {filler}"
            t0 = time.perf_counter()
            tracker.observe(messages, now=float(calls), call_id=str(calls), answer=answer)
            spent += time.perf_counter() - t0
            messages.append({"role": "assistant", "content": answer})
            calls += 1
        chat += 1
    print(
        f"{calls} calls, {args.turns} turns of {args.chars}-char messages: "
        f"{spent / calls * 1e6:.1f} us per call (mean; history of {args.turns} turns = {2 * args.turns + 1} messages at the end), "
        f"{tracker.linked} linked, {tracker.started} started, {len(tracker)} entries"
    )


if __name__ == "__main__":
    main()
