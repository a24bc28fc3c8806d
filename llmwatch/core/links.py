"""The files of a dataset folder are its own: a symbolic link inside one is refused, never followed.

A samples, scores or pairs folder (JSON Lines, or a Parquet dataset's tree) is often shared or
synced; a link planted in it (`part-x.parquet -> /etc/passwd`, `samples-9.jsonl -> another team's
export`) was read through, and its content landed in reports, suites and the UI. Every reader lists
a folder's files through `llmwatch.core.jsonio.jsonl_paths` or `llmwatch.core.parquet.dataset_files`,
and both ask `refuse_link` about each entry they would read: one rule, one message. A path the user
names on the command line is followed, as `cat` does: they chose it (design record 0062).
"""

from __future__ import annotations

import os

from llmwatch.core.records import RecordError


class LinkInDataset(RecordError):
    """A symbolic link among the files (or folders) a dataset folder would be read from."""


def refuse_link(entry: str | os.PathLike[str], folder: str | os.PathLike[str]) -> None:
    """`LinkInDataset` naming `entry`, its target and the fix when `entry` (a file or folder inside
    the dataset folder `folder`) is a symbolic link; nothing otherwise. Checked with lstat, so a
    broken link is named too instead of read as missing."""
    if not os.path.islink(entry):
        return
    try:
        target = os.readlink(entry)
    except OSError:
        target = "?"
    raise LinkInDataset(
        f"{entry}: a symbolic link (to {target}) inside the dataset folder {folder}; llmwatch never reads "
        f"a dataset folder's files through a link: replace the link with the file or folder itself "
        f"(cp or mv it in), or give its target on the command line on its own"
    )
