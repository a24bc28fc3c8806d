"""`suite build --consistency` reads the probe's pairs one at a time (issue 29).

Each pair holds two whole Samples (the first answer and the re-ask); the list of them was the
one part of `suite build` that still held whole records. `probe_verdicts` keeps, per pair, the
`consistency` verdict and the re-ask's answer text: the same scores and re-asks as before, in
a fraction of the memory.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from helpers.memory import peak_bytes
from helpers.samples import NOW, chat_sample

from llmwatch.core.jsonio import read_records
from llmwatch.core.pairs import Pair, PairScore
from llmwatch.scorers.evaluation.consistency import CONSISTENCY_CANDIDATE, consistency_scores, probe_verdicts

# A Pair (two Samples with their request and response bodies) costs tens of KB as Python
# objects; a verdict Score and the re-ask's text a few KB.
MAX_BYTES_PER_PAIR = 6_000


WORDS = ("rivers", "bridges", "owls", "compilers", "glaciers", "violins", "ledgers", "tides")


def write_pairs(path: Path, n: int) -> None:
    """`n` probe pairs: agreeing, disagreeing and sure-but-unstable re-asks, one id re-asked twice, a shadow pair."""
    with open(path, "wb") as out:
        for i in range(n):
            sid = "s0" if i == n - 1 else f"s{i}"  # the last pair re-asks s0 again
            first = chat_sample(
                f"The answer to question {i % 40} is {i % 7}. " + "It is certainly so. " * (i % 5),
                prompt=f"What do {WORDS[i % 40 % 8]} and {WORDS[i % 40 // 8]} have in common? Explain briefly.",
                id=sid,
                timestamp=NOW + timedelta(seconds=i),
                model_version="AB"[i % 2],
            )
            again = first.model_copy(
                update={
                    "id": f"re-{i}",
                    "response": {
                        "choices": [
                            {
                                "message": {"role": "assistant", "content": f"The answer is {(i * 3) % 7}."},
                                "finish_reason": "stop",
                            }
                        ]
                    },
                }
            )
            pair = Pair(
                id=f"pair-{i}",
                candidate="shadow-b" if i % 11 == 0 else CONSISTENCY_CANDIDATE,
                timestamp=first.timestamp,
                route=first.route,
                primary=first,
                shadow=again,
                primary_scores=[PairScore(check="refusal", kind="refusal", result="pass", value=1.0)],
            )
            out.write(pair.model_dump_json(by_alias=True).encode() + b"\n")


def listed(path: Path):
    """What `suite build --consistency` did before: the probe's pairs in a list."""
    pairs = [p for p in read_records(path, Pair, prefix="pairs") if p.candidate == CONSISTENCY_CANDIDATE]
    return consistency_scores(pairs), {p.primary.id: p.shadow.answer_text() for p in pairs}


def test_the_verdicts_and_re_asks_are_those_of_the_list(tmp_path: Path) -> None:
    write_pairs(tmp_path / "pairs.jsonl", 300)
    scores, re_asks = probe_verdicts(read_records(tmp_path / "pairs.jsonl", Pair, prefix="pairs"))
    old_scores, old_re_asks = listed(tmp_path / "pairs.jsonl")
    # The same verdicts (`scored_at` is the time of the reading).
    assert [s.model_dump(exclude={"scored_at"}) for s in scores] == [
        s.model_dump(exclude={"scored_at"}) for s in old_scores
    ]
    assert list(re_asks.items()) == list(old_re_asks.items())
    assert {s.result for s in scores} == {"pass", "fail"}
    assert re_asks["s0"] == f"The answer is {(299 * 3) % 7}."  # re-asked twice: the last re-ask, as the dict kept


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    out = {}
    for n in (500, 1500):
        out[n] = tmp_path_factory.mktemp(f"n{n}") / "pairs.jsonl"
        write_pairs(out[n], n)
    return out


def per_extra_pair(files: dict[int, Path], run) -> float:
    run(files[500])
    peaks = {n: peak_bytes(lambda p=p: run(p)) for n, p in files.items()}
    return (peaks[1500] - peaks[500]) / 1000


def test_reading_the_probe_grows_by_a_verdict_and_a_text_per_pair(files) -> None:
    per_pair = per_extra_pair(files, lambda p: probe_verdicts(read_records(p, Pair, prefix="pairs")))
    assert per_pair < MAX_BYTES_PER_PAIR, f"{per_pair:,.0f} bytes of Python allocations per extra pair"


def test_the_bound_catches_the_list_of_pairs(files) -> None:
    per_pair = per_extra_pair(files, listed)
    assert per_pair > MAX_BYTES_PER_PAIR, f"{per_pair:,.0f} bytes per extra pair"
