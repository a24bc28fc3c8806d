"""Writing the Parquet dataset of llmwatch.core.parquet: whole files only, private modes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel

from llmwatch.core.jsonio import atomic_writer, make_dirs
from llmwatch.core.parquet import PartitionKey, arrow_schema, partition_of, pyarrow_module, to_row


def write_part(
    root: str | os.PathLike[str], kind: str, key: PartitionKey, name: str, records: Sequence[BaseModel]
) -> Path:
    """One Parquet file of `records` (all of partition `key`) at `<root>/<kind>/<key>/<name>`,
    complete or not at all (temporary file, fsync, rename); files 0600, directories 0700."""
    pa = pyarrow_module()
    directory = Path(root) / kind / key.directory()
    make_dirs(directory)
    table = pa.Table.from_pylist([to_row(kind, r) for r in records], schema=arrow_schema()[kind])
    target = directory / name
    with atomic_writer(target) as fh:
        pa.parquet.write_table(table, fh, compression="zstd")
    return target


def write_dataset(
    root: str | os.PathLike[str], kind: str, records: Iterable[BaseModel], name: str = "part-0.parquet"
) -> list[Path]:
    """Every record into its partition, one file `name` per partition (an export of a JSON Lines file)."""
    groups: dict[PartitionKey, list[BaseModel]] = {}
    for r in records:
        groups.setdefault(partition_of(kind, r), []).append(r)
    return [
        write_part(root, kind, key, name, rs) for key, rs in sorted(groups.items(), key=lambda kv: kv[0].directory())
    ]
