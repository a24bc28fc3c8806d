"""Frozen baselines and version-stability drift: tests with known answers, false alarms controlled."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from synthetic import Behaviour, degradations, window  # noqa: E402

from llmwatch.scorers.drift.baseline import BaselineError, freeze, load_baseline, write_baseline  # noqa: E402
from llmwatch.scorers.drift.compare import DriftSettings, compare, format_text  # noqa: E402
from llmwatch.scorers.drift.features import summarize  # noqa: E402


def frozen(rng, n=2000, b=Behaviour()):
    samples, scores, emb = window(rng, n, b, version="A", prefix="base")
    return freeze(samples, scores, emb, model_version="A")


def report_for(baseline, rng, n, b, version="B", **settings):
    samples, scores, emb = window(rng, n, b, version=version, prefix="cur")
    return compare(
        baseline.routes,
        summarize(samples, scores, emb),
        baseline_version=baseline.model_version,
        current_versions=[version],
        settings=DriftSettings(**settings),
    )


def test_baseline_round_trips_through_its_file_and_verifies(tmp_path):
    baseline = frozen(np.random.default_rng(1), n=300)
    path = write_baseline(baseline, tmp_path / "b.json")
    loaded = load_baseline(path)
    assert loaded.checksum == baseline.checksum and loaded.model_version == "A"
    route = loaded.routes["/v1/chat/completions"]
    assert route.n == 300
    assert set(route.checks) >= {"refusal", "json_valid", "answer_relevance"}
    assert route.embedding is not None and route.embedding.dim == 384 and len(route.embedding.reservoir) <= 500
    assert set(route.metrics) == {"latency_ms", "ttft_ms", "output_tokens", "cost_usd"}
    assert sum(route.failure_modes.values()) == 300
    # What the drift families need: one row per sample (up to the reservoir) with its stratum.
    assert len(route.rows) == 300 and {r.category for r in route.rows} == {"uncategorized"}
    assert len(route.embedding.strata) == len(route.embedding.reservoir)
    assert loaded.minimums == DriftSettings().minimums()


def test_baseline_is_immutable(tmp_path):
    baseline = frozen(np.random.default_rng(1), n=100)
    path = write_baseline(baseline, tmp_path / "b.json")
    with pytest.raises(BaselineError, match="immutable"):
        write_baseline(baseline, path)
    assert not os.access(path, os.W_OK) or os.geteuid() == 0  # read-only mode bits (root ignores them)
    # Read-only and private (files.mode 0600 without its write bit).
    assert oct(path.stat().st_mode & 0o777) == "0o400"


def test_tampered_baseline_is_refused(tmp_path):
    path = write_baseline(frozen(np.random.default_rng(1), n=100), tmp_path / "b.json")
    data = orjson.loads(path.read_bytes())
    data["routes"]["/v1/chat/completions"]["checks"]["refusal"]["n_pass"] += 5
    path.chmod(0o644)
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(BaselineError, match="checksum"):
        load_baseline(path)


@pytest.mark.parametrize(
    "content,message",
    [
        (b'{"schema": "llmwatch.baseline/v1", "model_ver', "not valid JSON"),
        (b'{"schema": "something/else"}', "not an llmwatch baseline .*: its schema is 'something/else'. Freeze one"),
        (b'{"model_version": "A"}', "not an llmwatch baseline .*: it has no 'schema' field. Freeze one"),
        (b'[{"schema": "llmwatch.baseline/v2"}]', "not an llmwatch baseline .*: it is a JSON list. Freeze one"),
        (b'{"schema": "llmwatch.baseline/v2", "model_version": 3}', "corrupt"),
        (b'{"schema": "llmwatch.baseline/v1", "model_version": "A"}', "older llmwatch.*refreeze"),
    ],
)
def test_corrupt_baseline_is_refused_with_a_clear_message(tmp_path, content, message):
    path = tmp_path / "b.json"
    path.write_bytes(content)
    with pytest.raises(BaselineError, match=message):
        load_baseline(path)


def test_missing_baseline_says_how_to_make_one(tmp_path):
    with pytest.raises(BaselineError, match="llmwatch baseline freeze"):
        load_baseline(tmp_path / "nope.json")


def test_same_version_fresh_samples_is_stable():
    rng = np.random.default_rng(7)
    report = report_for(frozen(rng), rng, 1000, Behaviour(), version="A")
    assert report.verdict == "stable", format_text(report)
    assert report.exit_code == 0


@pytest.mark.parametrize(
    "name",
    [
        "JSON validity -5 points",
        "answers 30% shorter",
        "refusals +10 points",
        "10% of answers off-topic",
        "latency +40%",
    ],
)
def test_realistic_degradations_are_detected_with_the_right_signal(name):
    expected = {
        "JSON validity -5 points": "pass_rate:json_valid",
        "answers 30% shorter": "output_tokens",
        "refusals +10 points": "pass_rate:refusal",
        "10% of answers off-topic": "score:answer_relevance",
        # Latency per output token, not the raw total: answer length and load move the total.
        "latency +40%": "perf:latency_per_token_ms",
    }[name]
    rng = np.random.default_rng(11)
    baseline = frozen(rng, n=4000)
    report = report_for(baseline, rng, 3000, degradations()[name])
    assert report.verdict == "drift" and report.exit_code == 1, format_text(report)
    drifted = [s.name for s in report.signals if s.verdict == "drift"]
    assert expected in drifted, format_text(report)


def test_signals_are_ranked_drift_first_by_adjusted_p_value():
    rng = np.random.default_rng(3)
    report = report_for(frozen(rng), rng, 1500, degradations()["latency +40%"])
    verdicts = [s.verdict for s in report.signals]
    assert verdicts == sorted(verdicts, key=lambda v: v != "drift")
    drift_p = [s.p_adjusted for s in report.signals if s.verdict == "drift"]
    assert drift_p == sorted(drift_p)


def test_too_few_samples_is_undecided_and_says_so():
    rng = np.random.default_rng(5)
    report = report_for(frozen(rng), rng, 12, Behaviour(), min_samples=30)
    assert report.verdict == "insufficient" and report.exit_code == 2
    assert "too few samples" in format_text(report)
    # And what to do about it (it said only what was missing).
    assert "to decide behaviour, performance: more samples of the version in the window" in format_text(report)


def test_false_alarm_rate_of_a_stable_version_stays_near_alpha():
    """A-vs-A over many seeds: the family-wise rate of any drift verdict is at most alpha (+ noise)."""
    alarms = 0
    runs = 60
    for seed in range(runs):
        rng = np.random.default_rng(1000 + seed)
        baseline = frozen(rng, n=600)
        alarms += (
            report_for(baseline, rng, 300, Behaviour(), version="A", mmd_permutations=50, interval_draws=0).verdict
            == "drift"
        )  # intervals describe a drift, never decide one: not drawn 60 times
    # Holm keeps the family-wise rate <= 0.05; binomial(60, 0.05) exceeds 8 with probability < 1%.
    assert alarms <= 8, f"{alarms}/{runs} stable windows flagged"


def test_text_rows_name_a_direction_only_where_there_is_one():
    # A check every answer passed on both sides (pii_leak, language_match on the demo) has no
    # direction: it used to read "worse" beside an effect of +0.000.
    rng = np.random.default_rng(11)
    never = Behaviour(refusal=0.0)
    same = report_for(frozen(rng, n=300, b=never), rng, 300, never)
    always_passed = next(s for s in same.signals if s.name == "pass_rate:refusal")
    assert always_passed.effect_size == 0 and always_passed.direction == "", format_text(same)
    # A drifting signal with no direction (failure_modes had none) used to read ", clearest in ..."
    # with a dangling comma.
    report = report_for(frozen(rng, n=2000, b=never), rng, 1500, replace(never, refusal=0.10))
    failure_modes = next(s for s in report.signals if s.name == "failure_modes")
    assert failure_modes.verdict == "drift" and failure_modes.stratum
    report.signals[report.signals.index(failure_modes)] = replace(failure_modes, direction="")
    row = next(line for line in format_text(report).splitlines() if " failure_modes " in line)
    assert row.endswith(f"  clearest in {failure_modes.stratum}"), row


def test_text_rows_name_the_direction_of_every_signed_figure():
    # The prompt-length row (a relative median shift) and the failure-mode row (the change of one
    # mode's share) showed a signed effect and no direction beside rows that said "higher",
    # "worse": -0.08 for the failure modes is good news if the mode is `refusal`, bad if `ok`.
    rng = np.random.default_rng(11)
    baseline = frozen(rng, n=1000)
    samples, scores, emb = window(rng, 800, replace(Behaviour(), refusal=0.12), version="B", prefix="cur")
    longer = [s.model_copy(update={"usage": s.usage.model_copy(update={"input_tokens": 60})}) for s in samples]
    report = compare(baseline.routes, summarize(longer, scores, emb), baseline_version="A", current_versions=["B"])
    text = format_text(report)
    rows = {s.name: next(r for r in text.splitlines() if f" {s.name} " in r) for s in report.signals}
    by_name = {s.name: s for s in report.signals}
    assert by_name["input:prompt_tokens"].direction == "higher", rows["input:prompt_tokens"]
    assert rows["input:prompt_tokens"].endswith("  higher"), text
    failure_modes = by_name["failure_modes"]
    assert failure_modes.detail["mode"] in ("refusal", "ok"), failure_modes.detail
    expected = "refusal share higher" if failure_modes.detail["mode"] == "refusal" else "ok share lower"
    assert failure_modes.direction == expected and f"  {expected}" in rows["failure_modes"], text
    # Every row with a signed figure that moved names which way; only distances (the answer
    # embedding's 1 - cosine, a mix's total variation) have no sign to name.
    unsigned = {"embedding"} | {n for n in by_name if n.startswith("input:mix:")}
    for s in report.signals:
        if s.name in unsigned or not np.isfinite(s.effect_size) or s.effect_size == 0:
            continue
        assert s.direction and f"  {s.direction}" in rows[s.name], rows[s.name]


def test_text_rows_show_every_signal_and_test_name_whole():
    # The columns were cut at 34 and 18 characters: `mmd_stratified_permutation` read
    # `mmd_stratified_per`, and a long signal name could not be looked up in the JSON report.
    rng = np.random.default_rng(12)
    report = report_for(frozen(rng, n=300), rng, 300, Behaviour())
    report.signals[0] = replace(report.signals[0], name="pass_rate:" + "a_long_custom_check_name" * 2)
    report.signals[1] = replace(report.signals[1], test="mmd_stratified_permutation")
    text = format_text(report)
    rows = text.splitlines()
    assert any(f" {report.signals[0].name} " in row for row in rows), text
    assert any(" mmd_stratified_permutation " in row for row in rows), text
    head = next(row for row in rows if row.startswith("verdict "))
    # The columns after them still line up under their heads (right-aligned p_adj ends where its head does).
    end = head.index("p_adj") + len("p_adj")
    body = rows[rows.index(head) + 1 :]
    assert body and all(row[end - 1] != " " and row[end] == " " for row in body), text


@pytest.mark.parametrize("lines", [1, 3])
def test_a_samples_file_given_as_the_baseline_says_so(tmp_path, lines):
    # It said "not valid JSON at line 2, column 1 ...; refreeze it" (one line: "not an llmwatch
    # baseline (schema 'llmwatch.sample/v1')"), as if a baseline had been damaged.
    samples, _, _ = window(np.random.default_rng(1), lines, Behaviour())
    path = tmp_path / "samples-20261205-0000.jsonl"
    path.write_bytes(b"".join(s.to_json() + b"\n" for s in samples))
    with pytest.raises(BaselineError) as err:
        load_baseline(path)
    assert f"baseline {path} is a file of samples, not a baseline" in str(err.value)
    assert "llmwatch baseline freeze" in str(err.value)
