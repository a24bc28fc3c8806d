"""`llmwatch replay` reads samples with the JSON Lines reader every other command uses.

It had its own copy of the line loop, which refused a torn last line (a proxy killed mid-write;
every other reader skips it with a warning) and told a file of scores only that fields were missing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers.samples import NOW, chat_sample

from llmwatch.agent.cli.replay import ordered_samples
from llmwatch.core.records import RecordError
from llmwatch.core.scores import Score


def test_a_torn_last_line_is_skipped_and_the_rest_are_sorted_by_time(tmp_path):
    later = chat_sample(id="later", timestamp=NOW + timedelta(seconds=5))
    earlier = chat_sample(id="earlier")
    path = tmp_path / "samples-1.jsonl"
    path.write_bytes(later.to_json() + b"\n" + earlier.to_json() + b"\n" + earlier.to_json()[:40])
    assert [s.id for s in ordered_samples(str(path))] == ["earlier", "later"]


def test_a_bad_line_inside_the_file_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "samples-1.jsonl"
    path.write_bytes(chat_sample().to_json() + b"\n{not json\n" + chat_sample().to_json() + b"\n")
    with pytest.raises(RecordError, match=r"samples-1\.jsonl:2: not valid JSON"):
        ordered_samples(str(path))


def test_a_file_of_scores_is_named_as_one(tmp_path):
    score = Score(sample_id="s1", check="c", kind="rule", result="pass", value=1.0, sample_timestamp=NOW)
    path = tmp_path / "scores.jsonl"
    path.write_bytes(score.to_json() + b"\n")
    with pytest.raises(
        RecordError, match=r"scores\.jsonl:1: field 'schema' is 'llmwatch\.score/v1': this is a file of scores"
    ):
        ordered_samples(str(path))
