"""A blind-review round's data: two support-bot versions answering the same prompts."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import product
from pathlib import Path

import yaml

from llmwatch.core.records import Sample

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
V1, V2 = "support-v1-2026-11", "support-v2-2026-12"


REFUSAL = "I'm sorry, but I can't help with that."


CHECKS = [{"name": "refusal", "kind": "refusal"}, {"name": "complete", "kind": "not_empty_or_truncated"}]


PROMPTS = {
    "billing": [
        "Why was I charged twice for my subscription this month?",
        "Can I get a refund for the annual plan I bought yesterday?",
        "How do I change the credit card on my account?",
    ],
    "shipping": [
        "My package says delivered but it is not at my door. What now?",
        "Do you ship to Norway, and how long does it take?",
    ],
}


ANSWERS = {
    V1: "Here is what to do: open Settings > Billing, check the invoice list, and contact us from there if anything looks wrong; we answer within a day.",
    V2: "Open Settings > Billing to see both charges. A duplicate is refunded automatically within 5 business days; if not, reply with the invoice numbers.",
}


def sample(sid: str, version: str, prompt: str, answer: str, category: str, n: int, finish: str = "stop") -> Sample:
    return Sample(
        id=sid,
        timestamp=T0 + timedelta(seconds=n),
        model="gpt-4o-mini",
        response_model="gpt-4o-mini-2024-07-18",
        model_version=version,
        status=200,
        latency_ms=700.0,
        finish_reason=finish,
        cost_usd=0.001,
        request={
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": prompt},
            ],
        },
        response={
            "id": f"chatcmpl-{sid}",
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": f"fp_{version}",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": finish}],
        },
        metadata={"category": category},
    )


def live_traffic() -> list[Sample]:
    out, n = [], 0
    for category, prompts in PROMPTS.items():
        for i, prompt in enumerate(prompts):
            for version in (V1, V2):
                # v2 refuses the refund question: a failing answer the review must include.
                answer = REFUSAL if (version == V2 and "refund" in prompt) else ANSWERS[version]
                out.append(sample(f"req-{category}-{i}-{version[-7:]}", version, prompt, answer, category, n))
                n += 1
    # Prompts only one version saw: paired within their category instead.
    out.append(
        sample(
            "req-only-v1",
            V1,
            "Is there a student discount on the annual plan?",
            ANSWERS[V1] + " Students get 20% off.",
            "billing",
            n + 1,
        )
    )
    out.append(
        sample(
            "req-only-v2",
            V2,
            "Can I pause my subscription for two months?",
            ANSWERS[V2] + " Pausing is free.",
            "billing",
            n + 2,
            finish="length",
        )
    )
    return out


def write_samples(data: Path, samples: list[Sample]) -> Path:
    """`samples` as one day's file in DATA/samples, as the agent writes them; returns that folder."""
    folder = data / "samples"
    folder.mkdir()
    (folder / "samples-20261201-0000.jsonl").write_bytes(b"".join(s.to_json() + b"\n" for s in samples))
    return folder


def write_config(path: Path, *, categories: bool = False) -> Path:
    """An llmwatch.yaml with the round's CHECKS; with `categories`, the matrix's billing and shipping."""
    config: dict = {"scoring": {"checks": CHECKS, "embeddings": False}}
    if categories:
        config["matrix"] = {
            "categories": [
                {"name": "billing", "match": {"metadata": {"category": "billing"}}},
                {"name": "shipping", "match": {"metadata": {"category": "shipping"}}},
            ]
        }
    path.write_text(yaml.safe_dump(config))
    return path


def export_args(samples: Path, config: Path, out: Path, *options: str) -> list[str]:
    """The arguments of `llmwatch review export` for V1 against V2, tasks written to OUT."""
    return ["review", "export", "--samples", str(samples), "--config", str(config), "--versions", f"{V1},{V2}",
            "--out", str(out), *options]  # fmt: skip


def alpha_interval_pairwise(pairs: list[tuple[int, int]]) -> float:
    """Krippendorff's interval alpha for two complete raters, from its pairwise definition:
    1 - D_o / D_e, D_o the mean squared difference within items, D_e over all pairs of ratings."""
    values = [v for p in pairs for v in p]
    n = len(values)
    d_o = sum(2 * (a - b) ** 2 for a, b in pairs) / n
    d_e = sum((x - y) ** 2 for x, y in product(values, values)) / (n * (n - 1))
    return 1 - d_o / d_e
