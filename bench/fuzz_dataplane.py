"""The C planner (`dataplane.Planner`, native/dataplane.c) under AddressSanitizer and UBSan.

Builds the extension with `-fsanitize=address,undefined` into .bench/dataplane-asan/ and feeds it,
in a child interpreter with the sanitizer runtime preloaded, the relay fuzzer's hostile requests
and responses (tests/helpers/relay_fuzz.py), each also cut at a random byte and fed to the other
side's reader, under three configurations. Any out-of-bounds read or write, use after free or
undefined behaviour stops the child with the sanitizer's report: exit status 1. A crash-freedom
run, not a differential one (tests/integration/test_native_heads.py compares the two engines).

    python bench/fuzz_dataplane.py [--cases N] [--seed S]
    python bench/fuzz_dataplane.py --tests [TEST ...]   # the front door and C forwarding, sanitized
    python bench/fuzz_dataplane.py --tsan [TEST ...]    # the same under ThreadSanitizer
    python bench/fuzz_dataplane.py --tsan-self-check    # a race put in on purpose is reported

`--tsan` builds it with `-fsanitize=thread` into .bench/dataplane-tsan/ and runs the tests that
drive its thread beside the event loop (the hand-over queue, the ring, the counters, the pool's
slots) with the TSan runtime preloaded: any data race it sees in the extension stops the child
with its report, exit status 66. CPython and uvloop are not built with TSan, so it sees their
memory only through the calls it intercepts (malloc, memcpy, ...); bench/tsan.supp is for reports
that lie wholly inside them (none so far), each with why it is not ours. `--tsan-self-check` proves the
run can fail: it builds a copy of dataplane.c whose `count()` bumps the thread's counters without
the mutex that `stats()` reads them under, and expects TSan's report of that race.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / ".bench" / "dataplane-asan"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
TSAN_HOME = ROOT / ".bench" / "dataplane-tsan"
# -O1 after the hardened -O2: TSan's reports name the right lines, at a speed the tests can bear.
TSAN = ["-fsanitize=thread", "-g", "-O1", "-fno-omit-frame-pointer"]
TSAN_SUPPRESSIONS = ROOT / "bench" / "tsan.supp"
TSAN_PLANTED_HOME = ROOT / ".bench" / "dataplane-tsan-planted"
# The self-check's race: the thread's counters bumped without the lock that stats() reads them under
# (Python polls stats() while C forwards: test_native_forward.py's `counted`).
PLANTED = (
    "static void count(Front *f, unsigned long long *counter) {\n"
    "    pthread_mutex_lock(&f->lock);\n"
    "    (*counter)++;\n"
    "    pthread_mutex_unlock(&f->lock);\n"
    "}\n",
    "static void count(Front *f, unsigned long long *counter) {\n    (*counter)++; /* planted: no lock */\n}\n",
)
# The tests that drive the C thread beside the event loop: the hand-over queue (front, adopt), the
# ring and counters (ring, forward), the pool's slots shared with the relay (relay on the native engine).
TSAN_TESTS = [
    "tests/integration/test_native_forward.py",
    "tests/integration/test_native_ring.py",
    "tests/integration/test_native_front.py",
    "tests/integration/test_relay_adopt.py",
    "tests/integration/test_relay.py",
    "tests/integration/test_relay_hostile.py",
    "-k",
    "native or adopt",  # the relay suites' cases on the native engine; every native and adopt test
]


def runtime(name: str) -> str:
    """The path of gcc's sanitizer runtime `name` (libasan.so, libtsan.so, ...), or "" if it has none."""
    found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    # gcc prints the bare name back when it has no such file.
    return found if found and Path(found).is_absolute() and Path(found).exists() else ""


def build(
    home: Path = HOME, flags: list[str] = SANITIZE, lib: str = "libasan.so", main: Path | None = None
) -> tuple[Path | None, str]:
    """(the sanitized extension, "") or (None, why not); `main` in place of native/dataplane.c."""
    if shutil.which("gcc") is None:
        return None, "no gcc on PATH"
    if not runtime(lib):
        return None, f"gcc has no sanitizer runtime {lib}"
    spec = importlib.util.spec_from_file_location("llmwatch_hatch_build", ROOT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    built, why = hook.build_native(home, flags, main)
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
        nargs=argparse.REMAINDER,  # last: pytest's own options (-k ...) may follow
        metavar="TEST",
        help="instead of the planner fuzz: run these pytest files with the sanitized extension "
        "(default with no names: tests/integration/test_native_forward.py, test_native_ring.py and test_native_front.py)",
    )
    parser.add_argument(
        "--tsan",
        nargs=argparse.REMAINDER,
        metavar="TEST",
        help="run these pytest files (and options) with the extension under ThreadSanitizer (default with no "
        "names: the native forwarding, ring, front door and adopt tests, and the relay suites' native cases)",
    )
    parser.add_argument(
        "--tsan-self-check",
        action="store_true",
        help="build a copy of the extension with a data race put in and check that --tsan reports it",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tsan_self_check:
        return tsan_self_check()
    if args.tsan is not None:
        return tsan(args.tsan or TSAN_TESTS)
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
    env = {
        **os.environ,
        "LD_PRELOAD": f"{runtime('libasan.so')} {runtime('libubsan.so')}",
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


def tsan_child(built: Path, tests: list[str], **run: Any) -> subprocess.CompletedProcess[str]:
    """The tests, in a child interpreter with the TSan runtime preloaded and `built` in place of the
    in-place extension (child_tests). A report anywhere ends it with exit status 66."""
    env = {
        **os.environ,
        "LD_PRELOAD": runtime("libtsan.so"),
        # Every Python object through malloc and free, which TSan intercepts: pymalloc reusing its
        # arenas unseen would make memory handed between threads look shared.
        "PYTHONMALLOC": "malloc",
        "TSAN_OPTIONS": ":".join(
            [
                "halt_on_error=1",
                "exitcode=66",
                f"suppressions={TSAN_SUPPRESSIONS}",
                "second_deadlock_stack=1",
                "history_size=4",
            ]
        ),
    }
    command = [sys.executable, __file__, "--child", str(built), "--tests", *tests]
    return subprocess.run(command, env=env, cwd=ROOT, text=True, **run)


def tsan(tests: list[str]) -> int:
    built, why = build(TSAN_HOME, TSAN, "libtsan.so")
    if built is None:
        print(f"not run: {why}")
        return 2
    done = tsan_child(built, tests)
    print("tsan: clean" if done.returncode == 0 else f"tsan: FINDING (exit status {done.returncode})")
    return 0 if done.returncode == 0 else 1


def tsan_self_check() -> int:
    """The --tsan run over a copy of dataplane.c with a race put in (PLANTED): it must fail, naming it."""
    source = (ROOT / "native" / "dataplane.c").read_text()
    if PLANTED[0] not in source:
        print("self-check: count() in native/dataplane.c no longer reads as PLANTED expects; update PLANTED")
        return 1
    with tempfile.TemporaryDirectory(prefix="llmwatch-tsan-") as tmp:
        main = Path(tmp) / "dataplane.c"
        main.write_text(source.replace(*PLANTED))
        built, why = build(TSAN_PLANTED_HOME, TSAN, "libtsan.so", main)
    if built is None:
        print(f"not run: {why}")
        return 2
    done = tsan_child(built, ["tests/integration/test_native_forward.py"], capture_output=True)
    reported = [line for line in done.stderr.splitlines() if line.startswith("SUMMARY: ThreadSanitizer: data race")]
    if done.returncode == 66 and any("dataplane.c" in line for line in reported):
        print(f"tsan self-check: the planted race was reported ({reported[0]})")
        return 0
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    print(f"tsan self-check: FAILED, the planted race was not reported (exit status {done.returncode})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
