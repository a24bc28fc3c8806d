"""Reading a captured call: usage, TTFT from the first content event, streams assembled, odd bodies noted."""

import gzip

import orjson
from helpers.sse import chunk, exchange, sse

from llmwatch.collectors.receivers.proxy.capture import CallFacts, analyze


def analyze_chat_stream(events: list) -> CallFacts:
    """What capture makes of a streamed chat completion of model "m": `events`, then [DONE]."""
    return analyze(
        exchange(
            "/v1/chat/completions",
            {"model": "m", "stream": True},
            sse(*events, b"[DONE]"),
            content_type="text/event-stream",
        )
    )


def test_non_streamed_chat_usage_and_finish_reason_are_read():
    body = {
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2},
    }
    facts = analyze(exchange("/v1/chat/completions", {"model": "gpt-4o", "messages": []}, [orjson.dumps(body)]))
    assert (facts.operation, facts.model, facts.input_tokens, facts.output_tokens) == ("chat", "gpt-4o", 9, 2)
    assert facts.finish_reason == "stop" and facts.ttft_s is None and not facts.tokens_estimated
    assert facts.duration_s == 1.0


def test_stream_ttft_is_the_arrival_of_the_first_content_token_not_the_role_chunk():
    events = sse(
        chunk("", role="assistant"),
        chunk("Hel"),
        chunk("lo"),
        chunk(finish="stop"),
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        b"[DONE]",
    )
    times = [100.2, 100.5, 100.6, 100.7, 100.7, 100.8]
    facts = analyze(
        exchange(
            "/v1/chat/completions",
            {"model": "gpt-4o", "stream": True},
            events,
            content_type="text/event-stream",
            times=times,
        )
    )
    assert abs(facts.ttft_s - 0.5) < 1e-9
    assert facts.response["choices"][0]["message"]["content"] == "Hello"
    assert facts.finish_reason == "stop"
    assert (facts.input_tokens, facts.output_tokens, facts.tokens_estimated) == (3, 2, False)
    assert facts.stream


def test_an_event_split_across_tcp_chunks_counts_when_it_completes():
    whole = b"".join(sse(chunk("", role="assistant"), chunk("Hi"), b"[DONE]"))
    cut = whole.index(b"Hi")
    facts = analyze(
        exchange(
            "/v1/chat/completions",
            {"model": "m", "stream": True},
            [whole[:cut], whole[cut:]],
            content_type="text/event-stream",
            times=[100.1, 100.4],
        )
    )
    assert abs(facts.ttft_s - 0.4) < 1e-9


def test_stream_without_usage_counts_content_chunks_as_estimated_tokens():
    events = sse(chunk("", role="assistant"), chunk("a"), chunk(" b"), chunk(" c"), chunk(finish="length"), b"[DONE]")
    facts = analyze(
        exchange(
            "/v1/chat/completions",
            {"model": "m", "stream": True, "messages": [{"role": "user", "content": "say a b c"}]},
            events,
            content_type="text/event-stream",
        )
    )
    assert facts.output_tokens == 3 and facts.tokens_estimated
    assert facts.input_tokens == 4  # "say a b c", approximated
    assert facts.finish_reason == "length"


def test_streamed_tool_calls_are_assembled():
    calls = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "tool_calls": [
                            {"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": ""}}
                        ],
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
                    "finish_reason": None,
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    facts = analyze_chat_stream(calls)
    call = facts.response["choices"][0]["message"]["tool_calls"][0]
    assert call["id"] == "call_1" and call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert facts.finish_reason == "tool_calls"


def test_streamed_legacy_function_call_is_assembled_and_two_parallel_tool_calls_stay_apart():
    def delta(**d):
        return {"choices": [{"index": 0, "delta": d}]}

    events = [
        delta(role="assistant", function_call={"name": "get_weather", "arguments": ""}),
        delta(function_call={"arguments": '{"city": '}),
        delta(function_call={"arguments": '"Oslo"}'}),
    ]
    facts = analyze_chat_stream(events)
    assert facts.response["choices"][0]["message"]["function_call"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    events = [
        delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":'}}]),
        delta(tool_calls=[{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": " 1}"}}]),
    ]
    facts = analyze_chat_stream(events)
    calls = facts.response["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a", "f", '{"x": 1}'),
        ("b", "g", "{}"),
    ]


def test_legacy_completions_stream_is_assembled_as_text():
    events = sse(
        {"choices": [{"index": 0, "text": "Once", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": " upon", "finish_reason": "stop"}]},
        b"[DONE]",
    )
    facts = analyze(
        exchange(
            "/v1/completions",
            {"model": "m", "prompt": "tell", "stream": True},
            events,
            content_type="text/event-stream",
        )
    )
    assert facts.operation == "text_completion"
    assert facts.response["choices"][0]["text"] == "Once upon"


def test_responses_api_stream_uses_the_completed_event():
    final = {
        "object": "response",
        "status": "completed",
        "model": "gpt-4o",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi!"}]}],
        "usage": {"input_tokens": 4, "output_tokens": 2},
    }
    raw = [
        b"event: response.created\ndata: "
        + orjson.dumps({"type": "response.created", "response": {"model": "gpt-4o"}})
        + b"\n\n",
        b"event: response.output_text.delta\ndata: "
        + orjson.dumps({"type": "response.output_text.delta", "delta": "Hi!"})
        + b"\n\n",
        b"event: response.completed\ndata: "
        + orjson.dumps({"type": "response.completed", "response": final})
        + b"\n\n",
    ]
    facts = analyze(
        exchange(
            "/v1/responses",
            {"model": "gpt-4o", "input": "hello", "stream": True},
            raw,
            content_type="text/event-stream",
            times=[100.1, 100.3, 100.4],
        )
    )
    assert facts.operation == "generate_content"
    assert facts.response == final
    assert (facts.input_tokens, facts.output_tokens) == (4, 2)
    assert abs(facts.ttft_s - 0.3) < 1e-9
    assert facts.finish_reason == "stop"


def test_cut_stream_is_noted_incomplete_and_keeps_what_arrived():
    events = sse(chunk("", role="assistant"), chunk("partial"))
    events.append(b'data: {"choices": [{"delta": {"content": "los')  # torn mid-event
    facts = analyze(
        exchange("/v1/chat/completions", {"model": "m", "stream": True}, events, content_type="text/event-stream")
    )
    assert "stream_incomplete" in facts.notes
    assert facts.response["choices"][0]["message"]["content"] == "partial"


def test_gzip_response_is_read_through_compression():
    body = orjson.dumps(
        {
            "choices": [{"message": {"content": "zipped"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
    )
    facts = analyze(exchange("/v1/chat/completions", {"model": "m"}, [gzip.compress(body)], encoding="gzip"))
    assert facts.response["choices"][0]["message"]["content"] == "zipped"


def test_non_json_request_is_noted_and_kept_as_text():
    facts = analyze(
        exchange("/v1/chat/completions", b"model=gpt-4o&x=1", [b'{"error": {"message": "bad"}}'], status=400)
    )
    assert "request_not_json" in facts.notes
    assert facts.model is None
    assert facts.request == "model=gpt-4o&x=1"
    assert facts.error_type == "400"


def test_non_json_response_is_kept_as_bounded_text():
    facts = analyze(
        exchange("/v1/chat/completions", {"model": "m"}, [b"upstream says hi" * 1000], content_type="text/plain")
    )
    assert "response_not_json" in facts.notes
    assert isinstance(facts.response, str) and len(facts.response) == 4096


def test_embeddings_usage_has_no_output_tokens():
    body = {"object": "list", "data": [{"embedding": [0.1]}], "usage": {"prompt_tokens": 5, "total_tokens": 5}}
    facts = analyze(exchange("/v1/embeddings", {"model": "text-embedding-3-small", "input": "x"}, [orjson.dumps(body)]))
    assert facts.operation == "embeddings"
    assert (facts.input_tokens, facts.output_tokens) == (5, None)
