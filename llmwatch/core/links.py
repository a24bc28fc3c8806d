"""The files of a dataset folder are its own: a symbolic link inside one is refused, never followed.

A samples, scores or pairs folder (JSON Lines, or a Parquet dataset's tree) is often shared or
synced; a link planted in it (`part-x.parquet -> /etc/passwd`, `samples-9.jsonl -> another team's
export`) was read through, and its content landed in reports, suites and the UI. Every reader lists
a folder's files through `llmwatch.core.jsonio.jsonl_paths` or `llmwatch.core.parquet.dataset_files`,
and both ask `refuse_link` about each entry they would read: one rule, one message. A path the user
names on the command line is followed, as `cat` does: they chose it (design record 0062).

A listing answers for the moment it ran: a file (or a partition folder) swapped for a link between
the listing and the read was read through. So a listed file is opened with `open_inside` too, one
component at a time from the dataset folder with O_NOFOLLOW, and refused there with the same message.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from llmwatch.core.records import RecordError


class LinkInDataset(RecordError):
    """A symbolic link among the files (or folders) a dataset folder would be read from."""


def refuse_link(entry: str | os.PathLike[str], folder: str | os.PathLike[str]) -> None:
    """`LinkInDataset` naming `entry`, its target and the fix when `entry` (a file or folder inside
    the dataset folder `folder`) is a symbolic link; nothing otherwise. Checked with lstat, so a
    broken link is named too instead of read as missing."""
    if os.path.islink(entry):
        raise _link_in(entry, folder)


def _link_in(entry: str | os.PathLike[str], folder: str | os.PathLike[str]) -> LinkInDataset:
    try:
        target = os.readlink(entry)
    except OSError:
        target = "?"  # gone again, or not a link any more: it was one when the open refused it
    return LinkInDataset(
        f"{entry}: a symbolic link (to {target}) inside the dataset folder {folder}; llmwatch never reads "
        f"a dataset folder's files through a link: replace the link with the file or folder itself "
        f"(cp or mv it in), or give its target on the command line on its own"
    )


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# O_NONBLOCK: a FIFO swapped in for a part file would block the open until a writer came.
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _DIRECTORY


def open_inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> int:
    """A read-only descriptor of the regular file `path`, listed inside the dataset folder `folder`.

    Opened from `folder` one component at a time (`dir_fd`), each with O_NOFOLLOW: the file, or a
    partition folder on the way to it, swapped for a link after the listing raises `LinkInDataset`
    naming it, the listing's message; the file is never read through it. `folder` itself is followed
    (the user named it). `RecordError` when the name is no longer a regular file; `OSError` otherwise
    (gone, unreadable): the caller's "not a readable file" names it."""
    try:
        names = Path(path).relative_to(folder).parts
    except ValueError:
        names = ()
    if not names or os.open not in os.supports_dir_fd:
        # Not under `folder` lexically (never so for a listed file), or no dir_fd here: the last
        # component alone is checked.
        return _regular(_open_one(path, None, _FILE_FLAGS, path, folder), path)
    fd = os.open(folder, os.O_RDONLY | _CLOEXEC | _DIRECTORY)
    here = Path(folder)
    try:
        for i, name in enumerate(names):
            here = here / name
            last = i == len(names) - 1
            opened = _open_one(name, fd, _FILE_FLAGS if last else _DIR_FLAGS, here, folder)
            os.close(fd)
            fd = opened
    except BaseException:
        os.close(fd)
        raise
    return _regular(fd, path)


def _open_one(
    name: str | os.PathLike[str],
    dir_fd: int | None,
    flags: int,
    entry: str | os.PathLike[str],
    folder: str | os.PathLike[str],
) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        # ELOOP: O_NOFOLLOW met a link; ENOTDIR: O_DIRECTORY | O_NOFOLLOW met a link to a folder.
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and os.path.islink(entry)):
            raise _link_in(entry, folder) from None
        raise


def _regular(fd: int, path: str | os.PathLike[str]) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RecordError(
            f"{path}: not a regular file (a pipe, a device or a folder); a dataset's part files are files"
        )
    os.set_blocking(fd, True)
    return fd
