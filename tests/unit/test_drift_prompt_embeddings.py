"""Drift with prompt embeddings: comparable inputs found by meaning, not by spelling.

Untagged traffic (no category header), so the strata are prompt clusters. The synthetic prompts
carry prompt vectors made for the test: a few topics, and inside each topic a direction that
says how long an answer the question needs - so a shift of topics, even inside one cluster,
moves answer length without any change of the model. One test uses the real embedding model,
because matching rewordings is what the model, not the statistics, has to get right.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from helpers.samples import refusal_scored

from llmwatch.scorers.checks import embeddings as embeddings_module
from llmwatch.scorers.drift.baseline import freeze
from llmwatch.scorers.drift.compare import DriftSettings, compare
from llmwatch.scorers.drift.families import PromptVectors, semantic_prompt_clusters
from llmwatch.scorers.drift.features import summarize

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
DIM = 48
_rng = np.random.default_rng(7)
TOPICS = {t: v / np.linalg.norm(v) for t, v in zip(("code", "travel", "health"), _rng.normal(size=(3, DIM)))}
# Inside a topic, how much a question asks for (a longer or a shorter answer).
DEPTH = _rng.normal(size=DIM)
DEPTH /= np.linalg.norm(DEPTH)
ANSWER_TOKENS = {"code": 300.0, "travel": 120.0, "health": 200.0}


def topic_traffic(
    rng,
    n: int,
    mix: dict,
    *,
    depth_mean: float = 0.0,
    version: str = "A",
    prefix: str = "b",
    longer: dict | None = None,
):
    """`n` untagged samples, each its own prompt; answer length follows the topic and the question's depth."""
    samples, scores, prompts = [], [], {}
    topics = rng.choice(list(mix), size=n, p=np.array(list(mix.values())) / sum(mix.values()))
    for i, topic in enumerate(topics):
        depth = rng.normal(depth_mean, 1.0)
        vec = TOPICS[topic] + 0.25 * depth * DEPTH + rng.normal(scale=0.12, size=DIM)
        tokens = ANSWER_TOKENS[topic] * np.exp(0.35 * depth + rng.normal(0, 0.25)) * (longer or {}).get(topic, 1.0)
        prompt, relevant = f"{topic} question {prefix} {i}", rng.random() > 0.05
        s, score = refusal_scored(f"{prefix}-{i}", T0 + timedelta(seconds=i), prompt, int(tokens), version, relevant)
        samples.append(s)
        scores.append(score)
        prompts[s.id] = (vec / np.linalg.norm(vec)).astype(np.float32)
    return samples, scores, prompts


def run(rng, base_mix, cur_mix, *, n=1200, depth_shift=0.0, longer=None, with_prompts=True):
    bs, bsc, bp = topic_traffic(rng, n, base_mix)
    cs, csc, cp = topic_traffic(rng, n, cur_mix, depth_mean=depth_shift, version="B", prefix="c", longer=longer)
    baseline = freeze(bs, bsc, None, model_version="A", prompt_embeddings=bp if with_prompts else None)
    report = compare(
        baseline.routes,
        summarize(cs, csc, None, prompt_embeddings=cp if with_prompts else None),
        baseline_version="A",
        current_versions=["B"],
        settings=DriftSettings(),
    )
    return baseline, report


def verdicts(r) -> dict[str, str]:
    return {f: info["verdict"] for f, info in r.families.items()}


def signal(r, name):
    return next(s for s in r.signals if s.name == name)


MIX = {"code": 0.5, "travel": 0.3, "health": 0.2}
SHIFTED = {"code": 0.15, "travel": 0.35, "health": 0.5}


def test_a_pure_topic_shift_reads_as_inputs_shifted_and_never_as_behaviour_drift():
    rng = np.random.default_rng(1)
    _, r = run(rng, MIX, SHIFTED, depth_shift=0.8)
    assert r.families["inputs"]["verdict"] == "shifted"
    assert signal(r, "input:prompt_embedding").verdict == "shifted"
    assert r.families["behaviour"]["prompt_space"].startswith("prompt embeddings")
    # The questions moved inside the clusters too: answers are longer without any model change.
    # Compared only where inputs are comparable (here: nowhere, no prompt repeats), not as drift.
    assert r.families["behaviour"]["verdict"] != "drift", r.families["behaviour"]
    assert r.families["behaviour"]["prompts_within_strata"]["shifted"]
    assert r.exit_code != 1


def test_without_prompt_embeddings_the_same_shift_falls_back_to_hashed_words():
    # Without embeddings the rows carry hashed-words vectors (tests/integration/test_drift_prompt_words.py).
    rng = np.random.default_rng(1)
    _, r = run(rng, MIX, SHIFTED, depth_shift=0.8, with_prompts=False)
    assert r.families["behaviour"]["prompt_space"].startswith("hashed words")
    assert "input:prompt_embedding" not in {s.name for s in r.signals}
    assert "input:prompt_words" in {s.name for s in r.signals}


def test_a_behaviour_change_inside_one_cluster_fires_and_names_that_cluster():
    rng = np.random.default_rng(2)
    baseline, r = run(rng, MIX, MIX, longer={"health": 1.6})
    assert r.exit_code == 1
    out = signal(r, "output_tokens")
    assert out.verdict == "drift" and out.effect_size > 0
    # The named stratum is the cluster the health questions fall in.
    rows = baseline.routes["/v1/chat/completions"].rows
    label = semantic_prompt_clusters(rows, PromptVectors(rows))
    vectors = PromptVectors(rows)
    health = {label(row) for row in rows if float(vectors.of(row) @ TOPICS["health"]) > 0.6}
    assert out.stratum in health and len(health) == 1
    assert r.families["inputs"]["verdict"] == "stable"


def test_the_same_traffic_twice_is_stable_in_every_family():
    rng = np.random.default_rng(3)
    _, r = run(rng, MIX, MIX)
    assert verdicts(r)["inputs"] == "stable" and verdicts(r)["behaviour"] == "stable", verdicts(r)
    assert r.exit_code == 0


@pytest.mark.skipif(embeddings_module._packaged_model_path() is None, reason="needs the packaged embedding model")
def test_reworded_prompts_are_matched_to_the_baseline_s_and_compared_pair_by_pair():
    # 40 questions that differ by one key word (cosine 0.83 at most between them) and, on the
    # current side, the same questions reworded ("How can I ..." / lower case, "please"),
    # cosine 0.99 with their original: matched, not confused with a neighbour.
    qs = [
        f"How do I {v} a {n} in {lang}?"
        for v, n, lang in itertools.product(
            ["sort", "reverse", "copy", "shuffle", "filter"],
            ["list", "dictionary", "string", "file"],
            ["Python", "Java"],
        )
    ]
    reworded = [
        q.replace("How do I", "How can I") if i % 2 else q.lower().rstrip("?") + " please" for i, q in enumerate(qs)
    ]
    model = embeddings_module.Embedder(threads=1)
    rng = np.random.default_rng(4)
    length = {q: float(rng.lognormal(np.log(200), 0.8)) for q in qs}

    def window(prompts, factor, version, prefix):
        samples, scores = [], []
        for i, (q, p) in enumerate(zip(qs, prompts)):
            tokens = int(length[q] * factor * rng.lognormal(0, 0.05))
            s, score = refusal_scored(f"{prefix}-{i}", T0 + timedelta(seconds=i), p, tokens, version, True)
            samples.append(s)
            scores.append(score)
        return samples, scores, {s.id: v for s, v in zip(samples, model.encode(prompts))}

    bs, bsc, bp = window(qs, 1.0, "A", "b")
    baseline = freeze(bs, bsc, None, model_version="A", prompt_embeddings=bp)
    for factor, expected in ((1.0, 0), (1.3, 1)):
        cs, csc, cp = window(reworded, factor, "B", f"c{factor}")
        r = compare(
            baseline.routes,
            summarize(cs, csc, None, prompt_embeddings=cp),
            baseline_version="A",
            current_versions=["B"],
            settings=DriftSettings(),
        )
        b = r.families["behaviour"]
        assert b["exact_match_fraction"] == 0.0 and b["near_duplicate_fraction"] == 1.0
        assert b["comparison"] == "matched prompts"
        # 40 pairs: answer length per question varies eightfold, so only the paired test sees 30 %.
        assert r.exit_code == expected, (factor, b, [(s.name, s.p_adjusted) for s in r.signals])
        assert signal(r, "output_tokens").n_effective == 40
    # A threshold above what rewording reaches: nothing is matched.
    r = compare(
        baseline.routes,
        summarize(cs, csc, None, prompt_embeddings=cp),
        baseline_version="A",
        current_versions=["B"],
        settings=DriftSettings(near_duplicate_cosine=0.999),
    )
    assert r.families["behaviour"]["near_duplicate_fraction"] == 0.0
