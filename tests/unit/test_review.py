"""Blind review round trip: export paired tasks, two reviewers, one dispute, agreement checked independently."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import reviews as review_round
from helpers.reviews import CHECKS, REFUSAL, V1, V2, alpha_interval_pairwise, live_traffic
from sklearn.metrics import cohen_kappa_score

from llmwatch.agent.cli.main import main
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.suite import build_suite
from llmwatch.scorers.stats.agreement import cohen_kappa, krippendorff_alpha

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
CRITERIA = ["accuracy", "completeness", "hallucination"]


@pytest.fixture
def exported(tmp_path: Path, capsys):
    samples = live_traffic()
    samples_dir = review_round.write_samples(tmp_path, samples)
    scores = [
        r.score
        for r in build_suite(ScoringSection.model_validate({"checks": CHECKS, "embeddings": False})).score(samples)
    ]
    # A model-as-judge check scored the live traffic too: refusals low, everything else high.
    for s in samples:
        value = 0.0 if s.answer_text() == REFUSAL else (0.75 if s.model_version == V1 else 1.0)
        scores.append(
            Score(
                sample_id=s.id,
                check="judge",
                kind="judge",
                result="pass" if value >= 0.75 else "fail",
                value=value,
                model_version=s.model_version,
                sample_timestamp=s.timestamp,
            )
        )
    (tmp_path / "scores.jsonl").write_bytes(b"".join(sc.to_json() + b"\n" for sc in scores))
    config = review_round.write_config(tmp_path / "llmwatch.yaml", categories=True)
    out = tmp_path / "round1" / "tasks.jsonl"
    options = ("--scores", str(tmp_path / "scores.jsonl"), "--n", "6", "--seed", "11")
    assert main(review_round.export_args(samples_dir, config, out, *options)) == 0
    printed = capsys.readouterr().out
    return out, printed, samples


def read_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_export_writes_stratified_blind_tasks_and_a_separate_key(exported):
    tasks_path, printed, samples = exported
    key_path = tasks_path.with_name("tasks.key.json")
    assert f"-> {tasks_path}" in printed and f"-> {key_path}" in printed
    tasks = read_jsonl(tasks_path)
    assert len(tasks) == 6
    assert {t["stratum"] for t in tasks} >= {"failing", "typical"}
    assert (
        sum(t["same_prompt"] for t in tasks) == 5
    )  # every prompt both versions answered; the sixth is a category pair
    # Nothing in the tasks names a model: no version, model, sample id or fingerprint.
    body = tasks_path.read_text()
    for secret in (V1, V2, "gpt-4o", "fp_", "req-", "chatcmpl", "model_version", "sample_id"):
        assert secret not in body, secret
    for t in tasks:
        assert set(t["candidates"]) == {"A", "B"} and t["criteria"] == CRITERIA
    key = orjson.loads(key_path.read_bytes())
    assert set(key["tasks"]) == {t["task_id"] for t in tasks}
    first_version = {entry["A"]["model_version"] for entry in key["tasks"].values()}
    assert first_version == {V1, V2}, "the A/B order is drawn per task"
    by_id = {s.id: s for s in samples}
    for t in tasks:
        for label in ("A", "B"):
            entry = key["tasks"][t["task_id"]][label]
            assert by_id[entry["sample_id"]].answer_text() == t["candidates"][label]["answer"]
            assert by_id[entry["sample_id"]].model_version == entry["model_version"]


def reviews_for(tasks: list[dict], dispute: str) -> list[dict]:
    """Reviewer 1 scores what she reads; reviewer 2 agrees within a point, except a 2-point gap on `dispute`."""
    out = []
    for t in tasks:
        first = {}
        for label, cand in t["candidates"].items():
            refused = cand["answer"] == REFUSAL
            detailed = "refunded" in cand["answer"] or "%" in cand["answer"]
            first[label] = {
                "accuracy": 1 if refused else (5 if detailed else 4),
                "completeness": 1 if refused else (4 if detailed else 3),
                "hallucination": 5,
            }
        second = {label: {**s, "hallucination": 4} for label, s in first.items()}
        if t["task_id"] == dispute:
            second["A"]["accuracy"] = (
                first["A"]["accuracy"] - 2 if first["A"]["accuracy"] > 2 else first["A"]["accuracy"] + 2
            )
        for judge, scores in (("reviewer_01", first), ("reviewer_02", second)):
            out.append(
                {
                    "task_id": t["task_id"],
                    "category": t["category"],
                    "candidates": ["A", "B"],
                    "scores": scores,
                    "judge": judge,
                    "blind": True,
                }
            )
    return out


def test_import_unblinds_computes_agreement_and_sends_the_one_dispute_to_arbitration(exported, tmp_path: Path, capsys):
    tasks_path, _, _ = exported
    tasks = read_jsonl(tasks_path)
    dispute = tasks[2]["task_id"]
    reviews = reviews_for(tasks, dispute)
    reviews_path = tmp_path / "reviews.jsonl"
    reviews_path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reviews))
    report_path = tmp_path / "review-report.json"
    assert (
        main(
            [
                "review",
                "import",
                "--tasks",
                str(tasks_path),
                "--key",
                str(tasks_path.with_name("tasks.key.json")),
                "--reviews",
                str(reviews_path),
                "--out",
                str(report_path),
                "--level",
                "interval",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    report = orjson.loads(report_path.read_bytes())
    assert report["reviewers"] == ["reviewer_01", "reviewer_02"] and report["reviews"] == 12

    # Agreement per criterion, against independent computations.
    for criterion in CRITERIA:
        pairs = []
        for t in tasks:
            r1, r2 = (
                next(r for r in reviews if r["task_id"] == t["task_id"] and r["judge"] == j)
                for j in ("reviewer_01", "reviewer_02")
            )
            pairs += [(r1["scores"][label][criterion], r2["scores"][label][criterion]) for label in ("A", "B")]
        got = report["agreement"][criterion]
        expected_alpha = alpha_interval_pairwise(pairs)
        assert got["krippendorff_alpha"] == pytest.approx(expected_alpha), criterion
        kappa = cohen_kappa_score(
            [a for a, _ in pairs], [b for _, b in pairs], weights="quadratic", labels=[1, 2, 3, 4, 5]
        )
        assert got["cohen_kappa"]["reviewer_01|reviewer_02"]["kappa_quadratic"] == pytest.approx(kappa), criterion
        assert got["n_items"] == 12
    # Hallucination: reviewer 1 always 5, reviewer 2 always 4 -> no agreement beyond chance at all,
    # and the report says what that means for the scores, not only the figure.
    assert report["agreement"]["hallucination"]["krippendorff_alpha"] < 0
    assert report["agreement"]["hallucination"]["reading"].startswith("unreliable (alpha < 0.667)")
    assert "the reviewers disagree too much for their scores on it to decide" in printed

    # Exactly one dispute, in the disputes file (named so, beside the reviews), still blind.
    assert report["disputed"] == [dispute]
    assert Path(report["disputes_file"]).name.endswith(".disputes.jsonl")
    assert report["arbitration_file"] == report["disputes_file"]  # the earlier key, for scripts that read it
    arbitration = read_jsonl(Path(report["disputes_file"]))
    assert [a["task_id"] for a in arbitration] == [dispute]
    assert (
        arbitration[0]["reasons"][0]["kind"] == "score_gap" and arbitration[0]["reasons"][0]["criterion"] == "accuracy"
    )
    assert V1 not in Path(report["disputes_file"]).read_text() and V2 not in Path(report["disputes_file"]).read_text()

    # Unblinded: v2 refused the refund question, so its billing accuracy is the mean of what it got, by hand.
    key = orjson.loads(tasks_path.with_name("tasks.key.json").read_bytes())["tasks"]
    expected = [
        r["scores"][label]["accuracy"]
        for r in reviews
        for label in ("A", "B")
        if key[r["task_id"]][label]["model_version"] == V2 and r["category"] == "billing"
    ]
    assert report["human_scores"][V2]["billing"]["accuracy"]["mean"] == pytest.approx(np.mean(expected))
    assert report["human_scores"][V2]["billing"]["accuracy"]["n"] == len(expected)
    prefs = report["preferences"]
    assert prefs[V1]["wins"] + prefs[V1]["ties"] + prefs[V1]["losses"] == 12
    # Tested per task, not per review: each of the 6 tasks counts once.
    test = report["preference_test"]
    assert sum(test["preferred"].values()) + test["even"] == 6
    assert "sign test p" in printed and test["verdict"] in printed

    # The judge check against the humans' mean score per answer.
    cal = report["judge_calibration"]
    assert cal["n"] == 12
    xs, ys = [], []
    for t in tasks:
        for label in ("A", "B"):
            xs.append(key[t["task_id"]][label]["judge"])
            ys.append(
                np.mean(
                    [
                        np.mean([r["scores"][label][c] for c in CRITERIA])
                        for r in reviews
                        if r["task_id"] == t["task_id"]
                    ]
                )
            )
    assert cal["pearson"] == pytest.approx(float(np.corrcoef(xs, ys)[0, 1]))
    assert cal["pearson"] > 0.9

    assert "Krippendorff alpha (interval)" in printed and f"Disputed: 1 task(s): {dispute}" in printed
    assert "Judge check vs human mean score" in printed


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda r: r["scores"]["B"].update(accuracy=7),
            "reviews.jsonl:2: field 'scores.B.accuracy': 7 is outside the scale 1..5",
        ),
        (
            lambda r: r["scores"]["A"].update(accuracy="4"),
            "reviews.jsonl:2: field 'scores.A.accuracy': Input should be a valid integer",
        ),
        (lambda r: r.pop("judge"), "reviews.jsonl:2: field 'judge': Field required"),
        (lambda r: r.update(task_id="T-9999"), "reviews.jsonl:2: field 'task_id': unknown task 'T-9999'"),
        (lambda r: r["scores"]["A"].pop("completeness"), "reviews.jsonl:2: field 'scores.A.completeness': missing"),
        (lambda r: r["scores"]["A"].update(tone=3), "reviews.jsonl:2: field 'scores.A.tone': unknown criterion"),
        (
            lambda r: r.update(category="long_context_summary"),
            "reviews.jsonl:2: field 'category': 'long_context_summary' but task",
        ),
        (
            lambda r: r.update(judge="reviewer_01"),
            "reviews.jsonl:2: field 'judge': reviewer 'reviewer_01' already reviewed",
        ),
    ],
)
def test_bad_reviews_are_refused_naming_the_line_and_the_field(exported, tmp_path: Path, capsys, edit, message):
    tasks_path, _, _ = exported
    tasks = read_jsonl(tasks_path)
    reviews = reviews_for(tasks, dispute="none")[:2]
    edit(reviews[1])
    path = tmp_path / "reviews.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reviews))
    assert main(["review", "import", "--tasks", str(tasks_path), "--reviews", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_a_key_from_another_export_is_refused(exported, tmp_path: Path, capsys):
    tasks_path, _, _ = exported
    other = tmp_path / "other.jsonl"
    other.write_bytes(tasks_path.read_bytes().replace(b"T-0001", b"T-0100"))
    reviews = tmp_path / "reviews.jsonl"
    reviews.write_bytes(b"")
    assert (
        main(
            [
                "review",
                "import",
                "--tasks",
                str(other),
                "--key",
                str(tasks_path.with_name("tasks.key.json")),
                "--reviews",
                str(reviews),
            ]
        )
        == 2
    )
    assert "belongs to another tasks file" in capsys.readouterr().err


def test_exporting_over_an_unimported_round_is_refused(exported, tmp_path: Path, capsys):
    tasks_path, _, _ = exported
    options = ("--scores", str(tmp_path / "scores.jsonl"), "--n", "3")
    assert main(review_round.export_args(tmp_path / "samples", tmp_path / "llmwatch.yaml", tasks_path, *options)) == 2
    assert "already exists" in capsys.readouterr().err


def test_krippendorff_alpha_reproduces_the_published_four_coder_example():
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 coders, 12 units, missing values.
    n = None
    coders = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    units = list(zip(*coders))
    assert round(krippendorff_alpha(units, "nominal"), 3) == 0.743
    assert round(krippendorff_alpha(units, "ordinal"), 3) == 0.815
    assert round(krippendorff_alpha(units, "interval"), 3) == 0.849
    assert math.isnan(krippendorff_alpha([[3, 3], [3, 3]], "interval"))  # no variation: undefined


def test_an_agreement_figure_is_read_against_krippendorffs_bounds():
    from llmwatch.scorers.evaluation.review import agreement_reading

    assert agreement_reading(0.85).startswith("reliable")
    assert agreement_reading(0.8).startswith("reliable")
    assert agreement_reading(0.7).startswith("tentative conclusions only")
    assert agreement_reading(0.5).startswith("unreliable")
    assert agreement_reading(-0.046).startswith("unreliable")
    assert agreement_reading(None).startswith("not computable")


def test_a_preference_is_tested_task_by_task_with_a_sign_test():
    from scipy.stats import binomtest

    from llmwatch.scorers.evaluation.review import preference_test

    # 59 reviews against 48 came from 18 tasks each way: no preference at all.
    even = preference_test({f"t{i}": (1 if i < 18 else -1 if i < 36 else 0) for i in range(40)}, ("A", "B"))
    assert even["preferred"] == {"A": 18, "B": 18} and even["even"] == 4
    assert even["p_value"] == 1.0 and even["verdict"] == "no clear preference"
    # Three reviewers each preferring B on 15 of 20 tasks: 15 tasks of 20, p by hand.
    clear = preference_test({f"t{i}": (-3 if i < 15 else 3) for i in range(20)}, ("A", "B"))
    assert clear["p_value"] == pytest.approx(binomtest(5, 20, 0.5).pvalue) and clear["p_value"] < 0.05
    assert clear["verdict"] == "B preferred"


def test_weighted_kappa_by_hand_on_a_three_item_example():
    # Ratings (1, 1), (2, 3), (3, 3) on the scale 1..3, quadratic weights (i - j)^2.
    # Observed: sum w*O = (2-3)^2 / 3 = 1/3. Marginals a: 1/3 each of 1,2,3; b: 1/3 of 1, 2/3 of 3.
    # Expected: sum_ij w_ij a_i b_j = 1/3 * [(0*1/3 + 4*2/3) + (1*1/3 + 1*2/3) + (4*1/3 + 0)] = 1/3 * (8/3 + 1 + 4/3) = 5/3.
    # kappa = 1 - (1/3) / (5/3) = 0.8.
    assert cohen_kappa([1, 2, 3], [1, 3, 3], [1, 2, 3], "quadratic") == pytest.approx(0.8)


def test_judge_scores_made_after_the_export_are_calibrated_with_import_scores(exported, tmp_path: Path, capsys):
    tasks_path, _, samples = exported
    tasks = read_jsonl(tasks_path)
    reviews_path = tmp_path / "reviews.jsonl"
    reviews_path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reviews_for(tasks, dispute="none")))
    # A miscalibrated judge run later: it likes refusals best.
    later = [
        Score(
            sample_id=s.id,
            check="judge",
            kind="judge",
            result="pass",
            value=1.0 if s.answer_text() == REFUSAL else 0.25,
            model_version=s.model_version,
            sample_timestamp=s.timestamp,
        )
        for s in samples
    ]
    (tmp_path / "later-scores.jsonl").write_bytes(b"".join(sc.to_json() + b"\n" for sc in later))
    out = tmp_path / "report.json"
    assert (
        main(
            [
                "review",
                "import",
                "--tasks",
                str(tasks_path),
                "--reviews",
                str(reviews_path),
                "--scores",
                str(tmp_path / "later-scores.jsonl"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = orjson.loads(out.read_bytes())
    assert report["disputed"] == []
    key = orjson.loads(tasks_path.with_name("tasks.key.json").read_bytes())["tasks"]
    judge = {sc.sample_id: sc.value for sc in later}
    xs, ys = [], []
    for t in tasks:
        for label in ("A", "B"):
            xs.append(judge[key[t["task_id"]][label]["sample_id"]])
            ys.append(
                np.mean(
                    [
                        np.mean([r["scores"][label][c] for c in CRITERIA])
                        for r in reviews_for(tasks, "none")
                        if r["task_id"] == t["task_id"]
                    ]
                )
            )
    assert report["judge_calibration"]["pearson"] == pytest.approx(float(np.corrcoef(xs, ys)[0, 1]))
    assert report["judge_calibration"]["pearson"] < 0
    assert set(report["judge_calibration"]["by_judge_score"]) == {"2", "5"}


def test_import_with_out_and_json_writes_the_same_report_to_both_serialised_once(
    exported, tmp_path: Path, capsys, monkeypatch
):
    # `--out FILE --format json` serialised the report twice, once for the file and once for
    # stdout: the same document, made twice. Now made once, and the bytes are those of before
    # (indented JSON and a newline, in the file and on stdout alike).
    tasks_path, _, _ = exported
    reviews_path = tmp_path / "reviews.jsonl"
    reviews = reviews_for(read_jsonl(tasks_path), dispute="none")
    reviews_path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reviews))
    dumps = orjson.dumps
    made: list[dict] = []

    def counting(obj, *args, **kwargs):
        if isinstance(obj, dict) and "reviewers" in obj:
            made.append(obj)
        return dumps(obj, *args, **kwargs)

    monkeypatch.setattr(orjson, "dumps", counting)
    base = ["review", "import", "--tasks", str(tasks_path), "--reviews", str(reviews_path)]
    out = tmp_path / "report.json"
    assert main([*base, "--out", str(out), "--format", "json"]) == 0
    printed = capsys.readouterr().out
    assert len(made) == 1, "the report is serialised once"
    written = out.read_bytes()
    assert printed.encode() == written
    assert written == dumps(orjson.loads(written), option=orjson.OPT_INDENT_2) + b"\n"
    # Text keeps its summary and names the file, which holds the same report.
    made.clear()
    text_out = tmp_path / "report-text.json"
    assert main([*base, "--out", str(text_out), "--format", "text"]) == 0
    printed = capsys.readouterr().out
    assert f"report -> {text_out}" in printed and not printed.startswith("{")
    assert len(made) == 1 and same_report(text_out.read_bytes(), written)
    # JSON on stdout alone, no file.
    made.clear()
    assert main([*base, "--format", "json"]) == 0
    assert same_report(capsys.readouterr().out.encode(), written) and len(made) == 1


def same_report(a: bytes, b: bytes) -> bool:
    """Byte for byte, but for the time each import was made at."""
    created = (orjson.loads(a)["created_at"].encode(), orjson.loads(b)["created_at"].encode())
    return a.replace(created[0], b"T") == b.replace(created[1], b"T")


def test_the_tasks_file_given_as_the_reviews_says_so_in_one_line(exported, capsys):
    # `review import --tasks t.jsonl --reviews t.jsonl` listed four missing fields on every line
    # (10 lines of "field 'candidates': Input should be a valid list; field 'scores': Field
    # required; ...") and not that this is the tasks file.
    tasks_path, _, _ = exported
    assert main(["review", "import", "--tasks", str(tasks_path), "--reviews", str(tasks_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tasks_path}:1: a review task (written by `llmwatch review export`), not a review" in err
    assert "give the reviewers' verdicts (`llmwatch review serve --out`" in err
    assert err.count("\n") == 1, err


def spot_check_round(tmp_path: Path, versions: list[str]) -> tuple[Path, dict]:
    """A `review export --judge-spot-check` round of spot-checked samples of `versions`, in turn."""
    criterion = {"name": "helpfulness", "description": "answers the question", "scale": "1-5", "pass_at": 4}
    samples = [
        Sample(
            id=f"s-{i:04d}",
            timestamp=T0,
            model="m",
            model_version=versions[i % len(versions)],
            status=200,
            latency_ms=5.0,
            request={"model": "m", "messages": [{"role": "user", "content": f"How do I set up feature {i}?"}]},
            response={"choices": [{"message": {"role": "assistant", "content": f"Open settings, then feature {i}."}}]},
            metadata={"judge_criteria": [criterion], "judge_category": "code"},
        )
        for i in range(12)
    ]
    (tmp_path / "spot-check-20261204-0000.jsonl").write_bytes(b"".join(s.to_json() + b"\n" for s in samples))
    out = tmp_path / "spot.jsonl"
    assert main(["review", "export", "--judge-spot-check", str(tmp_path), "--n", "12", "--out", str(out), "--seed", "1"]) == 0  # fmt: skip
    key = orjson.loads(out.with_name("spot.key.json").read_bytes())
    reviews = [
        {"task_id": t, "candidates": ["A", "B"], "scores": {"A": {"helpfulness": 5}, "B": {"helpfulness": 2}},
         "judge": "ana", "blind": True}
        for t in key["tasks"]
    ]  # fmt: skip
    (tmp_path / "reviews.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reviews))
    return out, key


@pytest.mark.parametrize("versions", [["A"], ["A", "B", "C"]], ids=["one version", "three versions"])
def test_a_round_not_of_two_versions_imports_without_a_preference_test(tmp_path: Path, capsys, versions):
    # A spot-check round holds the versions its samples had: one (IndexError before) or three, where
    # a preference for the third version was counted as one for the second.
    tasks_path, key = spot_check_round(tmp_path, versions)
    assert len(key["versions"]) == len(versions)
    capsys.readouterr()
    code = main(["review", "import", "--tasks", str(tasks_path), "--reviews", str(tmp_path / "reviews.jsonl"), "--format", "json"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = orjson.loads(captured.out)
    assert report["preference_test"] is None
    assert "sign test" not in captured.out


def test_a_task_pairing_one_version_with_itself_is_no_evidence_of_a_preference(tmp_path: Path, capsys):
    # Spot checks of A and B alternate in the file, but a task pairs any two of them: a task of A
    # against A, where every review prefers side A, was counted as a task preferring A.
    tasks_path, key = spot_check_round(tmp_path, ["A", "B"])
    mixed = sum(1 for sides in key["tasks"].values() if sides["A"]["model_version"] != sides["B"]["model_version"])
    capsys.readouterr()
    code = main(["review", "import", "--tasks", str(tasks_path), "--reviews", str(tmp_path / "reviews.jsonl"), "--format", "json"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    test = orjson.loads(captured.out)["preference_test"]
    assert sum(test["preferred"].values()) + test["even"] == mixed
