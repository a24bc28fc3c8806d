"""A stored sample line is the same bytes whichever serializer writes it.

`Sample.to_json` uses pydantic's JSON writer (cheaper per sampled call, issue 13); it was orjson
over `model_dump(mode="json")`. Files, Kafka and the scorer child read these lines, and users diff
them, so the bytes must not change: dates, floats, non-ASCII text, nulls and nested bodies.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import orjson
import pytest

from llmwatch.core.records import Sample, Usage

TIMESTAMPS = [
    datetime(2026, 12, 3, 11, 8, 34, tzinfo=timezone.utc),
    datetime(2026, 12, 3, 11, 8, 34, 123456, tzinfo=timezone.utc),
    datetime(2026, 12, 3, 11, 8, 34, 500, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    datetime(2026, 12, 3, 11, 8, 34),  # naive: stored as UTC
    1700000000.25,  # epoch seconds
    1700000000250,  # epoch milliseconds
]
FLOATS = [
    0.0,
    -0.0,
    1.0,
    0.1 + 0.2,
    1e-7,
    2.5e-5,
    5e-324,
    1e15,
    1e16,
    1e21,
    1e22,
    123456789.125,
    1.7976931348623157e308,
]
BODIES = [
    None,
    "plain text",
    {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": 'héllo — ✓ 😀 日本語 \u2028 \x00\x1f\x7f "q" \\ / \t\n'}],
    },
    {"floats": FLOATS, "nan": float("nan"), "inf": float("inf"), "ints": [0, -1, 2**63 - 1, -(2**63), 2**64 - 1]},
    [True, False, None, [], {}, "", [[1, [2, [3]]]]],
]


def old_to_json(sample: Sample) -> bytes:
    return orjson.dumps(sample.model_dump(mode="json", by_alias=True))


@pytest.mark.parametrize("timestamp", TIMESTAMPS)
@pytest.mark.parametrize("body", BODIES)
def test_to_json_writes_the_bytes_orjson_wrote(timestamp, body):
    sample = Sample(
        id="llmw-1",
        client_request_id="req-é",
        timestamp=timestamp,
        model="gpt-4o-mini",
        response_model=None,
        status=200,
        latency_ms=1e-7,
        ttft_ms=0.1 + 0.2,
        usage=Usage(input_tokens=24, output_tokens=None, estimated=True),
        cost_usd=1.7976931348623157e308,
        request=body,
        response=body,
        capture_notes=["truncated"],
        metadata={"conversation_id": "conv ✓", "n": body},
    )
    line = sample.to_json()
    assert line == old_to_json(sample)
    assert Sample.from_json(line).to_json() == line


@pytest.mark.parametrize("latency_ms", FLOATS)
def test_every_float_field_is_written_like_orjson(latency_ms):
    sample = Sample(
        timestamp=TIMESTAMPS[0],
        model=None,
        status=0,
        latency_ms=abs(latency_ms),
        cost_usd=abs(latency_ms),
        request={},
        response={},
    )
    assert sample.to_json() == old_to_json(sample)
