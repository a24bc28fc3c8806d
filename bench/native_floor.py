"""Build `bench/native_floor.c` (a C relay on raw epoll that parses both heads with llhttp and
decides nothing) for `bench/peers.py --peers nginx,native-floor,relay-floor,...`.

llhttp is the parser httptools vendors: its C sources come from the httptools sdist of the
version installed here (`pip download --no-binary`), cached with the binary in .bench/native-floor/.
The build needs gcc; when anything is missing, `build()` returns None and says why, and peers.py
leaves the peer out.

    python bench/native_floor.py            # build (or find) it and print its path
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".bench" / "native-floor"


def build() -> tuple[Path | None, str]:
    """(the binary, "") or (None, why it could not be built)."""
    binary = HOME / "native_floor"
    source = ROOT / "bench" / "native_floor.c"
    if binary.exists() and binary.stat().st_mtime >= source.stat().st_mtime:
        return binary, ""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return None, "no C compiler (gcc) on PATH"
    HOME.mkdir(parents=True, exist_ok=True)
    wanted = f"httptools=={version('httptools')}"
    sdists = sorted(HOME.glob("httptools-*.tar.gz"))
    if not sdists:
        got = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(HOME),
                wanted,
            ],
            capture_output=True,
            text=True,
        )
        sdists = sorted(HOME.glob("httptools-*.tar.gz"))
        if not sdists:
            return None, f"could not download the {wanted} sdist for llhttp's sources: {got.stderr.strip()[-300:]}"
    with tarfile.open(sdists[-1]) as tar:
        tar.extractall(HOME, filter="data")
    llhttp = next(HOME.glob("httptools-*/vendor/llhttp"))
    cmd = [
        gcc,
        "-O2",
        "-o",
        str(binary),
        str(source),
        *map(str, sorted((llhttp / "src").glob("*.c"))),
        f"-I{llhttp / 'include'}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"the build failed: {done.stderr.strip()[-500:]}"
    return binary, ""


if __name__ == "__main__":
    path, why = build()
    print(path or why)
    sys.exit(0 if path else 1)
