"""Offline commands on bad records: exit 2 naming file, line and field; never 1, never a traceback.

Exit 1 means "the command ran and found a problem" (drift found), so bad input must never end
with it; and a traceback tells a user nothing about which line of their export to fix.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llmwatch.agent.cli.main import main

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def record(i: int, **fields) -> dict:
    base = {
        "id": f"s{i}",
        "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
        "model": "m",
        "model_version": "A" if i % 2 else "B",
        "status": 200,
        "latency_ms": 100.0 + i,
        "request": {"messages": [{"role": "user", "content": f"question {i}?"}]},
        "response": {
            "choices": [{"message": {"role": "assistant", "content": f"answer number {i}."}, "finish_reason": "stop"}]
        },
    }
    base.update(fields)
    return base


def write_lines(path: Path, lines: list[bytes]) -> str:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def run_cli(argv: list[str]) -> tuple[int, str]:
    """The CLI in-process (much faster than a subprocess per call); any exception is a failure."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return code, err.getvalue()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad-records")
    # No embedding model: bad input is refused before any scoring happens anyway.
    (d / "llmwatch.yaml").write_text("scoring: {embeddings: false}\n")
    good = write_lines(d / "good.jsonl", [orjson.dumps(record(i)) for i in range(20)])
    code, err = run_cli(
        [
            "baseline",
            "freeze",
            "--config",
            str(d / "llmwatch.yaml"),
            "--samples",
            good,
            "--model-version",
            "A",
            "--out",
            str(d / "baseline.json"),
        ]
    )
    assert code == 0, err
    return d


_counter = itertools.count()


def commands(d: Path, samples: str) -> dict[str, list[str]]:
    n = next(_counter)
    cfg = ["--config", str(d / "llmwatch.yaml")]
    return {
        "score": ["score", *cfg, "--in", samples, "--out", str(d / f"scores-{n}.jsonl")],
        "baseline freeze": [
            "baseline",
            "freeze",
            *cfg,
            "--samples",
            samples,
            "--model-version",
            "A",
            "--out",
            str(d / f"b-{n}.json"),
        ],
        "drift": ["drift", *cfg, "--baseline", str(d / "baseline.json"), "--samples", samples],
        "report": ["report", *cfg, "--samples", samples],
        "review export": [
            "review",
            "export",
            *cfg,
            "--samples",
            samples,
            "--versions",
            "A,B",
            "--n",
            "2",
            "--seed",
            "1",
            "--out",
            str(d / f"tasks-{n}.jsonl"),
        ],
    }


def assert_refused(d: Path, samples: str, line: int, field: str | None) -> None:
    for name, argv in commands(d, samples).items():
        code, err = run_cli(argv)
        assert code == 2, f"{name}: exit {code}, stderr {err!r}"
        assert "Traceback" not in err
        assert f"{samples}:{line}:" in err, f"{name}: file and line not named: {err!r}"
        if field is not None:
            # The field, or a field inside it (usage -> usage.input_tokens), is named.
            assert f"field '{field}'" in err or f"field '{field}." in err, f"{name}: field not named: {err!r}"


# --- the reported cases ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("latency_ms", "Infinity"),
        ("latency_ms", "NaN"),
        ("ttft_ms", "-Infinity"),
        ("cost_usd", "Infinity"),
        ("timestamp", -1e20),
        ("timestamp", 1e20),
        ("schema", "llmwatch.sample/v9"),
    ],
)
def test_each_reported_bad_value_is_refused_by_every_offline_command(workdir, field, value):
    lines = [orjson.dumps(record(i)) for i in range(12)]
    lines[6] = orjson.dumps(record(6, **{field: value}))
    samples = write_lines(workdir / f"bad-{field}-{next(_counter)}.jsonl", lines)
    assert_refused(workdir, samples, 7, field)


def test_a_parquet_file_of_another_schema_is_not_a_samples_dataset_to_every_offline_command(workdir):
    """Another tool's Parquet file as `--samples` said "row 1:" and thirteen fields it never had
    ("field 'schema': Input should be a valid string; field 'id': ..."); it is named as not a samples
    dataset, with the columns it has."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = workdir / f"events-{next(_counter)}.parquet"
    pq.write_table(pa.table({"user_id": [1, 2], "event": ["a", "b"], "ts": [1.0, 2.0]}), path)
    for name, argv in commands(workdir, str(path)).items():
        code, err = run_cli(argv)
        assert code == 2 and "Traceback" not in err, f"{name}: exit {code}, stderr {err!r}"
        assert f"{path}: not a samples dataset: its columns are event, ts, user_id, and it lacks " in err, (
            f"{name}: {err!r}"
        )
        assert "field '" not in err and err.strip().count("\n") == 0, f"{name}: {err!r}"


def test_bad_records_in_a_real_process_exit_2_without_a_traceback(workdir):
    samples = write_lines(workdir / "overflow.jsonl", [orjson.dumps(record(0, timestamp=-1e20))])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmwatch.agent.cli",
            "drift",
            "--config",
            str(workdir / "llmwatch.yaml"),
            "--baseline",
            str(workdir / "baseline.json"),
            "--samples",
            samples,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{samples}:1: field 'timestamp'" in proc.stderr


def test_a_frozen_baseline_always_loads_back_in_drift(workdir):
    # Finite but extreme values: whatever freeze accepts, drift must accept too.
    lines = [orjson.dumps(record(i, latency_ms=1.7e308, cost_usd=1.7e308)) for i in range(12)]
    samples = write_lines(workdir / "extreme.jsonl", lines)
    out = workdir / "extreme-baseline.json"
    code, err = run_cli(
        [
            "baseline",
            "freeze",
            "--config",
            str(workdir / "llmwatch.yaml"),
            "--samples",
            samples,
            "--model-version",
            "A",
            "--out",
            str(out),
        ]
    )
    assert "Traceback" not in err
    if code == 0:
        code, err = run_cli(
            ["drift", "--config", str(workdir / "llmwatch.yaml"), "--baseline", str(out), "--samples", samples]
        )
        assert code in (0, 1, 2) and "could not" not in err and "corrupt" not in err, err
    else:
        assert code == 2 and "refusing to write" in err and not out.exists()


@pytest.mark.parametrize(
    "content, names",
    [
        (b"[1, 2]", "not an llmwatch report"),
        (b"null", "not an llmwatch report"),
        (b'{"schema": "llmwatch.report/v1", "decision": 3}', "field 'decision'"),
        (b'{"schema": "llmwatch.report/v1", "decision": {"versions": "A"}}', "field 'decision.versions'"),
        (b'{"schema": "llmwatch.report/v1", "decision": {"versions": [7]}}', "field 'decision.versions.0'"),
        (
            b'{"schema": "llmwatch.report/v1", "decision": {"versions": [{"model_version": "A", "quality": "high"}]}}',
            "field 'decision.versions.0.quality'",
        ),
        (
            b'{"schema": "llmwatch.report/v1", "decision": {"versions": [{"model_version": ["A"]}]}}',
            "field 'decision.versions.0.model_version'",
        ),
    ],
)
def test_report_compare_with_a_malformed_earlier_report_exits_2(workdir, content, names):
    earlier = workdir / f"earlier-{next(_counter)}.json"
    earlier.write_bytes(content)
    code, err = run_cli(
        [
            "report",
            "--config",
            str(workdir / "llmwatch.yaml"),
            "--samples",
            str(workdir / "good.jsonl"),
            "--compare",
            str(earlier),
            "--allow-weights-change",
        ]
    )
    assert code == 2 and "Traceback" not in err
    assert str(earlier) in err and names in err


# --- fuzz ------------------------------------------------------------------------------------------

# Values each field must refuse (none of them is a valid spelling of anything).
BAD_VALUES = {
    "timestamp": st.sampled_from(
        [-1e20, 1e20, -1, 1e300, "Infinity", "not a date", "2026-13-45T00:00:00Z", None, [], {}]
    ),
    "latency_ms": st.sampled_from(["Infinity", "-Infinity", "NaN", "inf", -1, -1e-9, None, "fast", [], {}]),
    "ttft_ms": st.sampled_from(["Infinity", "NaN", -5, "soon", []]),
    "cost_usd": st.sampled_from(["NaN", "Infinity", -0.5, "cheap", {}]),
    "status": st.sampled_from([-1, 1000, "ok", None, 1.5, []]),
    "usage": st.sampled_from([{"input_tokens": -3}, {"output_tokens": "many"}, {"input_tokens": 1.5}, "lots", []]),
    "schema": st.sampled_from(["llmwatch.sample/v9", "llmwatch.sample/v2", "llmwatch.score/v1", "", 7]),
    "model": st.sampled_from([5, [], {}]),
    "metadata": st.sampled_from(["x", [], 3]),
    "capture_notes": st.sampled_from(["x", 3, {}]),
}
BROKEN_LINES = st.sampled_from(
    [b'{"id": "s1", "timestamp": ', b"[]", b"3", b"null", b'"a string"', b"{'single': 'quotes'}", b"\xff\xfe"]
)


@st.composite
def malformed_file(draw):
    n = draw(st.integers(min_value=1, max_value=8))
    bad_at = draw(st.integers(min_value=0, max_value=n - 1))
    lines = [orjson.dumps(record(i)) for i in range(n)]
    if draw(st.booleans()):
        field = draw(st.sampled_from(sorted(BAD_VALUES)))
        lines[bad_at] = orjson.dumps(record(bad_at, **{field: draw(BAD_VALUES[field])}))
    elif draw(st.booleans()):
        field = draw(st.sampled_from(["timestamp", "status", "latency_ms", "request", "response", "model"]))
        broken = record(bad_at)
        del broken[field]
        lines[bad_at] = orjson.dumps(broken)
    else:
        field = None
        lines[bad_at] = draw(BROKEN_LINES)
    return lines, bad_at + 1, field


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=malformed_file())
# A sample line with a score's schema: said "a file of scores" without naming the field (found by a draw).
@example(case=([orjson.dumps(record(0, schema="llmwatch.score/v1"))], 1, "schema"))
def test_fuzz_malformed_records_exit_2_with_file_and_line_and_no_traceback(workdir, case):
    lines, line, field = case
    samples = write_lines(workdir / f"fuzz-{next(_counter)}.jsonl", lines)
    assert_refused(workdir, samples, line, field)


# --- numbers out of range on the command line --------------------------------------------------------

HUGE = "99999999999999999999999"  # more than 64 bits hold


def huge_number_commands(d: Path) -> dict[str, list[str]]:
    n = next(_counter)
    cfg = ["--config", str(d / "llmwatch.yaml")]
    good = str(d / "good.jsonl")
    scores = d / "huge-scores.jsonl"
    if not scores.exists():
        code, err = run_cli(["score", *cfg, "--in", good, "--out", str(scores)])
        assert code == 0, err
    suite = ["suite", "build", *cfg, "--samples", good, "--scores", str(scores), "--out", str(d / f"suite-{n}.json")]
    review = ["review", "export", *cfg, "--samples", good, "--versions", "A,B", "--n", "2"]
    return {
        "--min-samples": ["drift", *cfg, "--baseline", str(d / "baseline.json"), "--samples", good, "--min-samples"],
        "--size": [*suite, "--size"],
        "--seed": [*review, "--out", str(d / f"tasks-{n}.jsonl"), "--seed"],
    }


@pytest.mark.parametrize("flag", ["--min-samples", "--size", "--seed"])
def test_a_number_beyond_64_bits_is_refused_at_the_prompt_not_after_the_work(workdir, flag):
    """`--seed 99999999999999999999999` was taken, the work done, and the output's write ended in a
    traceback ("TypeError: Integer exceeds 64-bit range"), exit 1 and no file."""
    argv = huge_number_commands(workdir)[flag]
    code, err = run_cli([*argv, HUGE])
    assert code == 2, err
    assert "Traceback" not in err, err
    # argparse's usage, then the one line that names the flag, the value and what to give.
    assert f"error: argument {flag}: {HUGE} is too large; give a whole number" in err.strip().splitlines()[-1], err


@pytest.mark.parametrize(
    "flag, value, field",
    [("--margin-pass-rate", "-1", "pass_rate_points"), ("--margin-latency", "0.5", "p95_latency_ratio")],
)
def test_a_bad_shadow_margin_flag_is_named_as_the_flag_not_as_the_config_file(workdir, flag, value, field):
    """`shadow report --config c.yaml --margin-pass-rate -1` said "invalid configuration (config file
    c.yaml): shadow.margins.pass_rate_points: ..." with no line: a user looked in a file that does not
    have the value; the value came from the flag."""
    code, err = run_cli(
        [
            "shadow",
            "report",
            "--config",
            str(workdir / "llmwatch.yaml"),
            "--pairs",
            str(workdir / "good.jsonl"),
            flag,
            value,
        ]
    )
    assert code == 2 and "Traceback" not in err, err
    assert f"shadow.margins.{field} (command line: {flag}):" in err, err


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory) -> Path:
    """A data directory's pairs/ of real shadow pairs: a report over them runs to a verdict."""
    from helpers.ui_data import generate

    d = tmp_path_factory.mktemp("pairs")
    generate(d, 0, hostile=False, pairs=40)
    return d / "pairs"


@pytest.mark.parametrize(
    "flag, value", [("--margin-latency", "inf"), ("--margin-latency", "nan"), ("--margin-pass-rate", "-inf")]
)
def test_a_non_finite_shadow_margin_is_refused_at_the_prompt(pairs_dir, flag, value):
    """`shadow report --margin-latency inf` passed the config's `ge=1.0` and read as "no margin": the
    report ran, and over these pairs latency_p95 x1.33 (39 of 39 slower) read `not_worse`, margin
    `xinf`. Refused as `--alpha inf` is: argparse's usage, then the flag, the value and an example
    (nan and -inf were refused already, by the config's range, in other words)."""
    code, err = run_cli(["shadow", "report", "--pairs", str(pairs_dir), f"{flag}={value}"])
    assert code == 2 and "Traceback" not in err, err
    assert f"error: argument {flag}: {value} is not a finite number; give e.g. " in err.strip().splitlines()[-1], err


def test_a_non_finite_shadow_margin_in_the_config_file_is_refused_with_its_line(workdir, pairs_dir):
    """The same margin as `.inf` in the YAML (or `inf` in LLMWATCH_SHADOW__MARGINS__...) was taken too."""
    cfg = workdir / f"inf-margin-{next(_counter)}.yaml"
    cfg.write_text("shadow:\n  margins:\n    p95_latency_ratio: .inf\n")
    code, err = run_cli(["shadow", "report", "--config", str(cfg), "--pairs", str(pairs_dir)])
    assert code == 2 and "Traceback" not in err, err
    assert "line 3: shadow.margins.p95_latency_ratio: Input should be a finite number" in err, err


# --- files that are not text ---------------------------------------------------------------------


def test_a_compressed_or_non_utf8_document_is_named_on_one_line(workdir):
    """A gzip'd config said `not valid YAML: unacceptable character #x008b: invalid start byte` and a
    second line `in "<byte string>", position 1`; a gzip'd baseline said `str is not valid UTF-8:
    surrogates not allowed`. Neither said what the file was or what to do."""
    import gzip

    packed = workdir / f"packed-{next(_counter)}.gz"
    packed.write_bytes(gzip.compress(b"scoring: {embeddings: false}\n"))
    good = str(workdir / "good.jsonl")
    for argv, what in (
        (["report", "--config", str(packed), "--samples", good], "config file"),
        (
            ["drift", "--config", str(workdir / "llmwatch.yaml"), "--baseline", str(packed), "--samples", good],
            "baseline",
        ),
    ):
        code, err = run_cli(argv)
        assert code == 2 and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert f"{what} {packed} is a gzip-compressed file" in err and "decompress it first" in err, err
    latin = workdir / f"latin-{next(_counter)}.yaml"
    latin.write_bytes(b"# caf\xe9\nscoring: {embeddings: false}\n")
    code, err = run_cli(["report", "--config", str(latin), "--samples", good])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"config file {latin} is not UTF-8 text at line 1, column 6 (byte 0xe9)" in err and "save it as UTF-8" in err


def test_a_non_utf8_line_names_its_column_and_the_fix(workdir):
    """A Latin-1 byte in a line said `not valid JSON (str is not valid UTF-8: surrogates not allowed:
    line 1 column 1 (char 0))`: the wrong column, and no word of the encoding to fix."""
    lines = [orjson.dumps(record(i)) for i in range(3)]
    lines[1] = b'{"id": "caf\xe9"}'
    samples = write_lines(workdir / f"latin-{next(_counter)}.jsonl", lines)
    for name, argv in commands(workdir, samples).items():
        code, err = run_cli(argv)
        assert code == 2 and "Traceback" not in err, f"{name}: {err}"
        assert f"{samples}:2: not UTF-8 text at column 12 (byte 0xe9)" in err and "save it as UTF-8" in err, err


def test_a_key_given_twice_in_the_config_is_refused_not_overridden_in_silence(workdir):
    """PyYAML keeps the last of two equal keys: a config with `scoring:` twice (one pasted at the end of
    the file) ran with the second section alone, the first's settings dropped without a word, exit 0."""
    config = workdir / f"twice-{next(_counter)}.yaml"
    config.write_text("scoring:\n  embeddings: false\nsampling:\n  rate: 0.5\nscoring:\n  checks: []\n")
    code, err = run_cli(["report", "--config", str(config), "--samples", str(workdir / "good.jsonl")])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"config file {config} is not valid YAML at line 5, column 1: key 'scoring' given twice" in err, err
    assert "first at line 1" in err and "merge the two" in err, err
    nested = workdir / f"twice-{next(_counter)}.yaml"
    nested.write_text("scoring: {embeddings: false, embeddings: true}\n")
    code, err = run_cli(["report", "--config", str(nested), "--samples", str(workdir / "good.jsonl")])
    assert code == 2 and "key 'embeddings' given twice" in err, err


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_nan_written_by_python_names_the_field_and_the_fix(workdir, token):
    """Python's json.dumps writes float('nan') as a bare NaN (allow_nan defaults to True): the line
    said `not valid JSON (unexpected character, expected a JSON value: line 1 column 110 (char 109))`."""
    lines = [orjson.dumps(record(i)) for i in range(3)]
    lines[2] = orjson.dumps(record(2, latency_ms=1.5)).replace(b'"latency_ms":1.5', b'"latency_ms": ' + token)
    samples = write_lines(workdir / f"nan-{next(_counter)}.jsonl", lines)
    for name, argv in commands(workdir, samples).items():
        code, err = run_cli(argv)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, f"{name}: {err}"
        assert f"{samples}:3: field 'latency_ms' is {token.decode()}, which JSON does not have" in err, err
        assert "write null or a finite number" in err, err


def test_a_pipe_given_as_the_baseline_is_named_a_pipe_not_a_missing_file(workdir):
    """`drift --baseline <(cat b.json)` (or a FIFO) said "--baseline /dev/fd/63 does not exist": it does."""
    fifo = workdir / f"fifo-{next(_counter)}.json"
    os.mkfifo(fifo)
    code, err = run_cli(
        [
            "drift",
            "--config",
            str(workdir / "llmwatch.yaml"),
            "--baseline",
            str(fifo),
            "--samples",
            str(workdir / "good.jsonl"),
        ]
    )
    assert code == 2 and "Traceback" not in err and "does not exist" not in err, err
    assert f"--baseline {fifo} is not a regular file (a pipe or a device); save it to a file first" in err, err


def test_a_suite_whose_manifest_cannot_be_written_leaves_the_earlier_suite_untouched(workdir):
    """`suite build` renamed the new suite over the earlier one, then, when the manifest's write failed,
    wrote the earlier bytes back through a new file: another inode with the data-file mode (a 0644
    suite came back 0600), and on a disk too full for that copy the earlier suite was lost. Both files
    are now complete on disk before either is renamed, so a failed manifest leaves the suite as it was."""
    cfg = ["--config", str(workdir / "llmwatch.yaml")]
    huge_number_commands(workdir)  # writes huge-scores.jsonl
    out = workdir / f"kept-suite-{next(_counter)}.json"
    build = [
        "suite",
        "build",
        *cfg,
        "--samples",
        str(workdir / "good.jsonl"),
        "--scores",
        str(workdir / "huge-scores.jsonl"),
    ]
    code, err = run_cli([*build, "--out", str(out), "--seed", "1"])
    assert code == 0, err
    manifest = workdir / out.name.replace(".json", ".manifest.json")
    manifest.unlink()
    manifest.mkdir()  # the manifest's name taken: its write fails after the suite's
    out.chmod(0o644)
    before = out.stat()
    content = out.read_bytes()
    code, err = run_cli([*build, "--out", str(out), "--seed", "2", "--size", "3"])
    assert code == 2 and "Traceback" not in err, err
    after = out.stat()
    assert out.read_bytes() == content
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == (before.st_ino, before.st_mode, before.st_mtime_ns)
    assert sorted(p.name for p in workdir.iterdir() if p.name.startswith(f".{out.name}")) == []


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_ui_refuses_a_refresh_that_is_not_a_finite_number(workdir, value):
    """`--refresh -1` was refused but `--refresh nan` (and inf) compared false with `<= 0`: the UI
    started and never looked for new files. Refused now before anything starts; a UI that started
    would still be serving at the deadline."""
    data = workdir / "ui-data" / "samples"
    data.mkdir(parents=True, exist_ok=True)
    (data / "samples-20260101-0000.jsonl").write_bytes(orjson.dumps(record(0)) + b"\n")
    cmd = [sys.executable, "-m", "llmwatch.agent.cli", "ui", "--data-dir", str(data.parent), "--listen", "127.0.0.1:0"]
    proc = subprocess.run([*cmd, "--refresh", value], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == f"llmwatch: --refresh {value}: give a finite number of seconds above 0 (default 5)\n"


@pytest.mark.parametrize("command", ["ui", "review serve"])
@pytest.mark.parametrize("value", ["notaurl", "ui.example.org", "ftp://ui.example.org", "https://", "https://h/?a=1"])
def test_a_public_url_that_is_not_an_http_base_url_is_refused_at_the_prompt(workdir, command, value):
    """`--public-url notaurl` started the server and printed links such as `notaurl/?token=...`
    that open nothing; refused now by argparse, before anything is read or bound."""
    code, err = run_cli([*command.split(), "--public-url", value])
    assert code == 2, err
    assert f"argument --public-url: {value!r} is not an http(s) base URL; give the address people open" in err
    assert "Traceback" not in err
