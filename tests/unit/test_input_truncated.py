"""The `input_truncated` check (issue 27): the server's input tokens against an estimate of the whole prompt."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from llmwatch.core.records import Sample
from llmwatch.scorers.checks.input_truncated import whole_prompt_text
from llmwatch.scorers.checks.registry import build_check

LONG = " ".join(["The quarterly report lists revenue, costs and the plan for next year."] * 60)  # ~780 words


def sample(reported: int | None, request: Any = None, estimated: bool = False, status: int = 200) -> Sample:
    return Sample(
        id="s1",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        model="llama3",
        status=status,
        latency_ms=1.0,
        usage={"input_tokens": reported, "output_tokens": 10, "estimated": estimated},
        request=request
        or {
            "model": "llama3",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}],
        },
        response={"choices": [{"message": {"role": "assistant", "content": "Revenue grew."}, "finish_reason": "stop"}]},
    )


CHECK = build_check("input_truncated", "input_truncated", {})


def test_a_server_that_counted_the_whole_prompt_passes_and_one_that_kept_a_quarter_fails():
    whole = CHECK.run(sample(1100))
    assert whole.result == "pass" and whole.value == 1.0
    cut = CHECK.run(sample(200))
    assert cut.result == "fail" and cut.value < 0.3
    assert cut.details["reported_input_tokens"] == 200 and cut.details["estimated_input_tokens"] > 700


def test_the_ratio_is_a_parameter():
    assert build_check("input_truncated", "input_truncated", {"min_ratio": 0.2}).run(sample(200)).result == "pass"


def test_nothing_to_compare_is_skipped():
    assert CHECK.run(sample(None)).details["reason"] == "no_reported_usage"
    assert CHECK.run(sample(5, estimated=True)).details["reason"] == "no_reported_usage"
    short = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert CHECK.run(sample(1, short)).details["reason"] == "prompt_too_short"
    assert CHECK.run(sample(1, status=500)).details["reason"] == "upstream_error"


def test_the_whole_prompt_counts_every_message_the_instructions_and_the_tools():
    request = {
        "instructions": "Answer in French.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "first"}]},
            {"role": "assistant", "content": "second"},
        ],
        "tools": [{"type": "function", "name": "lookup_weather"}],
    }
    text = whole_prompt_text(request)
    assert all(part in text for part in ("Answer in French.", "first", "second", "lookup_weather"))
    chat = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"q": "zebra"}'}}]},
            {"role": "user", "content": "last"},
        ]
    }
    assert all(part in whole_prompt_text(chat) for part in ("sys", "zebra", "last"))
