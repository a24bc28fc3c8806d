"""A data directory as the sidecar writes it (samples/, scores/, pairs/), generated, for `llmwatch ui`.

Records are real `Sample`, `Score` and `Pair` models written with their own `to_json`, into the
file names the exporters use (`samples-YYYYMMDD-NNNN.jsonl`), so what the UI reads is what a
running sidecar leaves. Deterministic from `seed`: version B answers are shorter, slower to first
token and fail `min_length` more often; every 97th sample is an upstream error; every 50th answer
carries a redaction mark; `hostile` puts markup in a prompt and an answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from llmwatch.core.pairs import Pair, PairScore
from llmwatch.core.records import Sample
from llmwatch.core.scores import Score

START = datetime(2026, 12, 1, 0, 0, 0, tzinfo=timezone.utc)
VERSIONS = ("A", "B")
CATEGORIES = ("billing", "shipping", "account")
ROUTES = ("/v1/chat/completions", "/v1/completions")
CHECKS = (("not_empty", "not_empty_or_truncated"), ("min_length", "length_bounds"), ("refusal", "refusal"))
HOSTILE_PROMPT = "<script>window.stolen=document.cookie</script><img src=x onerror=alert(1)> \"quoted' & more"
HOSTILE_ANSWER = "</div><script>alert('answer')</script><a href=\"javascript:alert(2)\">click</a>"
TOPICS = ("refund for order", "parcel tracking", "password reset", "invoice copy", "delivery address", "plan upgrade")


@dataclass
class Generated:
    samples: int
    scores: int
    pairs: int
    hostile_id: str | None


def sample_id(i: int) -> str:
    return f"smp-{i:07d}"


def make_sample(i: int, rng: random.Random, hostile: bool = False) -> Sample:
    version = VERSIONS[i % 2]
    category = CATEGORIES[i % 3]
    topic = TOPICS[i % len(TOPICS)]
    route = ROUTES[0] if i % 10 else ROUTES[1]
    error = i % 97 == 0
    prompt = HOSTILE_PROMPT if hostile else f"Question {i} about {topic}: what should I do next?"
    words = rng.randint(4, 12) if version == "B" else rng.randint(10, 30)
    answer = (
        HOSTILE_ANSWER if hostile else " ".join(["Please", "follow", "the", "steps", "for", topic] + ["now"] * words)
    )
    if i % 50 == 0 and not hostile:
        answer += " Write to [EMAIL] for help."
    if route == ROUTES[0]:
        request = {
            "model": "gpt-4o-mini",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}],
        }
        response = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]
        }
    else:
        request = {"model": "gpt-4o-mini", "prompt": prompt}
        response = {"choices": [{"index": 0, "text": answer, "finish_reason": "stop"}]}
    out_tokens = len(answer.split())
    return Sample(
        id=sample_id(i),
        timestamp=START + timedelta(seconds=i * 3),
        route=route,
        operation="chat" if route == ROUTES[0] else "text_completion",
        model="gpt-4o-mini",
        model_version=version,
        status=502 if error else 200,
        error_type="upstream_error" if error else None,
        latency_ms=round(rng.uniform(200, 900) * (1.3 if version == "B" else 1.0), 1),
        ttft_ms=round(rng.uniform(40, 160) * (1.5 if version == "B" else 1.0), 1) if i % 3 else None,
        stream=bool(i % 3),
        usage={"input_tokens": len(prompt.split()) + 8, "output_tokens": out_tokens},
        finish_reason="stop",
        cost_usd=round(out_tokens * 6e-7 + 1e-5, 8),
        request=request,
        response={"error": {"message": "bad gateway"}} if error else response,
        sample_reason="error" if error else "rate",
        redacted=i % 50 == 0,
        metadata={"category": category},
    )


def make_scores(sample: Sample, rng: random.Random) -> list[Score]:
    out = []
    for check, kind in CHECKS:
        if sample.status >= 400:
            result, value, details = "skip", None, {"reason": "upstream_error"}
        elif check == "min_length":
            words = len(sample.answer_text().split())
            ok = words >= 12
            result, value, details = ("pass" if ok else "fail"), (1.0 if ok else 0.0), {"words": words, "min": 12}
        elif check == "refusal":
            ok = rng.random() > 0.02
            result, value, details = (
                ("pass" if ok else "fail"),
                (1.0 if ok else 0.0),
                ({} if ok else {"matched": "I can't help"}),
            )
        else:
            result, value, details = "pass", 1.0, {}
        out.append(
            Score(
                sample_id=sample.id,
                check=check,
                kind=kind,
                result=result,
                value=value,
                details=details,
                model=sample.model,
                model_version=sample.model_version,
                route=sample.route,
                sample_timestamp=sample.timestamp,
                scored_at=sample.timestamp + timedelta(seconds=1),
            )
        )
    return out


def make_pair(i: int, primary: Sample, shadow: Sample) -> Pair:
    def pscores(s: Sample) -> list[PairScore]:
        ok = len(s.answer_text().split()) >= 12
        return [
            PairScore(
                check="min_length", kind="length_bounds", result="pass" if ok else "fail", value=1.0 if ok else 0.0
            )
        ]

    return Pair(
        id=f"pair-{i:06d}",
        candidate="B",
        timestamp=primary.timestamp,
        route=primary.route,
        category=str(primary.metadata.get("category")),
        primary=primary,
        shadow=shadow.model_copy(update={"id": f"shadow-{i:06d}", "model_version": "B"}),
        primary_scores=pscores(primary),
        shadow_scores=pscores(shadow),
    )


def generate(
    data_dir: Path, n: int, *, seed: int = 7, hostile: bool = True, pairs: int = 20, per_file: int = 50_000
) -> Generated:
    """`n` samples (and their scores) into `data_dir`, `per_file` per file; the hostile one is the 5th."""
    rng = random.Random(seed)
    for sub in ("samples", "scores", "pairs"):
        (data_dir / sub).mkdir(parents=True, exist_ok=True)
    n_scores = 0
    hostile_id = None
    for part in range(0, max(n, 1), per_file):
        name = f"20261201-{part // per_file:04d}.jsonl"
        with (
            open(data_dir / "samples" / f"samples-{name}", "ab") as out,
            open(data_dir / "scores" / f"scores-{name}", "ab") as sc,
        ):
            for i in range(part, min(n, part + per_file)):
                bad = hostile and i == 4
                sample = make_sample(i, rng, hostile=bad)
                if bad:
                    hostile_id = sample.id
                out.write(sample.to_json() + b"\n")
                scores = make_scores(sample, rng)
                n_scores += len(scores)
                sc.write(b"".join(s.to_json() + b"\n" for s in scores))
    with open(data_dir / "pairs" / "pairs-20261201-0000.jsonl", "ab") as fh:
        for i in range(pairs):
            a = make_sample(2 * i, random.Random(seed + i))
            b = make_sample(2 * i + 1, random.Random(seed + i))
            fh.write(make_pair(i, a, b).to_json() + b"\n")
    return Generated(n, n_scores, pairs, hostile_id)


HOSTILE_TURN = "<script>alert('turn')</script><img src=x onerror=alert(3)> & \"quoted\""


def conversation_id(n: int) -> str:
    return f"h-{n:016x}"


def make_turn(n: int, version: str, turn: int, when: datetime, rng: random.Random, hostile: bool = False) -> Sample:
    """Turn `turn` of conversation `n`: the whole history as a chat client resends it, the new user
    message last. Version B's answers shrink turn after turn (min_length fails from turn 3): a decay."""
    history: list[dict[str, str]] = [{"role": "system", "content": "Be brief."}]

    def user(k: int) -> str:
        return HOSTILE_TURN if hostile and k == 2 else f"Conversation {n}, turn {k}: and then what?"

    def answer(k: int) -> str:
        words = 20 if version == "A" else max(2, 16 - 5 * (k - 1))
        return " ".join([f"Answer {k} of {n}:"] + ["step"] * words)

    for k in range(1, turn):
        history += [{"role": "user", "content": user(k)}, {"role": "assistant", "content": answer(k)}]
    history.append({"role": "user", "content": user(turn)})
    text = answer(turn)
    return Sample(
        id=f"cnv-{n:03d}-{turn:02d}",
        timestamp=when,
        route=ROUTES[0],
        operation="chat",
        model="gpt-4o-mini",
        model_version=version,
        status=200,
        latency_ms=round(rng.uniform(200, 900), 1),
        stream=False,
        usage={"input_tokens": 10 * turn, "output_tokens": len(text.split())},
        finish_reason="stop",
        cost_usd=1e-5,
        request={"model": "gpt-4o-mini", "messages": history},
        response={
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
        },
        sample_reason="rate",
        metadata={"category": "account"},
        conversation_id=conversation_id(n),
        turn=turn,
    )


def generate_conversations(data_dir: Path, plan: dict[int, tuple[str, int]], *, seed: int = 11) -> list[Sample]:
    """Conversations `n -> (version, turns)` into `data_dir`, their scores too. Lines are written in
    a shuffled order (what several replicas appending to rotated files leave), so an ordered view
    has to sort them; conversation 2's second user message is markup."""
    rng = random.Random(seed)
    samples = [
        make_turn(n, version, k, START + timedelta(hours=1, minutes=n, seconds=10 * k), rng, hostile=n == 2)
        for n, (version, turns) in plan.items()
        for k in range(1, turns + 1)
    ]
    for sub in ("samples", "scores", "pairs"):
        (data_dir / sub).mkdir(parents=True, exist_ok=True)
    shuffled = samples[:]
    rng.shuffle(shuffled)
    with (
        open(data_dir / "samples" / "samples-20261201-0900.jsonl", "ab") as out,
        open(data_dir / "scores" / "scores-20261201-0900.jsonl", "ab") as sc,
    ):
        for sample in shuffled:
            out.write(sample.to_json() + b"\n")
            sc.write(b"".join(s.to_json() + b"\n" for s in make_scores(sample, rng)))
    return samples
