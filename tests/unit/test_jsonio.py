"""Files llmwatch writes whole appear complete or not at all; readers name the bad line."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from llmwatch.core.jsonio import atomic_write_bytes, atomic_write_text, atomic_writer, iter_jsonl, read_records
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score


def test_an_atomic_write_replaces_the_file_and_leaves_no_partial_file(tmp_path):
    target = tmp_path / "sub" / "run.json"
    atomic_write_text(target, "first")
    atomic_write_bytes(target, b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["run.json"]


def test_a_write_that_fails_midway_leaves_the_old_file_untouched(tmp_path):
    target = tmp_path / "scores.jsonl"
    target.write_bytes(b"old\n")
    with pytest.raises(RuntimeError, match="disk on fire"):
        with atomic_writer(target) as fh:
            fh.write(b"half a ")
            raise RuntimeError("disk on fire")
    assert target.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.jsonl"]


def test_readers_return_the_model_asked_for_and_name_file_line_and_field(tmp_path):
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    score = Score(sample_id="s1", check="c", kind="regex", result="pass", value=1.0, sample_timestamp=now)
    path = tmp_path / "scores-1.jsonl"
    path.write_bytes(
        score.to_json()
        + b"\n\n"
        + b'{"sample_id": "s2", "check": "c", "kind": "regex", "result": "maybe", "sample_timestamp": 0}\n'
    )
    records = read_records(tmp_path, Score, prefix="scores")
    assert next(records) == score
    with pytest.raises(RecordError, match=rf"{path}:3: field 'result': Input should be 'pass'"):
        next(records)
    sample_file = tmp_path / "samples.jsonl"
    sample_file.write_text(
        '{"timestamp": 0, "model": "m", "status": 200, "latency_ms": 1, "request": {}, "response": {}}\n'
    )
    [sample] = iter_jsonl(sample_file)
    assert isinstance(sample, Sample) and sample.model == "m"
