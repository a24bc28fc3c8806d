"""Drift families: a change in what users ask is not a model regression, and load is not a version change.

Synthetic traffic with three categories that behave very differently (long code answers, short
chat answers, often-refused legal questions), so that a change in the mix moves every marginal
distribution while the model's behaviour on each kind of question stays the same.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import traffic as traffic_data
from helpers.agents import proxy_url, settled, wait_until
from helpers.chat import seeded_calls
from helpers.procs import llmwatch
from helpers.samples import write_jsonl
from helpers.traffic import DIM, MIX, MODEL, SHIFTED_MIX, T0, Model, traffic

from llmwatch.agent.apps.simulator.server import PROFILES, SimProfile, start_simulator
from llmwatch.core.records import Sample, Usage
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.baseline import BaselineError, check_minimums, freeze, write_baseline
from llmwatch.scorers.drift.compare import DriftSettings, compare, format_text
from llmwatch.scorers.drift.features import summarize
from llmwatch.scorers.drift.model import family_of
from llmwatch.scorers.stats import twosample as stats

ROOT = Path(__file__).resolve().parents[2]


def baseline_of(rng, n=3000, model=MODEL, mix=MIX):
    return freeze(*traffic(rng, n, model, mix, prefix="base"), model_version="A")


def report(baseline, rng, n, model=MODEL, mix=MIX, **settings):
    samples, scores, emb = traffic(rng, n, model, mix, prefix="cur", version="B")
    return compare(
        baseline.routes,
        summarize(samples, scores, emb),
        baseline_version="A",
        current_versions=["B"],
        settings=DriftSettings(**settings),
    )


def verdicts(r) -> dict[str, str]:
    return {f: info["verdict"] for f, info in r.families.items()}


def signal(r, name):
    return next(s for s in r.signals if s.name == name)


def test_a_pure_mix_shift_reads_as_traffic_changed_not_as_behaviour_drift():
    rng = np.random.default_rng(1)
    base = baseline_of(rng)
    r = report(base, rng, 2000, mix=SHIFTED_MIX)
    assert verdicts(r) == {"inputs": "shifted", "behaviour": "stable", "performance": "stable"}, format_text(r)
    assert r.exit_code == 0
    assert signal(r, "input:mix:category").verdict == "shifted" and signal(r, "input:mix:category").stratum in {
        "code",
        "legal",
    }
    # The marginal view moved a lot (what the old report alarmed on): the raw answer length and
    # refusal rate of this traffic really differ from the baseline's.
    assert abs(signal(r, "perf:latency_ms").detail["p50_change"]) > 0.2, format_text(r)


def test_a_behaviour_change_in_one_category_fires_and_names_it():
    rng = np.random.default_rng(2)
    base = baseline_of(rng)
    r = report(base, rng, 2000, model=MODEL.with_kind("legal", refusal=0.30))
    assert verdicts(r)["behaviour"] == "drift" and r.exit_code == 1, format_text(r)
    refusal = signal(r, "pass_rate:refusal")
    assert refusal.verdict == "drift" and refusal.stratum == "legal" and refusal.direction == "worse", format_text(r)
    assert verdicts(r)["inputs"] == "stable"


def test_a_behaviour_change_survives_a_simultaneous_mix_shift():
    rng = np.random.default_rng(3)
    base = baseline_of(rng)
    r = report(base, rng, 2000, model=MODEL.with_kind("chat", answer_tokens=45), mix=SHIFTED_MIX)
    assert verdicts(r)["behaviour"] == "drift" and verdicts(r)["inputs"] == "shifted", format_text(r)
    length = signal(r, "output_tokens")
    assert length.verdict == "drift" and length.stratum == "chat" and length.direction == "lower"


def test_a_a_is_stable_in_every_family():
    rng = np.random.default_rng(4)
    base = baseline_of(rng)
    r = report(base, rng, 1500)
    assert verdicts(r) == {"inputs": "stable", "behaviour": "stable", "performance": "stable"}, format_text(r)
    assert r.exit_code == 0


def test_longer_answers_at_the_same_speed_per_token_are_no_performance_regression():
    """Latency x1.5 because answers are 1.5x longer: behaviour changed, performance did not."""
    rng = np.random.default_rng(5)
    base = baseline_of(rng)
    longer = Model({c: replace(k, answer_tokens=k.answer_tokens * 1.5) for c, k in MODEL.kinds.items()})
    r = report(base, rng, 1500, model=longer)
    assert verdicts(r)["performance"] == "stable", format_text(r)
    assert signal(r, "perf:latency_ms").verdict == "changed" and signal(r, "perf:latency_ms").effect_size > 0.3
    assert signal(r, "output_tokens").verdict == "drift"


@pytest.mark.parametrize("factor,expected", [(1.4, "drift"), (1.08, "stable")])
def test_performance_regresses_only_beyond_the_margin_per_token(factor, expected):
    rng = np.random.default_rng(6)
    base = baseline_of(rng)
    r = report(base, rng, 2000, model=replace(MODEL, ms_per_token=MODEL.ms_per_token * factor))
    sig = signal(r, "perf:latency_per_token_ms")
    assert verdicts(r)["performance"] == expected and sig.verdict == expected, format_text(r)
    # A significant +8 % is still noise for an on-call engineer: below the 20 % margin. The test
    # against no change finds it; the row's test, against the margin, finds nothing beyond it.
    if expected == "stable":
        assert sig.detail["location"]["unshifted_p"] < 1e-3 and sig.effect_size < 0.2
        assert sig.p_value == 1.0 and sig.statistic == 0.0


def test_traffic_the_baseline_never_saw_is_insufficient_not_drift():
    rng = np.random.default_rng(7)
    base = baseline_of(rng, mix={"code": 1.0})
    r = report(base, rng, 800, mix={"chat": 0.8, "code": 0.2})
    assert verdicts(r)["behaviour"] == "insufficient" and r.exit_code == 2, format_text(r)
    assert "strata the baseline knows" in r.families["behaviour"]["reason"]


def test_repeated_prompts_are_compared_as_matched_pairs():
    rng = np.random.default_rng(8)
    base = freeze(*traffic(rng, 2000, MODEL, MIX, prefix="base", prompts_per_category=40), model_version="A")
    samples, scores, emb = traffic(rng, 800, MODEL, MIX, prefix="cur", prompts_per_category=40)
    r = compare(base.routes, summarize(samples, scores, emb), baseline_version="A", current_versions=["A"])
    assert (
        r.families["behaviour"]["comparison"] == "matched prompts" and r.families["behaviour"]["in_prompt_strata"] > 0.9
    )
    assert verdicts(r)["behaviour"] == "stable", format_text(r)
    assert all(s.n_effective > 0 for s in r.signals if s.family == "behaviour" and s.verdict != "insufficient")


def test_other_material_minimums_than_the_baseline_s_are_refused():
    base = baseline_of(np.random.default_rng(9), n=200)
    check_minimums(base, DriftSettings())
    with pytest.raises(BaselineError, match="performance_margin is 0.5 but .* frozen with 0.2"):
        check_minimums(base, DriftSettings(performance_margin=0.5))


def test_cli_reports_families_in_json_and_fails_only_on_the_named_families(tmp_path):
    rng = np.random.default_rng(10)
    base = baseline_of(rng, n=1500)
    write_baseline(base, tmp_path / "base.json")
    samples, scores, _ = traffic(rng, 1000, MODEL, SHIFTED_MIX, prefix="cur")
    write_jsonl(tmp_path / "samples.jsonl", samples)
    write_jsonl(tmp_path / "scores.jsonl", scores)
    common = [
        "drift",
        "--baseline",
        str(tmp_path / "base.json"),
        "--samples",
        str(tmp_path / "samples.jsonl"),
        "--scores",
        str(tmp_path / "scores.jsonl"),
        "--format",
        "json",
    ]
    proc = llmwatch(*common, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    out = orjson.loads(proc.stdout)
    assert set(out["families"]) == {"inputs", "behaviour", "performance"}
    assert out["families"]["inputs"]["verdict"] == "shifted" and out["families"]["behaviour"]["verdict"] == "stable"
    assert any(s["name"] == "input:mix:category" for s in out["families"]["inputs"]["signals"])
    assert llmwatch(*common, "--fail-on", "inputs,behaviour", cwd=tmp_path).returncode == 1
    bad = llmwatch(*common, "--fail-on", "latency", cwd=tmp_path)
    assert bad.returncode == 2 and "--fail-on" in bad.stderr and "Traceback" not in bad.stderr


def test_real_outputs_bench_reads_its_documented_format_and_prints_the_table(tmp_path, capsys):
    """bench/drift_real.py on a small directory in its documented format: a version that refuses more is found."""
    sys.path.insert(0, str(ROOT / "bench"))
    import drift_real

    rng = np.random.default_rng(11)
    lines = []
    for model, refusal in (("m-v1", 0.03), ("m-v2", 0.35)):
        for i in range(240):
            source = "helpful" if i % 3 else "koala"
            refused = rng.random() < refusal
            output = (
                "I'm sorry, but I can't help with that." if refused else " ".join(["word"] * int(rng.integers(40, 160)))
            )
            lines.append(
                {
                    "prompt_id": str(i),
                    "prompt": f"{source} question {i}",
                    "model": model,
                    "output": output,
                    "source": source,
                }
            )
    (tmp_path / "outputs.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    assert drift_real.main([str(tmp_path), "--splits", "4", "--pair", "m-v1:m-v2"]) == 0
    table = capsys.readouterr().out
    assert "| A/A m-v1 | 4 splits |" in table and "| mix shift m-v2 |" in table
    pair = next(line for line in table.splitlines() if line.startswith("| m-v1 -> m-v2"))
    assert "exit 1" in pair and "pass_rate:refusal" in pair, table
    (tmp_path / "outputs.jsonl").write_bytes(b'{"prompt_id": "1", "model": "m"}\n')
    with pytest.raises(SystemExit, match=r"outputs.jsonl:1: field\(s\) prompt, output missing"):
        drift_real.main([str(tmp_path)])


def test_answer_embeddings_follow_the_model_not_the_topic_mix():
    """Issue 14: the answer-embedding test moved more with the prompt mix than with the model."""
    rng = np.random.default_rng(12)
    base = baseline_of(rng)
    mix = report(base, rng, 1500, mix=SHIFTED_MIX)
    assert signal(mix, "embedding").verdict == "stable", format_text(mix)
    # Answers about legal questions drift to another place (the model says something else),
    # nothing else changes: the permutation p-value can go far below 1/201.
    saved = traffic_data.CENTRES
    moved = np.random.default_rng(77).normal(size=DIM)
    traffic_data.CENTRES = {
        **saved,
        "legal": (saved["legal"] + 0.6 * moved / np.linalg.norm(moved))
        / np.linalg.norm(saved["legal"] + 0.6 * moved / np.linalg.norm(moved)),
    }
    try:
        changed = report(base, rng, 1500)
    finally:
        traffic_data.CENTRES = saved
    emb = signal(changed, "embedding")
    assert emb.verdict == "drift" and emb.p_value < 1 / 201 and emb.detail["permutations"] > 200, format_text(changed)


def test_false_alarms_of_a_stable_version_stay_near_alpha_with_strata():
    """A/A over many seeds, three categories: the rate of exit 1 stays at alpha (Holm over behaviour and performance together)."""
    runs, alarms = 30, 0
    for seed in range(runs):
        rng = np.random.default_rng(500 + seed)
        # No effect intervals: they describe a drift, never decide one, and 30 reports' bootstraps
        # took this test past its time limit on a loaded machine.
        alarms += report(baseline_of(rng, n=1500), rng, 800, interval_draws=0).exit_code == 1
    # binomial(30, 0.05) exceeds 5 with probability 1.6 %; the seeds are fixed, so this is deterministic.
    assert alarms <= 5, f"{alarms}/{runs} stable windows failed the run"


SIM_PROMPTS = {
    "cooking": ["How do I roast a chicken?", "How should I water tomatoes?", "How long do I boil an egg?"],
    "code": ["Explain Python list comprehensions.", "What is a race condition?", "How do I reverse a list in Python?"],
}


async def sim_traffic(base: str, n: int, share_code: float, seed0: int) -> None:
    rng = np.random.default_rng(seed0)
    cats = ["code" if rng.random() < share_code else "cooking" for _ in range(n)]
    prompts = [SIM_PROMPTS[cat][i % len(SIM_PROMPTS[cat])] for i, cat in enumerate(cats)]
    await seeded_calls(base, prompts, seed0, [{"x-llmwatch-category": cat} for cat in cats])


@pytest.mark.slow
async def test_simulator_version_whose_traffic_mix_changes_reads_traffic_changed_not_behaviour_drift(
    tmp_path, make_agent
):
    """Real proxy, scorer and online drift: the same simulated version asked other questions."""
    sim = await start_simulator("127.0.0.1", 0, SimProfile(**{**PROFILES["A"].__dict__, "latency_scale": 0.05}), seed=3)
    try:
        agent = await make_agent(
            sim.url,
            sampling={"rate": 1.0},
            scoring={"enabled": True, "embeddings": False},
            drift={"interval_s": 1.0, "min_samples": 40, "window": 400, "alpha": 0.01},
        )
        await wait_until(lambda: agent.scorer.ready.is_set(), timeout=60)
        await sim_traffic(proxy_url(agent), 300, 0.15, 0)
        await wait_until(lambda: settled(agent), timeout=60)
        await asyncio.to_thread(agent.scorer.freeze_baseline, "A", str(tmp_path / "baseline-A.json"))
        agent.scorer.load_baseline(str(tmp_path / "baseline-A.json"))
        await sim_traffic(proxy_url(agent), 300, 0.85, 10_000)
        await wait_until(lambda: settled(agent), timeout=60)
        # A verdict over the whole new window (all 300 samples scored).
        await wait_until(lambda: any(k[0] == "A" and v[3] == 300 for k, v in agent.drift_state.items()), timeout=60)
        latest = {k[2]: v for k, v in agent.drift_state.items() if k[0] == "A" and v[3] == 300}
        assert latest.get("input:mix:category", (0, 1, False))[2], f"the mix moved from 15 % to 85 % code: {latest}"
        # The test can fail: the simulator answers code questions much shorter than cooking ones,
        # so this mix shift moves the marginal answer length that the old report alarmed on.
        rows = orjson.loads((tmp_path / "baseline-A.json").read_bytes())["routes"]["/v1/chat/completions"]["rows"]
        median = {
            c: float(np.median([r["output_tokens"] for r in rows if r["category"] == c and r["output_tokens"]]))
            for c in SIM_PROMPTS
        }
        assert median["code"] < 0.8 * median["cooking"], median
        behaviour = sorted(name for name, v in latest.items() if v[2] and family_of(name) == "behaviour")
        assert behaviour == [], f"the same version on other questions must not read as behaviour drift: {latest}"
    finally:
        await sim.close()


def one_answer_per_prompt(rng, n_prompts: int, length_factor: float, version: str):
    """Each prompt answered once: lengths vary a lot between prompts, little between versions."""
    prompt_rng = np.random.default_rng(99)  # the prompt set is shared by both versions
    typical = prompt_rng.lognormal(np.log(200), 0.8, n_prompts)
    cats = prompt_rng.choice(list(MIX), size=n_prompts, p=list(MIX.values()))
    samples, scores = [], []
    for i in range(n_prompts):
        tokens = int(max(2, typical[i] * length_factor * rng.lognormal(0, 0.05)))
        sid = f"{version}-{i}"
        ts = T0 + timedelta(seconds=i)
        samples.append(
            Sample(
                id=sid,
                timestamp=ts,
                model="m",
                model_version=version,
                status=200,
                latency_ms=100.0 + 15 * tokens,
                ttft_ms=100.0,
                stream=True,
                usage=Usage(input_tokens=40, output_tokens=tokens),
                finish_reason="stop",
                request={"model": "m", "messages": [{"role": "user", "content": f"prompt {i}"}]},
                response={},
                metadata={"category": str(cats[i])},
            )
        )
        scores.append(
            Score(
                sample_id=sid,
                check="refusal",
                kind="refusal",
                result="pass",
                value=1.0,
                model="m",
                model_version=version,
                route=samples[-1].route,
                sample_timestamp=ts,
            )
        )
    return samples, scores


@pytest.mark.parametrize("factor,expected", [(0.9, 1), (1.0, 0)])
def test_a_successor_on_the_same_prompts_is_compared_pair_by_pair(factor, expected):
    """10 % shorter on every prompt is lost in the spread between prompts, and plain on each pair."""
    rng = np.random.default_rng(13)
    base = freeze(*one_answer_per_prompt(rng, 400, 1.0, "v1"), None, model_version="v1")
    samples, scores = one_answer_per_prompt(rng, 400, factor, "v2")
    r = compare(base.routes, summarize(samples, scores, None), baseline_version="v1", current_versions=["v2"])
    assert r.families["behaviour"]["comparison"] == "matched prompts" and r.exit_code == expected, format_text(r)
    if expected:
        assert signal(r, "output_tokens").verdict == "drift" and signal(r, "output_tokens").direction == "lower"
        # Without the pairing, the same windows differ by far less than the spread between prompts.
        assert (
            stats.compare_distributions(
                [s.usage.output_tokens for s in samples],
                [r_.output_tokens for r_ in base.routes["/v1/chat/completions"].rows],
            ).p_value
            > 0.01
        )


def test_untagged_traffic_is_stratified_by_prompt_clusters_frozen_with_the_baseline():
    """No category tags: the same mix shift still reads as traffic, not behaviour, through prompt clusters."""
    rng = np.random.default_rng(14)
    base = freeze(*traffic(rng, 3000, MODEL, MIX, prefix="base", tagged=False), model_version="A")
    samples, scores, emb = traffic(rng, 2000, MODEL, SHIFTED_MIX, prefix="cur", version="B", tagged=False)
    r = compare(base.routes, summarize(samples, scores, emb), baseline_version="A", current_versions=["B"])
    assert verdicts(r) == {"inputs": "shifted", "behaviour": "stable", "performance": "stable"}, format_text(r)
    assert signal(r, "input:mix:prompt_cluster").verdict == "shifted"
    # And a change on one kind of question is still found and placed in a cluster.
    samples, scores, emb = traffic(
        rng, 2000, MODEL.with_kind("legal", refusal=0.35), MIX, prefix="cur2", version="B", tagged=False
    )
    r = compare(base.routes, summarize(samples, scores, emb), baseline_version="A", current_versions=["B"])
    assert verdicts(r)["behaviour"] == "drift" and signal(r, "pass_rate:refusal").stratum.startswith(
        ("cluster-", "topic-")
    ), format_text(r)


def test_an_export_without_latencies_or_token_counts_is_judged_on_behaviour_alone():
    """Performance that is not recorded at all cannot block a verdict (A/A of such an export exits 0)."""
    rng = np.random.default_rng(15)

    def bare(prefix, n):
        samples, scores, emb = traffic(rng, n, MODEL, MIX, prefix=prefix)
        return (
            [
                s.model_copy(update={"ttft_ms": None, "usage": Usage(), "cost_usd": None, "latency_ms": 0.0})
                for s in samples
            ],
            scores,
            emb,
        )

    base = freeze(*bare("base", 1500), model_version="A")
    r = compare(base.routes, summarize(*bare("cur", 800)), baseline_version="A", current_versions=["A"])
    assert verdicts(r)["behaviour"] == "stable" and r.exit_code == 0, format_text(r)
