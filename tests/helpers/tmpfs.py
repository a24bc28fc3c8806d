"""A small tmpfs of the test's own: a disk that really fills, without touching the real one.

    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        ...                        # write under `disk`; fill(disk) takes what is left
    # unmounted here, whatever happened

Needs root (mount(8)); where it cannot mount, the test is skipped with the reason, never faked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        # Lazy: a process of the test that still holds a file there must not leave it mounted.
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(disk: Path, name: str = "filler") -> Path:
    """Take every free byte of `disk` (until ENOSPC); remove the returned file to give them back."""
    path = disk / name
    block = b"\0" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 64, 1):
            while True:
                try:
                    if os.write(fd, block[:size]) < size:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path
