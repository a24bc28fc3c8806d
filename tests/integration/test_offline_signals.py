"""A signal during an offline command leaves nothing behind: no output, no hidden temporary file.

`llmwatch score` writes its scores through an atomic writer: a hidden `.<name>.<random>.partial`
beside the output, renamed over it once complete. Stopped half way, by Ctrl-C or by a supervisor's
SIGTERM (a Kubernetes Job past its deadline, `timeout`, systemd), it must remove that file and exit
with the signal's code (130, 143), without a traceback.

The command is held half way without timing: its input directory holds a regular samples file and,
after it by name, a FIFO that nobody writes. The command scores the first file, opens its output,
and blocks opening the FIFO; the test waits for the `.partial` to appear, then signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.samples import chat_sample, write_jsonl


def _partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


@contextlib.contextmanager
def _as_a_terminal_starts_it() -> Iterator[None]:
    """The child starts with Ctrl-C and SIGTERM live, as from a terminal.

    A test run started in the background by a shell (`&`, as CI runners and nohup do) inherits
    SIGINT ignored, and an ignored signal stays ignored across exec: the child would never see
    Ctrl-C. A handler of Python's own in this process is reset to the default by exec instead.
    Blocked signals are inherited across exec too: should anything earlier in this process have
    left SIGINT or SIGTERM blocked, the child would never receive the signal the test sends."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, inherited)


def _signal_state(pid: int) -> str:
    """The child's signal masks as the kernel holds them, for a failure's message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"(no /proc/{pid}/status: {exc})"
    return "; ".join(
        line for line in lines if line.startswith(("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))
    )


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_score_run_removes_its_temporary_file_and_writes_no_output(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    samples = tmp_path / "samples"
    write_jsonl(samples / "samples-a.jsonl", [chat_sample(id=f"smp-{i}") for i in range(20)])
    os.mkfifo(samples / "samples-b.jsonl")  # never opened for writing: the reader waits here
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false", "NO_COLOR": "1"}
    with _as_a_terminal_starts_it():
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmwatch.agent.cli",
                "score",
                "--in",
                str(samples),
                "--out",
                str(out / "scores.jsonl"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    try:
        # The event: the output's temporary file exists, so the command is inside its writer.
        deadline = time.monotonic() + 120
        while not _partials(out):
            assert proc.poll() is None, f"score ended before blocking on the FIFO: {proc.communicate()}"
            assert time.monotonic() < deadline, "score never opened its output"
            time.sleep(0.05)
        state = _signal_state(proc.pid)
        proc.send_signal(sig)
        try:
            stdout, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"score did not end on {sig.name} (child at the signal: {state}; now: {_signal_state(proc.pid)})"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, f"{stderr.decode()} (child at the signal: {state})"
    assert b"Traceback" not in stderr, stderr.decode()
    assert _partials(out) == [], "the temporary file is removed"
    assert not (out / "scores.jsonl").exists(), "no output: the run did not finish"


# Holds the command inside its first import of the commands' module, without timing: a finder put
# in front of the import system by a `sitecustomize` marks that it got there, then opens a FIFO
# that nobody writes. Ctrl-C interrupts that open, inside the import.
_HOLD_IMPORT = """
import os, sys

class _Hold:
    def find_spec(self, name, path=None, target=None):
        if name == "llmwatch.agent.cli.main":
            sys.meta_path.remove(self)
            open(os.environ["HOLD_MARK"], "w").close()
            with open(os.environ["HOLD_FIFO"]) as fifo:
                fifo.read()
        return None

sys.meta_path.insert(0, _Hold())
"""


def test_ctrl_c_while_the_command_is_still_importing_ends_it_with_130_and_no_traceback(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_HOLD_IMPORT)
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    mark = tmp_path / "importing"
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "HOLD_FIFO": str(fifo), "HOLD_MARK": str(mark), "NO_COLOR": "1"}
    with _as_a_terminal_starts_it():
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmwatch.agent.cli", "drift", "--help"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert proc.poll() is None, f"the command ended before its import: {proc.communicate()}"
            assert time.monotonic() < deadline, "the command never reached its import"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr.decode()
    assert stderr == b"", stderr.decode()
    assert stdout == b""


def test_the_installed_command_is_the_entry_point_that_takes_ctrl_c_during_imports() -> None:
    # The console script imports what pyproject.toml names before calling it: naming
    # `llmwatch.agent.cli.main:main` would put the heavy import outside `run`'s rule again.
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert scripts["llmwatch"] == "llmwatch.agent.cli:run"
