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
