"""The page links under a list in `llmwatch ui` (samples, conversations, a conversation's turns)."""

from __future__ import annotations

from llmwatch.agent.apps.ui.app import _pages


def test_first_middle_and_last_pages_link_only_where_there_is_more():
    def href(n: int) -> str:
        return f"/samples?model=a&page={n}"

    assert _pages(1, 50, href) == '<nav class="pages"></nav>'
    assert _pages(1, 51, href) == '<nav class="pages"><a id="next" href="/samples?model=a&amp;page=2">next</a></nav>'
    assert _pages(2, 101, href) == (
        '<nav class="pages"><a id="prev" href="/samples?model=a&amp;page=1">previous</a>'
        '<a id="next" href="/samples?model=a&amp;page=3">next</a></nav>'
    )
    assert (
        _pages(3, 101, href) == '<nav class="pages"><a id="prev" href="/samples?model=a&amp;page=2">previous</a></nav>'
    )


def test_a_page_size_and_words_of_its_own():
    nav = _pages(
        2, 201, lambda n: f"/conversations/c%201?page={n}", size=100, earlier="earlier turns", later="later turns"
    )
    assert nav == (
        '<nav class="pages"><a id="prev" href="/conversations/c%201?page=1">earlier turns</a>'
        '<a id="next" href="/conversations/c%201?page=3">later turns</a></nav>'
    )
