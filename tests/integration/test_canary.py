"""Canary comparison (issue 14): two versions served in the same window, compared with each other.

Load and the traffic mix hit both versions alike in one window, so the canary is judged against
the stable version's samples from the same minutes, not against a baseline frozen under other
load. Unit tests of the window and the verdict on synthetic traffic (tests/integration/test_drift_families.py's
generator), the command line's exit codes, and a real simulator serving both versions at once
behind the real proxy.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers.agents import drained, metric, proxy_url, scrape, settled, wait_until
from helpers.chat import seeded_calls
from helpers.procs import llmwatch
from helpers.samples import write_jsonl
from helpers.traffic import MIX, MODEL, SHIFTED_MIX, T0, traffic

from llmwatch.agent.apps.simulator.server import PROFILES, SimProfile, start_simulator
from llmwatch.agent.components import load_config
from llmwatch.core.config import ConfigError
from llmwatch.core.metrics import CanaryReading, Metrics
from llmwatch.core.records import Sample
from llmwatch.scorers.drift.aggregate import WindowAggregator
from llmwatch.scorers.drift.canary import (
    CanaryError,
    compare_versions,
    format_text,
    parse_duration,
    pick_pairs,
    same_window,
)
from llmwatch.scorers.drift.compare import DriftSettings
from llmwatch.scorers.drift.config import DriftSection
from llmwatch.scorers.drift.metrics import CanaryMetrics

ROOT = Path(__file__).resolve().parents[2]


def _at(samples: list[Sample], offset_s: float) -> list[Sample]:
    return [s.model_copy(update={"timestamp": s.timestamp + timedelta(seconds=offset_s)}) for s in samples]


def two_versions(
    rng, n: int, canary_model=MODEL, *, canary_offset_s: float = 0.0, canary_mix=MIX, n_canary: int | None = None
):
    """Stable version A and canary B, each sample one second apart from T0 (B shifted by `canary_offset_s`)."""
    a = traffic(rng, n, MODEL, MIX, prefix="a", version="A")
    b = traffic(rng, n_canary or n, canary_model, canary_mix, prefix="b", version="B")
    return a, (_at(b[0], canary_offset_s), b[1], b[2])


def run(a, b, **settings):
    samples = a[0] + b[0]
    stable, canary, window = same_window(samples, "A", "B")
    report, _, _ = compare_versions(
        (stable, a[1], a[2]),
        (canary, b[1], b[2]),
        stable_version="A",
        canary_version="B",
        window=window,
        settings=DriftSettings(**settings),
    )
    return report


# ---------------------------------------------------------------------------- the window


def test_only_the_time_both_versions_were_served_is_compared_and_the_rest_is_counted():
    rng = np.random.default_rng(0)
    a, b = two_versions(rng, 100, canary_offset_s=60)  # A 0..99 s, B 60..159 s
    stable, canary, window = same_window(a[0] + b[0], "A", "B")
    assert (window.start, window.end) == (T0 + timedelta(seconds=60), T0 + timedelta(seconds=99))
    assert len(stable) == window.n_stable == 40 and len(canary) == window.n_canary == 40
    assert window.left_out == {"A": 60, "B": 60}
    assert all(window.start <= s.timestamp <= window.end for s in stable + canary)
    assert {s.model_version for s in stable} == {"A"} and {s.model_version for s in canary} == {"B"}


def test_a_window_asked_for_is_applied_before_the_overlap():
    rng = np.random.default_rng(0)
    a, b = two_versions(rng, 100)
    stable, canary, window = same_window(
        a[0] + b[0], "A", "B", start=T0 + timedelta(seconds=10), end=T0 + timedelta(seconds=29)
    )
    assert len(stable) == len(canary) == 20 and window.left_out == {"A": 80, "B": 80}
    # --last: the span before the newest sample of either version (the file's own clock).
    stable, canary, window = same_window(a[0] + b[0], "A", "B", last=timedelta(seconds=9))
    assert len(stable) == len(canary) == 10 and window.end == T0 + timedelta(seconds=99)


def test_versions_never_served_together_or_missing_are_refused_with_what_was_found():
    rng = np.random.default_rng(0)
    a, b = two_versions(rng, 50, canary_offset_s=3600)
    with pytest.raises(CanaryError, match="never served at the same time.*llmwatch drift"):
        same_window(a[0] + b[0], "A", "B")
    with pytest.raises(CanaryError, match=r"no samples of version 'C'.*A \(50\), B \(50\)"):
        same_window(a[0] + b[0], "A", "C")
    with pytest.raises(CanaryError, match="two different versions"):
        same_window(a[0], "A", "A")
    with pytest.raises(CanaryError, match="widen the window"):
        same_window(a[0] + b[0], "A", "B", end=T0 + timedelta(seconds=100))


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5d", 129600)])
def test_durations(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "-5m", "0h", "2 weeks"])
def test_bad_durations_are_refused_with_an_example(text):
    with pytest.raises(ValueError, match="e.g. 30m"):
        parse_duration(text)


def test_online_pairs_follow_the_config_or_the_version_with_most_samples():
    counts = {"gpt": {"v1": 900, "v2": 100}, "other": {"x": 50}}
    assert pick_pairs(counts, None, None) == [("v1", "v2")]
    assert pick_pairs(counts, "v2", "v1") == [("v2", "v1")]
    assert pick_pairs(counts, "v1", "v3") == [], "a configured canary not in the window is not compared"
    many = {"gpt": {f"v{i}": 100 - i for i in range(10)}}
    assert pick_pairs(many, None, None, most=3) == [("v0", "v1"), ("v0", "v2"), ("v0", "v3")]


# ---------------------------------------------------------------------------- the verdict


def test_a_canary_slower_per_token_and_refusing_more_is_worse_and_named():
    rng = np.random.default_rng(1)
    slower = replace(MODEL, ms_per_token=MODEL.ms_per_token * 1.5).with_kind("chat", refusal=0.25)
    r = run(*two_versions(rng, 1500, slower))
    assert r.verdict == "worse" and r.exit_code == 1, format_text(r)
    named = {(s.family, s.name) for s in r.worse}
    assert ("performance", "perf:latency_per_token_ms") in named and ("behaviour", "pass_rate:refusal") in named
    assert r.family_verdicts()["performance"] == "worse" and r.family_verdicts()["behaviour"] == "worse"
    text = format_text(r)
    assert text.startswith("WORSE") and "perf:latency_per_token_ms" in text.splitlines()[0]


def test_an_identical_canary_is_not_worse():
    rng = np.random.default_rng(2)
    r = run(*two_versions(rng, 1500))
    assert r.verdict == "not_worse" and r.exit_code == 0, format_text(r)
    assert r.worse == []


def test_a_canary_that_refuses_less_differs_but_is_not_worse():
    rng = np.random.default_rng(3)
    r = run(*two_versions(rng, 1500, MODEL.with_kind("legal", refusal=0.0).with_kind("chat", refusal=0.0)))
    assert [s.name for s in r.better] and r.worse == [], format_text(r)
    assert r.verdict == "not_worse" and r.exit_code == 0


def test_a_canary_on_another_traffic_mix_is_compared_within_categories():
    # The canary's router sent it other questions: inputs shifted, behaviour and performance compared like with like.
    rng = np.random.default_rng(4)
    r = run(*two_versions(rng, 1500, canary_mix=SHIFTED_MIX))
    assert r.family_verdicts() == {"inputs": "shifted", "behaviour": "not_worse", "performance": "not_worse"}, (
        format_text(r)
    )
    assert r.exit_code == 0


def test_too_few_canary_samples_are_undecided_not_a_verdict():
    rng = np.random.default_rng(5)
    r = run(*two_versions(rng, 1000, replace(MODEL, ms_per_token=40.0), n_canary=10), min_samples=30)
    assert r.verdict == "insufficient" and r.exit_code == 2, format_text(r)


# ---------------------------------------------------------------------------- the command line


def test_cli_exit_codes_json_and_bad_input(tmp_path):
    rng = np.random.default_rng(6)
    a, b = two_versions(rng, 800, replace(MODEL, ms_per_token=MODEL.ms_per_token * 1.6), canary_offset_s=100)
    write_jsonl(tmp_path / "samples.jsonl", a[0] + b[0])
    write_jsonl(tmp_path / "scores.jsonl", a[1] + b[1])

    def canary(samples: Path, canary_version: str) -> list[str]:
        scores = str(tmp_path / "scores.jsonl")
        return ["canary", "--samples", str(samples), "--scores", scores, "--stable", "A", "--canary", canary_version]

    common = canary(tmp_path / "samples.jsonl", "B")

    worse = llmwatch(*common, "--format", "json", cwd=tmp_path)
    assert worse.returncode == 1, worse.stderr + worse.stdout[-3000:]
    out = orjson.loads(worse.stdout)
    assert out["verdict"] == "worse" and out["exit_code"] == 1
    assert out["families"]["performance"]["canary_verdict"] == "worse"
    assert {"family": "performance", "signal": "perf:latency_per_token_ms"}.items() <= out["worse"][0].items()
    assert (
        out["window"]["left_out"] == {"A": 100, "B": 100}
        and out["window"]["n_stable"] == out["window"]["n_canary"] == 700
    )
    # Performance not named: the slower canary passes.
    assert llmwatch(*common, "--fail-on", "behaviour", cwd=tmp_path).returncode == 0
    text = llmwatch(*common, cwd=tmp_path)
    assert text.returncode == 1 and text.stdout.startswith("WORSE") and "left out" in text.stdout

    for extra, needle in (
        (["--fail-on", "latency"], "--fail-on"),
        (["--window-start", "yesterday"], "--window-start"),
        (["--last", "2 weeks"], "--last"),
        (["--last", "1h", "--window-end", "2026-12-01T00:10:00Z"], "--last"),
    ):
        bad = llmwatch(*common, *extra, cwd=tmp_path)
        assert bad.returncode == 2 and needle in bad.stderr and "Traceback" not in bad.stderr, (extra, bad.stderr)
    missing = llmwatch(*canary(tmp_path / "samples.jsonl", "C"), cwd=tmp_path)
    assert missing.returncode == 2 and "'C'" in missing.stderr and "Traceback" not in missing.stderr
    apart = write_jsonl(tmp_path / "apart.jsonl", a[0] + _at(b[0], 7200))
    never = llmwatch(*canary(apart, "B"), cwd=tmp_path)
    assert never.returncode == 2 and "never served at the same time" in never.stderr and "Traceback" not in never.stderr


# ---------------------------------------------------------------------------- a real canary


PROMPTS = [
    "How do I roast a chicken?",
    "Explain Python list comprehensions.",
    "Plan a weekend in Lisbon.",
    "Why is the sky blue?",
    "How should I water tomatoes?",
]


def split(stable: SimProfile, canary: SimProfile, every: int = 2):
    """The simulator serving two versions at once: every `every`-th request goes to the canary."""
    counter = iter(range(1 << 62))
    return lambda: canary if next(counter) % every == 0 else stable


def at_pace(profile: SimProfile, latency_scale: float, name: str | None = None) -> SimProfile:
    return SimProfile(**{**profile.__dict__, "latency_scale": latency_scale, **({"name": name} if name else {})})


async def canary_traffic(base: str, n: int, seed0: int) -> None:
    await seeded_calls(base, [PROMPTS[i % len(PROMPTS)] for i in range(n)], seed0)


async def served_canary(
    tmp_path: Path, make_agent, phases: list[tuple[SimProfile, SimProfile]], n: int
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Each phase: `n` calls through the real proxy to a simulator serving (stable, canary) half and half; then `llmwatch canary`."""
    sim = await start_simulator("127.0.0.1", 0, split(*phases[0]), seed=5)
    try:
        agent = await make_agent(sim.url, sampling={"rate": 1.0})
        for k, (stable, canary) in enumerate(phases):
            sim.set_profile(split(stable, canary))
            await canary_traffic(proxy_url(agent), n, 1000 * k)
        samples = await drained(agent, n * len(phases))
    finally:
        await sim.close()
    config = tmp_path / "llmwatch.yaml"
    config.write_text("scoring:\n  embeddings: false\n")
    stable, canary = phases[0][0].name, phases[0][1].name
    proc = await asyncio.to_thread(
        llmwatch,
        "canary",
        "--config",
        str(config),
        "--samples",
        str(agent.cfg.data_dir / "samples"),
        "--stable",
        stable,
        "--canary",
        canary,
        "--alpha",
        "0.01",
        "--format",
        "json",
        cwd=tmp_path,
    )
    return proc, samples


@pytest.mark.slow
async def test_a_degraded_canary_served_beside_the_stable_version_is_found_worse(tmp_path, make_agent):
    pace = 0.1
    proc, _ = await served_canary(
        tmp_path, make_agent, [(at_pace(PROFILES["A"], pace), at_pace(PROFILES["B"], pace))], 400
    )
    assert proc.returncode == 1, proc.stderr + proc.stdout[-4000:]
    out = orjson.loads(proc.stdout)
    assert out["verdict"] == "worse" and out["stable_version"] == "A" and out["canary_version"] == "B"
    assert {w["family"] for w in out["worse"]} & {"behaviour", "performance"}
    assert out["families"]["behaviour"]["comparison"] == "matched prompts", "both versions answered the same prompts"


@pytest.mark.slow
async def test_a_truly_faster_canary_is_named_better_with_its_interval_in_every_output(tmp_path, make_agent):
    # The same model served three times faster per token as the canary, through the real proxy.
    # Before, performance drifts only when slower, so NOT WORSE was all any output said: the
    # canary's speed-up was in no list, not in the JSON's `better`, not in the headline.
    a = PROFILES["A"]
    proc, _ = await served_canary(
        tmp_path, make_agent, [(at_pace(a, 0.3), at_pace(replace(a, name="A-fast"), 0.1))], 300
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout[-4000:]
    out = orjson.loads(proc.stdout)
    assert out["verdict"] == "not_worse" and out["worse"] == [], out["worse"]
    better = {b["signal"]: b for b in out["better"]}
    assert "perf:latency_per_token_ms" in better, out["better"]
    fast = better["perf:latency_per_token_ms"]
    assert fast["family"] == "performance" and fast["direction"] == "lower"
    assert fast["effect_kind"] == "relative change" and "p50 and p95" in fast["effect_unit"]
    low, high = fast["effect_ci"]
    # Three times faster: about -0.67, and the whole interval beyond the 20 % margin.
    assert low <= fast["effect"] <= high < -0.2, fast
    signal = next(s for s in out["signals"] if s["name"] == "perf:latency_per_token_ms")
    assert signal["effect_ci"] == fast["effect_ci"] and signal["effect_kind"] == "relative change"

    # The text says the same: the headline, the better line with the interval, the legend.
    config = tmp_path / "llmwatch.yaml"
    common = ["canary", "--config", str(config), "--samples", str(tmp_path / "data" / "samples")]
    common += ["--stable", "A", "--canary", "A-fast", "--alpha", "0.01"]
    text = await asyncio.to_thread(llmwatch, *common, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    head, *rest = text.stdout.splitlines()
    assert head.startswith("NOT WORSE") and "better on performance/perf:latency_per_token_ms (lower)" in head, head
    interval = f"[{low:+.3f}, {high:+.3f}]"
    better_line = next(line for line in rest if line.startswith("better in the canary"))
    assert "perf:latency_per_token_ms (lower, rel p50|p95" in better_line and interval in better_line, better_line
    assert any(line.startswith("effect: diff = canary minus stable") for line in rest), text.stdout
    row = next(line for line in rest if " perf:latency_per_token_ms " in line)
    assert interval in row and "rel p50|p95" in row, row

    # And the HTML page: the same headline, the interval and kind in the signal table, the legend.
    page = tmp_path / "canary.html"
    html = await asyncio.to_thread(llmwatch, *common, "--format", "html", "--out", str(page), cwd=tmp_path)
    assert html.returncode == 0, html.stderr
    body = page.read_text()
    assert "better on performance/perf:latency_per_token_ms (lower)" in body
    assert interval.replace("-", "\u2212") in body and "relative change, larger of p50 and p95" in body
    assert "canary minus stable" in body


@pytest.mark.slow
async def test_an_identical_canary_under_load_that_hits_both_versions_is_not_worse(tmp_path, make_agent):
    # Host load: halfway through, everything the simulator serves gets 3x slower, for both versions.
    quiet, loaded = 0.1, 0.3
    a, a2 = PROFILES["A"], replace(PROFILES["A"], name="A2")
    phases = [(at_pace(a, quiet), at_pace(a2, quiet)), (at_pace(a, loaded), at_pace(a2, loaded))]
    proc, samples = await served_canary(tmp_path, make_agent, phases, 200)
    # The test can fail: the load moved the stable version's own time per token far beyond the
    # 20 % margin, so a comparison with its quiet past would read as a performance regression.
    per_token = {
        phase: [
            s["latency_ms"] / s["usage"]["output_tokens"]
            for s in samples
            if s["model_version"] == "A"
            and s["usage"].get("output_tokens")
            and (int(s["request"]["seed"]) >= 1000) == phase
        ]
        for phase in (False, True)
    }
    assert np.median(per_token[True]) > 1.5 * np.median(per_token[False]), {
        k: float(np.median(v)) for k, v in per_token.items()
    }
    assert proc.returncode == 0, proc.stderr + proc.stdout[-4000:]
    out = orjson.loads(proc.stdout)
    assert out["verdict"] == "not_worse" and out["worse"] == []
    assert out["families"]["performance"]["canary_verdict"] == "not_worse"
    # Only the first and last few calls fall outside the time both versions were served.
    window = out["window"]
    assert (
        window["n_stable"] + window["n_canary"] + sum(window["left_out"].values()) == 400
        and sum(window["left_out"].values()) <= 10
    ), window


# ---------------------------------------------------------------------------- online


def aggregator(**canary) -> WindowAggregator:
    return WindowAggregator(None, DriftSection(min_samples=30, window=2000, interval_s=1.0, canary=canary), None)


def fed(stage: WindowAggregator, a, b) -> WindowAggregator:
    for side in (a, b):
        stage.add(side[0], side[1], side[2])
    return stage


def test_readings_that_take_longer_than_the_interval_leave_at_least_as_long_for_scoring(monkeypatch):
    """On a starved CPU one evaluation can outlast drift.interval_s; the scorer child asks `due()`
    after every batch it scores, so without a pause it would evaluate after every batch and fall
    behind on scoring without bound. Here an evaluation takes 5 s of a 1 s interval."""
    import llmwatch.scorers.drift.aggregate as aggregate

    clock = [1000.0]
    monkeypatch.setattr(aggregate.time, "monotonic", lambda: clock[0])
    stage = aggregator(stable="A", canary="B")

    def slow_canary():
        clock[0] += 5.0
        return []

    monkeypatch.setattr(stage, "_canary", slow_canary)
    assert stage.due(now=clock[0] + 1.0)
    stage.readings(now=clock[0] + 1.0)  # starts at 1001 by its `now`, ends at 1005 by the clock
    assert not stage.due(now=1003.0) and not stage.due(now=1005.5)
    assert stage.due(now=1006.5)


def test_the_aggregate_stage_reads_a_configured_canary_without_any_baseline():
    rng = np.random.default_rng(7)
    stage = fed(
        aggregator(stable="A", canary="B"),
        *two_versions(rng, 1200, replace(MODEL, ms_per_token=MODEL.ms_per_token * 1.5)),
    )
    assert stage.baseline is None and stage.due(now=1e12)
    got = {(r.kind, r.key): r for r in stage.readings(now=1e12).canary}
    assert got[("verdict", "performance")].value == 1.0 and got[("verdict", "behaviour")].value == 0.0
    assert {(r.stable_version, r.canary_version) for r in got.values()} == {("A", "B")}
    assert 1.3 < got[("latency_per_token_ratio", "0.5")].value < 1.7
    assert abs(got[("pass_rate_difference", "refusal")].value) < 0.05
    assert got[("samples", "stable")].value == got[("samples", "canary")].value == 1200


def test_automatic_pairs_take_the_busiest_version_as_stable_and_an_identical_canary_is_not_worse():
    rng = np.random.default_rng(8)
    stage = fed(aggregator(enabled=True), *two_versions(rng, 1500, n_canary=300))
    got = {(r.kind, r.key): r for r in stage.readings(now=1e12).canary}
    assert {(r.stable_version, r.canary_version) for r in got.values()} == {("A", "B")}
    assert got[("verdict", "performance")].value == 0.0 and got[("verdict", "behaviour")].value == 0.0


def test_the_canary_is_off_unless_configured_and_a_half_configured_pair_is_refused():
    rng = np.random.default_rng(9)
    stage = fed(aggregator(), *two_versions(rng, 100))
    assert not stage.due(now=1e12) and stage.readings(now=1e12).canary is None
    with pytest.raises(ConfigError, match="drift.canary"):
        load_config(None, overrides={"drift": {"canary": {"stable": "A"}}}, environ={})
    assert load_config(
        None, overrides={"drift": {"canary": {"stable": "A", "canary": "B"}}}, environ={}
    ).drift.canary.enabled


def test_canary_gauges_are_replaced_as_a_whole_so_a_finished_canary_stops_alerting():
    m = Metrics()
    m.group(CanaryMetrics).set_canary(
        [
            CanaryReading("verdict", "A", "B", "performance", 1.0),
            CanaryReading("latency_per_token_ratio", "A", "B", "0.5", 1.4),
        ]
    )
    assert (
        m.registry.get_sample_value(
            "llmwatch_canary_verdict", {"family": "performance", "stable_version": "A", "canary_version": "B"}
        )
        == 1.0
    )
    m.group(CanaryMetrics).set_canary([CanaryReading("verdict", "A", "C", "performance", 0.0)])
    assert (
        m.registry.get_sample_value(
            "llmwatch_canary_verdict", {"family": "performance", "stable_version": "A", "canary_version": "B"}
        )
        is None
    )
    assert (
        m.registry.get_sample_value(
            "llmwatch_canary_latency_per_token_ratio", {"quantile": "0.5", "stable_version": "A", "canary_version": "B"}
        )
        is None
    )
    assert (
        m.registry.get_sample_value(
            "llmwatch_canary_verdict", {"family": "performance", "stable_version": "A", "canary_version": "C"}
        )
        == 0.0
    )


@pytest.mark.slow
async def test_the_sidecar_exports_a_degraded_canary_as_worse_while_both_versions_are_served(make_agent):
    """Real simulator serving A and B at once, the real proxy, the scorer process, a real scrape."""
    pace = 0.1
    sim = await start_simulator(
        "127.0.0.1", 0, split(at_pace(PROFILES["A"], pace), at_pace(PROFILES["B"], pace)), seed=5
    )
    try:
        agent = await make_agent(
            sim.url,
            sampling={"rate": 1.0},
            scoring={"enabled": True, "embeddings": False},
            drift={
                "interval_s": 1.0,
                "min_samples": 40,
                "window": 400,
                "alpha": 0.01,
                "canary": {"stable": "A", "canary": "B"},
            },
        )
        await wait_until(lambda: agent.scorer.ready.is_set(), timeout=60)
        await canary_traffic(proxy_url(agent), 400, 0)
        await wait_until(lambda: settled(agent), timeout=60)
        labels = {"stable_version": "A", "canary_version": "B"}
        samples: dict = {}
        deadline = asyncio.get_running_loop().time() + 60
        # The verdict over (nearly) every sample served; the first intervals saw fewer.
        while asyncio.get_running_loop().time() < deadline:
            samples = await scrape(agent)
            if metric(samples, "llmwatch_canary_window_samples", role="canary", **labels) >= 190:
                break
            await asyncio.sleep(0.2)
        assert metric(samples, "llmwatch_canary_window_samples", role="canary", **labels) >= 190, (
            "a verdict over B's samples in the window"
        )
        worse = {
            f: metric(samples, "llmwatch_canary_verdict", family=f, **labels) for f in ("behaviour", "performance")
        }
        assert 1.0 in worse.values(), {k: v for k, v in samples.items() if k[0].startswith("llmwatch_canary")}
        assert metric(samples, "llmwatch_canary_latency_per_token_ratio", quantile="0.5", **labels) > 1.2, (
            "B is slower per token in the same window"
        )
        assert metric(samples, "llmwatch_canary_pass_rate_difference", check="refusal", **labels) < 0, "B refuses more"
    finally:
        await sim.close()
