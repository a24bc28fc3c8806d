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


def test_a_file_of_another_llmwatch_record_kind_says_which_kind_it_is(tmp_path):
    # `report --samples llmwatch-data/scores` (the folders mixed up) said "unsupported schema
    # 'llmwatch.score/v1' ... (omit the field or convert the file)" and six missing fields.
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    scores = tmp_path / "scores-1.jsonl"
    scores.write_bytes(
        Score(sample_id="s1", check="c", kind="regex", result="pass", value=1.0, sample_timestamp=now).to_json() + b"\n"
    )
    with pytest.raises(RecordError) as err:
        list(iter_jsonl(scores))
    message = str(err.value)
    assert message.startswith(
        f"{scores}:1: field 'schema' is 'llmwatch.score/v1': this is a file of scores, not of samples"
    )
    assert "--samples llmwatch-data/samples --scores llmwatch-data/scores" in message
    assert "Field required" not in message
    # A schema llmwatch does not write (a newer version's) is still refused as unsupported.
    newer = tmp_path / "samples-1.jsonl"
    newer.write_text('{"schema": "llmwatch.sample/v9"}\n')
    with pytest.raises(RecordError, match="unsupported schema 'llmwatch.sample/v9'"):
        list(iter_jsonl(newer))


# --- whole documents: one reader, one wording ------------------------------------------------------


class _Bad(Exception):
    pass


def test_a_document_that_is_missing_unparsable_or_of_another_kind_is_refused_naming_the_file(tmp_path):
    from pydantic import BaseModel

    from llmwatch.core.jsonio import read_document, read_model

    class Doc(BaseModel):
        schema_: str = "x"
        n: int

    missing = tmp_path / "gone.json"
    with pytest.raises(_Bad, match=rf"^baseline {missing} does not exist; freeze one$"):
        read_document(missing, what="baseline", error=_Bad, missing="freeze one")
    with pytest.raises(_Bad, match=rf"^config file {tmp_path} is a directory, not a file; pass a file$"):
        read_document(tmp_path, what="config file", error=_Bad, fmt="yaml", missing="pass a file")
    broken = tmp_path / "broken.json"
    broken.write_text('{"a": 1,\n "b": }')
    with pytest.raises(_Bad, match=rf"^baseline {broken} is not valid JSON at line 2, column 7: .*; refreeze it$"):
        read_document(broken, what="baseline", error=_Bad, fix="refreeze it")
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("a: [1, 2\n")
    with pytest.raises(_Bad, match=rf"^config file {yaml_file} is not valid YAML at line \d+, column \d+: "):
        read_document(yaml_file, what="config file", error=_Bad, fmt="yaml")
    other = tmp_path / "other.json"
    other.write_text('{"schema": "something/v1"}')
    with pytest.raises(_Bad, match=r"is not an llmwatch run \(schema 'something/v1', expected 'llmwatch.run/v1'\)"):
        read_model(other, Doc, what="run", error=_Bad, schema="llmwatch.run/v1", kind="an llmwatch run")
    damaged = tmp_path / "damaged.json"
    damaged.write_text('{"schema": "llmwatch.run/v1", "n": "many"}')
    with pytest.raises(_Bad, match=rf"^run {damaged}: .*n"):
        read_model(damaged, Doc, what="run", error=_Bad, schema="llmwatch.run/v1")


def test_a_folder_file_swapped_for_a_link_after_the_listing_is_refused_at_the_open(tmp_path):
    """The listing refuses a link (llmwatch.core.links); one swapped in after it is refused by the
    open itself (O_NOFOLLOW), while a file the user names alone is read through its link."""
    from llmwatch.core.links import LinkInDataset

    victim = tmp_path / "elsewhere.jsonl"
    victim.write_bytes(
        b'{"id": "x", "timestamp": 0, "model": "m", "status": 200, "latency_ms": 1, "request": {}, "response": {}}\n'
    )
    folder = tmp_path / "samples"
    folder.mkdir()
    (folder / "samples-1.jsonl").symlink_to(victim)
    with pytest.raises(LinkInDataset, match="samples-1.jsonl: a symbolic link .* inside the dataset folder"):
        list(iter_jsonl(folder / "samples-1.jsonl", folder=folder))
    with pytest.raises(LinkInDataset, match="samples-1.jsonl: a symbolic link"):
        list(read_records(folder))
    assert [s.id for s in iter_jsonl(folder / "samples-1.jsonl")] == ["x"]
    assert [s.id for s in read_records(folder / "samples-1.jsonl")] == ["x"]
