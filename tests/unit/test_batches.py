"""`batches`: a stream of records in lists of a given size, for the readers that score or embed them."""

from __future__ import annotations

from llmwatch.core.jsonio import batches


def test_full_lists_then_the_rest_and_never_an_empty_one():
    assert list(batches(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batches(range(6), 3)) == [[0, 1, 2], [3, 4, 5]]
    assert list(batches([], 3)) == []


def test_each_list_is_new_so_a_consumer_may_keep_it():
    kept = list(batches(iter("abcde"), 2))
    assert kept == [["a", "b"], ["c", "d"], ["e"]]
    assert len({id(b) for b in kept}) == 3


def test_records_are_read_only_as_far_as_the_batch_handed_on():
    read = []

    def stream():
        for i in range(10):
            read.append(i)
            yield i

    first = next(batches(stream(), 4))
    assert first == [0, 1, 2, 3] and read == [0, 1, 2, 3]
