"""Synthetic windows of scored traffic with known behaviour, for drift power and false-alarm studies.

`window(rng, n, Behaviour(...))` returns (samples, scores, embeddings) as the sidecar would have
produced them for one model version: pass/fail checks with given rates, answer lengths, latency
and TTFT from lognormal distributions, and answer embeddings clustered around topic centroids.
A `Behaviour` changes one knob at a time to model a realistic degradation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import numpy as np

from llmwatch.core.records import Sample, Usage
from llmwatch.core.scores import Score

DIM = 384
_TOPICS = np.random.default_rng(12345).normal(size=(12, DIM))
_TOPICS /= np.linalg.norm(_TOPICS, axis=1, keepdims=True)
_OFF_TOPIC = np.random.default_rng(999).normal(size=(4, DIM))
_OFF_TOPIC /= np.linalg.norm(_OFF_TOPIC, axis=1, keepdims=True)
T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Behaviour:
    json_valid: float = 0.97
    refusal: float = 0.02
    truncated: float = 0.02
    error: float = 0.01
    answer_tokens: float = 180.0  # median output tokens
    latency_ms: float = 1200.0  # median
    ttft_ms: float = 150.0
    off_topic: float = 0.0  # fraction of answers embedded away from their topic
    relevance: float = 0.62  # mean answer relevance similarity


def degradations(base: Behaviour = Behaviour()) -> dict[str, Behaviour]:
    """The drift power table's degradations (docs/benchmarks/drift.md): each a realistic way for a new version to be worse."""
    return {
        "JSON validity -5 points": replace(base, json_valid=base.json_valid - 0.05),
        "answers 30% shorter": replace(base, answer_tokens=base.answer_tokens * 0.7),
        "refusals +10% (relative)": replace(base, refusal=base.refusal * 1.10),
        "refusals +10 points": replace(base, refusal=base.refusal + 0.10),
        "10% of answers off-topic": replace(base, off_topic=0.10, relevance=base.relevance - 0.035),
        "latency +40%": replace(base, latency_ms=base.latency_ms * 1.4, ttft_ms=base.ttft_ms * 1.4),
    }


def window(rng: np.random.Generator, n: int, b: Behaviour, *, version: str = "A", prefix: str = "s"):
    samples: list[Sample] = []
    scores: list[Score] = []
    embeddings: dict[str, np.ndarray] = {}
    topics = rng.integers(0, len(_TOPICS), n)
    for i in range(n):
        sid = f"{prefix}{version}-{i}-{rng.integers(1 << 40)}"
        ts = T0 + timedelta(seconds=i)
        error = rng.random() < b.error
        refused = not error and rng.random() < b.refusal
        truncated = not error and not refused and rng.random() < b.truncated
        tokens = int(max(1, rng.lognormal(np.log(b.answer_tokens), 0.35))) if not refused else int(rng.integers(8, 20))
        latency = float(rng.lognormal(np.log(b.latency_ms), 0.3))
        ttft = float(rng.lognormal(np.log(b.ttft_ms), 0.3))
        sample = Sample(
            id=sid,
            timestamp=ts,
            model="gpt-4o-mini",
            model_version=version,
            status=500 if error else 200,
            error_type="500" if error else None,
            latency_ms=latency,
            ttft_ms=ttft,
            stream=True,
            usage=Usage(input_tokens=40, output_tokens=None if error else tokens),
            finish_reason="length" if truncated else "stop",
            cost_usd=None if error else (40 * 0.15 + tokens * 0.6) / 1e6,
            request={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "q"}]},
            response={},
            operation="chat",
        )
        samples.append(sample)
        if error:
            continue

        # Bound as defaults: the helper belongs to this sample, not to whichever the loop is on.
        def add(
            check: str,
            kind: str,
            ok: bool | None,
            value: float | None = None,
            sid: str = sid,
            sample: Sample = sample,
            ts: datetime = ts,
        ) -> None:
            result = "skip" if ok is None else ("pass" if ok else "fail")
            v = value if value is not None else (None if ok is None else float(ok))
            scores.append(
                Score(
                    sample_id=sid,
                    check=check,
                    kind=kind,
                    result=result,
                    value=v,
                    model=sample.model,
                    model_version=version,
                    route=sample.route,
                    sample_timestamp=ts,
                )
            )

        add("refusal", "refusal", not refused)
        add("not_empty_or_truncated", "not_empty_or_truncated", not truncated)
        json_mode = rng.random() < 0.3
        add("json_valid", "json_valid", (rng.random() < b.json_valid) if json_mode else None)
        off = rng.random() < b.off_topic
        rel = float(np.clip(rng.normal(b.relevance if not off else 0.2, 0.08), 0, 1))
        add("answer_relevance", "embedding_relevance", rel >= 0.3, rel)
        centre = _OFF_TOPIC[rng.integers(0, len(_OFF_TOPIC))] if off else _TOPICS[topics[i]]
        vec = centre + rng.normal(scale=0.06, size=DIM)
        embeddings[sid] = (vec / np.linalg.norm(vec)).astype(np.float32)
    return samples, scores, embeddings
