"""`llmwatch ui`'s conversation view, as a real process over a generated data directory.

Samples carry `conversation_id` and `turn` (as the proxy writes them); their lines are shuffled in
the file. A sample's page names its conversation and turn and links to the conversation's page,
which shows every sampled call of it in turn order with its user message, answer and verdicts;
the conversations list ranks them by decay, length or recency under the samples' filters; an
unknown id is a 404 that says so; a user message with markup is inert text.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers.ui_app import UiServer, get, records
from helpers.ui_data import HOSTILE_TURN, conversation_id, generate, generate_conversations

SECURITY = ("Content-Security-Policy", "Referrer-Policy", "X-Content-Type-Options", "Cache-Control")
# n -> (version, turns): B's conversations decay (min_length fails from turn 3), A's do not;
# conversation 2's second user message is markup; conversation 6 is longer than one page of turns.
PLAN = {1: ("A", 4), 2: ("B", 3), 3: ("B", 5), 4: ("A", 1), 5: ("B", 2), 6: ("A", 104)}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ui-conv") / "llmwatch-data"
    generate(folder, 40, pairs=0)  # calls with no conversation (not chat, or from before tracking)
    generate_conversations(folder, PLAN)
    return folder


@pytest.fixture(scope="module")
def ui(data_dir: Path):
    server = UiServer(data_dir)
    yield server
    server.stop()


def share_by_sample(data_dir: Path) -> dict[str, float]:
    passed: dict[str, int] = {}
    decided: dict[str, int] = {}
    for s in records(data_dir / "scores"):
        if s["result"] in ("pass", "fail"):
            decided[s["sample_id"]] = decided.get(s["sample_id"], 0) + 1
            passed[s["sample_id"]] = passed.get(s["sample_id"], 0) + (s["result"] == "pass")
    return {i: passed[i] / decided[i] for i in decided}


def turn_rows(body: str) -> list[tuple[str, str]]:
    """(turn, sample id) of each row of a conversation's page, top to bottom."""
    return re.findall(
        r'<tr class="turn" id="turn-[^"]+"><td class=num>([^<]+)</td><td><a class="sample-link" href="/samples/([^"]+)"',
        body,
    )


def conversation_links(body: str) -> list[str]:
    return re.findall(r'class="conversation-link" href="/conversations/([^"]+)"', body)


def test_a_sample_links_to_its_conversation_which_shows_every_turn_in_order(ui: UiServer, data_dir: Path):
    cid = conversation_id(3)
    status, headers, body = get(f"{ui.base}/samples/cnv-003-03")
    assert status == 200
    text = html.unescape(re.sub(r"<[^>]+>", " ", body))
    assert re.search(rf"conversation\s+{cid} , turn 3 of 5\s+\(5 sampled call\(s\) of it\)", text), text[:3000]
    link = re.search(r'id="conversation-link" href="([^"]+)"', body).group(1)  # type: ignore[union-attr]
    assert link == f"/conversations/{cid}"

    status, headers, page = get(ui.base + link)
    assert status == 200 and all(h in headers for h in SECURITY)
    # Turn order, though the file holds the lines shuffled.
    assert turn_rows(page) == [(str(k), f"cnv-003-{k:02d}") for k in range(1, 6)]
    samples = {s["id"]: s for s in records(data_dir / "samples")}
    lines = [s for s in records(data_dir / "samples") if s.get("conversation_id") == cid]
    assert [s["turn"] for s in lines] != sorted(s["turn"] for s in lines)  # the fixture really is shuffled
    rows = re.findall(r'<tr class="turn".*?</tr>', page, re.S)
    scores = records(data_dir / "scores")
    shares = share_by_sample(data_dir)
    for k, row in enumerate(rows, start=1):
        sid = f"cnv-003-{k:02d}"
        cells = html.unescape(re.sub(r"<[^>]+>", "|", row))
        # That turn's user message (not the whole history) and its answer.
        assert f"Conversation 3, turn {k}: and then what?" in cells and "turn 1:" not in cells.replace(f"turn {k}:", "")
        assert samples[sid]["response"]["choices"][0]["message"]["content"] in cells
        verdicts = sorted(re.findall(r'([\w]+): <span class="(\w+)">', row))
        assert verdicts == sorted((s["check"], s["result"]) for s in scores if s["sample_id"] == sid)
        assert f"{100 * shares[sid]:.1f}%" in cells
    # Where it went wrong: min_length passes on turns 1-2 and fails from turn 3 on (version B).
    assert [dict(re.findall(r'([\w]+): <span class="(\w+)">', r))["min_length"] for r in rows] == [
        "pass", "pass", "fail", "fail", "fail"
    ]  # fmt: skip
    facts = html.unescape(re.sub(r"<[^>]+>", " ", re.search(r'<dl class="facts".*?</dl>', page, re.S).group(0)))  # type: ignore[union-attr]
    assert re.search(r"model versions\s+B\b", facts) and re.search(r"sampled calls\s+5\b", facts)
    assert re.search(r"turns\s+1 to 5\b", facts)

    # The samples list filtered by the conversation id lists the same calls.
    _, _, listed = get(f"{ui.base}/samples?conversation={quote(cid)}")
    assert re.search(r'<p id="count"><strong>5</strong>', listed)
    assert sorted(re.findall(r'class="sample-link" href="/samples/([^"]+)"', listed)) == [
        f"cnv-003-{k:02d}" for k in range(1, 6)
    ]


def test_a_sample_without_a_conversation_says_nothing_of_one(ui: UiServer):
    status, _, body = get(f"{ui.base}/samples/smp-0000010")
    assert status == 200 and 'id="conversation-link"' not in body and "<dt>conversation</dt>" not in body


def test_a_long_conversation_is_shown_a_page_of_turns_at_a_time(ui: UiServer):
    cid = conversation_id(6)
    _, _, first = get(f"{ui.base}/conversations/{cid}")
    assert [t for t, _ in turn_rows(first)] == [str(k) for k in range(1, 101)]
    nxt = html.unescape(re.search(r'id="next" href="([^"]+)"', first).group(1))  # type: ignore[union-attr]
    _, _, second = get(ui.base + nxt)
    assert [t for t, _ in turn_rows(second)] == ["101", "102", "103", "104"] and 'id="next"' not in second
    assert get(f"{ui.base}/conversations/{cid}?page=zero")[0] == 400


def test_an_unknown_conversation_is_a_404_that_says_so(ui: UiServer):
    status, headers, body = get(f"{ui.base}/conversations/h-does-not-exist")
    assert status == 404 and all(h in headers for h in SECURITY)
    assert "no sample in the data directory carries this conversation id" in body
    _, _, listed = get(f"{ui.base}/samples?conversation=h-does-not-exist")
    assert re.search(r'<p id="count"><strong>0</strong>', listed)


def test_markup_in_a_user_message_is_inert_text(ui: UiServer):
    cid = conversation_id(2)
    for url in (f"/conversations/{cid}", "/samples/cnv-002-02", f"/samples?conversation={cid}", "/conversations"):
        status, _, body = get(ui.base + url)
        assert status == 200, url
        # The pages have no script of their own: any <script or <img is the record's, unescaped.
        assert "<script" not in body and "<img" not in body, url
    _, _, body = get(f"{ui.base}/conversations/{cid}")
    assert html.escape(HOSTILE_TURN) in body
    # A hostile conversation id, in the path or a filter, is escaped back too.
    hostile = quote('"><script>alert(1)</script>', safe="")
    status, _, body = get(f"{ui.base}/conversations/{hostile}")
    assert status == 404 and "<script" not in body
    _, _, body = get(f"{ui.base}/samples?conversation={hostile}")
    assert "<script" not in body and "&quot;&gt;&lt;script&gt;" in body


def test_the_conversations_list_ranks_by_decay_length_or_recency_under_the_filters(ui: UiServer, data_dir: Path):
    shares = share_by_sample(data_dir)

    def decay(n: int) -> float | None:
        turns = PLAN[n][1]
        if turns < 2:
            return None
        return shares[f"cnv-{n:03d}-01"] - shares[f"cnv-{n:03d}-{turns:02d}"]

    status, headers, body = get(f"{ui.base}/conversations")
    assert status == 200 and all(h in headers for h in SECURITY)
    assert re.search(r'<p id="count"><strong>6</strong>', body)  # the calls without one are not a conversation
    ranked = conversation_links(body)
    assert set(ranked) == {conversation_id(n) for n in PLAN}
    decays = [decay(next(n for n in PLAN if conversation_id(n) == c)) for c in ranked]
    known = [d for d in decays if d is not None]
    assert known == sorted(known, reverse=True) and decays[-1] is None  # the one-turn conversation last
    assert ranked[0] in {conversation_id(2), conversation_id(3)}  # a B conversation that lost min_length

    _, _, body = get(f"{ui.base}/conversations?order=turns")
    assert conversation_links(body) == [conversation_id(n) for n in (6, 3, 1, 2, 5, 4)]
    _, _, body = get(f"{ui.base}/conversations?order=recent")
    assert conversation_links(body) == [conversation_id(n) for n in (6, 5, 4, 3, 2, 1)]
    _, _, body = get(f"{ui.base}/conversations?model_version=A&order=turns")
    assert conversation_links(body) == [conversation_id(n) for n in (6, 1, 4)]
    # A check filter does not cut conversations down to their failing turns: same list, same shares.
    _, _, everything = get(f"{ui.base}/conversations?order=turns")
    _, _, filtered = get(f"{ui.base}/conversations?order=turns&check=min_length&outcome=fail")
    assert re.search(r"<tbody>.*</tbody>", filtered, re.S).group(0) == re.search(
        r"<tbody>.*</tbody>", everything, re.S
    ).group(0)  # type: ignore[union-attr]

    status, _, body = get(f"{ui.base}/conversations?order=worst")
    assert status == 400 and "order=&#x27;worst&#x27;: one of decay, turns, recent" in body


def test_a_parquet_dataset_of_the_same_records_shows_the_same_conversations(
    ui: UiServer, data_dir: Path, tmp_path: Path
):
    # `llmwatch archive` writes samples with their conversation and turn (llmwatch.parquet/v2).
    from llmwatch.core import parquet_write
    from llmwatch.core.jsonio import read_records
    from llmwatch.core.scores import Score

    dataset = tmp_path / "dataset"
    parquet_write.write_dataset(dataset, "samples", read_records(data_dir / "samples"))
    parquet_write.write_dataset(dataset, "scores", read_records(data_dir / "scores", Score, prefix="scores"))
    server = UiServer(dataset)
    try:
        for n in (1, 3):
            cid = conversation_id(n)
            expected = turn_rows(get(f"{ui.base}/conversations/{cid}")[2])
            assert expected and turn_rows(get(f"{server.base}/conversations/{cid}")[2]) == expected
        assert conversation_links(get(f"{server.base}/conversations")[2]) == conversation_links(
            get(f"{ui.base}/conversations")[2]
        )
    finally:
        server.stop()


def test_a_page_number_in_other_digits_is_a_400_that_says_so_not_a_server_error(ui: UiServer):
    # "²" is a digit to str.isdigit but no number to int(): it ended each of these in a 500.
    cid = quote(conversation_id(6), safe="")
    for path in (f"/conversations/{cid}", "/conversations", "/samples"):
        status, _, body = get(f"{ui.base}{path}?page=%C2%B2")
        assert status == 400 and "a whole number from 1" in body, path
    # Digits of another script are numbers to int(): page 2 of the long conversation.
    status, _, body = get(f"{ui.base}/conversations/{cid}?page=%D9%A2")
    assert status == 200 and [t for t, _ in turn_rows(body)] == ["101", "102", "103", "104"]
    for path in ("/drift/%C2%B2", "/drift/page/%C2%B2", "/suites/%C2%B2"):
        assert get(ui.base + path)[0] == 404, path
    assert get(f"{ui.base}/shadow?page=%C2%B2")[0] == 200  # the shadow list reads a bad page as page 1
