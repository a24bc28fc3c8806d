"""`llmwatch` with the embedding model replaced by the tests' hash embedder (tests/helpers/fake_embedder.py).

For `bench/offline_scale.py --hash-embedder`: a deterministic unit vector per text instead of the
model's forward pass (15-22 ms a sample on the 2-vCPU machine, five hours a million), so that the
memory and time of everything around the model (the checks, the batches, the embedding cache)
can be measured at a million samples. The vectors mean nothing; never use it for a verdict.

    python bench/hash_embedder_cli.py score --in samples.jsonl --out scores.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.fake_embedder import FakeEmbedder  # noqa: E402

import llmwatch.scorers.checks.embeddings as embeddings  # noqa: E402
from llmwatch.agent.cli.main import main  # noqa: E402

embeddings.Embedder = FakeEmbedder  # type: ignore[misc, assignment]

if __name__ == "__main__":
    raise SystemExit(main())
