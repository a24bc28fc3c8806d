"""The index behind `llmwatch ui`: the SQL text extraction agrees with core.wire, filters read what
Grafana and people send, a record is found by its own id, and refreshes read each line once."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
from helpers.samples import chat_sample, rule_score

from llmwatch.agent.apps.ui.index import FilterError, Filters, Index, read_record, signal_filters
from llmwatch.core.wire import extract_answer_text, extract_prompt_text
from llmwatch.scorers.drift.features import FAILURE_MODES as DRIFT_FAILURE_MODES
from llmwatch.scorers.drift.features import failure_mode

SHAPES = [
    ({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "last <b>"}]},
     {"choices": [{"message": {"role": "assistant", "content": "chat answer"}}]}),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "part one "}, {"type": "image_url", "image_url": {"url": "data:"}}, "a bare part", {"type": "text", "text": "part two"}]}]},
     {"choices": [{"message": {"role": "assistant", "content": [{"type": "text", "text": "parts"}, {"type": "text", "text": " answered"}]}}]}),
    ({"messages": [{"role": "system", "content": "only a system message"}]}, {"choices": [{"message": {"role": "assistant", "content": None}}]}),
    ({"prompt": "completion prompt"}, {"choices": [{"text": "completion text"}]}),
    ({"prompt": ["first of a batch", "second"]}, {"choices": []}),
    ({"input": "responses input"}, {"output_text": "responses output"}),
    ("a bare string request", "a bare string answer"),
    ({"model": "x"}, {"error": {"message": "bad gateway"}}),
]  # fmt: skip


def write(path: Path, records: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as fh:
        fh.write(b"".join(r + b"\n" for r in records))


def test_prompt_and_answer_text_in_sql_are_what_core_wire_extracts(tmp_path: Path):
    records = [chat_sample(id=f"s{i}", request=req, response=resp).to_json() for i, (req, resp) in enumerate(SHAPES)]
    write(tmp_path / "samples" / "samples-20261201-0000.jsonl", records)
    index = Index(tmp_path)
    index.refresh()
    for i, (req, resp) in enumerate(SHAPES):
        row = index.sample(f"s{i}")
        assert row is not None
        assert (row["prompt"], row["answer"]) == (extract_prompt_text(req), extract_answer_text(resp)), (req, resp)


# (sample fields, failing checks as (kind, details)): one call per failure mode, and the order between them.
MODE_CASES = [
    ({}, []),
    ({"status": 500}, [("refusal", {})]),
    ({}, [("refusal", {}), ("tool_call", {})]),
    ({}, [("json_valid", {})]),
    ({"finish_reason": "length"}, [("tool_call", {"failures": ["unknown_tool"]})]),
    ({"finish_reason": "length"}, []),
    ({}, [("not_empty_or_truncated", {"truncated": True})]),
    ({}, [("not_empty_or_truncated", {})]),
    ({}, [("consistency", {"confident_unstable": True})]),
    ({}, [("consistency", {"confident_unstable": False})]),
]  # fmt: skip


def test_the_failure_mode_in_sql_is_what_the_drift_family_counts(tmp_path: Path):
    """The UI's failure mode of a call (its filter, the sample page) is the label the drift family
    `failure_modes` gives it (features.failure_mode), for every label: a call whose tool call failed
    read `ok` in the UI and `tool_calls` in drift, a confidently unstable one `ok` and
    `confident_unstable`."""
    samples, scores = [], []
    for i, (fields, failing) in enumerate(MODE_CASES):
        sample = chat_sample(id=f"s{i}", **fields)
        samples.append(sample)
        scores += [
            rule_score(sample.id, check=kind, kind=kind, result="fail", value=0.0, details=details)
            for kind, details in failing
        ]
    write(tmp_path / "samples" / "samples-20261201-0000.jsonl", [s.to_json() for s in samples])
    write(tmp_path / "scores" / "scores-20261201-0000.jsonl", [s.to_json() for s in scores])
    index = Index(tmp_path)
    index.refresh()
    expected = {s.id: failure_mode(s, {c.check: c for c in scores if c.sample_id == s.id}) for s in samples}
    assert set(expected.values()) == set(DRIFT_FAILURE_MODES) | {"confident_unstable"}  # every label is tried
    got = {s.id: (index.sample(s.id) or {}).get("failure_mode") for s in samples}
    assert got == expected
    for mode in set(expected.values()) - {"ok"}:
        assert Filters.from_query({"failure_mode": mode}).failure_mode == mode  # a filter takes each label


@pytest.mark.parametrize("value", [".*", "$__all", "All", ""])
def test_a_grafana_variable_set_to_all_is_no_filter(value: str):
    assert Filters.from_query({"model_version": value, "check": value}) == Filters()
    assert Filters.from_query({"model_version": f"B,{value}"}) == Filters()  # All among the values


def test_filters_read_lists_times_and_signals():
    f = Filters.from_query({"model_version": "A, B", "since": "1796083200000", "until": "2026-12-02T00:00:00Z"})
    assert f.model_version == ("A", "B")
    assert f.since == f.until.replace(day=1) == datetime(2026, 12, 1, tzinfo=timezone.utc)  # type: ignore[union-attr]
    assert Filters.from_query({"since": "1796083200"}).since == f.since  # epoch seconds too
    assert f.query() == "model_version=A%2CB&since=2026-12-01T00%3A00%3A00Z&until=2026-12-02T00%3A00%3A00Z"
    assert Filters.from_query(dict(p.split("=") for p in "check=c&outcome=fail&page=2".split("&"))).query(page=3) == (
        "check=c&outcome=fail&page=3"
    )
    assert signal_filters("pass_rate:refusal") == {"check": "refusal", "outcome": "fail"}
    assert signal_filters("failure_modes") == {"failure_mode": "any"}
    assert signal_filters("perf:latency_per_token_ms") == {"sort": "latency"}
    assert signal_filters("input:mix:category") == {}
    # An explicit parameter wins over what the signal implies.
    assert Filters.from_query({"signal": "pass_rate:refusal", "outcome": "pass"}).outcome == "pass"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"outcome": "maybe"}, "outcome='maybe': one of pass, fail, error, skip"),
        ({"failure_mode": "x"}, "failure_mode='x': one of any, error"),
        ({"since": "yesterday"}, "since='yesterday': give an ISO 8601 time"),
        ({"until": "1e30"}, "until='1e30': an epoch time out of range"),
        ({"page": "0"}, "page='0': a whole number from 1"),
        ({"sort": "name"}, "sort='name': one of time, latency"),
        ({"q": "x" * 501}, "q: at most 500 characters"),
        ({"conversation": "h-" * 65}, "conversation: at most 128 characters"),
    ],
)
def test_a_bad_filter_names_the_parameter_and_what_it_takes(query: dict, message: str):
    with pytest.raises(FilterError, match=message.replace("(", r"\(").replace("[", r"\[")):
        Filters.from_query(query)


def test_a_record_is_found_by_its_own_id_not_a_nested_one(tmp_path: Path):
    path = tmp_path / "samples.jsonl"
    # A tool call inside an earlier record carries the same id string; a later record is the one.
    decoy = chat_sample(
        id="other", request={"messages": [{"role": "user", "content": "x"}], "tools": [{"id": "smp-7"}]}
    )
    target = chat_sample(id="smp-7", prompt="the real one")
    spaced = b'{"id": "spaced", "timestamp": 0, "model": "m", "status": 200, "latency_ms": 1, "request": "r", "response": "a"}'
    write(path, [decoy.to_json(), b"{torn", target.to_json(), spaced])
    assert orjson.dumps(read_record(str(path), "smp-7")) == orjson.dumps(orjson.loads(target.to_json()))
    assert read_record(str(path), "spaced")["request"] == "r"  # type: ignore[index]
    assert read_record(str(path), "missing") is None
    assert read_record(str(tmp_path / "gone.jsonl"), "smp-7") is None


def test_a_refresh_reads_each_appended_line_once_and_a_torn_line_once_whole(tmp_path: Path):
    path = tmp_path / "samples" / "samples-20261201-0000.jsonl"
    write(path, [chat_sample(id=f"s{i}").to_json() for i in range(3)])
    index = Index(tmp_path)
    assert index.refresh() and index.totals()["samples"] == 3
    assert not index.refresh()  # nothing changed: nothing read

    whole = chat_sample(id="s3").to_json()
    torn = chat_sample(id="s4").to_json()
    with open(path, "ab") as fh:
        fh.write(whole + b"\n" + torn[:40])  # the writer is mid-line
    assert index.refresh() and index.totals()["samples"] == 4
    with open(path, "ab") as fh:
        fh.write(torn[40:] + b"\n")
    assert index.refresh() and index.totals()["samples"] == 5
    ids = [r["id"] for r in index._rows("SELECT id FROM samples ORDER BY id")]
    assert ids == ["s0", "s1", "s2", "s3", "s4"]

    # Rotated away and replaced by a shorter file of the same name: read again from the start.
    path.unlink()
    write(path, [chat_sample(id="n0").to_json()])
    assert index.refresh()
    assert [r["id"] for r in index._rows("SELECT id FROM samples")] == ["n0"]
    path.unlink()
    assert index.refresh() and index.totals()["samples"] == 0


def test_conversations_come_from_the_index_turn_order_and_old_files_without_them(tmp_path: Path):
    """A file written before conversation tracking (no `conversation_id`, or an empty one) reads as no
    conversation; a conversation's calls come back in turn order whatever the file order."""
    folder = tmp_path / "samples"
    old = orjson.loads(chat_sample(id="old").to_json())
    for key in ("conversation_id", "turn"):
        old.pop(key, None)
    empty = orjson.loads(chat_sample(id="empty").to_json()) | {"conversation_id": ""}
    turns = [chat_sample(id=f"t{k}", prompt=f"turn {k}", conversation_id="h-1", turn=k) for k in (3, 1, 2)]
    write(
        folder / "samples-20261201-0000.jsonl", [orjson.dumps(old), orjson.dumps(empty)] + [t.to_json() for t in turns]
    )
    index = Index(tmp_path)
    try:
        index.refresh()
        summary, rows = index.conversation("h-1")
        assert summary is not None and summary["calls"] == 3 and summary["last_turn"] == 3
        assert [(r["id"], r["turn"], r["prompt"]) for r in rows] == [
            ("t1", 1, "turn 1"),
            ("t2", 2, "turn 2"),
            ("t3", 3, "turn 3"),
        ]
        assert index.conversation("h-2") == (None, [])
        total, listed = index.conversations(Filters())
        assert total == 1 and [r["conversation_id"] for r in listed] == ["h-1"]
        assert index.sample("old")["conversation_id"] is None and index.sample("empty")["conversation_id"] is None  # type: ignore[index]
        assert index.search(Filters.from_query({"conversation": "h-1"}))[0] == 3
    finally:
        index.close()
