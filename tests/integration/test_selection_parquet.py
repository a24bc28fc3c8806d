"""`suite build` and `review export` read a Parquet dataset as they read JSON Lines (issue 29).

The dataset's files are partitioned by date and model version, so its records come back in
another order than the JSON Lines file's. A suite does not depend on that order (its samples are
taken in time order), so it is byte-identical; a review round draws by position in the input, so
it is a round of the same size over the same samples, not the same draw.
"""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from helpers import procs

from llmwatch.core import parquet_write
from llmwatch.core.jsonio import read_records
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score

pytest.importorskip("pyarrow")

T0 = datetime(2026, 3, 1, 20, 0, tzinfo=timezone.utc)
WORDS = "apples billing caching dates engines forms graphs hashes invoices joins keys lists maps notes".split()
ENV = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def sample(i: int) -> Sample:
    refuse = i % 9 == 0
    answer = "I'm sorry, but I can't help with that." if refuse else " ".join(["word"] * (5 + i % 40)) + "."
    topic = ("bread", "trains", "taxes")[i % 3]
    return Sample(
        id=f"s{i}",
        timestamp=T0 + timedelta(minutes=3 * i),  # crosses midnight: two date partitions
        model="m",
        model_version="AB"[i % 2],
        status=200,
        latency_ms=100.0,
        request={
            "messages": [
                {"role": "user", "content": f"Tell me about {topic}, {WORDS[i % len(WORDS)]} and {WORDS[i % 7]}?"}
            ]
        },
        response={"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]},
    )


def llmwatch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return procs.llmwatch(*args, cwd=cwd, env=ENV)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    d = tmp_path_factory.mktemp("inputs")
    samples = [sample(i) for i in range(400)]
    (d / "samples.jsonl").write_bytes(b"".join(s.to_json() + b"\n" for s in samples))
    scored = llmwatch("score", "--in", str(d / "samples.jsonl"), "--out", str(d / "scores.jsonl"), cwd=d)
    assert scored.returncode == 0, scored.stderr
    parquet_write.write_dataset(d / "ds", "samples", samples)
    parquet_write.write_dataset(d / "ds", "scores", list(read_records(d / "scores.jsonl", Score, prefix="scores")))
    return {
        "jsonl": (str(d / "samples.jsonl"), str(d / "scores.jsonl")),
        "parquet": (str(d / "ds"), str(d / "ds")),
    }


def test_a_suite_built_from_the_parquet_dataset_is_the_one_built_from_json_lines(inputs, tmp_path):
    built = {}
    for form, (samples, scores) in inputs.items():
        out = tmp_path / f"{form}.jsonl"
        proc = llmwatch(
            "suite", "build", "--samples", samples, "--scores", scores, "--out", str(out),
            "--similarity", "text", "--size", "30", "--seed", "3", cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        manifest = orjson.loads(out.with_name(f"{form}.manifest.json").read_bytes())
        built[form] = (out.read_bytes(), manifest["cases"], manifest["counts"])
    assert built["parquet"] == built["jsonl"]
    assert len(built["jsonl"][0].splitlines()) == 30


def test_a_review_round_is_drawn_from_the_parquet_dataset(inputs, tmp_path):
    samples, scores = inputs["parquet"]
    out = tmp_path / "tasks.jsonl"
    proc = llmwatch(
        "review", "export", "--samples", samples, "--scores", scores, "--versions", "A,B", "--n", "40",
        "--seed", "1", "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    tasks = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    key = orjson.loads(out.with_name("tasks.key.json").read_bytes())
    assert len(tasks) == 40 and {t["stratum"] for t in tasks} == {"typical", "edge", "failing"}
    by_id = {s.id: s for s in read_records(inputs["jsonl"][0])}
    for task in tasks:
        sides = key["tasks"][task["task_id"]]
        assert {e["model_version"] for e in sides.values()} == {"A", "B"}
        for label, entry in sides.items():  # the answer shown is the answer of the sample the key names
            assert task["candidates"][label]["answer"] == by_id[entry["sample_id"]].answer_text()
