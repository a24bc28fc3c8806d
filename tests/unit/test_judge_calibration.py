"""Calibrating the live judge against people: agreement, sensitivity, specificity, corrected rates.

The judge here is the simulator's judge mode (agent/llmwatch/agent/apps/simulator/judge.py): a
judge whose bias and noise on the 1-5 scale are known, so the statistics can be held to the truth.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone

import numpy as np
import orjson
import pytest

from llmwatch.agent.apps.simulator.judge import judge_reply, simulate_labels, true_score
from llmwatch.agent.cli.main import main
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.evaluation.judge import JudgeCriterion, judge_messages, outcome
from llmwatch.scorers.evaluation.judge_calibration import (
    calibrate,
    corrected_pass_rate,
    human_labels,
    judge_verdicts,
    load_calibration,
)
from llmwatch.scorers.evaluation.review import load_tasks
from llmwatch.scorers.stats.agreement import cohen_kappa_interval
from llmwatch.scorers.stats.proportions import rogan_gladen

HELPFUL = JudgeCriterion(name="helpfulness", description="answers the question", scale="1-5", pass_at=4)
# True quality of answers, 1..5: 55 % of them pass (4 or 5).
QUALITY = (1, 2, 3, 4, 5)
WEIGHTS = (0.1, 0.15, 0.2, 0.3, 0.25)
TRUE_PASS = 0.55


def draw(rng: random.Random, n: int) -> list[int]:
    return rng.choices(QUALITY, WEIGHTS, k=n)


# --- Rogan-Gladen -------------------------------------------------------------------------------


def test_a_perfect_judge_needs_no_correction_and_a_chance_judge_cannot_be_corrected():
    est, lo, hi = rogan_gladen(30, 100, 50, 50, 50, 50)
    assert est == pytest.approx(0.30) and lo < 0.30 < hi
    assert rogan_gladen(30, 100, 25, 50, 25, 50) is None  # Se + Sp = 1: says nothing
    assert rogan_gladen(30, 100, 0, 0, 10, 10) is None  # no labelled passes: sensitivity unknown
    assert rogan_gladen(0, 0, 5, 5, 5, 5) is None


def test_a_lenient_judges_pass_rate_is_corrected_back_to_the_truth():
    # Sensitivity 0.9, specificity 0.7: the judge passes 30 % of what fails. Apparent rate on a
    # true 40 %: 0.9 * 0.4 + 0.3 * 0.6 = 0.54.
    est, lo, hi = rogan_gladen(5400, 10000, 900, 1000, 700, 1000)
    assert est == pytest.approx(0.40, abs=1e-9)
    assert lo < 0.40 < hi and hi - lo < 0.1


def test_the_corrected_interval_covers_the_true_pass_rate_about_95_percent_of_the_time():
    """Over simulated rounds: a lenient, noisy judge; people label 150 answers, the judge rates 400 more."""
    rng = random.Random(7)
    reps, covered, raw_covered = 300, 0, 0
    for rep in range(reps):
        labelled = draw(rng, 150)
        judged_on_labels = simulate_labels(labelled, bias=0.6, noise=0.8, seed=rep)
        human_pass = [t >= 4 for t in labelled]
        judge_pass = [j >= 4 for j in judged_on_labels]
        pos = sum(human_pass)
        tp = sum(1 for j, h in zip(judge_pass, human_pass) if j and h)
        tn = sum(1 for j, h in zip(judge_pass, human_pass) if not j and not h)
        live = simulate_labels(draw(rng, 400), bias=0.6, noise=0.8, seed=10_000 + rep)
        passed = sum(1 for j in live if j >= 4)
        result = rogan_gladen(passed, len(live), tp, pos, tn, len(labelled) - pos)
        assert result is not None
        covered += result[1] <= TRUE_PASS <= result[2]
        raw_lo, raw_hi = (passed / 400 - 0.049, passed / 400 + 0.049)
        raw_covered += raw_lo <= TRUE_PASS <= raw_hi
    assert 0.91 <= covered / reps <= 0.99, covered / reps
    # The uncorrected rate of this judge almost never holds the truth: the correction is what works.
    assert raw_covered / reps < 0.2


# --- agreement ----------------------------------------------------------------------------------


def test_the_kappa_interval_is_seeded_and_holds_the_estimate():
    truth = draw(random.Random(1), 120)
    judge = simulate_labels(truth, bias=0.0, noise=0.7, seed=2)
    lo, hi = cohen_kappa_interval(judge, truth, QUALITY, "quadratic", seed=3)
    assert (lo, hi) == cohen_kappa_interval(judge, truth, QUALITY, "quadratic", seed=3)
    assert 0.0 < lo < hi < 1.0
    assert all(np.isnan(x) for x in cohen_kappa_interval([3], [3], QUALITY))


def verdicts_for(truths: list[int], judged: list[int], criterion=HELPFUL, model="judge-m") -> dict:
    out = {}
    for i, score in enumerate(judged):
        o = outcome(score, "", criterion, judge_model=model, calibrated=False)
        out[f"s-{i}"] = {"score": score, "passed": o.result == "pass", "scale": "1-5", "pass_at": 4}
    return {(model, criterion.name, "llmwatch-pointwise/1"): out}


def test_a_judge_is_calibrated_only_with_enough_labels_and_a_high_enough_lower_bound():
    truth = draw(random.Random(3), 120)
    labels = {(f"s-{i}", "helpfulness"): t for i, t in enumerate(truth)}
    good = calibrate(verdicts_for(truth, simulate_labels(truth, 0.0, 0.3, seed=1)), labels, min_labels=50)
    noisy = calibrate(verdicts_for(truth, simulate_labels(truth, 0.0, 2.5, seed=1)), labels, min_labels=50)
    few = calibrate(
        verdicts_for(truth, simulate_labels(truth, 0.0, 0.3, seed=1)),
        {k: v for k, v in list(labels.items())[:20]},
        min_labels=50,
    )
    (g,), (n,), (f,) = good.entries, noisy.entries, few.entries
    assert g.calibrated and g.kappa_low is not None and g.kappa_low >= 0.6 and g.labels == 120
    assert g.sensitivity is not None and g.sensitivity_low is not None and g.sensitivity_low < g.sensitivity
    assert not n.calibrated and "below min_agreement" in n.why
    assert not f.calibrated and "fewer than min_labels" in f.why and f.labels == 20


def test_sensitivity_and_specificity_follow_the_judges_bias():
    truth = draw(random.Random(4), 400)
    labels = {(f"s-{i}", "helpfulness"): t for i, t in enumerate(truth)}
    lenient = calibrate(verdicts_for(truth, simulate_labels(truth, 1.0, 0.0)), labels).entries[0]
    strict = calibrate(verdicts_for(truth, simulate_labels(truth, -1.0, 0.0)), labels).entries[0]
    # A judge one point lenient passes every true pass and every true 3; one point strict fails every 4.
    assert lenient.sensitivity == 1.0 and lenient.specificity is not None and lenient.specificity < 0.8
    assert strict.specificity == 1.0 and strict.sensitivity is not None and strict.sensitivity < 0.7
    passed = sum(1 for j in simulate_labels(truth, 1.0, 0.0) if j >= 4)
    est, lo, hi = corrected_pass_rate(passed, len(truth), lenient)
    assert lo <= sum(t >= 4 for t in truth) / len(truth) <= hi


# --- from spot checks to a calibration file -----------------------------------------------------


def spot_checked(n: int, rng: random.Random) -> list[Sample]:
    out = []
    for i in range(n):
        question = f"How do I configure feature {i} of the deployment pipeline?"
        answer = rng.choice(["I'm sorry, I can't help.", "Configure the deployment pipeline feature in settings."])
        out.append(
            Sample(
                id=f"s-{i:04d}",
                timestamp=datetime(2026, 12, 4, tzinfo=timezone.utc),
                model="m",
                model_version="A",
                status=200,
                latency_ms=5.0,
                request={"model": "m", "messages": [{"role": "user", "content": question}]},
                response={"choices": [{"message": {"role": "assistant", "content": answer}}]},
                metadata={"judge_criteria": [HELPFUL.model_dump(mode="json")], "judge_category": "code"},
            )
        )
    return out


def test_spot_checks_become_a_blind_round_whose_reviews_calibrate_the_judge(tmp_path, capsys):
    rng = random.Random(5)
    samples = spot_checked(120, rng)
    spot = tmp_path / "spot-check-20261204-0000.jsonl"
    spot.write_bytes(b"".join(s.to_json() + b"\n" for s in samples))
    # The judge's verdicts, as the live judge writes them (the simulator's judge, bias 0, noise 0.4).
    scores = tmp_path / "scores"
    scores.mkdir()
    lines = []
    for s in samples:
        messages = judge_messages(s.prompt_text(), s.answer_text(), HELPFUL, None)
        verdict = json.loads(judge_reply(messages, 0.0, 0.4))
        o = outcome(verdict["score"], verdict["reason"], HELPFUL, judge_model="judge-m", calibrated=False)
        lines.append(Score.from_outcome(s, o, check="judge:helpfulness", kind="judge").to_json())
    (scores / "scores-20261204-0000.jsonl").write_bytes(b"\n".join(lines) + b"\n")

    assert main(["review", "export", "--judge-spot-check", str(tmp_path), "--n", "120", "--out", str(tmp_path / "t.jsonl"), "--seed", "1"]) == 0  # fmt: skip
    tasks, _ = load_tasks(tmp_path / "t.jsonl")
    assert len(tasks) == 60
    task = next(iter(tasks.values()))
    assert task.criteria == ["helpfulness"] and "answers the question" in task.instructions
    raw = (tmp_path / "t.jsonl").read_text()
    assert "judge-m" not in raw and "s-0" not in raw  # blind: no sample id, no judge verdict
    # People rate every answer on the simulator's rule (the truth the judge is noisy about).
    key = json.loads((tmp_path / "t.key.json").read_text())
    by_id = {s.id: s for s in samples}
    reviews = []
    for task_id, sides in key["tasks"].items():
        rated = {}
        for label, entry in sides.items():
            s = by_id[entry["sample_id"]]
            rated[label] = {"helpfulness": true_score(s.prompt_text(), s.answer_text())}
        reviews.append({"task_id": task_id, "candidates": ["A", "B"], "scores": rated, "judge": "ana", "blind": True})
    (tmp_path / "reviews.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reviews))
    labels = human_labels(tmp_path / "t.jsonl", tmp_path / "reviews.jsonl")
    assert len(labels) == 120 and set(judge_verdicts([Score.from_json(line) for line in lines])) == {
        ("judge-m", "helpfulness", "llmwatch-pointwise/1")
    }

    capsys.readouterr()
    code = main(
        ["judge", "calibrate", "--verdicts", str(scores), "--tasks", str(tmp_path / "t.jsonl"),
         "--reviews", str(tmp_path / "reviews.jsonl"), "--out", str(tmp_path / "cal.json"), "--min-labels", "100"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "judge-m" in out and "helpfulness" in out
    cal = load_calibration(tmp_path / "cal.json")
    (entry,) = cal.entries
    assert entry.labels == 120 and entry.calibrated, entry.why


def test_calibrate_names_what_is_missing_instead_of_a_traceback(tmp_path, capsys):
    (tmp_path / "scores.jsonl").write_text("")
    code = main(["judge", "calibrate", "--verdicts", str(tmp_path / "nope"), "--tasks", "t", "--reviews", "r"])
    err = capsys.readouterr().err
    assert code == 2 and "--verdicts" in err and "Traceback" not in err
