"""A record llmwatch accepts is one it can write and read back: the property, over generated input.

The sidecar builds a `Sample` from what upstreams and spans send and writes it with `to_json`;
`score`, `report`, `baseline freeze` and the scorer child read it back through the same model.
Whatever the model accepts must therefore survive that trip: hypothesis generates samples with
numbers of every size (ints beyond 64 bits, 1e300, inf, NaN) in the typed fields and in the bodies.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmwatch.core.jsonio import iter_jsonl
from llmwatch.core.records import MAX_TOKENS, Sample, Usage
from llmwatch.core.wire import token_count

numbers = st.one_of(
    st.integers(),  # unbounded: 10**300 included
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, MAX_TOKENS, MAX_TOKENS + 1, 2**63, 2**64, 10**301, 1e300, -1, float("inf")]),
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
maybe_number = st.none() | numbers


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    # Most draws valid, so that whole samples pass the model often and their writing is tried.
    return st.one_of(valid, valid, valid, numbers)


@st.composite
def raw_samples(draw: st.DrawFn) -> dict:
    return {
        "id": draw(st.text(max_size=12)),
        "timestamp": draw(
            st.one_of(
                st.datetimes(timezones=st.just(timezone.utc)),
                st.floats(min_value=0, max_value=253402300799, allow_nan=False),
                st.datetimes(timezones=st.just(timezone.utc)),
            )
        ),
        "model": draw(st.none() | st.text(max_size=12)),
        "status": draw(mostly(st.integers(100, 599))),
        "latency_ms": draw(mostly(st.floats(0, 1e6))),
        "ttft_ms": draw(st.none() | mostly(st.floats(0, 1e6))),
        "cost_usd": draw(st.none() | mostly(st.floats(0, 10))),
        "usage": {"input_tokens": draw(maybe_number), "output_tokens": draw(maybe_number)},
        "request": draw(json_values),
        "response": draw(json_values),
        "metadata": draw(st.dictionaries(st.text(max_size=8), json_values, max_size=3)),
    }


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=raw_samples())
def test_every_sample_the_model_accepts_is_read_back_by_its_own_readers(raw, tmp_path_factory):
    try:
        sample = Sample.model_validate(raw)
    except ValidationError:
        return  # refused at the boundary, with a message naming the field: nothing gets written
    line = sample.to_json()
    back = Sample.from_json(line)  # the reader of files, Kafka and the scorer child
    assert back.usage == sample.usage and back.status == sample.status
    assert (back.latency_ms, back.ttft_ms, back.cost_usd) == (sample.latency_ms, sample.ttft_ms, sample.cost_usd)
    path = tmp_path_factory.mktemp("rt") / "samples.jsonl"
    path.write_bytes(line + b"\n")
    [read] = iter_jsonl(path)  # what `score`, `report` and `baseline freeze` go through
    assert read.to_json() == back.to_json()


@pytest.mark.parametrize("count", [10**301, MAX_TOKENS + 1, -1])
def test_a_token_count_no_reader_can_hold_is_refused_naming_the_field(count):
    with pytest.raises(ValidationError, match="output_tokens"):
        Usage(output_tokens=count)


@given(numbers | st.text(max_size=30) | st.booleans() | st.none())
def test_token_count_takes_only_whole_numbers_a_record_can_hold(value):
    n = token_count(value)
    assert n is None or (type(n) is int and 0 <= n <= MAX_TOKENS)
    if n is not None:
        Usage(input_tokens=n)  # never refused downstream


def test_a_sample_at_the_bounds_round_trips_exactly():
    s = Sample(
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        model="m",
        status=999,
        latency_ms=1.7976931348623157e308,
        usage=Usage(input_tokens=MAX_TOKENS, output_tokens=0),
        request={"big": 10**30},
        response=None,
    )
    assert Sample.from_json(s.to_json()).usage.input_tokens == MAX_TOKENS
