"""`load_tasks_and_key`: a review round's tasks with the key written for exactly those tasks."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import pytest

from llmwatch.scorers.evaluation.review import (
    Candidate,
    KeyEntry,
    ReviewError,
    ReviewKey,
    ReviewTask,
    load_tasks_and_key,
)


def write_round(tmp_path, tasks_sha256: str | None = None):
    task = ReviewTask(
        task_id="t1",
        category="general",
        stratum="general",
        same_prompt=True,
        prompt=[{"role": "user", "content": "hi"}],
        candidates={"A": Candidate(answer="hello"), "B": Candidate(answer="hey")},
        criteria=["helpfulness"],
    )
    tasks = tmp_path / "round.jsonl"
    tasks.write_text(task.model_dump_json(by_alias=True) + "\n")
    key = ReviewKey(
        created_at=datetime(2026, 12, 5, tzinfo=timezone.utc),
        tasks_file=str(tasks),
        tasks_sha256=tasks_sha256 or hashlib.sha256(tasks.read_bytes()).hexdigest(),
        versions=["primary", "cand"],
        seed=1,
        criteria=["helpfulness"],
        tasks={
            "t1": {
                "A": KeyEntry(model_version="primary", sample_id="s1"),
                "B": KeyEntry(model_version="cand", sample_id="s2"),
            }
        },
    )
    (tmp_path / "round.key.json").write_text(key.model_dump_json(by_alias=True))
    return tasks


def test_the_key_next_to_the_tasks_is_read_by_default(tmp_path):
    tasks_path = write_round(tmp_path)
    tasks, key, key_file = load_tasks_and_key(tasks_path)
    assert list(tasks) == ["t1"] and key.versions == ["primary", "cand"]
    assert str(key_file) == str(tmp_path / "round.key.json")


def test_a_key_written_for_other_tasks_is_refused_and_names_both_files(tmp_path):
    tasks_path = write_round(tmp_path, tasks_sha256="0" * 64)
    with pytest.raises(ReviewError) as refused:
        load_tasks_and_key(tasks_path, tmp_path / "round.key.json")
    assert str(refused.value) == (
        f"key file {tmp_path / 'round.key.json'} was written for another tasks file than {tasks_path} "
        "(sha256 differs); give the key exported with it (--key)"
    )
