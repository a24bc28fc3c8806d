"""A short differential fuzz run of the relay against h11 (tests/helpers/relay_fuzz.py says the invariants).

Derandomized and bounded, so that CI sees the same cases every run; bench/fuzz_relay.py runs the
long, random version. Each finding fixed is pinned here with @example.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.engines import ENGINES
from helpers.relay_fuzz import Relay, check_request, check_response, requests, responses
from hypothesis import HealthCheck, example, given, settings

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module", params=ENGINES)
def relay(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    # The same cases on both engines (design record 0067, step 4).
    proxy = Relay(Path(tmp_path_factory.mktemp("fuzz")), engine=request.param)
    yield proxy
    proxy.close()


@FUZZ
@given(data=requests())
# Findings of bench/fuzz_relay.py, fixed: an HTTP/1.1 request without Host, or with two, was forwarded.
@example(data=b"PUT /v1/./x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
@example(data=b"POST /a?b=c HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
@example(data=b"GET /v1/x HTTP/2.0\r\nHost: x\r\nHost: x\r\nContent-Length: 1\r\n\r\nt")
# Finding, fixed: llhttp reads a request line without a version as HTTP/0.9; it was forwarded.
@example(data=b"GET /v1/chat/completionsHTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
# Junk after a complete request: that request is forwarded and answered (it was dropped, the connection aborted).
@example(data=b"POST /a?b=c HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\njunk")
# Not a finding: a request line split on a run of spaces (RFC 9112 §3 allows it; llhttp does it).
@example(data=b"GET  /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
# Not a finding: an empty line before the request line is skipped (RFC 9112 §2.2), never forwarded.
@example(data=b"\nGET /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nt")
# The items 2, 6, 7 as cases: a dot-segment escape, a bad chunk, a coding before chunked.
@example(data=b"GET /%2e%2e/admin HTTP/1.1\r\nHost: x\r\n\r\n")
@example(data=b"POST /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
@example(data=b"POST /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")
def test_the_relay_forwards_exactly_the_requests_h11_accepts(relay: Relay, data: bytes) -> None:
    check_request(relay, data)


@FUZZ
@given(data=responses())
# Findings, fixed: chunk lines ending in a bare LF were accepted and relayed as they were, so a
# strict client waited for an end it could not read; a chunk size with trailing space (h11 reads it) was cut.
@example(data=b"HTTP/1.1 404 Not Found\nTransfer-Encoding: Chunked\n\n1\n\xbe\n0\n\n")
@example(
    data=b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nab\r\n0\r\n\r\n"
)
# Finding, fixed: a NUL in a reason phrase (of a 103 the relay does not relay) was read as valid.
@example(data=b"HTTP/1.1 103 \x00Early Hints\r\n\r\nHTTP/1.1 200 OK\r\n\r\nbody")
# Finding, fixed: an empty line before a status line (llhttp skips it, h11 refuses it) was relayed.
@example(data=b"\nHTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
@example(data=b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\n\r\nHTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n")
# The items 1 and 4 as cases: a bare-LF head; a second response after the terminal chunk.
@example(data=b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok")
@example(
    data=b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED"
)
def test_the_relay_relays_exactly_the_responses_h11_accepts(relay: Relay, data: bytes) -> None:
    check_response(relay, data)
