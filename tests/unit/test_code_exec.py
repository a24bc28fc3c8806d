"""The `code_exec` check (issue 27, opt-in): the answer's Python runs in a sandboxed child process:
no network, rlimits, a throwaway directory, a wall-clock limit; the score keeps no output."""

from __future__ import annotations

import glob
import socket
import tempfile
import threading
from datetime import datetime, timezone

import orjson

from llmwatch.core.records import Sample
from llmwatch.scorers.checks.code_exec import code_blocks
from llmwatch.scorers.checks.registry import build_check


def sample(answer: str) -> Sample:
    return Sample(
        id="s1",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        model="m",
        status=200,
        latency_ms=1.0,
        request={"model": "m", "messages": [{"role": "user", "content": "Write Python."}]},
        response={"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]},
    )


def fenced(code: str, lang: str = "python") -> str:
    return f"Here you go:\n\n```{lang}\n{code}\n```\n\nIt prints the sum."


CHECK = build_check("code_exec", "code_exec", {"timeout_s": 3.0})


def test_code_that_runs_passes_and_code_that_raises_fails_with_the_exception_class_only():
    ok = CHECK.run(sample(fenced("print(sum(range(10)))")))
    assert ok.result == "pass" and ok.details["returncode"] == 0 and ok.details["stdout_bytes"] == 3
    bad = CHECK.run(sample(fenced("secret = 'hunter2'\nraise ValueError(secret)")))
    assert bad.result == "fail" and bad.details["reason"] == "exit_status" and bad.details["exception"] == "ValueError"
    assert "hunter2" not in orjson.dumps(bad.details).decode()


def test_blocks_are_joined_in_order_and_an_answer_without_code_is_skipped():
    answer = fenced("x = 2") + "\nThen:\n" + fenced("assert x == 2", lang="py")
    assert code_blocks(answer) == ["x = 2", "assert x == 2"]
    assert CHECK.run(sample(answer)).result == "pass"
    assert CHECK.run(sample("No code here, just words.")).details["reason"] == "no_code"
    assert CHECK.run(sample(fenced("echo hi", lang="bash"))).details["reason"] == "no_code"
    unfenced = build_check("code_exec", "code_exec", {"run_unfenced": True})
    assert unfenced.run(sample("print('bare')")).result == "pass"


def test_an_endless_loop_is_killed_at_the_time_limit():
    out = build_check("code_exec", "code_exec", {"timeout_s": 0.5}).run(sample(fenced("while True:\n    pass")))
    assert out.result == "fail" and out.details["reason"] == "timeout"


def test_the_code_has_no_network():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(5)
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    port = server.getsockname()[1]
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"
    out = CHECK.run(sample(fenced(code)))
    server.close()
    thread.join()
    assert out.result == "fail" and out.details["exception"] in ("OSError", "ConnectionRefusedError", "TimeoutError")
    assert accepted == []  # the connection never reached the host's loopback


def test_memory_is_limited_and_the_working_directory_is_thrown_away():
    before = set(glob.glob(f"{tempfile.gettempdir()}/llmwatch-code-*"))
    out = build_check("code_exec", "code_exec", {"memory_mb": 64}).run(
        sample(fenced("open('kept.txt', 'w').write('x')\nb = bytearray(512 * 1024 * 1024)"))
    )
    assert out.result == "fail" and out.details["exception"] == "MemoryError"
    assert set(glob.glob(f"{tempfile.gettempdir()}/llmwatch-code-*")) == before


def test_the_scorers_own_time_limit_leaves_no_child_behind(tmp_path):
    import os

    import pytest

    from llmwatch.scorers.checks.config import CheckSpec
    from llmwatch.scorers.checks.suite import Suite

    suite = Suite([CheckSpec(name="code", kind="code_exec", params={"timeout_s": 30})], check_timeout_s=1.0)
    pid_file = tmp_path / "pid"
    code = f"import os\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\nwhile True:\n    pass"
    (result,) = suite.score([sample(fenced(code))])
    assert result.score.result == "error"  # scoring.check_timeout_s stopped the check
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped before the check returned
