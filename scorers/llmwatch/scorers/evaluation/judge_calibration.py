"""A model judge measured against people: agreement, sensitivity, specificity, corrected pass rates.

People rate the spot-checked answers blind (`llmwatch review export --judge-spot-check`, then the
review app or any tool that writes review lines); their 1-5 ratings are joined with the judge's
verdicts on the same samples and criteria. Per judge model, criterion and prompt version:

* agreement: Cohen's kappa (llmwatch.scorers.stats.agreement, the one implementation) between the
  judge's rating and people's, quadratic-weighted on 1-5 criteria, unweighted on pass/fail ones,
  with a percentile bootstrap interval over the labelled samples;
* as a binary judge (pass at `pass_at`, people's ratings cut at the same point): sensitivity
  (the judge passes what people pass) and specificity (it fails what people fail), each with the
  lower bound of its 95 % Wilson interval;
* calibrated: at least `min_labels` labelled samples and the kappa interval's LOWER bound at or
  above `min_agreement`; a judge that merely looked good on a dozen labels is not calibrated.

`corrected_pass_rate` turns a judge's raw pass rate into an estimate of the rate people would
give (Rogan-Gladen, with Lang-Reiczigel's interval: llmwatch.scorers.stats.proportions).

Several reviewers of one sample: their mean rating, rounded half up, is the label.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import orjson
from pydantic import BaseModel, ConfigDict, Field

from llmwatch.core.errors import LlmwatchError
from llmwatch.core.jsonio import atomic_write_bytes, read_model
from llmwatch.core.scores import Score
from llmwatch.scorers.stats.agreement import cohen_kappa, cohen_kappa_interval
from llmwatch.scorers.stats.proportions import rogan_gladen, wilson_interval

__all__ = [
    "CALIBRATION_SCHEMA",
    "CalibrationEntry",
    "Calibration",
    "CalibrationError",
    "human_labels",
    "judge_verdicts",
    "calibrate",
    "is_calibrated",
    "corrected_pass_rate",
    "write_calibration",
    "load_calibration",
    "format_calibration",
]

CALIBRATION_SCHEMA = "llmwatch.judge-calibration/v1"
SCALE = (1, 2, 3, 4, 5)


class CalibrationError(LlmwatchError, ValueError):
    """Calibration input that cannot be used; the message names the file and what to do."""


class CalibrationEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")

    judge_model: str
    criterion: str
    prompt_version: str
    scale: str
    pass_at: int
    labels: int  # samples both the judge and people rated
    agreement: float | None = None  # share of samples with the same rating (pass/fail) or same score
    kappa: float | None = None
    kappa_low: float | None = None
    kappa_high: float | None = None
    kappa_weights: str = "unweighted"
    human_pass: int = 0  # labelled samples people passed
    human_fail: int = 0
    judge_pass_given_human_pass: int = 0
    judge_fail_given_human_fail: int = 0
    sensitivity: float | None = None
    sensitivity_low: float | None = None
    specificity: float | None = None
    specificity_low: float | None = None
    calibrated: bool = False
    why: str = ""


class Calibration(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    schema_: str = Field(default=CALIBRATION_SCHEMA, alias="schema")
    created_at: datetime
    min_agreement: float
    min_labels: int
    confidence: float
    entries: list[CalibrationEntry]

    def find(self, judge_model: str, criterion: str, prompt_version: str) -> CalibrationEntry | None:
        for e in self.entries:
            if e.judge_model == judge_model and e.criterion == criterion and e.prompt_version == prompt_version:
                return e
        return None


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def human_labels(
    tasks_path: str | os.PathLike[str],
    reviews_path: str | os.PathLike[str],
    key_path: str | os.PathLike[str] | None = None,
) -> dict[tuple[str, str], int]:
    """People's rating (1-5) per (sample id, criterion), unblinded with the round's key.

    Only blind reviews count. Several reviewers: the mean, rounded half up.
    """
    from llmwatch.scorers.evaluation.review import ReviewError, load_reviews, load_tasks_and_key

    tasks, key, key_file = load_tasks_and_key(tasks_path, key_path)
    ratings: dict[tuple[str, str], list[int]] = defaultdict(list)
    for review in load_reviews(reviews_path, tasks):
        if not review.blind:
            continue
        sides = key.tasks.get(review.task_id)
        if sides is None:
            raise ReviewError(f"{reviews_path}: task {review.task_id} is not in the key {key_file}")
        for label, scores in review.scores.items():
            entry = sides.get(label)
            if entry is None:
                continue
            for criterion, value in scores.items():
                ratings[(entry.sample_id, criterion)].append(value)
    return {k: _round_half_up(sum(v) / len(v)) for k, v in ratings.items()}


def judge_verdicts(scores: Iterable[Score]) -> dict[tuple[str, str, str], dict[str, dict[str, Any]]]:
    """The judge's verdicts from score records: (judge model, criterion, prompt version) -> sample id -> details.

    The last verdict of a sample wins (a sample judged twice: the later one).
    """
    out: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for sc in scores:
        if sc.kind != "judge" or not sc.check.startswith("judge:") or sc.result not in ("pass", "fail"):
            continue
        d = sc.details if isinstance(sc.details, dict) else {}
        score = d.get("score")
        if not isinstance(score, int) or not 1 <= score <= 5:
            continue
        key = (str(d.get("judge_model", "?")), sc.check[len("judge:") :], str(d.get("prompt_version", "?")))
        out[key][sc.sample_id] = {
            "score": score,
            "passed": sc.result == "pass",
            "scale": str(d.get("scale", "1-5")),
            "pass_at": int(d.get("pass_at", 4)),
        }
    return dict(out)


def is_calibrated(entry: CalibrationEntry | None, min_agreement: float, min_labels: int) -> tuple[bool, str]:
    """Whether a judge's verdicts may drive alerts and drift verdicts, and why not."""
    if entry is None:
        return False, "no labels from people yet"
    if entry.labels < min_labels:
        return False, f"{entry.labels} labels, fewer than min_labels {min_labels}"
    if entry.kappa_low is None:
        return False, "agreement undefined (no variation in the labels)"
    if entry.kappa_low < min_agreement:
        return False, f"kappa lower bound {entry.kappa_low:.2f} below min_agreement {min_agreement:g}"
    return True, f"kappa lower bound {entry.kappa_low:.2f} >= {min_agreement:g} on {entry.labels} labels"


def _clean(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def calibrate(
    verdicts: Mapping[tuple[str, str, str], Mapping[str, Mapping[str, Any]]],
    labels: Mapping[tuple[str, str], int],
    *,
    min_agreement: float = 0.6,
    min_labels: int = 50,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Calibration:
    """One entry per (judge model, criterion, prompt version) that has verdicts."""
    z = {0.9: 1.6448536269514722, 0.95: 1.959963984540054, 0.99: 2.5758293035489004}.get(confidence)
    if z is None:
        from scipy.stats import norm

        z = float(norm.ppf(0.5 + confidence / 2))
    entries = []
    for (model, criterion, version), by_sample in sorted(verdicts.items()):
        some = next(iter(by_sample.values()))
        scale, pass_at = some["scale"], some["pass_at"]
        ids = sorted(i for i in by_sample if (i, criterion) in labels)
        judge_scores = [int(by_sample[i]["score"]) for i in ids]
        human_scores = [labels[(i, criterion)] for i in ids]
        judge_pass = [bool(by_sample[i]["passed"]) for i in ids]
        human_pass = [h >= pass_at for h in human_scores]
        if scale == "1-5":
            a: Sequence[Any] = judge_scores
            b: Sequence[Any] = human_scores
            scale_labels: Sequence[Any] = SCALE
            weights: Any = "quadratic"
        else:
            a, b, scale_labels, weights = judge_pass, human_pass, (False, True), None
        kappa = cohen_kappa(a, b, scale_labels, weights) if ids else math.nan
        lo, hi = (
            cohen_kappa_interval(a, b, scale_labels, weights, confidence=confidence, resamples=resamples, seed=seed)
            if ids
            else (math.nan, math.nan)
        )
        pos = sum(human_pass)
        neg = len(ids) - pos
        tp = sum(1 for j, h in zip(judge_pass, human_pass) if j and h)
        tn = sum(1 for j, h in zip(judge_pass, human_pass) if not j and not h)
        entry = CalibrationEntry(
            judge_model=model,
            criterion=criterion,
            prompt_version=version,
            scale=scale,
            pass_at=pass_at,
            labels=len(ids),
            agreement=_clean(sum(1 for x, y in zip(a, b) if x == y) / len(ids)) if ids else None,
            kappa=_clean(kappa),
            kappa_low=_clean(lo),
            kappa_high=_clean(hi),
            kappa_weights=weights or "unweighted",
            human_pass=pos,
            human_fail=neg,
            judge_pass_given_human_pass=tp,
            judge_fail_given_human_fail=tn,
            sensitivity=_clean(tp / pos) if pos else None,
            sensitivity_low=_clean(wilson_interval(tp, pos, z)[0]) if pos else None,
            specificity=_clean(tn / neg) if neg else None,
            specificity_low=_clean(wilson_interval(tn, neg, z)[0]) if neg else None,
        )
        ok, why = is_calibrated(entry, min_agreement, min_labels)
        entries.append(entry.model_copy(update={"calibrated": ok, "why": why}))
    return Calibration(
        created_at=datetime.now(timezone.utc),
        min_agreement=min_agreement,
        min_labels=min_labels,
        confidence=confidence,
        entries=entries,
    )


def corrected_pass_rate(passed: int, judged: int, entry: CalibrationEntry) -> tuple[float, float, float] | None:
    """The pass rate people would give, from the judge's `passed` of `judged` (estimate, lower, upper)."""
    return rogan_gladen(
        passed,
        judged,
        entry.judge_pass_given_human_pass,
        entry.human_pass,
        entry.judge_fail_given_human_fail,
        entry.human_fail,
    )


def write_calibration(calibration: Calibration, path: str | os.PathLike[str]) -> None:
    atomic_write_bytes(
        Path(path), orjson.dumps(calibration.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2)
    )


def load_calibration(path: str | os.PathLike[str]) -> Calibration:
    return read_model(
        path,
        Calibration,
        what="judge calibration",
        error=CalibrationError,
        schema=CALIBRATION_SCHEMA,
        kind="an llmwatch judge calibration",
        missing="write it with `llmwatch judge calibrate --verdicts SCORES --tasks TASKS --reviews REVIEWS --out FILE`",
    )


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


# Labels a kappa interval needs to be about 0.2 wide (bench/judge_cost.py, docs/guide/judge.md):
# the default min_labels. Fewer may be asked for; a "calibrated" from them is said to be weak.
ADVISED_LABELS = 50


def _caveats(e: CalibrationEntry) -> str:
    """What the verdict does not say: a percentile bootstrap over labels that all agree gives an
    interval of width 0 ("[1.00, 1.00]" on 3 labels, read as certain agreement), and a calibration
    on a handful of labels (--min-labels 3) passed with that interval's lower bound."""
    notes = []
    if e.kappa_low is not None and e.kappa_high is not None and e.kappa_low == e.kappa_high:
        notes.append("every bootstrap resample gave this kappa: an interval of width 0 at this n, not certainty")
    if e.calibrated and e.labels < ADVISED_LABELS:
        notes.append(f"on {e.labels} labels, under the {ADVISED_LABELS} a kappa interval needs to be narrow")
    return "".join(f"; {n}" for n in notes)


def format_calibration(calibration: Calibration) -> str:
    lines = [
        f"llmwatch judge calibrate: calibrated = at least {calibration.min_labels} labels and the kappa interval's "
        f"lower bound >= {calibration.min_agreement:g} ({calibration.confidence:.0%} intervals)",
        "",
        f"  {'judge model':<20} {'criterion':<16} {'labels':>6} {'kappa':>6} {'interval':>13} "
        f"{'sens':>5} {'>=':>5} {'spec':>5} {'>=':>5}  verdict",
    ]
    for e in calibration.entries:
        interval = f"[{_f(e.kappa_low)}, {_f(e.kappa_high)}]"
        lines.append(
            f"  {e.judge_model[:20]:<20} {e.criterion[:16]:<16} {e.labels:>6} {_f(e.kappa):>6} {interval:>13} "
            f"{_f(e.sensitivity):>5} {_f(e.sensitivity_low):>5} {_f(e.specificity):>5} {_f(e.specificity_low):>5}  "
            f"{'calibrated' if e.calibrated else 'UNCALIBRATED'}: {e.why}{_caveats(e)}"
        )
    if not calibration.entries:
        lines.append("  (no judge verdicts found)")
    return "\n".join(lines)
