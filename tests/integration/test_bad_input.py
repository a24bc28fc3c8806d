"""Bad input gets a clear outcome, loses nothing, and the proxy keeps serving."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import aiohttp
import openai
import pytest
from helpers.agents import drained, metric, proxy_url, scrape
from helpers.chat import CHAT, client
from helpers.engines import both_engines as proxy_engine  # noqa: F401  (every test on both engines)
from helpers.upstreams import echo_app, serve

from llmwatch.agent.apps.simulator.server import FAULT_HEADER


async def still_serving(agent) -> None:
    r = await client(proxy_url(agent)).chat.completions.create(**CHAT)
    assert r.choices[0].message.content


async def test_malformed_json_is_forwarded_and_the_upstreams_answer_returned(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0})
    async with aiohttp.ClientSession() as http:
        for base in (sim.url, proxy_url(agent)):
            async with http.post(
                base + "/v1/chat/completions",
                data=b'{"model": "m", "messages": [',
                headers={"Content-Type": "application/json"},
            ) as resp:
                assert resp.status == 400
                body = await resp.json()
                assert body["error"]["type"] == "invalid_request_error"
    samples = await scrape(agent)
    assert metric(samples, "llmwatch_capture_skipped_total", reason="request_not_json") == 1
    [record] = await drained(agent, 1)
    assert record["request"] == '{"model": "m", "messages": ['
    assert record["status"] == 400 and "request_not_json" in record["capture_notes"]
    await still_serving(agent)


async def test_non_json_request_body_is_forwarded_untouched(make_agent):
    runner, url = await serve(echo_app())
    try:
        agent = await make_agent(url)
        body = "model=gpt-4o&prompt=hello".encode()
        async with aiohttp.ClientSession() as http:
            async with http.post(
                proxy_url(agent) + "/v1/chat/completions",
                data=body,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            ) as resp:
                seen = await resp.json()
        assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_capture_skipped_total", reason="request_not_json") == 1
    finally:
        await runner.cleanup()


async def test_non_json_response_is_relayed_and_noted(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 1.0})
    async with aiohttp.ClientSession() as http:
        async with http.post(
            proxy_url(agent) + "/v1/chat/completions", json=CHAT, headers={FAULT_HEADER: "non_json"}
        ) as resp:
            assert resp.status == 200 and await resp.text() == "upstream says hi"
    [record] = await drained(agent, 1)
    assert record["response"] == "upstream says hi"
    assert "response_not_json" in record["capture_notes"]


async def test_body_over_the_capture_limit_is_forwarded_whole_but_not_stored(make_agent):
    runner, url = await serve(echo_app())
    try:
        agent = await make_agent(url, capture={"max_body_bytes": 4096}, sampling={"rate": 1.0})
        big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * 3_000_000 + b'"}]}'
        async with aiohttp.ClientSession() as http:
            async with http.post(
                proxy_url(agent) + "/v1/chat/completions", data=big, headers={"Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 200
                seen = await resp.json()

            async def chunked():
                for i in range(0, len(big), 65536):
                    yield big[i : i + 65536]

            async with http.post(
                proxy_url(agent) + "/v1/chat/completions", data=chunked(), headers={"Content-Type": "application/json"}
            ) as resp:
                seen_chunked = await resp.json()
        digest = hashlib.sha256(big).hexdigest()
        assert seen["body_sha256"] == digest and seen["body_len"] == len(big)
        assert seen_chunked["body_sha256"] == digest
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_capture_skipped_total", reason="request_too_large") == 2
        records = await drained(agent, 2)
        assert all(r["request"] is None and "request_too_large" in r["capture_notes"] for r in records)
    finally:
        await runner.cleanup()


async def test_huge_response_is_relayed_whole_and_capture_is_truncated(make_agent):
    from aiohttp import web

    payload = b'{"choices": [{"message": {"content": "' + b"y" * 2_000_000 + b'"}}]}'

    async def big(request):
        await request.read()
        return web.Response(body=payload, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", big)
    runner, url = await serve(app)
    try:
        agent = await make_agent(url, capture={"max_body_bytes": 65536})
        async with aiohttp.ClientSession() as http:
            async with http.post(
                proxy_url(agent) + "/v1/chat/completions", json={"model": "m", "messages": []}
            ) as resp:
                assert await resp.read() == payload
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_capture_skipped_total", reason="response_truncated") == 1
    finally:
        await runner.cleanup()


async def test_huge_chunked_response_is_relayed_whole_and_capture_is_truncated(make_agent):
    """The same with chunked framing: the relay's chunk step captures a chunk at a time."""
    from aiohttp import web

    pieces = [b"data: " + b"z" * 20_000 + b"\n\n" for _ in range(10)]

    async def big(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for piece in pieces:
            await resp.write(piece)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", big)
    runner, url = await serve(app)
    try:
        agent = await make_agent(url, capture={"max_body_bytes": 65536})
        async with aiohttp.ClientSession() as http:
            async with http.post(
                proxy_url(agent) + "/v1/chat/completions", json={"model": "m", "messages": [], "stream": True}
            ) as resp:
                assert resp.headers.get("Transfer-Encoding") == "chunked"
                assert await resp.read() == b"".join(pieces)
        samples = await scrape(agent)
        assert metric(samples, "llmwatch_capture_skipped_total", reason="response_truncated") == 1
    finally:
        await runner.cleanup()


async def test_upstream_closing_mid_stream_breaks_the_client_stream_like_a_direct_call(sim, make_agent):
    agent = await make_agent(sim.url, sampling={"rate": 0.0})
    failures = []
    for base in (sim.url, proxy_url(agent)):
        received = []
        with pytest.raises(openai.APIError) as err:
            async for ch in await client(base).chat.completions.create(
                **CHAT, stream=True, extra_headers={FAULT_HEADER: "cut_after=3"}
            ):
                if ch.choices and ch.choices[0].delta.content:
                    received.append(ch.choices[0].delta.content)
        failures.append((type(err.value), received))
    assert failures[0] == failures[1], "the client sees the same partial stream and the same error type"
    assert len(failures[1][1]) == 3
    samples = await scrape(agent)
    assert metric(samples, "llmwatch_proxy_errors_total", error_type="stream_interrupted") == 1
    [record] = await drained(agent, 1)
    assert record["error_type"] == "stream_interrupted" and record["sample_reason"] == "error"
    assert "stream_incomplete" in record["capture_notes"]
    await still_serving(agent)


async def test_unknown_model_is_forwarded_counted_as_unpriced_and_capped(sim, make_agent):
    agent = await make_agent(sim.url, metrics={"max_models": 2})
    c = client(proxy_url(agent))
    # Models the upstream answers for are real: each keeps its label, priced or not.
    for model in ("sim-gpt-4o-mini", "my-private-finetune", "another-model"):
        r = await c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
        assert r.model == model
    # Names the upstream refuses are capped: the first max_models keep a label, the rest are `other`.
    for model in ("typo-1", "typo-2", "typo-3", "typo-4"):
        with pytest.raises(openai.NotFoundError):
            await c.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], extra_headers={FAULT_HEADER: "status=404"}
            )
    samples = await scrape(agent)
    models = {
        dict(ls)["gen_ai_request_model"] for (n, ls) in samples if n == "gen_ai_client_operation_duration_seconds_count"
    }
    assert models == {"sim-gpt-4o-mini", "my-private-finetune", "another-model", "typo-1", "typo-2", "other"}
    assert metric(samples, "gen_ai_client_operation_duration_seconds_count", gen_ai_request_model="other") == 2
    assert metric(samples, "llmwatch_unpriced_calls_total", gen_ai_request_model="my-private-finetune") == 1
    assert metric(samples, "llmwatch_unpriced_calls_total", gen_ai_request_model="another-model") == 1
    assert metric(samples, "llmwatch_cost_usd_total", gen_ai_request_model="my-private-finetune") == 0


def run_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", *args], capture_output=True, text=True, timeout=60, **kw
    )


def test_bad_config_file_stops_start_up_with_the_field_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sampling:\n  rate: 2\n  keep_error: true\n")
    result = run_cli("proxy", "--config", str(bad), "--upstream", "http://127.0.0.1:8000")
    assert result.returncode == 2
    assert "sampling.rate" in result.stderr and "less than or equal to 1" in result.stderr
    assert "sampling.keep_error: unknown field" in result.stderr and "keep_errors" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_upstream_is_a_usage_error():
    result = run_cli("proxy", env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert "--upstream" in result.stderr


def test_every_error_llmwatch_defines_shares_one_root_with_an_exit_code():
    from llmwatch.collectors.receivers.otlp import SpanRejected
    from llmwatch.core.config import ConfigError
    from llmwatch.core.errors import LlmwatchError
    from llmwatch.core.records import RecordError
    from llmwatch.scorers.checks.embeddings import EmbeddingModelMissing
    from llmwatch.scorers.checks.judge import JudgeReplyError
    from llmwatch.scorers.checks.suite import CheckTimeout
    from llmwatch.scorers.drift.baseline import BaselineError
    from llmwatch.scorers.evaluation.evaluate import WeightsMismatch
    from llmwatch.scorers.evaluation.regress import RegressError
    from llmwatch.scorers.evaluation.review import ReviewError

    for cls in (
        ConfigError,
        RecordError,
        BaselineError,
        ReviewError,
        RegressError,
        WeightsMismatch,
        SpanRejected,
        JudgeReplyError,
        EmbeddingModelMissing,
        CheckTimeout,
    ):
        assert issubclass(cls, LlmwatchError) and cls("x").exit_code == 2, cls
    # The builtin bases stay, so code that caught ValueError/RuntimeError still does.
    assert issubclass(ConfigError, ValueError) and issubclass(EmbeddingModelMissing, RuntimeError)
    assert LlmwatchError("x", exit_code=3).exit_code == 3


def test_an_unusable_regress_suite_is_reported_by_the_one_handler_with_exit_2(tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"id": "c1", "input": "hi"}\n')
    result = run_cli("regress", "--suite", str(suite), "--upstream", "http://127.0.0.1:9", "--model", "m")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr.startswith(f"llmwatch: {suite}:1: ")
        and "a case needs `expected` and/or `checks`" in result.stderr
    )


def test_a_full_disk_names_the_output_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    # A write refused for space names no file: stderr said only "[Errno 28] No space left on device".
    from helpers.samples import chat_sample, write_jsonl
    from helpers.tmpfs import fill, small_tmpfs

    samples = write_jsonl(tmp_path / "samples.jsonl", [chat_sample(id=f"s{i}") for i in range(50)])
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        out = disk / "scores.jsonl"
        out.write_text("OLD\n")
        fill(disk)
        env = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false"}
        result = run_cli("score", "--in", str(samples), "--out", str(out), env=env)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("llmwatch: [Errno 28] No space left on device: cannot write ")
        assert str(out) in result.stderr and "free space there or write it elsewhere" in result.stderr
        assert out.read_text() == "OLD\n"
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "scores.jsonl"]


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path):
    # `score --in s.jsonl --out s.jsonl` read the samples, then renamed the scores over them: exit 0,
    # the samples gone. `report` and `suite build` the same with --samples.
    from helpers.samples import chat_sample, write_jsonl

    samples = write_jsonl(tmp_path / "samples.jsonl", [chat_sample(id=f"s{i}") for i in range(20)])
    before = samples.read_bytes()
    os.link(samples, tmp_path / "second-name.jsonl")
    env = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false"}
    for args in (
        ("score", "--in", str(samples), "--out", str(samples)),
        ("score", "--in", str(samples), "--out", str(tmp_path / "second-name.jsonl")),
        ("report", "--samples", str(samples), "--format", "json", "--out", str(samples)),
    ):
        result = run_cli(*args, env=env, cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, (args, result.stderr)
        assert "writing it would replace that input; give --out another file name" in result.stderr
        assert samples.read_bytes() == before, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples.jsonl", "second-name.jsonl"]


def test_a_pipe_given_as_input_is_named_as_a_pipe_not_a_missing_file(tmp_path):
    # `score --in <(zcat samples.jsonl.gz)` said "--in /dev/fd/63: no such file or directory".
    fifo = tmp_path / "samples.pipe"
    os.mkfifo(fifo)
    result = run_cli("score", "--in", str(fifo), "--out", str(tmp_path / "scores.jsonl"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"--in {fifo}: not a regular file or directory (a pipe or a device)" in result.stderr
    assert "save it to a file first" in result.stderr and "no such file" not in result.stderr
    assert not (tmp_path / "scores.jsonl").exists()


def test_a_compressed_export_is_named_as_compressed(tmp_path):
    # A .jsonl.gz given as is was "line 1: not valid JSON (str is not valid UTF-8: surrogates not allowed)".
    import gzip

    from helpers.samples import chat_sample, write_jsonl

    plain = write_jsonl(tmp_path / "samples.jsonl", [chat_sample(id=f"s{i}") for i in range(5)])
    packed = tmp_path / "samples.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    result = run_cli("score", "--in", str(packed), "--out", str(tmp_path / "scores.jsonl"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{packed}: a gzip-compressed file, not JSON Lines; decompress it first" in result.stderr
    assert not (tmp_path / "scores.jsonl").exists()


def test_a_review_round_whose_key_cannot_be_written_leaves_no_tasks_file_behind(tmp_path):
    # The tasks file was written, then the key that unblinds it failed on a full disk: blind tasks were
    # left behind that no key could ever unblind.
    from helpers.samples import chat_sample, write_jsonl
    from helpers.tmpfs import fill, small_tmpfs

    samples = write_jsonl(
        tmp_path / "samples.jsonl",
        [chat_sample(id=f"{v}{i}", model_version=v, prompt=f"question {i}?") for v in "AB" for i in range(20)],
    )
    env = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false"}
    export = ("review", "export", "--samples", str(samples), "--versions", "A,B", "--n", "5", "--seed", "7")
    # The same round on a roomy disk first, to know how many pages the tasks file takes.
    assert run_cli(*export, "--out", str(tmp_path / "sized.jsonl"), env=env).returncode == 0
    pages = -(-(tmp_path / "sized.jsonl").stat().st_size // 4096)
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        filler = fill(disk)
        os.truncate(filler, filler.stat().st_size - pages * 4096)  # room for the tasks, none for the key
        result = run_cli(*export, "--out", str(disk / "tasks.jsonl"), env=env)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert "No space left on device" in result.stderr and "tasks.key.json" in result.stderr
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_json_lines_file_that_starts_with_a_utf8_bom_is_read_whole(tmp_path):
    # Refused at line 1: "not valid JSON (UTF-8 byte order mark (BOM) is not supported)".
    from helpers.samples import chat_sample, write_jsonl

    plain = write_jsonl(tmp_path / "plain.jsonl", [chat_sample(id=f"s{i}") for i in range(5)])
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    env = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false"}
    for name in ("plain", "bom"):
        result = run_cli(
            "score", "--in", str(tmp_path / f"{name}.jsonl"), "--out", str(tmp_path / f"{name}.out"), env=env
        )
        assert result.returncode == 0, result.stderr

    def ids(name: str) -> list[str]:
        return sorted(
            line.split(b'"sample_id":"')[1].split(b'"')[0].decode()
            for line in (tmp_path / f"{name}.out").read_bytes().splitlines()
        )

    assert ids("bom") == ids("plain") and "s0" in ids("bom")


def test_a_path_with_a_tilde_the_shell_left_alone_is_named_with_the_path_it_meant(tmp_path):
    # `--in=~/samples.jsonl` is one word: the shell does not expand its `~`, and the error said only
    # "no such file or directory" about a file that is there.
    from helpers.samples import chat_sample, write_jsonl

    write_jsonl(tmp_path / "samples.jsonl", [chat_sample(id="s0")])
    env = {**os.environ, "HOME": str(tmp_path)}
    result = run_cli("score", "--in=~/samples.jsonl", "--out", str(tmp_path / "scores.jsonl"), env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "the shell did not expand this `~`" in result.stderr
    assert f"give {tmp_path / 'samples.jsonl'}" in result.stderr


def test_a_path_with_the_tilde_of_an_unknown_user_is_a_missing_file_not_a_traceback(tmp_path):
    # `~name/...` of a user this machine does not have: pathlib's expanduser raises RuntimeError
    # ("Could not determine home directory."), which escaped as a traceback, exit 1.
    result = run_cli("score", "--in=~no-such-user-llmwatch/samples.jsonl", "--out", str(tmp_path / "scores.jsonl"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "~no-such-user-llmwatch/samples.jsonl: no such file or directory" in result.stderr


def test_an_input_option_given_twice_is_refused_not_half_read(tmp_path):
    # argparse kept the last --samples: a report over day 2 alone, exit 0, day 1 dropped unsaid.
    from helpers.samples import chat_sample, write_jsonl

    day1 = write_jsonl(tmp_path / "day1.jsonl", [chat_sample(id=f"a{i}") for i in range(5)])
    day2 = write_jsonl(tmp_path / "day2.jsonl", [chat_sample(id=f"b{i}") for i in range(5)])
    out = tmp_path / "report.json"
    result = run_cli("report", "--samples", str(day1), f"--samples={day2}", "--format", "json", "--out", str(out))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "--samples given 2 times; it takes one file or directory" in result.stderr
    assert "put the files in one directory" in result.stderr and not out.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--alpha", "2"), "argument --alpha: 2 is not between 0 and 1 (exclusive)"),
        (("--alpha", "nan"), "argument --alpha: nan is not between 0 and 1 (exclusive)"),
        (("--min-samples", "-1"), "argument --min-samples: -1 is less than 1"),
    ],
)
def test_drift_refuses_a_level_or_a_minimum_out_of_range_with_exit_2(tmp_path, args, said):
    # `--alpha 2` and `--alpha nan` answered "stable", exit 0 (nan compares false); `--min-samples -1`
    # ended in a numpy traceback, exit 1.
    from helpers.samples import chat_sample, write_jsonl

    samples = write_jsonl(tmp_path / "s.jsonl", [chat_sample(id=f"s{i}", model_version="A") for i in range(40)])
    env = {**os.environ, "LLMWATCH_SCORING__EMBEDDINGS": "false"}
    frozen = run_cli(
        "baseline",
        "freeze",
        "--samples",
        str(samples),
        "--model-version",
        "A",
        "--out",
        str(tmp_path / "b.json"),
        env=env,
    )
    assert frozen.returncode == 0, frozen.stderr
    result = run_cli(
        "drift",
        "--baseline",
        str(tmp_path / "b.json"),
        "--samples",
        str(samples),
        "--model-version",
        "A",
        *args,
        env=env,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert said in result.stderr
