"""The proxy reads only what metrics need of an unsampled stream, and reads it exactly as the full assembly does.

`analyze(ex, assemble=False)` parses a stream's first events up to the first content token and
its last events down to usage, instead of assembling the whole answer on the event loop. Every
figure a metric or the sampling decision uses must equal the full analysis's, for every stream
shape; where the shortcut cannot be sure, it assembles.
"""

import gzip

import orjson
import pytest
from helpers.sse import chunk, exchange, sse
from hypothesis import given, settings
from hypothesis import strategies as st

from llmwatch.collectors.receivers.proxy.capture import analyze, to_sample

USAGE = {"id": "c", "model": "gpt-4o", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
METRIC_FIELDS = (
    "operation",
    "model",
    "response_model",
    "stream",
    "status",
    "error_type",
    "duration_s",
    "ttft_s",
    "input_tokens",
    "output_tokens",
    "tokens_estimated",
    "notes",
)


def facts_pair(events, *, route="/v1/chat/completions", request=None, encoding=None, split=False):
    request = (
        request
        if request is not None
        else {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi there"}]}
    )
    chunks = events
    if split:  # TCP chunks that cut events in half
        whole = b"".join(events)
        chunks = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    if encoding == "gzip":
        chunks = [gzip.compress(b"".join(chunks))]

    def make():
        return exchange(route, request, chunks, content_type="text/event-stream", encoding=encoding)

    return analyze(make(), assemble=False), analyze(make()), make


def same_metrics(light, full):
    for name in METRIC_FIELDS:
        assert getattr(light, name) == getattr(full, name), name


def test_a_stream_with_usage_before_done_takes_the_shortcut_with_the_same_figures():
    light, full, _ = facts_pair(
        sse(chunk("", role="assistant"), chunk("Hel"), chunk("lo"), chunk(finish="stop"), USAGE, b"[DONE]")
    )
    assert not light.assembled and full.assembled
    same_metrics(light, full)
    assert (light.input_tokens, light.output_tokens, light.response_model) == (7, 3, "gpt-4o")
    assert light.ttft_s == pytest.approx(0.02)


@pytest.mark.parametrize(
    "events",
    [
        # no usage at all: output tokens are counted from content events, which needs every event
        sse(chunk("", role="assistant"), chunk("Hel"), chunk("lo"), chunk(finish="stop"), b"[DONE]"),
        # no [DONE]: the stream may be incomplete
        sse(chunk("", role="assistant"), chunk("Hel"), USAGE),
        # usage far from the end
        sse(chunk("a"), USAGE, *[chunk(finish="stop")] * 6, b"[DONE]"),
        # CRLF separators
        [
            b"data: " + orjson.dumps(chunk("Hi")) + b"\r\n\r\n",
            b"data: " + orjson.dumps(USAGE) + b"\r\n\r\n",
            b"data: [DONE]\r\n\r\n",
        ],
        # no content at all
        sse(chunk("", role="assistant"), USAGE, b"[DONE]"),
        # a cut trailing event
        sse(chunk("Hi"), USAGE, b"[DONE]") + [b'data: {"id'],
    ],
)
def test_streams_the_shortcut_cannot_be_sure_of_are_assembled(events):
    light, full, _ = facts_pair(events)
    assert light.assembled
    same_metrics(light, full)


def test_usage_in_the_first_content_event_is_found_when_the_passes_meet():
    first = {**chunk("Hi"), "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    light, full, _ = facts_pair(sse(first, chunk(finish="stop"), b"[DONE]"))
    assert not light.assembled
    same_metrics(light, full)


def test_split_and_compressed_streams_read_the_same():
    events = sse(chunk("", role="assistant"), chunk("Hel"), chunk("lo"), USAGE, b"[DONE]")
    for kwargs in ({"split": True}, {"encoding": "gzip"}):
        light, full, _ = facts_pair(events, **kwargs)
        assert not light.assembled
        same_metrics(light, full)


def test_legacy_completions_and_responses_streams():
    text = {
        "id": "c",
        "model": "gpt-3.5-turbo-instruct",
        "choices": [{"index": 0, "text": "Hi", "finish_reason": None}],
    }
    light, full, _ = facts_pair(
        sse(text, USAGE, b"[DONE]"),
        route="/v1/completions",
        request={"model": "gpt-3.5-turbo-instruct", "prompt": "x", "stream": True},
    )
    assert not light.assembled
    same_metrics(light, full)
    responses = [
        b"event: response.created\ndata: "
        + orjson.dumps({"type": "response.created", "response": {"model": "gpt-4o"}})
        + b"\n\n",
        b"event: response.output_text.delta\ndata: "
        + orjson.dumps({"type": "response.output_text.delta", "delta": "Hi"})
        + b"\n\n",
        b"event: response.completed\ndata: "
        + orjson.dumps(
            {
                "type": "response.completed",
                "response": {"model": "gpt-4o", "usage": {"input_tokens": 2, "output_tokens": 1}},
            }
        )
        + b"\n\n",
    ]
    light, full, _ = facts_pair(
        responses, route="/v1/responses", request={"model": "gpt-4o", "input": "x", "stream": True}
    )
    assert light.assembled
    same_metrics(light, full)


def test_a_sample_built_from_shortcut_facts_holds_the_whole_answer():
    light, full, make = facts_pair(
        sse(chunk("", role="assistant"), chunk("Hel"), chunk("lo", finish="stop"), USAGE, b"[DONE]")
    )
    assert not light.assembled
    sample = to_sample(make(), light, model_version="v1", cost_usd=None, reason="random")
    assert sample.response["choices"][0]["message"]["content"] == "Hello"
    assert sample.finish_reason == "stop"
    assert sample.usage.output_tokens == 3 and sample.ttft_ms == pytest.approx(20.0)


# Event blocks and the newline runs between them: the shortcut reads from both ends, the full
# assembly from the start only, and runs of three or more newlines split differently from each end.
_ROLE = b"data: " + orjson.dumps(chunk("", role="assistant"))
_CONTENT = [b"data: " + orjson.dumps(chunk("Hel")), b"data: " + orjson.dumps(chunk("lo", finish="stop"))]
_USAGES = [
    b"data: " + orjson.dumps(USAGE),
    b"data: " + orjson.dumps({**USAGE, "usage": {"prompt_tokens": 9, "completion_tokens": 5}}),
]
_OTHER = [b": a comment", b"data: {not json", b"", b"data: " + orjson.dumps(chunk(finish="stop"))]
_block_lists = st.tuples(
    st.lists(st.sampled_from([_ROLE, *_OTHER]), max_size=2),
    st.lists(st.sampled_from(_CONTENT), min_size=1, max_size=3),
    st.lists(st.sampled_from([*_USAGES, *_OTHER]), max_size=4),
    st.lists(st.sampled_from(_USAGES), max_size=2),
    st.sampled_from([[b"data: [DONE]"], [b"data: [DONE]", b""], []]),
).map(lambda parts: [block for part in parts for block in part])


@settings(max_examples=500, deadline=None)
@given(
    blocks=_block_lists,
    seps=st.lists(
        st.sampled_from([b"\n\n", b"\n\n", b"\n\n", b"\n\n\n", b"\n\n\n\n", b"\n"]), min_size=14, max_size=14
    ),
    split=st.booleans(),
)
def test_any_run_of_newlines_between_events_reads_the_same_either_way(blocks, seps, split):
    events = [block + sep for block, sep in zip(blocks, seps)]
    light, full, _ = facts_pair(events, split=split)
    same_metrics(light, full)
