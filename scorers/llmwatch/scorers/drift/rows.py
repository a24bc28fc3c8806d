"""One compact row per sample: what the drift families need to compare like with like.

Marginal reservoirs (features.py) cannot tell a change in what users ask from a change in what
the model does: both move `output_tokens`. A row keeps, for one sample, its stratum (route and
category), a hash of its normalised prompt, the prompt-side features (the `inputs` family), the
behaviour values (checks, answer length, failure mode) and the per-token performance figures.
A baseline keeps a bounded, deterministic reservoir of rows (lowest sample-id hashes first, as
for every other reservoir), so matched-prompt and stratified tests can run against it later.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import unicodedata
from typing import Any, Iterable, Mapping, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, Field

from llmwatch.core.records import Sample

UNCATEGORIZED = "uncategorized"
_WS = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
# Words that say nothing about what is asked; without them the sketch follows the topic.
_STOP = frozenset(
    "the and for are but not you your with this that have from they will would there their what about which when make like time just know take into year "
    "some could them see other than then now look only come its over think also back after use two how our work first well way even new want because any "
    "these give day most can please tell me i a an of to in on is be do does it my us we why who where should explain write".split()
)
SKETCH_BITS = 128


class ScoreLike(Protocol):
    """What the drift summaries read of a score: a Score, or the compact entry a streamed window keeps."""

    @property
    def kind(self) -> str: ...
    @property
    def result(self) -> str: ...
    @property
    def value(self) -> float | None: ...
    @property
    def details(self) -> Mapping[str, Any]: ...


class Row(BaseModel):
    category: str = UNCATEGORIZED
    prompt_hash: str = ""
    # SimHash of the prompt's content words (hex): prompts about the same things share most bits.
    # Lets untagged traffic be stratified by prompt clusters without keeping any prompt text.
    prompt_sketch: str = ""
    prompt_tokens: float | None = None  # usage.input_tokens, else prompt characters / 4
    model: str | None = None
    language: str | None = None
    failure_mode: str = "ok"
    ok: bool = True  # answered (status < 400): only those carry behaviour and performance values
    output_tokens: float | None = None
    latency_ms: float | None = None
    ttft_ms: float | None = None
    ms_per_token: float | None = None
    cost_per_1k: float | None = None
    cost_usd: float | None = None
    checks: dict[str, int] = Field(default_factory=dict)  # 1 pass, 0 fail
    scores: dict[str, float] = Field(default_factory=dict)  # continuous check values
    # The prompt's embedding (all-MiniLM-L6-v2, unit length) as base64 float16, "" without one:
    # near-duplicate matching, semantic prompt clusters and the `inputs` embedding signal. It is
    # a lossy 384-number summary, not the prompt text (about 1 KB a row).
    prompt_vec: str = ""
    # Which space `prompt_vec` lies in: "minilm" (the embedding model) or "hashed-words" (hashed
    # bag of words, when no embedding was available). "" on rows frozen before this field: those
    # vectors are MiniLM. Vectors of two spaces are never compared with each other.
    prompt_space: str = ""
    # The sample's conversation (its opaque hashed id, never text) and turn: the `turn_decay`
    # signal compares quality by turn within conversations. "" / None on rows frozen before.
    conversation: str = ""
    turn: int | None = None


MINILM = "minilm"
HASHED_WORDS = "hashed-words"
# 1,024 buckets: measured on AlpacaEval mix shifts, separation 0.20-0.26 against 0.13-0.18 at 512
# (2,048: 0.22-0.28, twice the bytes); about 2.7 KB a row in a baseline.
WORDS_DIM = 1024
# Long prompts (pasted documents) would dominate the hashing time; their first part says the topic.
WORDS_MAX_CHARS = 8000


def space_of(row: "Row") -> str:
    """The space of the row's prompt vector, "" without one (rows from before the field are MiniLM)."""
    return (row.prompt_space or MINILM) if row.prompt_vec else ""


def hashed_words_vector(text: str, dim: int = WORDS_DIM) -> np.ndarray:
    """A prompt vector without the embedding model: word unigrams and bigrams of the normalised
    prompt, signed feature hashing into `dim` buckets, sublinear tf (1 + log tf), L2-normalised.

    blake2b rather than Python's hash(), which is salted per process: the baseline's vectors must
    equal the ones another process computes for the same prompt. Zeros for a prompt without words.
    """
    words = _WORD.findall(normalise_prompt(text[:WORDS_MAX_CHARS]))
    counts: dict[str, int] = {}
    for token in (*words, *(f"{a} {b}" for a, b in zip(words, words[1:]))):
        counts[token] = counts.get(token, 0) + 1
    v = np.zeros(dim)
    for token, tf in counts.items():
        h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
        v[h % dim] += (1.0 if (h >> 63) & 1 else -1.0) * (1.0 + math.log(tf))
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def pack_vector(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode()


def unpack_vectors(rows: Sequence["Row"]) -> np.ndarray:
    """The rows' prompt vectors as float64 (n, dim), re-normalised; rows without one must be filtered first."""
    X = np.stack([np.frombuffer(base64.b64decode(r.prompt_vec), dtype="<f2") for r in rows]).astype(np.float64)
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)


def normalise_prompt(text: str) -> str:
    """What makes two prompts "the same" for matching: case, Unicode form and whitespace ignored."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def prompt_digest(text: str) -> str:
    # 16 hex digits: collisions are irrelevant at reservoir sizes, and the baseline stays small.
    return hashlib.sha256(normalise_prompt(text).encode()).hexdigest()[:16]


def prompt_sketch(text: str) -> str:
    words = {w for w in _WORD.findall(normalise_prompt(text)) if len(w) > 2 and w not in _STOP and not w.isdigit()}
    if not words:
        return ""
    acc = np.zeros(SKETCH_BITS)
    for word in words:
        bits = np.unpackbits(
            np.frombuffer(hashlib.blake2b(word.encode(), digest_size=SKETCH_BITS // 8).digest(), dtype=np.uint8)
        )
        acc += 2.0 * bits - 1.0
    return np.packbits(acc > 0).tobytes().hex()


def sketch_bits(sketch: str) -> np.ndarray:
    """The sketch as a +-1 vector (for k-means); zeros when the prompt had no content words."""
    if not sketch:
        return np.zeros(SKETCH_BITS)
    return 2.0 * np.unpackbits(np.frombuffer(bytes.fromhex(sketch), dtype=np.uint8)).astype(float) - 1.0


def category_of(sample: Sample) -> str:
    """The explicit tag (`x-llmwatch-category` / `metadata.category`), as the evaluation matrix reads it."""
    for meta in (sample.metadata, sample.request.get("metadata") if isinstance(sample.request, dict) else None):
        if isinstance(meta, dict) and isinstance(meta.get("category"), str) and meta["category"]:
            return meta["category"]
    return UNCATEGORIZED


def _language(sample: Sample) -> str | None:
    value = sample.metadata.get("language") if isinstance(sample.metadata, dict) else None
    return value if isinstance(value, str) and value else None


def per_token_latency(latency_ms: float, ttft_ms: float | None, output_tokens: float | None) -> float | None:
    """Time per output token after the first (TPOT) when TTFT is known, else latency per token.

    TPOT is what a version change moves and what answer length does not: a longer answer takes
    longer in total but not per token. Without TTFT (non-streaming) the fixed part is included.
    """
    if not output_tokens or output_tokens <= 0:
        return None
    if ttft_ms is not None and output_tokens > 1 and latency_ms >= ttft_ms:
        return (latency_ms - ttft_ms) / (output_tokens - 1)
    return latency_ms / output_tokens


def make_row(
    sample: Sample, scores: Mapping[str, ScoreLike], failure_mode: str, prompt_vector: np.ndarray | None = None
) -> Row:
    text = sample.prompt_text()
    space = MINILM
    if prompt_vector is None or not np.any(prompt_vector):
        # No embedding (embeddings off, the slim install, an empty prompt): hashed words, so that
        # prompt matching, clusters and the inputs signal still follow what is asked.
        prompt_vector, space = (hashed_words_vector(text) if text else None), HASHED_WORDS
    packed = pack_vector(prompt_vector) if prompt_vector is not None and np.any(prompt_vector) else ""
    has_vec = bool(packed)
    row = Row(
        prompt_vec=packed,
        prompt_space=space if has_vec else "",
        category=category_of(sample),
        prompt_hash=prompt_digest(text),
        prompt_sketch=prompt_sketch(text),
        prompt_tokens=float(sample.usage.input_tokens)
        if sample.usage.input_tokens is not None
        else (round(len(text) / 4, 1) if text else None),
        model=sample.model,
        language=_language(sample),
        failure_mode=failure_mode,
        ok=sample.status < 400 and not sample.error_type,
        conversation=sample.conversation_id or "",
        turn=sample.turn,
    )
    if row.ok:
        out = sample.usage.output_tokens
        row.output_tokens = float(out) if out is not None else None
        row.latency_ms = round(float(sample.latency_ms), 3)
        row.ttft_ms = round(float(sample.ttft_ms), 3) if sample.ttft_ms is not None else None
        tpot = per_token_latency(sample.latency_ms, sample.ttft_ms, out)
        row.ms_per_token = round(tpot, 4) if tpot is not None and math.isfinite(tpot) else None
        if sample.cost_usd is not None:
            row.cost_usd = sample.cost_usd
            tokens = (sample.usage.input_tokens or 0) + (out or 0)
            row.cost_per_1k = round(sample.cost_usd * 1000 / tokens, 9) if tokens else None
    for name, score in scores.items():
        if score.result in ("pass", "fail"):
            row.checks[name] = 1 if score.result == "pass" else 0
            if score.value is not None and score.value not in (0.0, 1.0):
                row.scores[name] = round(float(score.value), 6)
    return row


def reservoir_rows(items: Iterable[tuple[float, Row]], size: int) -> list[Row]:
    """The `size` rows with the lowest sample-id hash fractions: deterministic and uniform."""
    return [row for _, row in sorted(items, key=lambda t: t[0])[:size]]
