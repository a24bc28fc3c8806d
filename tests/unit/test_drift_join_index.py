"""`DriftWindows.join` finds a late score's sample through each window's index of sample ids; it
scanned the window from its newest end (80-290 us a score in a 2,000-sample window). The index must
find what the scan found: the same windows and the same waiting scores, over generated runs of
samples arriving (ids repeated, windows overflowing, windows restarted by a new served version)
and late scores joining them, before or after their sample."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

from helpers.samples import NOW, chat_sample
from hypothesis import given, settings
from hypothesis import strategies as st

from llmwatch.core.scores import Score
from llmwatch.scorers.drift import online
from llmwatch.scorers.drift.compare import DriftSettings
from llmwatch.scorers.drift.online import DriftWindows

IDS = [f"s{i}" for i in range(6)]
VERSIONS = ["A", "B", None]  # None: the window "unknown"


def linear_join(windows: DriftWindows, scores: list[Score]) -> None:
    """The join as it was (online.py before the index), kept as the reference."""
    for score in scores:
        win = windows._windows.get(score.model_version or "unknown")
        item = next((i for i in reversed(win) if i[0].id == score.sample_id), None) if win else None
        if item is not None:
            kept = [s for s in item[1] if s.check != score.check]
            item[1][:] = [*kept, score]
            continue
        windows._waiting.setdefault(score.sample_id, []).append(score)
        windows._waiting.move_to_end(score.sample_id)
        while len(windows._waiting) > online.MAX_WAITING_SCORES:
            windows._waiting.popitem(last=False)


def sample(sid: str, version: str | None, served: str | None, n: int):
    response = {"model": served, "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}
    return chat_sample(
        id=sid,
        timestamp=NOW + timedelta(seconds=n),
        model_version=version,
        response_model=served,
        response=response if served else {},
    )


def score(sid: str, version: str | None, check: str, value: float) -> Score:
    return Score(
        sample_id=sid,
        check=check,
        kind="consistency",
        result="pass",
        value=value,
        model_version=version,
        sample_timestamp=NOW,
    )


scores = st.lists(
    st.builds(score, st.sampled_from(IDS), st.sampled_from(VERSIONS), st.sampled_from(["c1", "c2"]), st.floats(0, 1)),
    max_size=6,
)
arrivals = st.lists(
    st.tuples(st.sampled_from(IDS), st.sampled_from(VERSIONS), st.sampled_from(["m1", "m2", None])),
    min_size=1,
    max_size=6,
)
steps = st.lists(
    st.one_of(st.tuples(st.just("add"), arrivals, scores), st.tuples(st.just("join"), scores)), max_size=12
)


def state(windows: DriftWindows) -> tuple:
    def of(items: list[Score]) -> list[tuple]:
        return [(s.sample_id, s.check, s.value) for s in items]

    return (
        {v: [(i[0].id, of(i[1])) for i in win] for v, win in windows._windows.items()},
        [(sid, of(waiting)) for sid, waiting in windows._waiting.items()],
        windows.restarts,
    )


@settings(max_examples=300, deadline=None)
@given(window=st.integers(1, 4), waiting=st.integers(1, 5), run=steps)
def test_the_index_finds_what_the_scan_found(window: int, waiting: int, run: list[tuple]) -> None:
    # remember_s=0: every change of served model restarts its window (until it counts as flapping).
    indexed, scanned = (
        DriftWindows(None, window=window, interval_s=60, settings=DriftSettings(), remember_s=0.0) for _ in range(2)
    )
    with mock.patch.object(online, "MAX_WAITING_SCORES", waiting):
        for n, step in enumerate(run):
            if step[0] == "add":
                batch = [sample(sid, version, served, n) for sid, version, served in step[1]]
                for w in (indexed, scanned):
                    w.add(batch, [sc for sc in step[2] if sc.sample_id in {s.id for s in batch}], {})
            else:
                indexed.join(step[1])
                linear_join(scanned, step[1])
            assert state(indexed) == state(scanned)
