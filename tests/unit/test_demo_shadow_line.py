"""The demo's shadow line says which versions the candidate was paired with.

The candidate serves B throughout; in the demo's B phase the primary serves B as well, so a part
of the pairs compares B with itself. The summary said "194 pairs with the primary; WORSE on ..."
as though all of them were B against A (62 were B against B).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from llmwatch.agent.apps.demo import shadow_summary
from llmwatch.agent.components import load_config
from llmwatch.core.pairs import Pair, PairScore
from llmwatch.core.records import Sample


def pair(i: int, primary_version: str) -> Pair:
    def sample(version: str, ok: bool) -> Sample:
        return Sample(
            id=f"{version}{i}",
            timestamp=1_700_000_000 + i,
            model="sim-gpt-4o",
            model_version=version,
            status=200,
            latency_ms=100.0,
            request={"messages": []},
            response={"choices": [{"message": {"content": "ok" if ok else ""}}]},
            cost_usd=0.001,
        )

    refused = i % 8 == 0
    return Pair(
        id=f"p{i}",
        candidate="candidate-B",
        timestamp=1_700_000_000 + i,
        route="/v1/chat/completions",
        primary=sample(primary_version, True),
        shadow=sample("B", not refused),
        primary_scores=[PairScore(check="refusal", result="pass")],
        shadow_scores=[PairScore(check="refusal", result="fail" if refused else "pass")],
    )


def test_the_shadow_line_names_the_pairs_against_each_primary_version(tmp_path: Path):
    (tmp_path / "pairs").mkdir()
    pairs = [pair(i, "A" if i < 132 else "B") for i in range(194)]
    (tmp_path / "pairs" / "pairs-20261205-0000.jsonl").write_bytes(b"".join(p.to_json() + b"\n" for p in pairs))
    agent = SimpleNamespace(cfg=load_config(None).model_copy(update={"data_dir": tmp_path}), shadow=object())
    line = shadow_summary(agent).splitlines()[0]  # type: ignore[arg-type]
    assert "candidate candidate-B: 194 pairs with the primary (132 against A, 62 against B itself);" in line
