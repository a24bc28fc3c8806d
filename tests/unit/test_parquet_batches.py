"""A Parquet file is read in batches bounded by bytes, not only by rows: 2,048 rows of 1 MB answers
were one batch of 2 GB. Real files written by llmwatch's own writer; the assertions are on sizes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from helpers.samples import NOW, chat_sample

from llmwatch.core import parquet, parquet_write
from llmwatch.core.records import Sample

pytest.importorskip("pyarrow")


def samples(n: int, answer_bytes: int) -> list[Sample]:
    # Unique per row (no dictionary encoding), compressible (a small file on disk).
    return [
        chat_sample(
            (f"answer {i} " * (answer_bytes // 10 + 1))[:answer_bytes], id=f"s{i}", timestamp=NOW + timedelta(seconds=i)
        )
        for i in range(n)
    ]


def one_file(tmp_path: Path, records: list[Sample]) -> Path:
    [path] = parquet_write.write_dataset(tmp_path / "ds", "samples", records)
    return path


def test_a_file_of_large_cells_is_read_in_batches_of_at_most_batch_bytes(tmp_path: Path):
    path = one_file(tmp_path, samples(300, 200_000))  # 60 MB of answers: one 2,048-row batch before
    file = parquet.open_part(None, str(path))
    sizes = [(b.num_rows, b.nbytes) for b in parquet.record_batches(file)]
    assert sum(rows for rows, _ in sizes) == 300
    assert len(sizes) > 1 and all(nbytes <= parquet.BATCH_BYTES for _, nbytes in sizes), sizes
    ids = [s.id for s in parquet.read_dataset(tmp_path / "ds", Sample, "samples")]
    assert ids == [f"s{i}" for i in range(300)]


def test_samples_of_a_few_kilobytes_still_read_2048_rows_a_batch(tmp_path: Path):
    """What the million-sample benchmark reads: its batches keep their row count."""
    path = one_file(tmp_path, samples(5000, 2000))
    file = parquet.open_part(None, str(path))
    assert [b.num_rows for b in parquet.record_batches(file)] == [2048, 2048, 904]
