"""What a new user meets first, run as they run it: the `llmwatch` command as a process.

Each test is one rough edge of issue 18 that must stay smooth: the commands listed when none is
given, `llmwatch simulate` saying where it listens, an upstream given as its `/v1` root, a port
already taken, an upstream that is not there yet, a typo in an offline command's input.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Callable

import httpx2 as httpx  # the HTTP client the openai SDK ships with
import orjson
import pytest
from helpers.ports import dead_address

LLMWATCH = [sys.executable, "-m", "llmwatch.agent.cli"]
# Scoring off: these tests are about the command line, not the embedding model.
ENV = {**os.environ, "LLMWATCH_SCORING__ENABLED": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


class Lines:
    """Lines of a child's stream, read on a thread so that a wait for one has a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError("the process ended before the line came:\n" + "".join(self.seen))
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError("no such line in time:\n" + "".join(self.seen))

    def rest(self, timeout: float = 10.0) -> str:
        """Everything up to the end of the stream (the process has been told to stop)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
        return "".join(self.seen)


def start(args: list[str]) -> tuple[subprocess.Popen[str], Lines, Lines]:
    proc = subprocess.Popen(LLMWATCH + args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    return proc, Lines(proc.stdout), Lines(proc.stderr)


def stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise


def start_simulator() -> tuple[subprocess.Popen[str], str]:
    proc, out, _ = start(["simulate", "--port", "0", "--latency-scale", "0"])
    try:
        line = out.wait_for(lambda ln: "listening" in ln)
        url = re.search(r"url=(http://127\.0\.0\.1:\d+)", line)
        assert url, line
    except BaseException:
        stop(proc)
        raise
    return proc, url.group(1)


def start_proxy(upstream: str, tmp_path: Path) -> tuple[subprocess.Popen[str], Lines, dict]:
    """`llmwatch proxy` on ports it picks itself; they are read back from its start-up log line."""
    proc, _, err = start(
        [
            "proxy",
            "--upstream",
            upstream,
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "data"),
        ]
    )
    try:
        started = orjson.loads(err.wait_for(lambda ln: '"agent_started"' in ln))
    except BaseException:
        stop(proc)
        raise
    return proc, err, started


def run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(LLMWATCH + args, env=ENV, capture_output=True, text=True, timeout=timeout)


def test_llmwatch_alone_lists_every_command_with_a_line_each_and_exits_2():
    result = run([])
    assert result.returncode == 2
    for command in ("proxy", "simulate", "demo", "score", "baseline", "drift", "report", "regress", "review"):
        assert re.search(rf"^\s+{command}\s+\S", result.stderr, re.M), (
            f"{command} is not listed with its help line:\n{result.stderr}"
        )
    assert "arguments are required" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_group_without_its_subcommand_lists_the_subcommands():
    result = run(["baseline"])
    assert result.returncode == 2
    assert re.search(r"^\s+freeze\s+\S", result.stderr, re.M), result.stderr


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out += _commands(child, (*path, name))
    return out


def test_every_option_of_every_command_has_help():
    from llmwatch.agent.cli.main import build_parser

    missing = [
        f"llmwatch {' '.join(path)} {a.option_strings[-1]}"
        for path, p in _commands(build_parser())
        for a in p._actions
        if a.option_strings and not a.help
    ]
    assert missing == []


def test_simulate_prints_the_address_it_bound_and_serves_the_openai_api():
    proc, url = start_simulator()
    try:
        models = httpx.get(url + "/v1/models", timeout=5).json()
        assert any(m["id"] == "sim-gpt-4o-mini" for m in models["data"])
    finally:
        assert stop(proc) == 0


def test_an_upstream_given_as_its_v1_root_reaches_the_same_paths(tmp_path: Path):
    sim, url = start_simulator()
    proxy = None
    try:
        proxy, _, started = start_proxy(url + "/v1", tmp_path)
        assert started["upstream"] == url, "one trailing /v1 is dropped: clients send paths that start with /v1/"
        r = httpx.post(
            f"http://127.0.0.1:{started['proxy_port']}/v1/chat/completions",
            timeout=10,
            json={"model": "sim-gpt-4o-mini", "messages": [{"role": "user", "content": "How do I bake bread?"}]},
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
    finally:
        if proxy is not None:
            assert stop(proxy) == 0
        stop(sim)


@pytest.mark.parametrize("flag", ["--listen", "--metrics-listen"])
def test_a_port_in_use_names_the_address_and_the_flag_and_exits_2(tmp_path: Path, flag: str):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        addresses = {"--listen": "127.0.0.1:0", "--metrics-listen": "127.0.0.1:0", flag: address}
        result = run(
            [
                "proxy",
                "--upstream",
                "http://127.0.0.1:9",
                "--listen",
                addresses["--listen"],
                "--metrics-listen",
                addresses["--metrics-listen"],
                "--data-dir",
                str(tmp_path / "data"),
            ]
        )
    assert result.returncode == 2
    assert f"cannot listen on {address} ({flag}," in result.stderr
    assert "in use" in result.stderr
    for noise in ("Traceback", "Unclosed", "Errno"):
        assert noise not in result.stderr, result.stderr


def test_a_kafka_worker_names_its_taken_metrics_port_too():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        # Rule checks only: the port is bound before any broker is contacted, so none is needed.
        result = subprocess.run(
            LLMWATCH + ["scorer", "--kafka", "127.0.0.1:9", "--metrics-listen", address],
            env={**ENV, "LLMWATCH_SCORING__EMBEDDINGS": "false"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert f"cannot listen on {address} (--metrics-listen," in result.stderr
    assert "Traceback" not in result.stderr and "Errno" not in result.stderr


def test_an_unreachable_upstream_is_warned_once_and_reported_by_readyz_without_failing_it(tmp_path: Path):
    dead = dead_address()  # bound, never listening: connection refused, and no one else can take it
    proxy, err, started = start_proxy(f"http://{dead}", tmp_path)
    try:
        warning = orjson.loads(err.wait_for(lambda ln: '"upstream_unreachable"' in ln))
        assert dead in warning["error"] and "ssl" not in warning["error"]
        ready = httpx.get(f"http://127.0.0.1:{started['metrics_port']}/readyz", timeout=5)
        assert ready.status_code == 200, "the proxy stays ready: clients must see the upstream's own failure"
        assert ready.json()["upstream_reachable"] is False
        # The proxy still forwards, answering for the missing upstream in words without aiohttp's ssl:default.
        r = httpx.post(
            f"http://127.0.0.1:{started['proxy_port']}/v1/chat/completions",
            json={"model": "m", "messages": []},
            timeout=10,
        )
        assert r.status_code == 502
        assert dead in r.text and "ssl:default" not in r.text
    finally:
        assert stop(proxy) == 0
    assert err.rest().count('"upstream_unreachable"') == 1


def test_readyz_says_the_upstream_answered(tmp_path: Path):
    sim, url = start_simulator()
    proxy = None
    try:
        proxy, _, started = start_proxy(url, tmp_path)
        deadline = time.monotonic() + 15
        while (body := httpx.get(f"http://127.0.0.1:{started['metrics_port']}/readyz", timeout=5).json())[
            "upstream_reachable"
        ] is None:
            assert time.monotonic() < deadline, body
            time.sleep(0.05)
        assert body["upstream_reachable"] is True and body["status"] == "ready"
    finally:
        if proxy is not None:
            assert stop(proxy) == 0
        stop(sim)


def test_a_bad_upstream_flag_is_blamed_on_the_flag_and_its_value_named_once():
    result = run(["proxy", "--upstream", "localhost:8000"])
    assert result.returncode == 2
    assert "upstream (command line: --upstream)" in result.stderr
    assert result.stderr.count("'localhost:8000'") == 1, result.stderr
    assert "defaults and environment" not in result.stderr


@pytest.mark.parametrize("make", ["empty", "missing"])
def test_score_refuses_an_empty_or_missing_samples_file_naming_it(tmp_path: Path, make: str):
    samples = tmp_path / "samples.jsonl"
    if make == "empty":
        samples.write_text("")
    result = run(["score", "--in", str(samples), "--out", str(tmp_path / "scores.jsonl")])
    assert result.returncode == 2
    assert str(samples) in result.stderr
    assert ("holds no samples" if make == "empty" else "no such file") in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "scores.jsonl").exists()


def test_drift_checks_its_files_before_loading_anything(tmp_path: Path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"not": "checked yet"}\n')
    result = run(["drift", "--baseline", str(tmp_path / "typo.json"), "--samples", str(samples)])
    assert result.returncode == 2
    assert f"--baseline {tmp_path / 'typo.json'} does not exist" in result.stderr


def test_baseline_freeze_refuses_an_existing_out_file_before_scoring(tmp_path: Path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"not": "checked yet"}\n')
    existing = tmp_path / "baseline.json"
    existing.write_text("{}")
    result = run(["baseline", "freeze", "--samples", str(samples), "--model-version", "A", "--out", str(existing)])
    assert result.returncode == 2
    assert f"--out {existing} already exists" in result.stderr


def test_report_refuses_an_empty_samples_file_naming_it(tmp_path: Path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text("\n")
    result = run(["report", "--samples", str(samples)])
    assert result.returncode == 2
    assert f"--samples {samples} holds no samples" in result.stderr


def test_a_command_that_prints_a_summary_keeps_logs_off_stdout_and_quiet_unless_verbose(tmp_path: Path):
    sim, url = start_simulator()
    suite = tmp_path / "suite.jsonl"
    suite.write_bytes(
        orjson.dumps(
            {
                "id": "pasta",
                "category": "instruction_following",
                "input": "A simple pasta dinner?",
                "checks": [{"kind": "refusal"}],
            }
        )
        + b"\n"
    )
    args = ["regress", "--suite", str(suite), "--upstream", url + "/v1", "--model", "sim-gpt-4o-mini", "--repeat", "2"]
    try:
        quiet, verbose = run(args), run([*args, "--verbose"])
    finally:
        stop(sim)
    for result in (quiet, verbose):
        assert result.returncode == 0, result.stderr
        assert "pasta" in result.stdout
        assert "regress_done" not in result.stdout, "logs go to stderr, never into the output a person reads"
    assert "regress_done" not in quiet.stderr
    assert "regress_done" in verbose.stderr


# --- issue 30: scores that are mostly `error` are not data --------------------------------------


def _window(tmp_path: Path, n: int = 60) -> tuple[Path, Path, Path, Path]:
    """Samples of version A, their rule-check scores, and the same scores all turned into `error`
    (what a scorer stopped before its model loaded leaves behind). Embeddings off in a config file."""
    from datetime import timedelta

    from helpers.samples import NOW, chat_sample

    from llmwatch.scorers.checks.config import ScoringSection
    from llmwatch.scorers.checks.suite import build_suite

    answers = ["Paris is the capital of France.", "The capital of France is Paris, on the Seine."]
    samples = [
        chat_sample(answers[i % 2], id=f"s{i}", timestamp=NOW + timedelta(seconds=i), model_version="A")
        for i in range(n)
    ]
    scoring = ScoringSection.model_validate({"embeddings": False})
    scores = [r.score for r in build_suite(scoring).score(samples)]
    errors = [sc.model_copy(update={"result": "error", "value": None}) for sc in scores]
    paths = tmp_path / "samples.jsonl", tmp_path / "scores.jsonl", tmp_path / "errors.jsonl", tmp_path / "c.yaml"
    paths[0].write_bytes(b"".join(s.to_json() + b"\n" for s in samples))
    for path, records in ((paths[1], scores), (paths[2], errors)):
        path.write_bytes(b"".join(orjson.dumps(r.model_dump(mode="json", by_alias=True)) + b"\n" for r in records))
    paths[3].write_text("scoring:\n  embeddings: false\n")
    return paths


def test_freeze_drift_and_report_do_not_take_all_error_scores_silently(tmp_path: Path):
    samples, scores, errors, config = _window(tmp_path)
    common = ["--samples", str(samples), "--config", str(config)]

    refused = tmp_path / "from-errors.json"
    result = run(
        ["baseline", "freeze", *common, "--scores", str(errors), "--model-version", "A", "--out", str(refused)]
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "mostly `error` (more than 50% of a check's scores)" in result.stderr
    assert "for version A" in result.stderr and "of 60 (100%)" in result.stderr
    assert f"llmwatch score --in {samples} --out NEW_SCORES.jsonl" in result.stderr
    assert "Traceback" not in result.stderr and not refused.exists()

    baseline = tmp_path / "baseline.json"
    result = run(
        ["baseline", "freeze", *common, "--scores", str(scores), "--model-version", "A", "--out", str(baseline)]
    )
    assert result.returncode == 0, result.stderr

    result = run(["drift", "--baseline", str(baseline), *common, "--scores", str(errors)])
    assert result.returncode == 2, result.stdout + result.stderr
    assert "refusing to use them for the drift window" in result.stderr and "llmwatch score --in" in result.stderr

    # `report` warns (exit 0: it has cost and latency to show) on stderr and in the report itself.
    result = run(["report", *common, "--scores", str(errors), "--format", "json"])
    assert result.returncode == 0, result.stderr
    assert "WARNING: the scores in" in result.stderr and "mostly `error`" in result.stderr
    assert "mostly `error`" in orjson.loads(result.stdout)["warnings"][0]


def test_a_configured_section_that_is_off_says_so_at_start_naming_the_key_to_set(tmp_path: Path):
    # shadow.candidates without shadow.enabled: true mirrors nothing; it used to say nothing.
    config = tmp_path / "c.yaml"
    config.write_text(
        "shadow:\n  candidates:\n    - {name: b, upstream: 'http://127.0.0.1:9', rate: 0.5}\n"
        "kafka:\n  bootstrap_servers: 'localhost:9092'\n"
    )
    dead = dead_address()
    args = ["proxy", "--upstream", f"http://{dead}", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
    proxy, _, err = start([*args, "--data-dir", str(tmp_path / "data"), "--config", str(config)])
    try:
        # The warnings come before the start-up line; the exit code is not what this test is about.
        err.wait_for(lambda ln: '"agent_started"' in ln)
    finally:
        stop(proxy)
    warnings = [orjson.loads(ln) for ln in err.rest().splitlines() if '"config_section_off"' in ln]
    by_section = {w["section"]: w for w in warnings}
    assert set(by_section) == {"shadow", "kafka"}, warnings
    assert by_section["shadow"]["level"] == "warning"
    assert by_section["shadow"]["settings"] == ["shadow.candidates"]
    assert "set shadow.enabled: true" in by_section["shadow"]["fix"]
    assert "set kafka.enabled: true" in by_section["kafka"]["fix"]


def test_sections_left_at_their_defaults_or_switched_on_say_nothing():
    from llmwatch.agent.components import Config, load_config
    from llmwatch.core.config import inactive_settings

    assert inactive_settings(Config()) == []
    on = {"shadow": {"enabled": True, "candidates": [{"name": "b", "upstream": "http://127.0.0.1:9", "rate": 0.5}]}}
    assert inactive_settings(load_config(None, overrides={"upstream": "http://h", **on}, environ={})) == []
    off_only = {"kafka": {"enabled": False}}
    assert inactive_settings(load_config(None, overrides={"upstream": "http://h", **off_only}, environ={})) == []


@pytest.mark.parametrize(
    "command,example",
    [
        (["report", "--samples", "{samples}", "--out", "{dir}"], "report.json"),
        (["shadow", "report", "--pairs", "{samples}", "--out", "{dir}"], "shadow-report.txt"),
        (["baseline", "freeze", "--samples", "{samples}", "--model-version", "A", "--out", "{dir}"], "baseline-A.json"),
        # These ran their work first (a whole suite's calls, a judge's paid calls, an export) and
        # then said only "[Errno 21] Is a directory: '.out.x1y2.partial' -> 'out'", or for
        # `review serve` "[Errno 22] not a regular file".
        (
            ["regress", "--suite", "{samples}", "--upstream", "http://127.0.0.1:9", "--model", "m", "--out", "{dir}"],
            "run.json",
        ),
        (["review", "export", "--samples", "{samples}", "--versions", "A,B", "--out", "{dir}"], "tasks.jsonl"),
        (["review", "export", "--pairs", "{samples}", "--out", "{dir}"], "tasks.jsonl"),
        (
            ["review", "import", "--tasks", "{samples}", "--reviews", "{samples}", "--out", "{dir}"],
            "review-report.json",
        ),
        (["review", "serve", "--tasks", "{samples}", "--out", "{dir}", "--reviewers", "1"], "reviews.jsonl"),
        (
            ["shadow", "judge", "--pairs", "{samples}", "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "m"]
            + ["--out", "{dir}"],
            "judge-verdicts.jsonl",
        ),
        (
            ["judge", "calibrate", "--verdicts", "{samples}", "--tasks", "{samples}", "--reviews", "{samples}"]
            + ["--out", "{dir}"],
            "calibration.json",
        ),
    ],
)
def test_a_directory_given_as_out_is_refused_before_the_work_naming_a_file_to_give(
    tmp_path: Path, command: list[str], example: str
):
    # `report --out llmwatch-data` computed the whole report, then said only
    # "[Errno 21] Is a directory: '.llmwatch-data.x00om2z9.partial' -> 'llmwatch-data'".
    records = tmp_path / "records.jsonl"
    records.write_text('{"not": "checked yet"}\n')  # refused before it is read
    folder = tmp_path / "out"
    folder.mkdir()
    result = run([part.format(samples=records, dir=folder) for part in command])
    assert result.returncode == 2
    assert f"--out {folder} is a directory; give a file name inside it, e.g. {folder / example}" in result.stderr
    assert "Errno" not in result.stderr and "Traceback" not in result.stderr
    assert list(folder.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["out", "records.jsonl"]


@pytest.mark.parametrize(
    "command,message",
    [
        (
            ["drift", "--config", "{dir}", "--baseline", "{dir}", "--samples", "{dir}"],
            "config file {dir} is a directory",
        ),
        (["suite", "show", "{dir}"], "suite {dir} is a directory, not a file; give the suite's .jsonl file"),
        (
            ["regress", "--suite", "{dir}", "--upstream", "http://127.0.0.1:9", "--model", "m"],
            "suite {dir} is a directory, not a file; give the suite's .jsonl file",
        ),
        (
            ["review", "import", "--tasks", "{dir}", "--reviews", "{dir}"],
            "tasks file {dir} is a directory, not a file; give the .jsonl file itself",
        ),
        (
            ["review", "serve", "--tasks", "{dir}", "--out", "{dir}/reviews.jsonl", "--reviewers", "1"],
            "tasks file {dir} is a directory, not a file; give the .jsonl file itself",
        ),
        # `llmwatch ui --suite eval` said "no such file" of a folder that is there, and
        # `--data-dir notes.txt` "no such directory" of a file that is there.
        (["ui", "--data-dir", "{dir}/../notes.txt"], "--data-dir {dir}/../notes.txt: is a file, not a directory"),
        (
            ["ui", "--data-dir", "{dir}/..", "--suite", "{dir}"],
            "--suite {dir}: is a directory, not a file; give a suite",
        ),
        (
            ["ui", "--data-dir", "{dir}/..", "--drift-report", "{dir}"],
            "--drift-report {dir}: is a directory, not a file; give a `llmwatch drift --format json` report",
        ),
    ],
)
def test_a_directory_given_where_a_file_is_read_is_named_as_one_with_the_fix(
    tmp_path: Path, command: list[str], message: str
):
    # These said "cannot be read: Is a directory" or "[Errno 21] Is a directory: 'eval'".
    folder = tmp_path / "eval"
    folder.mkdir()
    (tmp_path / "samples").mkdir()  # so that `ui --data-dir` takes tmp_path and goes on to the file flags
    (tmp_path / "notes.txt").write_text("not a data directory\n")
    result = run([part.format(dir=folder) for part in command])
    assert result.returncode == 2
    assert message.format(dir=folder) in result.stderr
    assert "Errno" not in result.stderr and "Traceback" not in result.stderr


def test_drift_refuses_a_misspelt_fail_on_before_reading_the_window(tmp_path: Path):
    # `--fail-on behavior` was refused only after the window was read and scored (minutes with
    # the embedding checks); the unreadable samples here prove nothing was read first.
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"not": "checked yet"}\n')
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{}")
    args = ["drift", "--baseline", str(baseline), "--samples", str(samples), "--fail-on", "behavior"]
    result = run(args)
    assert result.returncode == 2
    assert "--fail-on 'behavior': name families from inputs, behaviour, performance" in result.stderr


@pytest.mark.parametrize("command", ["drift", "canary"])
@pytest.mark.parametrize("value", ["", " , "])
def test_an_empty_fail_on_is_refused_not_read_as_every_family(tmp_path: Path, command: str, value: str):
    # `--fail-on ""` (a CI variable left empty) ran as if the flag were absent: every family failed
    # the run, where the user meant to name some.
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"not": "checked yet"}\n')
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{}")
    sides = ["--baseline", str(baseline)] if command == "drift" else ["--stable", "A", "--canary", "B"]
    result = run([command, *sides, "--samples", str(samples), "--fail-on", value])
    assert result.returncode == 2, result.stderr
    assert f"--fail-on {value!r}: name families from inputs, behaviour, performance" in result.stderr


def test_the_command_list_says_what_exit_2_of_drift_and_canary_means():
    # "exit 0 stable, 1 drift, 2 undecided": a newcomer whose CI job failed with 2 on a bad
    # --samples path read "undecided" and waited for more traffic.
    listing = " ".join(run([]).stderr.split())
    assert "(exit 0 stable, 1 drift, 2 too little data or bad input)" in listing
    assert "(exit 0 not worse, 1 worse, 2 too little data or bad input)" in listing
