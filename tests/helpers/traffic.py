"""Synthetic traffic with known behaviour per category, for the drift-family and canary tests."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import numpy as np

from llmwatch.core.records import Sample, Usage
from llmwatch.core.scores import Score

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


DIM = 32


CENTRES = {
    c: v / np.linalg.norm(v) for c, v in zip(("code", "chat", "legal"), np.random.default_rng(42).normal(size=(3, DIM)))
}


@dataclass(frozen=True)
class Kind:
    """How the model behaves on one category of question."""

    prompt_tokens: float
    answer_tokens: float
    refusal: float
    relevance: float


@dataclass(frozen=True)
class Model:
    kinds: dict
    ms_per_token: float = 15.0
    ttft_base_ms: float = 120.0
    ttft_ms_per_input_token: float = 0.4

    def with_kind(self, category: str, **changes) -> "Model":
        return replace(self, kinds={**self.kinds, category: replace(self.kinds[category], **changes)})


MODEL = Model(
    {
        "code": Kind(prompt_tokens=220, answer_tokens=420, refusal=0.01, relevance=0.72),
        "chat": Kind(prompt_tokens=30, answer_tokens=70, refusal=0.04, relevance=0.55),
        "legal": Kind(prompt_tokens=90, answer_tokens=260, refusal=0.12, relevance=0.62),
    }
)


MIX = {"code": 0.6, "chat": 0.3, "legal": 0.1}


SHIFTED_MIX = {"code": 0.15, "chat": 0.35, "legal": 0.5}


def traffic(
    rng: np.random.Generator,
    n: int,
    model: Model,
    mix: dict,
    *,
    prefix: str,
    version: str = "A",
    prompts_per_category: int = 400,
    tagged: bool = True,
):
    samples, scores, embeddings = [], [], {}
    cats = rng.choice(list(mix), size=n, p=np.array(list(mix.values())) / sum(mix.values()))
    for i, cat in enumerate(cats):
        k = model.kinds[cat]
        sid = f"{prefix}-{i}-{rng.integers(1 << 40)}"
        ts = T0 + timedelta(seconds=i)
        refused = rng.random() < k.refusal
        tokens = int(rng.integers(8, 20)) if refused else int(max(2, rng.lognormal(np.log(k.answer_tokens), 0.3)))
        pin = int(max(5, rng.lognormal(np.log(k.prompt_tokens), 0.2)))
        ttft = float(rng.lognormal(np.log(model.ttft_base_ms + model.ttft_ms_per_input_token * pin), 0.2))
        latency = ttft + (tokens - 1) * float(rng.lognormal(np.log(model.ms_per_token), 0.15))
        prompt = f"{cat} question number {rng.integers(prompts_per_category)}"
        sample = Sample(
            id=sid,
            timestamp=ts,
            model="m",
            model_version=version,
            status=200,
            latency_ms=latency,
            ttft_ms=ttft,
            stream=True,
            usage=Usage(input_tokens=pin, output_tokens=tokens),
            finish_reason="stop",
            cost_usd=(pin * 0.15 + tokens * 0.6) / 1e6,
            request={"model": "m", "messages": [{"role": "user", "content": prompt}]},
            response={},
            metadata={"category": cat} if tagged else {},
        )
        samples.append(sample)
        rel = float(np.clip(rng.normal(k.relevance, 0.06), 0, 1))
        for check, kind, ok, value in (
            ("refusal", "refusal", not refused, None),
            ("answer_relevance", "embedding_relevance", rel >= 0.3, rel),
        ):
            scores.append(
                Score(
                    sample_id=sid,
                    check=check,
                    kind=kind,
                    result="pass" if ok else "fail",
                    value=value if value is not None else float(ok),
                    model="m",
                    model_version=version,
                    route=sample.route,
                    sample_timestamp=ts,
                )
            )
        vec = CENTRES[cat] + rng.normal(scale=0.15, size=DIM)
        embeddings[sid] = (vec / np.linalg.norm(vec)).astype(np.float32)
    return samples, scores, embeddings


def slower_canary(**settings):
    """A canary report: stable A and canary B, 800 samples each served in the same window, B 1.6x
    slower per output token and alike otherwise; `settings` are DriftSettings (fail_on, ...)."""
    from llmwatch.scorers.drift.canary import compare_versions, same_window
    from llmwatch.scorers.drift.compare import DriftSettings

    rng = np.random.default_rng(6)
    a = traffic(rng, 800, MODEL, MIX, prefix="a", version="A")
    b = traffic(rng, 800, replace(MODEL, ms_per_token=MODEL.ms_per_token * 1.6), MIX, prefix="b", version="B")
    b = ([s.model_copy(update={"timestamp": s.timestamp + timedelta(seconds=0.5)}) for s in b[0]], b[1], b[2])
    stable, canary, window = same_window(a[0] + b[0], "A", "B")
    report, _, _ = compare_versions(
        (stable, a[1], a[2]),
        (canary, b[1], b[2]),
        stable_version="A",
        canary_version="B",
        window=window,
        settings=DriftSettings(**settings),
    )
    return report
