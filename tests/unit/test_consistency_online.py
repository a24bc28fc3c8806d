"""The consistency probe's verdicts reach online drift: joined late to their samples, tested as a behaviour signal."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from helpers.samples import NOW, chat_sample

from llmwatch.core.records import Sample
from llmwatch.core.scores import Score
from llmwatch.scorers.drift.baseline import freeze
from llmwatch.scorers.drift.compare import DriftSettings
from llmwatch.scorers.drift.online import MAX_WAITING_SCORES, DriftWindows


def calls(rng: np.random.Generator, n: int, version: str, start: int = 0) -> list[tuple[Sample, Score]]:
    """Samples as the scorer sees them, each with its rule check (passing: the answers look fine)."""
    out = []
    for i in range(start, start + n):
        at = NOW + timedelta(seconds=i)
        s = chat_sample(
            id=f"{version}-{i}",
            timestamp=at,
            model_version=version,
            usage={"input_tokens": 30, "output_tokens": int(rng.integers(80, 120))},
        )
        out.append((s, Score(sample_id=s.id, check="refusal", kind="refusal", result="pass", sample_timestamp=at)))
    return out


def verdicts(rng: np.random.Generator, samples: list[Sample], disagree: float) -> list[Score]:
    """The probe's verdicts on these samples, as its child sends them (verdict_score's shape)."""
    out = []
    for s in samples:
        unstable = rng.random() < disagree
        out.append(
            Score(
                sample_id=s.id,
                check="consistency",
                kind="consistency",
                result="fail" if unstable else "pass",
                value=0.2 if unstable else 0.95,
                details={"method": "lexical", "confident_unstable": unstable},
                model_version=s.model_version,
                sample_timestamp=s.timestamp,
            )
        )
    return out


def baseline(rng: np.random.Generator, *, with_probe: bool):
    items = calls(rng, 400, "A")
    samples = [s for s, _ in items]
    scores = [sc for _, sc in items] + (verdicts(rng, samples, 0.02) if with_probe else [])
    return freeze(samples, scores, None, model_version="A")


def feed(windows: DriftWindows, rng: np.random.Generator, version: str, disagree: float) -> None:
    items = calls(rng, 400, version)
    samples = [s for s, _ in items]
    late = verdicts(rng, samples, disagree)
    # A re-ask can be compared before the scorer's batch arrives: the first 50 verdicts come first.
    windows.join(late[:50])
    windows.add(samples, [sc for _, sc in items], {})
    windows.join(late[50:])


def detected(windows: DriftWindows, version: str) -> dict[str, bool]:
    return {r.signal: r.detected for r in windows.evaluate() if r.model_version == version}


def test_a_version_that_no_longer_stands_by_its_answers_drifts_on_the_consistency_signal() -> None:
    rng = np.random.default_rng(7)
    windows = DriftWindows(baseline(rng, with_probe=True), window=1000, interval_s=30, settings=DriftSettings())
    feed(windows, rng, "B", disagree=0.35)
    feed(windows, rng, "C", disagree=0.02)
    b, c = detected(windows, "B"), detected(windows, "C")
    assert b["pass_rate:consistency"] is True
    assert c["pass_rate:consistency"] is False
    # The joined verdicts are the samples' own scores: the failure mode follows them.
    assert b["failure_modes"] is True and c["failure_modes"] is False
    assert b["pass_rate:refusal"] is False


def test_a_baseline_frozen_without_the_probe_does_not_test_it() -> None:
    rng = np.random.default_rng(8)
    windows = DriftWindows(baseline(rng, with_probe=False), window=1000, interval_s=30, settings=DriftSettings())
    feed(windows, rng, "B", disagree=0.35)
    b = detected(windows, "B")
    assert "pass_rate:consistency" not in b and "score:consistency" not in b
    assert b["pass_rate:refusal"] is False


def test_verdicts_whose_sample_never_comes_wait_in_a_bounded_buffer() -> None:
    rng = np.random.default_rng(9)
    windows = DriftWindows(None, window=100, interval_s=30, settings=DriftSettings())
    never = [s for s, _ in calls(rng, MAX_WAITING_SCORES + 5, "B")]
    windows.join(verdicts(rng, never, 0.5))
    # The five oldest are forgotten, the newest still joins when its sample arrives.
    last, _ = calls(rng, 1, "B", start=MAX_WAITING_SCORES + 4)[0]
    first, _ = calls(rng, 1, "B", start=0)[0]
    windows.add([first, last], [], {})
    _, scores = windows.contents()
    assert [s.sample_id for s in scores] == [last.id]


def test_late_scores_are_not_queued_for_a_scorer_at_its_bound_of_pending_samples() -> None:
    """The proxy's process hands verdicts to the scorer child on its event loop; while the child is
    so far behind that samples are dropped, verdicts are dropped too (counted), not buffered without end."""
    from llmwatch.agent.processes.scoring import JoinScores, ScorerProcess

    class Inbox:
        def __init__(self) -> None:
            self.put_items: list[object] = []

        def put(self, item: object) -> None:
            self.put_items.append(item)

    scorer = ScorerProcess({}, lambda *a: None, max_pending=4, batch_timeout_s=30)
    inbox = scorer._inbox = Inbox()
    line = Score(sample_id="s1", check="consistency", kind="consistency", result="pass", sample_timestamp=NOW).to_json()

    scorer._pending = 3
    scorer.join_scores([line])
    assert [type(m) for m in inbox.put_items] == [JoinScores] and scorer.late_scores_dropped == 0

    scorer._pending = 4  # what `submit` refuses more samples at
    scorer.join_scores([line, line])
    assert len(inbox.put_items) == 1 and scorer.late_scores_dropped == 2
