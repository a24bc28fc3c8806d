"""The C planner (`dataplane.Planner`, native/dataplane.c) under AddressSanitizer and UBSan.

Builds the extension with `-fsanitize=address,undefined` into .bench/dataplane-asan/ and feeds it,
in a child interpreter with the sanitizer runtime preloaded, the relay fuzzer's hostile requests
and responses (tests/helpers/relay_fuzz.py), each also cut at a random byte and fed to the other
side's reader, under three configurations. Any out-of-bounds read or write, use after free or
undefined behaviour stops the child with the sanitizer's report: exit status 1. A crash-freedom
run, not a differential one (tests/integration/test_native_heads.py compares the two engines).

    python bench/fuzz_dataplane.py [--cases N] [--seed S]
    python bench/fuzz_dataplane.py --tests [TEST ...]   # the front door and C forwarding, sanitized
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / ".bench" / "dataplane-asan"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]


def build() -> tuple[Path | None, str]:
    """(the sanitized extension, "") or (None, why not)."""
    cc = shutil.which("gcc")
    if cc is None:
        return None, "no gcc on PATH"
    runtime = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not runtime or not Path(runtime).exists():
        return None, "gcc has no AddressSanitizer runtime (libasan)"
    spec = importlib.util.spec_from_file_location("llmwatch_hatch_build", ROOT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    built, why = hook.build_native(HOME, SANITIZE)
    return built, why


def child(path: Path, cases: int, seed: int) -> int:
    """Runs in the sanitized interpreter: every case through plan() and respond()."""
    import ctypes

    sys.path.insert(0, str(ROOT / "tests"))
    import hypothesis
    from helpers.relay_fuzz import requests, responses
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    spec = importlib.util.spec_from_file_location("llmwatch.collectors.receivers.proxy.dataplane", path)
    assert spec is not None and spec.loader is not None
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    planners = [
        native.Planner(
            prefix=prefix,
            host_header=b"Host: up:8000\r\n",
            authorization=auth,
            preserve_host=preserve,
            max_header_bytes=line,
            max_headers=count,
            max_head=max(min(line * (count + 1), 1 << 20), 2 * line),
        )
        for prefix, auth, preserve, line, count in [
            (b"", None, False, 65_536, 256),
            (b"/base", b"Authorization: Basic eDp5\r\n", True, 8190, 32),
            (b"/p", None, False, 8190, 32),
        ]
    ]
    verdicts: collections.Counter[str] = collections.Counter()

    def exact(data: bytes) -> Any:
        # A buffer of exactly len(data) bytes from malloc (PYTHONMALLOC=malloc), so that reading one
        # byte past its end is out of bounds for the sanitizer: a bytes object's buffer ends in a NUL
        # inside its allocation. (ctypes keeps arrays of 16 bytes or less inside the object.)
        return (ctypes.c_char * len(data)).from_buffer_copy(data) if data else data

    def feed(data: bytes, cut: int) -> None:
        for planner in planners:
            for piece in (exact(data), exact(data[:cut])):
                verdicts["plan %d" % planner.plan(piece)[0]] += 1
                verdicts["respond %d" % planner.respond(piece, cut % 2 == 0, cut % 3 == 0)[0]] += 1

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.one_of(requests(), responses()), st.integers(0, 4096))
    def run(data: bytes, cut: int) -> None:
        feed(data, cut % (len(data) + 1))

    hypothesis.seed(seed)(run)()
    print(f"{cases} cases, each whole and cut, through 3 planners: {dict(sorted(verdicts.items()))}")
    return 0


def child_tests(path: Path, tests: list[str]) -> int:
    """Runs in the sanitized interpreter: the front door's and C forwarding's own integration tests,
    with the sanitized extension in place of the built one (its thread, epoll loop, pool and
    buffers under AddressSanitizer and UBSan, over real sockets)."""
    import pytest

    spec = importlib.util.spec_from_file_location("llmwatch.collectors.receivers.proxy.dataplane", path)
    assert spec is not None and spec.loader is not None
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    sys.modules["llmwatch.collectors.receivers.proxy.dataplane"] = native
    import llmwatch.collectors.receivers.proxy as package

    package.dataplane = native  # type: ignore[attr-defined]
    # --capture=sys: a sanitizer report is written to fd 2 as the process ends; captured at the fd
    # level, it would be lost with the process.
    return int(pytest.main(["-q", "-p", "no:cacheprovider", "--capture=sys", "--rootdir", str(ROOT), *tests]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--tests",
        nargs="*",
        metavar="TEST",
        help="instead of the planner fuzz: run these pytest files with the sanitized extension "
        "(default with no names: tests/integration/test_native_forward.py, test_native_ring.py and test_native_front.py)",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tests is not None and not args.tests:
        args.tests = [
            "tests/integration/test_native_forward.py",
            "tests/integration/test_native_ring.py",
            "tests/integration/test_native_front.py",
        ]
    if args.child is not None:
        return child_tests(args.child, args.tests) if args.tests else child(args.child, args.cases, args.seed)
    built, why = build()
    if built is None:
        print(f"not run: {why}")
        return 2
    runtime = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    ubsan = subprocess.run(["gcc", "-print-file-name=libubsan.so"], capture_output=True, text=True).stdout.strip()
    env = {
        **os.environ,
        "LD_PRELOAD": f"{runtime} {ubsan}",
        "PYTHONMALLOC": "malloc",
        # The interpreter's own allocations are not ours to judge; out-of-bounds access and UB are.
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=1",
    }
    command = [sys.executable, __file__, "--child", str(built), "--cases", str(args.cases), "--seed", str(args.seed)]
    if args.tests:
        command += ["--tests", *args.tests]
    done = subprocess.run(command, env=env, cwd=ROOT)
    print("sanitizers: clean" if done.returncode == 0 else f"sanitizers: FINDING (exit status {done.returncode})")
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
