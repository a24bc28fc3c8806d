"""The embedding model in plain torch (scorers/llmwatch/scorers/checks/minilm.py) gives sentence-transformers' vectors,
loads without importing sentence-transformers or transformers, and the offline commands embed
a text shared by many samples once per run and use every CPU they are allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from llmwatch.core.records import Sample
from llmwatch.scorers.checks import embeddings, minilm
from llmwatch.scorers.checks.config import ScoringSection
from llmwatch.scorers.checks.embeddings import Embedder, EmbeddingScorer, model_dir
from llmwatch.scorers.checks.offline import offline_scoring

pytestmark = pytest.mark.skipif(embeddings._packaged_model_path() is None, reason="needs the packaged embedding model")

# Short and long (past the model's 256 word pieces), CJK, accents, code, emoji, stray whitespace
# and a one-character text: every tokeniser path the vectors depend on.
TEXTS = [
    "For a runny yolk, cook the egg for about six minutes, then move it into ice water.",
    "How do I find duplicate email addresses in PostgreSQL?",
    "   leading and trailing whitespace\n\t ",
    "日本の首都はどこですか？東京です。人口は約千四百万人です。",
    "La mejor época para visitar Japón es la primavera, con los cerezos en flor — “sakura”.",
    "SELECT customer_id, SUM(amount) FROM orders GROUP BY customer_id ORDER BY 2 DESC LIMIT 5;",
    "Great news 🎉🚀 the deploy went through!",
    "x",
    "The retry budget is spent once the queue is full. " * 60,
]


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(threads=2)


def test_plain_torch_vectors_equal_sentence_transformers_vectors(embedder: Embedder) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(model_dir(), device="cpu", local_files_only=True)
    expected = unit(reference.encode(TEXTS, batch_size=len(TEXTS), convert_to_numpy=True))
    ours = embedder.encode(TEXTS)
    assert embedder.runtime == "torch"
    assert np.einsum("ij,ij->i", ours, expected).min() >= 0.99999
    assert np.abs(ours - expected).max() < 1e-4


def test_the_model_loads_without_sentence_transformers_or_transformers() -> None:
    code = (
        "import sys\n"
        "from llmwatch.scorers.checks.embeddings import Embedder\n"
        "e = Embedder(threads=1)\n"
        "assert e.encode(['hello world']).shape == (1, 384)\n"
        "print(e.runtime, sorted(m for m in ('sentence_transformers', 'transformers', 'sklearn') if m in sys.modules))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "torch []"


def _copy_of_the_model(tmp_path: Path) -> Path:
    source = Path(model_dir())
    target = tmp_path / "model"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("model.safetensors", "*.bin"))
    (target / "model.safetensors").symlink_to(source / "model.safetensors")
    return target


@pytest.mark.parametrize(
    ("file", "change"),
    [
        ("1_Pooling/config.json", {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}),
        ("config.json", {"model_type": "roberta"}),
        ("config.json", {"position_embedding_type": "relative_key"}),
    ],
)
def test_a_model_of_another_layout_is_left_to_sentence_transformers(tmp_path: Path, file: str, change: dict) -> None:
    path = _copy_of_the_model(tmp_path)
    settings = json.loads((path / file).read_text())
    (path / file).write_text(json.dumps({**settings, **change}))
    assert minilm.load(str(path)) is None
    assert minilm.load(str(_copy_of_the_model(tmp_path / "unchanged"))) is not None


def _sample(i: int, prompt: str) -> Sample:
    return Sample(
        id=f"s{i}",
        timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc),
        route="/v1/chat/completions",
        operation="chat",
        model="m",
        status=200,
        latency_ms=100.0,
        request={"model": "m", "messages": [{"role": "user", "content": prompt}]},
        response={
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"Answer number {i} about {prompt.split()[-1]}"},
                    "finish_reason": "stop",
                }
            ]
        },
    )


class Counting:
    """The real embedder, counting the texts it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts: list[str] = []
        self.dimension = inner.dimension

    def encode(self, texts, batch_size=32):
        self.texts += list(texts)
        return self.inner.encode(texts, batch_size=batch_size)


def test_a_prompt_shared_across_batches_is_embedded_once_with_the_same_verdicts(embedder: Embedder) -> None:
    prompts = ["Summarise the incident report for the on-call channel.", "Translate the release notes into French."]
    samples = [_sample(i, prompts[i % 2]) for i in range(12)]
    counting = Counting(embedder)
    scorer = EmbeddingScorer([("relevance", "embedding_relevance", None)], embedder=counting)  # type: ignore[arg-type]
    rows = [row for start in range(0, 12, 3) for row in scorer.score_batch(samples[start : start + 3])]
    assert sorted(counting.texts.count(p) for p in prompts) == [1, 1]
    assert len(counting.texts) == 12 + 2
    fresh = EmbeddingScorer([("relevance", "embedding_relevance", None)], embedder=embedder).score_batch(samples)
    for (_, _, memo), (_, _, whole) in zip((r[0] for r in rows), (r[0] for r in fresh)):
        assert memo.result == whole.result and abs(memo.value - whole.value) < 1e-5


def test_offline_commands_use_every_allowed_cpu_unless_threads_are_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert offline_scoring(ScoringSection(torch_threads=1)).torch_threads == 1
    assert "OMP_WAIT_POLICY" not in os.environ
    assert offline_scoring(ScoringSection()).torch_threads == len(os.sched_getaffinity(0))
    # Several threads wait passively (no core burnt spinning on a shared machine), unless the user chose.
    assert offline_scoring(ScoringSection(torch_threads=2)).torch_threads == 2
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    offline_scoring(ScoringSection(torch_threads=2))
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    # The sidecar's own default is untouched: one thread, the other cores left to traffic.
    assert ScoringSection().torch_threads == 1


def _score_log(tmp_path: Path, prefix: list[str], name: str) -> dict:
    """The `embedding_model_loaded` event of one `llmwatch score` run (JSON logs: not a terminal)."""
    src = tmp_path / f"{name}.jsonl"
    src.write_bytes(b"".join(_sample(i, "Summarise the incident report.").to_json() + b"\n" for i in range(3)))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LLMWATCH_LOGGING__LEVEL": "info",
    }
    cmd = [
        *prefix,
        sys.executable,
        "-m",
        "llmwatch.agent.cli",
        "score",
        "--in",
        str(src),
        "--out",
        str(tmp_path / f"{name}-scores.jsonl"),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    (line,) = [ln for ln in (result.stdout + result.stderr).splitlines() if "embedding_model_loaded" in ln]
    return json.loads(line)


@pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2, reason="needs taskset and two CPUs"
)
def test_score_runs_the_model_on_every_cpu_it_may_use_and_no_more(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    unpinned = _score_log(tmp_path, [], "all")
    assert (unpinned["threads"], unpinned["runtime"]) == (len(allowed), "torch")
    pinned = _score_log(tmp_path, ["taskset", "-c", str(allowed[0])], "one")
    assert pinned["threads"] == 1
