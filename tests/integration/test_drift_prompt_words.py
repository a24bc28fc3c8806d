"""Drift without the embedding model: prompts compared as hashed bags of words.

With embeddings off (or the slim install without the [embeddings] extra) every row carries a
hashed-words vector of its prompt instead of a MiniLM one, and the same prompt-space machinery
runs on it: the `input:prompt_words` classifier signal, clusters, near-verbatim matching and the
"unmatched prompts differ within strata" gate. The traffic here is untagged and written in words:
a few topics with their own vocabulary, and inside each topic words that ask for a short or a long
answer - so a change of what users ask moves answer length without any change of the model.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import numpy as np
from helpers.samples import refusal_scored

from llmwatch.scorers.drift.baseline import freeze
from llmwatch.scorers.drift.compare import DriftSettings, compare
from llmwatch.scorers.drift.features import summarize
from llmwatch.scorers.drift.rows import HASHED_WORDS, MINILM, hashed_words_vector

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
ROUTE = "/v1/chat/completions"
VOCAB = {
    "code": "python function list sort loop class variable compile error bug test string array".split(),
    "travel": "flight hotel visa beach train city museum passport luggage airport tour island".split(),
    "health": "sleep diet vitamin exercise headache doctor fever muscle heart stress water calories".split(),
}
ANSWER_TOKENS = {"code": 300.0, "travel": 120.0, "health": 200.0}
SHORT, LONG = "briefly in one line".split(), "step by step in detail with examples".split()


def prompt_of(rng, topic: str, long_answer: bool) -> str:
    words = list(rng.choice(VOCAB[topic], size=6, replace=False))
    asks = LONG if long_answer else SHORT
    return f"{' '.join(words)} {' '.join(asks)} {rng.integers(10**9)}"


def traffic(
    rng,
    n: int,
    mix: dict,
    *,
    long_share: float = 0.3,
    version: str = "A",
    prefix: str = "b",
    longer: float = 1.0,
    prompts: list[str] | None = None,
):
    """`n` untagged samples; answer length follows the topic and whether the prompt asks for detail."""
    samples, scores, texts = [], [], []
    topics = rng.choice(list(mix), size=n, p=np.array(list(mix.values())) / sum(mix.values()))
    for i, topic in enumerate(topics):
        text = prompts[i] if prompts is not None else prompt_of(rng, topic, rng.random() < long_share)
        topic = next(t for t in VOCAB if any(w in text.split() for w in VOCAB[t]))
        tokens = ANSWER_TOKENS[topic] * (2.0 if LONG[0] in text.split() else 1.0) * np.exp(rng.normal(0, 0.25)) * longer
        ok = bool(rng.random() > 0.05)
        s, score = refusal_scored(f"{prefix}-{i}", T0 + timedelta(seconds=i), text, int(tokens), version, ok)
        scores.append(score)
        samples.append(s)
        texts.append(text)
    return samples, scores, texts


MIX = {"code": 0.5, "travel": 0.3, "health": 0.2}
SHIFTED = {"code": 0.15, "travel": 0.35, "health": 0.5}


def drift(base, cur, base_prompts=None):
    baseline = freeze(base[0], base[1], None, model_version="A", prompt_embeddings=base_prompts)
    report = compare(
        baseline.routes,
        summarize(cur[0], cur[1], None),
        baseline_version="A",
        current_versions=["B"],
        settings=DriftSettings(),
    )
    return baseline, report


def signal(r, name):
    return next(s for s in r.signals if s.name == name)


def test_without_embeddings_a_pure_topic_shift_reads_as_inputs_shifted_not_behaviour_drift():
    rng = np.random.default_rng(1)
    # Current users ask other topics, and more of them ask for detail: longer answers, same model.
    baseline, r = drift(traffic(rng, 1200, MIX), traffic(rng, 1200, SHIFTED, long_share=0.6, version="B", prefix="c"))
    assert {row.prompt_space for row in baseline.routes[ROUTE].rows} == {HASHED_WORDS}
    assert r.families["behaviour"]["prompt_space"].startswith("hashed words")
    assert r.families["inputs"]["verdict"] == "shifted"
    assert signal(r, "input:prompt_words").verdict == "shifted"
    assert "input:prompt_embedding" not in {s.name for s in r.signals}
    # Longer answers, but to prompts that ask for detail: compared like with like (clusters of
    # hashed words, or matched prompts only when prompts differ within them), not as drift.
    assert r.families["behaviour"]["verdict"] != "drift", r.families["behaviour"]
    assert signal(r, "output_tokens").verdict != "drift"
    assert r.exit_code != 1


def test_without_embeddings_the_same_traffic_twice_is_stable():
    rng = np.random.default_rng(3)
    _, r = drift(traffic(rng, 1200, MIX), traffic(rng, 1200, MIX, version="B", prefix="c"))
    assert {f: i["verdict"] for f, i in r.families.items()} == {
        "inputs": "stable",
        "behaviour": "stable",
        "performance": "stable",
    }
    assert r.exit_code == 0


def test_without_embeddings_longer_answers_to_the_same_prompts_are_drift():
    rng = np.random.default_rng(4)
    base = traffic(rng, 800, MIX)
    _, r = drift(base, traffic(rng, 800, MIX, version="B", prefix="c", longer=1.3, prompts=base[2]))
    assert r.families["behaviour"]["verdict"] == "drift"
    assert signal(r, "output_tokens").verdict == "drift" and signal(r, "output_tokens").effect_size > 0
    assert r.families["inputs"]["verdict"] == "stable"
    assert r.exit_code == 1


def test_a_baseline_with_embeddings_is_not_compared_on_vectors_with_a_window_without():
    rng = np.random.default_rng(5)
    base = traffic(rng, 600, MIX)
    # Vectors standing in for MiniLM's: another space than the window's hashed words.
    vecs = {s.id: (v := rng.normal(size=48)) / np.linalg.norm(v) for s in base[0]}
    baseline, r = drift(base, traffic(rng, 600, MIX, version="B", prefix="c"), base_prompts=vecs)
    assert {row.prompt_space for row in baseline.routes[ROUTE].rows} == {MINILM}
    space = r.families["behaviour"]["prompt_space"]
    assert space.startswith("lexical") and "minilm" in space and "hashed-words" in space
    assert not {"input:prompt_embedding", "input:prompt_words"} & {s.name for s in r.signals}


def test_hashed_word_vectors_are_the_same_in_another_process():
    """Python's hash() is salted per process; the baseline's vectors must equal a later run's."""
    text = "How do I sort a list in Python?  Step by step, please."
    here = hashed_words_vector(text)
    code = "import sys; from llmwatch.scorers.drift.rows import hashed_words_vector as h; sys.stdout.write(h(sys.argv[1]).tobytes().hex())"
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code, text],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        )
        assert np.array_equal(np.frombuffer(bytes.fromhex(out.stdout), dtype=here.dtype), here)
    assert abs(float(np.linalg.norm(here)) - 1.0) < 1e-9
    # Rewordings share words; a question about something else shares none.
    assert float(here @ hashed_words_vector("how do i sort a list in python")) > 0.6
    assert abs(float(here @ hashed_words_vector("Recommend a beach hotel on a Greek island"))) < 0.2
