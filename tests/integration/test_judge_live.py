"""The live judge end to end, with the simulator as the judge (its judge mode: known bias and noise).

Real processes throughout: `llmwatch simulate` as the service and another as the judge, a real
`llmwatch proxy` with `judge:` on, calls through the official `openai` client, then the commands a
team runs: `llmwatch review export --judge-spot-check` and `llmwatch judge calibrate`. The same
story with a real model as the judge is tests/e2e/test_judge.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import aiohttp
from helpers.agents import metric
from helpers.judge import (
    judge_scores,
    judged,
    review_as_people,
    send,
    start_judged_proxy,
    wait_metrics,
)
from helpers.procs import simulator_url, start_simulator, stop_gracefully

from llmwatch.core.jsonio import read_records

PRICE = {"input_per_million": 1.0, "output_per_million": 2.0}
JUDGE_KEY = "sk-judge-secret-5f4e3d2c1b0a9988"


def llmwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmwatch.agent.cli", *args], capture_output=True, text=True, timeout=120
    )


async def test_the_judge_is_uncalibrated_until_people_label_its_spot_checks_then_its_verdicts_count(tmp_path: Path):
    # Version B refuses and wanders off topic more often: answers people rate 1 or 2 among the good ones.
    service = start_simulator("--latency-scale", "0", "--seed", "1", "--profile", "B")
    judge = start_simulator("--latency-scale", "0", "--judge-bias", "0", "--judge-noise", "0.3")
    calibration = tmp_path / "calibration.json"
    proxy = None
    try:
        proxy, ports = start_judged_proxy(
            tmp_path,
            simulator_url(service),
            {
                "upstream": simulator_url(judge) + "/v1",
                "model": "sim-judge",
                "rate": 1.0,
                "spot_check_rate": 1.0,
                "max_usd_per_hour": 1.0,
                "calibration": str(calibration),
                "min_labels": 20,
                "min_agreement": 0.3,
            },
            metrics={"pricing": {"sim-judge": PRICE}},
        )
        base = f"http://127.0.0.1:{ports['proxy_port']}"
        data = tmp_path / "data"
        async with aiohttp.ClientSession() as session:
            assert len(await send(base, 40)) == 40
            m = await wait_metrics(session, ports, lambda m: judged(m) >= 40)
            # Every call judged, stored as a check like any other, with the prompt version and the judge.
            scores = judge_scores(data)
            assert len(scores) == 40 and {s["check"] for s in scores} == {"judge:helpfulness"}
            assert all(s["kind"] == "judge" and s["details"]["judge_model"] == "sim-judge" for s in scores)
            assert {s["details"]["prompt_version"] for s in scores} == {"llmwatch-pointwise/1"}
            assert metric(m, "llmwatch_judge_verdicts_total", calibrated="false") == 40
            assert metric(m, "llmwatch_judge_calibrated", criterion="helpfulness") == 0
            assert metric(m, "llmwatch_judge_spend_usd_total") > 0
            # Uncalibrated: stored and shown, but not in the series the alert rules read.
            assert metric(m, "llmwatch_check_total", check="judge:helpfulness") == 0
            assert metric(m, "llmwatch_judge_pass_rate", criterion="helpfulness") > 0

            # People rate the spot checks blind; the calibration file appears; the judge reads it.
            out = llmwatch("review", "export", "--judge-spot-check", str(data / "judge"), "--n", "40",
                           "--out", str(tmp_path / "round.jsonl"), "--seed", "3")  # fmt: skip
            assert out.returncode == 0, out.stderr
            spot = {s.id: s for s in read_records(data / "judge", prefix="spot-check")}
            assert len(spot) == 40
            assert review_as_people(tmp_path / "round.key.json", spot, tmp_path / "reviews.jsonl") == 20
            out = llmwatch("judge", "calibrate", "--verdicts", str(data / "scores"), "--tasks",
                           str(tmp_path / "round.jsonl"), "--reviews", str(tmp_path / "reviews.jsonl"),
                           "--out", str(calibration), "--min-labels", "20", "--min-agreement", "0.3")  # fmt: skip
            assert out.returncode == 0, out.stderr
            assert "calibrated" in out.stdout and "sim-judge" in out.stdout
            m = await wait_metrics(session, ports, lambda m: metric(m, "llmwatch_judge_calibrated") == 1, timeout=30)
            assert metric(m, "llmwatch_judge_kappa", bound="lower") >= 0.3

            # From now on its verdicts count like any check's, and the corrected pass rate is exported.
            assert len(await send(base, 10, start=100)) == 10
            m = await wait_metrics(session, ports, lambda m: judged(m) >= 50)
            assert metric(m, "llmwatch_judge_verdicts_total", calibrated="true") == 10
            assert metric(m, "llmwatch_check_total", check="judge:helpfulness") == 10
            low = metric(m, "llmwatch_judge_pass_rate_corrected", bound="lower")
            high = metric(m, "llmwatch_judge_pass_rate_corrected", bound="upper")
            assert 0 <= low <= metric(m, "llmwatch_judge_pass_rate_corrected", bound="estimate") <= high <= 1
    finally:
        if proxy is not None:
            stop_gracefully(proxy)
        service.stop()
        judge.stop()


async def test_a_judge_that_goes_away_changes_nothing_for_clients(tmp_path: Path):
    service = start_simulator("--latency-scale", "0", "--seed", "1")
    judge = start_simulator("--latency-scale", "0", "--judge-bias", "0")
    proxy = None
    try:
        url = simulator_url(service)
        proxy, ports = start_judged_proxy(
            tmp_path,
            url,
            {"upstream": simulator_url(judge), "model": "sim-judge", "rate": 1.0, "api_key": "env:JUDGE_KEY"},
            env={"JUDGE_KEY": JUDGE_KEY},
        )
        base = f"http://127.0.0.1:{ports['proxy_port']}"
        async with aiohttp.ClientSession() as session:
            await send(base, 5)
            await wait_metrics(session, ports, lambda m: judged(m) >= 5)
            judge.stop()  # the judge's server is killed
            through_proxy = await send(base, 20, start=10)
            direct = await send(url, 20, start=10)
            assert through_proxy == direct  # the same answers, every call answered
            m = await wait_metrics(session, ports, lambda m: judged(m) >= 25)
        assert metric(m, "llmwatch_judge_failures_total", reason="unreachable") == 20
        assert metric(m, "llmwatch_judge_verdicts_total", result="error") == 20
        errors = [s for s in judge_scores(tmp_path / "data") if s["result"] == "error"]
        assert len(errors) == 20 and {s["details"]["exception"] for s in errors} == {"unreachable"}
        # The judge's key reached no file and no log line.
        stop_gracefully(proxy)
        assert JUDGE_KEY not in proxy.output()
        for path in (tmp_path / "data").rglob("*"):
            assert not path.is_file() or JUDGE_KEY.encode() not in path.read_bytes(), path
    finally:
        if proxy is not None:
            stop_gracefully(proxy)
        service.stop()
        judge.stop()


async def test_a_judge_child_that_dies_is_said_restarted_and_judges_again(tmp_path: Path):
    import os
    import signal

    service = start_simulator("--latency-scale", "0", "--seed", "1")
    judge = start_simulator("--latency-scale", "0", "--judge-bias", "0")
    proxy = None
    try:
        proxy, ports = start_judged_proxy(
            tmp_path, simulator_url(service), {"upstream": simulator_url(judge), "model": "sim-judge", "rate": 1.0}
        )
        base = f"http://127.0.0.1:{ports['proxy_port']}"
        first = proxy.wait_event("judge_ready")["pid"]
        async with aiohttp.ClientSession() as session:
            await send(base, 5)
            await wait_metrics(session, ports, lambda m: judged(m) >= 5)
            os.kill(first, signal.SIGKILL)  # the judge's own process, started by the proxy this test started
            proxy.wait_event("judge_child_died")
            deadline = asyncio.get_running_loop().time() + 60
            while len(proxy.events("judge_ready")) < 2:
                assert asyncio.get_running_loop().time() < deadline, proxy.output()[-3000:]
                await asyncio.sleep(0.05)
            assert proxy.events("judge_ready")[1]["pid"] != first
            assert await send(base, 5, start=50)
            m = await wait_metrics(session, ports, lambda m: metric(m, "llmwatch_judge_verdicts_total") >= 10)
        assert (
            metric(m, "llmwatch_judge_verdicts_total", result="pass")
            + metric(m, "llmwatch_judge_verdicts_total", result="fail")
            == 10
        )
    finally:
        if proxy is not None:
            stop_gracefully(proxy)
        service.stop()
        judge.stop()
