"""The relay's head search and dot-segment check (collectors/llmwatch/collectors/receivers/proxy/relay.py)."""

from __future__ import annotations

import pytest

from llmwatch.collectors.receivers.proxy.relay import climbs_above_root, head_end, head_limit

HEADS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    b"HTTP/1.1 200 OK\nA: b\r\nContent-Length: 2\n\r\nok",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok",
    b"HTTP/1.1 204 No Content\r\n\r\n",
]


@pytest.mark.parametrize("data", HEADS)
def test_the_end_of_a_head_is_found_after_its_empty_line_whatever_the_line_ends(data):
    end = head_end(data, 0)
    assert data[end:] in (b"ok", b"")
    assert data[:end].endswith((b"\n\r\n", b"\n\n"))


@pytest.mark.parametrize("data", HEADS)
def test_a_head_that_arrives_in_pieces_ends_at_the_same_byte_with_each_byte_searched_once(data):
    whole = head_end(data, 0)
    for split in range(1, len(data)):
        held = bytearray(data[:split])
        first = head_end(held, 0)
        if first >= 0:
            assert first == whole
            continue
        start = max(len(held) - 2, 0)  # what the relay passes: only new bytes, two of overlap
        held += data[split:]
        assert head_end(held, start) == whole, split


def test_no_empty_line_no_end():
    assert head_end(b"HTTP/1.1 200 OK\r\nA: b\r\n", 0) == -1


def test_a_whole_head_is_bounded_to_1_mib_unless_two_lines_need_more():
    assert head_limit(65_536, 256) == 1 << 20
    assert head_limit(8190, 32) == 8190 * 33
    assert head_limit(1_048_576, 256) == 2 * 1_048_576


@pytest.mark.parametrize(
    "path",
    [
        b"/..",
        b"/../admin",
        b"/v1/../../admin",
        b"/%2e%2e/admin",
        b"/%2E%2e/x",
        b"/..%2fadmin",
        b"/v1/..\\..\\x",
        b"/v1/%5c..%5c..%5cx",
        b"/%252e%252e/x",
        b"//../x",
        b"/./../x",
    ],
)
def test_paths_that_climb_above_their_root(path):
    assert climbs_above_root(path)


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/chat/completions",
        b"/v1/../v1/x",
        b"/v1/models/..",
        b"/v1/a..b/c",
        b"/v1/./x",
        b"/v1/%2e/x",
        b"/%zz/x",
        b"/v1/.../x",
    ],
)
def test_paths_that_stay_under_their_root(path):
    assert not climbs_above_root(path)


# --- header names classified once (relay.py `_header_kind`) ----------------------------------------

_SPECIAL_NAMES = [b"Host", b"Expect", b"Authorization", b"Content-Length", b"Transfer-Encoding", b"Connection"]
_SPECIAL_NAMES += [b"Keep-Alive", b"TE", b"Trailer", b"Upgrade", b"Proxy-Connection", b"Proxy-Authorization"]


def _spellings():
    from hypothesis import strategies as st

    def mixed_case(name: bytes):
        return st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
            lambda flips: bytes(c ^ 0x20 if flip and chr(c).isalpha() else c for c, flip in zip(name, flips))
        )

    token = st.binary(min_size=1, max_size=80).filter(lambda b: b":" not in b)
    return st.one_of(st.sampled_from(_SPECIAL_NAMES).flatmap(mixed_case), token)


def _old_request_rule(lower: bytes) -> str:
    """What new_call did with a request header before names were classified once (by lower case)."""
    from llmwatch.collectors.receivers.proxy.relay import _HOP_BY_HOP

    if lower in _HOP_BY_HOP:
        return "te" if lower == b"transfer-encoding" else "drop"
    return {b"host": "host", b"expect": "expect", b"authorization": "auth", b"content-length": "length"}.get(
        lower, "forward"
    )


def _old_response_rule(lower: bytes) -> str:
    from llmwatch.collectors.receivers.proxy.relay import _HOP_BY_HOP

    if lower in _HOP_BY_HOP:
        return "te" if lower == b"transfer-encoding" else "drop"
    return "length" if lower == b"content-length" else "forward"


def test_a_header_name_is_classified_as_its_lower_case_name_was_in_any_spelling_remembered_or_not():
    from hypothesis import given, settings

    from llmwatch.collectors.receivers.proxy import relay

    names = {
        relay._PLAIN: "forward",
        relay._HOP: "drop",
        relay._TE: "te",
        relay._HOST: "host",
        relay._EXPECT: "expect",
        relay._AUTH: "auth",
        relay._LENGTH: "length",
    }

    @settings(max_examples=400, deadline=None)
    @given(_spellings())
    def check(name: bytes) -> None:
        for table, rule in ((relay._REQUEST_KINDS, _old_request_rule), (relay._RESPONSE_KINDS, _old_response_rule)):
            kinds: dict = {}
            first = relay._header_kind(kinds, name, table)
            assert first[0] == name.lower()
            assert names[first[1]] == rule(name.lower()), name
            again = kinds.get(name) or relay._header_kind(kinds, name, table)
            assert again == first

    check()


def test_the_remembered_header_names_are_bounded_in_number_and_length():
    from llmwatch.collectors.receivers.proxy import relay

    kinds: dict = {}
    for i in range(relay._MAX_HEADER_KINDS * 3):
        assert relay._header_kind(kinds, b"X-Invented-%d" % i) == (b"x-invented-%d" % i, relay._PLAIN)
    assert len(kinds) == relay._MAX_HEADER_KINDS
    long_name = b"X-" + b"a" * 100_000
    assert relay._header_kind({}, long_name) == (long_name.lower(), relay._PLAIN)
    kept: dict = {}
    relay._header_kind(kept, long_name)
    assert kept == {}
    # Past the bound a name is still classified, only not remembered: Host stays Host.
    assert relay._header_kind(kinds, b"HOST") == (b"host", relay._HOST)
    assert b"HOST" not in kinds
