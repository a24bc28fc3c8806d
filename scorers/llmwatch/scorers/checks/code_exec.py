"""The `code_exec` check (opt-in): does the Python code in the answer run?

The answer's fenced Python blocks (```python / ```py; with `run_unfenced`, a whole answer that is
no prose) are joined and run in a child process that is sandboxed as far as an unprivileged
process can be on Linux without extra packages:

- **no network**: the child enters new user and network namespaces before it runs anything
  (`unshare(CLONE_NEWUSER | CLONE_NEWNET)`: only a loopback device, down); where the kernel refuses
  that, the check records an `error` (`sandbox_unavailable`) and runs nothing;
- **rlimits**: CPU seconds, address space, file size, open files, no core dumps;
- **a throwaway directory** as working and home directory, removed afterwards, and an environment
  of nothing but `PATH`, `HOME`, `TMPDIR` and `LANG`; Python in isolated mode (`-I -S -B`);
- a wall-clock limit (`timeout_s`) after which the whole process group is killed.

It is **not** a boundary against a determined attacker: the code runs as the scorer's user and
can read what that user can read; it only cannot send it anywhere, and the score keeps no output,
only the exit status, the exception's class name and sizes. Enable it only for traffic whose
code you would run yourself, and keep `scoring.check_timeout_s` above `timeout_s`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from pydantic import Field

from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome
from llmwatch.scorers.checks.base import CheckParams, answer_or_skip, error_outcome, skipped

__all__ = ["CodeExecParams", "check_code_exec", "code_blocks"]

_BLOCK_RE = re.compile(
    r"^[ \t]*(`{3,}|~{3,})[ \t]*(python3?|py)\b[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE | re.IGNORECASE
)
_EXCEPTION_RE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")
_NO_SANDBOX = 97  # the launcher's exit status when the kernel refused the namespaces
# Run in the child before the answer's code: enter the namespaces, set the limits, exec Python.
_LAUNCHER = """
import ctypes, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000 | 0x40000000) != 0:  # CLONE_NEWUSER | CLONE_NEWNET
    os._exit(97)
cpu, memory, fsize = (int(v) for v in sys.argv[1:4])
for limit, value in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, fsize),
                     (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(limit, (value, value))
os.execv(sys.executable, [sys.executable, "-I", "-S", "-B", "main.py"])
"""


class CodeExecParams(CheckParams):
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    cpu_s: int = Field(default=5, ge=1, le=60)
    memory_mb: int = Field(default=256, ge=32, le=8192)
    max_file_mb: int = Field(default=16, ge=1, le=1024)
    # Also run an answer without a fenced Python block when it parses as Python as a whole.
    run_unfenced: bool = False


def code_blocks(text: str) -> list[str]:
    """The fenced Python blocks of an answer, in order."""
    return [m.group(3).rstrip("\n") for m in _BLOCK_RE.finditer(text)]


def _unfenced(text: str) -> str | None:
    try:
        compile(text, "<answer>", "exec")
    except (SyntaxError, ValueError):
        return None
    return text


def _exception_name(stderr: bytes) -> str | None:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return None
    match = _EXCEPTION_RE.match(lines[-1].strip())
    return match.group(1)[:80] if match else None


def _run(code: str, params: CodeExecParams) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="llmwatch-code-")
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as fh:
            fh.write(code)
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        limits = [str(params.cpu_s), str(params.memory_mb * 1024 * 1024), str(params.max_file_mb * 1024 * 1024)]
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _LAUNCHER, *limits],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills everything it started
        )
        timed_out = False
        try:
            out, err = proc.communicate(timeout=params.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        except BaseException:
            # The scorer's own limit (scoring.check_timeout_s) interrupted the wait: nothing may outlive it.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return {
            "returncode": proc.returncode,
            "timed_out": timed_out,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
            "stdout_bytes": len(out),
            "stderr": err,
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def check_code_exec(sample: Sample, params: CodeExecParams) -> CheckOutcome:
    text = answer_or_skip(sample)
    if not isinstance(text, str):
        return text
    blocks = code_blocks(text)
    code = "\n\n".join(blocks) if blocks else (_unfenced(text) if params.run_unfenced else None)
    if not code or not code.strip():
        return skipped("no_code")
    ran = _run(code, params)
    stderr: bytes = ran.pop("stderr")
    details: dict[str, Any] = {"blocks": len(blocks), **ran}
    if ran["returncode"] == _NO_SANDBOX and not ran["timed_out"]:
        return error_outcome(
            "sandbox_unavailable", hint="the kernel refused unprivileged user and network namespaces; nothing was run"
        )
    if ran["timed_out"]:
        return CheckOutcome("fail", 0.0, {**details, "reason": "timeout"})
    if ran["returncode"] != 0:
        reason = "signal" if ran["returncode"] < 0 else "exit_status"
        exception = _exception_name(stderr)
        if exception:
            details["exception"] = exception  # the class name only: the message may quote data
        return CheckOutcome("fail", 0.0, {**details, "reason": reason})
    return CheckOutcome("pass", 1.0, details)
