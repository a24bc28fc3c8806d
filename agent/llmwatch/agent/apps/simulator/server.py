"""A built-in OpenAI-compatible LLM server simulator.

It is the upstream behind the proxy in `llmwatch demo`, in tests and in
benchmarks, so it speaks the OpenAI wire format closely enough for the real
`openai` client: chat completions, legacy completions, embeddings, the
Responses API and the model list, each streaming where the real API does.

Answers come from a small hand-written topic bank and stay on the prompt's
topic, so quality scorers and drift detectors have something realistic to
measure. JSON mode (`json_object` or `json_schema`) answers
`{"answer": ..., "topic": ..., "confidence": ...}` whatever the schema. A
`SimProfile` models one model version; its rates (refusals, broken JSON,
off-topic answers, truncation, 5xx errors) and answer length are the knobs the
demo turns to produce a visible regression. The profile name is returned in
the `x-model-version` header of every response.

Determinism: a request that carries the OpenAI `seed` parameter gets a body
that is a pure function of the request body and the profile's behaviour
fields, streaming included (ids come from a hash of the body, `created` is
1700000000 + seed). A streamed and a non-streamed request that differ only in
`stream`/`stream_options` get the same answer. The Responses API has no `seed`
parameter; send one as an extra body field for the same effect. Without
`seed`, answers come from a generator seeded by `create_app(seed=...)`, or OS
entropy.

Fault injection, for tests of the proxy: request header
`x-llmwatch-sim-fault`, comma-separated directives, e.g.
`x-llmwatch-sim-fault: slow_ms=200,cut_after=5`.

    status=CODE   answer CODE with an OpenAI-style error JSON body
    cut_after=N   stream N content chunks (role chunk first), then close the
                  connection without the final chunk or `[DONE]`; a
                  non-streaming request gets half of its body under the full
                  Content-Length and is closed too
    non_json      200 with a `text/plain` body "upstream says hi"
    slow_ms=N     extra N ms before responding (not scaled by latency_scale)
    no_usage      no usage chunk even if `stream_options.include_usage` is
                  set; non-streaming bodies without `usage`
    num_ctx=N     chat completions: a prompt longer than N tokens is silently
                  cut to N, and usage reports N prompt tokens (as llama.cpp and
                  Ollama do past their context window)

Run standalone (benchmarks use a separate process):

    llmwatch simulate --host 127.0.0.1 --port 8001 --latency-scale 1.0 --profile A
    python -m llmwatch.agent.apps.simulator --port 0   # the same; prints the address it bound
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import importlib.resources
import json
import math
import random
import re
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import orjson
import structlog
from aiohttp import web

from llmwatch.agent.apps.simulator.stability import answer_rng, conversation_profile, phrasing_profile

log = structlog.get_logger(__name__)

__all__ = ["PROFILES", "SimProfile", "SimulatorHandle", "create_app", "main", "start_simulator"]


@dataclass(frozen=True)
class SimProfile:
    name: str = "A"  # model version label, returned in the `x-model-version` header
    ttft_ms: float = 120.0  # median time to first token (lognormal, sigma ~0.35)
    inter_token_ms: float = 12.0  # median gap between streamed tokens
    latency_scale: float = 1.0  # multiplies all delays; 0 => never sleeps
    answer_length_scale: float = 1.0  # 0.7 => answers ~30% shorter
    refusal_rate: float = 0.02  # fraction of answers that are refusals
    invalid_json_rate: float = 0.01  # fraction of JSON-mode answers that are broken JSON
    off_topic_rate: float = 0.0  # fraction of answers about an unrelated topic
    error_rate: float = 0.0  # fraction of requests answered 500
    truncation_rate: float = 0.02  # fraction cut short with finish_reason "length"
    # fraction of tool calls broken (wrong argument type, a required argument missing, or a name
    # the request did not offer); the response header `x-llmwatch-sim-tool-calls` says which
    tool_call_error_rate: float = 0.0
    # The `model` answers name, as a provider resolves an alias to a dated snapshot; None: the
    # requested model. Switching profiles with another one is a silent version change.
    served_model: str | None = None
    # Judge mode (agent/llmwatch/agent/apps/simulator/judge.py): llmwatch's judge prompts are
    # answered with a verdict of this bias and noise on the 1-5 scale; None: answered as any chat.
    judge_bias: float | None = None
    judge_noise: float = 0.0


# "B" is the regressed version the demo switches to: slower, terser, and
# sloppier, so every llmwatch detector has something to find.
PROFILES: dict[str, SimProfile] = {
    "A": SimProfile(),
    "B": SimProfile(
        name="B",
        ttft_ms=240.0,  # twice A's: clear of the 20 % drift margin on the demo's ~50 streamed calls a side
        inter_token_ms=16.0,
        answer_length_scale=0.7,
        refusal_rate=0.08,
        invalid_json_rate=0.06,
        off_topic_rate=0.05,
        truncation_rate=0.04,
        tool_call_error_rate=0.25,
    ),
}

REFUSAL = "I'm sorry, but I can't help with that."
FAULT_HEADER = "x-llmwatch-sim-fault"
# On answers with tool calls: "ok", or how the call was broken ("wrong_type", "missing_required",
# "unknown_name"), so a test knows the truth a check must find.
TOOL_CALLS_HEADER = "x-llmwatch-sim-tool-calls"
MODELS = ("sim-gpt-4o-mini", "sim-gpt-4o", "sim-gpt-3.5-turbo-instruct", "sim-text-embedding-3-small")

_TTFT_SIGMA = 0.35
_ITL_SIGMA = 0.25
_EPOCH = 1700000000
_MAX_EMBED_DIM = 4096

# ---------------------------------------------------------------------------
# Topic bank


@dataclass(frozen=True)
class _Topic:
    name: str
    keywords: tuple[str, ...]  # prefixes of prompt words
    answers: tuple[str, ...]


def _load_text() -> tuple[tuple[_Topic, ...], tuple[str, ...], tuple[str, ...], frozenset[str]]:
    """The simulator's English, from text.json beside this module (data, not code).

    Topics (keyword prefixes of prompt words, answer paragraphs); answers for prompts of no known
    topic ({a} and {b}: the prompt's key nouns); answers for prompts with nothing to restate,
    such as a bare greeting; stopwords left out of key nouns.
    """
    raw = importlib.resources.files(__package__).joinpath("text.json").read_bytes()
    data = orjson.loads(raw)
    topics = tuple(_Topic(t["name"], tuple(t["keywords"]), tuple(t["answers"])) for t in data["topics"])
    return topics, tuple(data["generic_answers"]), tuple(data["open_answers"]), frozenset(data["stopwords"])


_TOPICS, _GENERIC_ANSWERS, _OPEN_ANSWERS, _STOPWORDS = _load_text()

_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
# Each chunk carries its leading whitespace so that joining the chunks gives
# back the text exactly; the chunk count equals the token count.
_CHUNK_RE = re.compile(r"\s*(?:\w+|[^\w\s])")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")


def _count_tokens(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


def _chunks(text: str) -> list[str]:
    return _CHUNK_RE.findall(text)


def _keyword_index() -> tuple[re.Pattern[str], dict[str, list[tuple[int, int]]]]:
    owners: dict[str, list[tuple[int, int]]] = {}
    for i, topic in enumerate(_TOPICS):
        for kw in topic.keywords:
            # A phrase is stronger evidence than a single word prefix.
            owners.setdefault(kw, []).append((i, 2 if " " in kw else 1))
    # Longest first, so "index fund" wins over "index" at the same position.
    alternation = "|".join(re.escape(k) for k in sorted(owners, key=len, reverse=True))
    return re.compile(rf"\b(?:{alternation})"), owners


# One regex pass over the prompt: matching keyword by keyword per topic cost
# about half a millisecond per request, too much for a benchmark upstream.
_KEYWORD_RE, _KEYWORD_OWNERS = _keyword_index()


def _pick_topic(text: str) -> _Topic | None:
    scores = [0] * len(_TOPICS)
    for kw in _KEYWORD_RE.findall(text.lower()):
        for i, weight in _KEYWORD_OWNERS[kw]:
            scores[i] += weight
    best = max(range(len(_TOPICS)), key=lambda i: (scores[i], -i))
    return _TOPICS[best] if scores[best] else None


def _key_nouns(text: str) -> list[str]:
    seen: dict[str, str] = {}
    for w in re.findall(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?", text):
        low = w.lower()
        if len(low) >= 4 and low not in _STOPWORDS and not low.isdigit() and low not in seen:
            seen[low] = w
    return list(seen.values())[:2]


@lru_cache(maxsize=4096)
def _sentences(paragraph: str) -> tuple[tuple[str, int], ...]:
    return tuple((s, _count_tokens(s)) for s in _SENTENCE_RE.split(paragraph))


def _scale_paragraphs(pool: Sequence[str], base_count: int, scale: float) -> str:
    """Keep whole sentences from `pool` until ~scale x the first `base_count` paragraphs' tokens."""
    paragraphs = [_sentences(p) for p in pool]
    base = sum(n for sentences in paragraphs[:base_count] for _, n in sentences)
    target = max(1.0, base * max(scale, 0.0))
    out: list[list[str]] = []
    total = 0
    for sentences in paragraphs:
        kept: list[str] = []
        for s, n in sentences:
            # A sentence goes in when more than half of it fits, which keeps the
            # average length unbiased at sentence granularity.
            if total and total + n / 2 > target:
                break
            kept.append(s)
            total += n
        if kept:
            out.append(kept)
        if len(kept) < len(sentences) or total >= target:
            break
    return "\n\n".join(" ".join(s) for s in out)


# Words of a request's framing rather than its subject ("Return a JSON object about ...").
_FRAMING_WORDS = frozenset({"json", "object", "return", "reply", "respond", "format", "recommend", "plan"})


def _content_words(prompt: str, limit: int = 6) -> list[str]:
    """The prompt's subject words in order, without framing; a sentence's first word lowercased
    unless it is an acronym (SQL), so proper nouns keep their capital."""
    out: list[str] = []
    seen: set[str] = set()
    for m in re.finditer(r"[A-Za-z][A-Za-z0-9'-]*", prompt):
        word, low = m.group(0), m.group(0).lower()
        if len(low) < 3 or low in _STOPWORDS or low in _FRAMING_WORDS or low in seen:
            continue
        seen.add(low)
        at_start = not prompt[: m.start()].strip() or prompt[: m.start()].rstrip()[-1] in ".!?:"
        out.append(low if at_start and not word.isupper() else word)
        if len(out) == limit:
            break
    return out


def _lead(prompt: str) -> str:
    """An opening that names what was asked about, as a model answering the question does.

    Without it the canned paragraphs are about the topic but often not about the question
    (a Python question answered with advice on virtualenvs), and the demo's good version A
    failed `answer_relevance` on about a quarter of its answers.
    """
    words = _content_words(prompt)
    if not words:
        return ""
    subject = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    return f"Here is what matters about {subject}. "


def _overlap(prompt_words: set[str], paragraph: str) -> int:
    # Five-letter stems, so that "roast" meets "roasting" and "tomatoes" meets "tomato".
    return len(prompt_words & {w.lower()[:5] for w in re.findall(r"[A-Za-z]+", paragraph)})


def _topic_answer(
    rng: random.Random, topic: _Topic | None, prompt: str, scale: float, *, on_topic: bool = True
) -> tuple[str, str]:
    """An answer from `topic`'s bank; `on_topic` False for a deliberately off-topic answer,
    which then neither leads with the prompt's subject nor picks the paragraphs closest to it."""
    if topic is None:
        nouns = _key_nouns(prompt)
        if nouns:
            a, b = nouns[0], nouns[-1]
            pool = [t.format(a=a, b=b) for t in _GENERIC_ANSWERS]
        else:
            pool = list(_OPEN_ANSWERS)
        rng.shuffle(pool)
        name = "general"
    else:
        pool = list(topic.answers)
        rng.shuffle(pool)
        name = topic.name
        if on_topic:
            # Stable: the closest paragraphs first, ties in the shuffled order.
            stems = {w.lower()[:5] for w in _content_words(prompt)}
            pool.sort(key=lambda paragraph: -_overlap(stems, paragraph))
    base_count = 1 if rng.random() < 0.5 else 2
    body = _scale_paragraphs(pool, base_count, scale)
    return (_lead(prompt) + body if topic is not None and on_topic else body), name


def _break_json(rng: random.Random, text: str) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        # A strict prefix of a JSON object is never valid JSON.
        return text[: max(1, int(len(text) * rng.uniform(0.4, 0.9)))]
    if kind == 1:
        return text[:-1] + ", }"
    return "```json\n" + text + "\n```"


# ---------------------------------------------------------------------------
# Answer planning


@dataclass
class _Choice:
    chunks: list[str]
    finish_reason: str

    @property
    def text(self) -> str:
        return "".join(self.chunks)


def _plan_choice(
    rng: random.Random,
    profile: SimProfile,
    topic: _Topic | None,
    prompt: str,
    *,
    json_mode: bool,
    max_tokens: int | None,
    stop: list[str],
) -> _Choice:
    if rng.random() < profile.refusal_rate:
        text = json.dumps({"refusal": REFUSAL}) if json_mode else REFUSAL
    else:
        on_topic = True
        if rng.random() < profile.off_topic_rate:
            others = [t for t in _TOPICS if t is not topic]
            topic, on_topic = rng.choice(others), False
        body, name = _topic_answer(rng, topic, prompt, profile.answer_length_scale, on_topic=on_topic)
        if json_mode:
            text = json.dumps(
                {"answer": body, "topic": name, "confidence": round(rng.uniform(0.55, 0.98), 2)},
                ensure_ascii=False,
            )
            if rng.random() < profile.invalid_json_rate:
                text = _break_json(rng, text)
        else:
            text = body
    finish = "stop"
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    if cuts:
        text = text[: min(cuts)]
    chunks = _chunks(text)
    if rng.random() < profile.truncation_rate and len(chunks) > 2:
        chunks = chunks[: max(1, int(len(chunks) * rng.uniform(0.3, 0.8)))]
        finish = "length"
    if max_tokens is not None and len(chunks) > max_tokens:
        chunks = chunks[:max_tokens]
        finish = "length"
    return _Choice(chunks, finish)


# ---------------------------------------------------------------------------
# Tool calls


@dataclass
class _ToolCall:
    name: str
    arguments: str  # JSON text, as the API sends it
    broken: str  # "ok", or how it was broken


def _offered_tools(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, parameters schema) of each function the request offers, in order."""
    out = []
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.append((fn["name"], fn.get("parameters")))
    return out


def _example_value(schema: Any, words: list[str], depth: int = 0) -> Any:  # noqa: C901
    """A value the (common subset of a) JSON Schema accepts, the same for the same schema and words."""
    if not isinstance(schema, dict) or depth > 8:
        return None if schema is False else {}
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _example_value(schema[key][0], words, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        return {
            name: _example_value(sub, words[i:] + words[:i], depth + 1) for i, (name, sub) in enumerate(props.items())
        }
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [_example_value(schema.get("items", {}), words, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum")
        value = 3
        if isinstance(low, (int, float)):
            value = int(low) + 1
        if isinstance(high, (int, float)) and value > high:
            value = int(high)
        return value if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    fmt = str(schema.get("format"))
    text = {"date": "2026-01-15", "date-time": "2026-01-15T09:30:00Z", "email": "user@example.com"}.get(
        fmt, words[0] if words else "example"
    )
    min_len, max_len = int(schema.get("minLength", 0)), schema.get("maxLength")
    text = text.ljust(min_len, "x")
    return text[: int(max_len)] if isinstance(max_len, int) else text


def _wrong_type(value: Any) -> Any:
    if isinstance(value, str):
        return 42
    if isinstance(value, (bool, int, float)):
        return "forty-two"
    return "not-a-" + type(value).__name__


def _break_call(rng: random.Random, name: str, args: Any, schema: Any) -> tuple[str, Any, str]:
    """(name, arguments, how): a call the request's contract refuses, one of three ways."""
    kind = rng.randrange(3)
    props = schema.get("properties") if isinstance(schema, dict) else None
    required = [r for r in (schema.get("required") or []) if r in args] if isinstance(schema, dict) else []
    if kind == 1 and isinstance(args, dict) and required:
        return name, {k: v for k, v in args.items() if k != required[0]}, "missing_required"
    if kind == 2:
        return name + "_v2", args, "unknown_name"
    if isinstance(args, dict) and isinstance(props, dict) and args:
        typed = [k for k in args if isinstance(props.get(k), dict) and "type" in props[k]]
        if typed:
            return name, {**args, typed[0]: _wrong_type(args[typed[0]])}, "wrong_type"
    # No typed argument to spoil: the arguments themselves are the wrong type.
    return name, [args], "wrong_type"


def _plan_tool_calls(
    rng: random.Random, profile: SimProfile, body: dict[str, Any], messages: list[Any], prompt: str
) -> list[_ToolCall] | None:
    """The calls a model makes for this request, or None when it answers in text."""
    tools = _offered_tools(body)
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if last.get("role") == "tool" and choice == "auto":
        return None  # the tool answered: the model now answers the user in text
    by_name = dict(tools)
    name = named if named in by_name else tools[rng.randrange(len(tools))][0]
    schema = by_name[name]
    args = _example_value(schema if schema is not None else {"type": "object"}, _content_words(prompt))
    how = "ok"
    if rng.random() < profile.tool_call_error_rate:
        name, args, how = _break_call(rng, name, args, schema)
    return [_ToolCall(name, json.dumps(args, ensure_ascii=False), how)]


# ---------------------------------------------------------------------------
# Request plumbing


class _ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code


_PARSE_ERROR = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
    "HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. "
    "If you have trouble figuring out how to fix this, please contact us through our help center at "
    "help.openai.com.)"
)


def _error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def _error_response(
    status: int, message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> web.Response:
    return web.Response(status=status, body=_error_body(message, type_, param, code), content_type="application/json")


def _status_error(status: int) -> web.Response:
    if status == 429:
        return _error_response(
            429, "Rate limit reached for requests. Please try again later.", "requests", code="rate_limit_exceeded"
        )
    if status >= 500:
        return _error_response(
            status, "The server had an error while processing your request. Sorry about that!", "server_error"
        )
    return _error_response(status, f"Simulated error (status {status}).", "invalid_request_error")


@dataclass(frozen=True)
class _Faults:
    status: int | None = None
    cut_after: int | None = None
    non_json: bool = False
    slow_ms: float = 0.0
    no_usage: bool = False
    num_ctx: int | None = None


def _parse_faults(header: str | None) -> _Faults:
    if not header:
        return _Faults()
    values: dict[str, Any] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        key = key.strip().lower()
        try:
            if key == "status":
                code = int(value)
                if not 100 <= code <= 599:
                    raise ValueError(value)
                values["status"] = code
            elif key == "cut_after":
                values["cut_after"] = max(0, int(value))
            elif key == "num_ctx":
                values["num_ctx"] = max(1, int(value))
            elif key == "slow_ms":
                values["slow_ms"] = max(0.0, float(value))
            elif key in ("non_json", "no_usage"):
                values[key] = True
            elif key:
                log.warning("simulator.unknown_fault", fault=key)
        except ValueError:
            log.warning("simulator.bad_fault_value", fault=key, value=value)
    return _Faults(**values)


class _ProfileSource:
    def __init__(self, profile: SimProfile | Callable[[], SimProfile]) -> None:
        self.profile = profile

    def current(self) -> SimProfile:
        p = self.profile
        return p if isinstance(p, SimProfile) else p()


_PROFILE_KEY = web.AppKey("llmwatch_sim_profile", _ProfileSource)
_RNG_KEY = web.AppKey("llmwatch_sim_rng", random.Random)
# web.RequestKey arrived after aiohttp 3.9, the oldest version we support.
_PROFILE_REQ_KEY: Any = (
    web.RequestKey("llmwatch_sim_profile", SimProfile) if hasattr(web, "RequestKey") else "llmwatch_sim_profile"
)
_TOOL_CALLS_REQ_KEY: Any = (
    web.RequestKey("llmwatch_sim_tool_calls", str) if hasattr(web, "RequestKey") else "llmwatch_sim_tool_calls"
)

# These fields shape the answer; the rest of the profile only changes timing
# and labels, so a latency change alone must not change seeded answers.
_BEHAVIOUR_FIELDS = (
    "answer_length_scale",
    "refusal_rate",
    "invalid_json_rate",
    "off_topic_rate",
    "error_rate",
    "truncation_rate",
)
# Transport-only request fields: a streamed request must get the same answer
# as the same request without streaming.
_TRANSPORT_FIELDS = ("stream", "stream_options")


@dataclass
class _Ctx:
    """Everything a handler needs for one request, fixed before any answer is drawn."""

    request: web.Request
    body: dict[str, Any]
    profile: SimProfile
    faults: _Faults
    rng: random.Random
    timing: random.Random
    ident: str
    created: int
    response: web.StreamResponse | None = None  # once prepared

    def usage_allowed(self) -> bool:
        return not self.faults.no_usage

    async def sleep(self, ms: float) -> None:
        delay = ms * self.profile.latency_scale / 1000.0
        if delay > 0:
            await asyncio.sleep(delay)

    def ttft_ms(self) -> float:
        if self.profile.latency_scale <= 0 or self.profile.ttft_ms <= 0:
            return 0.0
        return self.timing.lognormvariate(math.log(self.profile.ttft_ms), _TTFT_SIGMA)

    def itl_ms(self) -> float:
        if self.profile.latency_scale <= 0 or self.profile.inter_token_ms <= 0:
            return 0.0
        return self.timing.lognormvariate(math.log(self.profile.inter_token_ms), _ITL_SIGMA)

    async def generation_delay(self, tokens: int) -> None:
        """The wall time a non-streaming answer of `tokens` tokens would take."""
        if self.profile.latency_scale > 0:
            await self.sleep(self.ttft_ms() + max(0, tokens - 1) * self.itl_ms())


def _seeded(
    body: dict[str, Any], path: str, profile: SimProfile
) -> tuple[random.Random, random.Random, str, int] | None:
    seed = body.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        return None
    content = {k: v for k, v in body.items() if k not in _TRANSPORT_FIELDS}
    behaviour = {k: v for k, v in asdict(profile).items() if k in _BEHAVIOUR_FIELDS}
    if body.get("tools") or body.get("functions"):
        # Only requests with tools depend on it: adding the knob left every other seeded answer as it was.
        behaviour["tool_call_error_rate"] = profile.tool_call_error_rate
    digest = hashlib.blake2b(
        orjson.dumps([path, content, behaviour], option=orjson.OPT_SORT_KEYS), digest_size=32
    ).digest()
    rng = random.Random(int.from_bytes(digest[:16], "big"))
    timing = random.Random(int.from_bytes(digest[16:], "big"))
    return rng, timing, digest.hex()[:24], _EPOCH + seed % 100_000_000


async def _read_json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _ApiError(400, _PARSE_ERROR) from None
    if not isinstance(body, dict):
        raise _ApiError(400, _PARSE_ERROR)
    return body


def _require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _ApiError(400, "you must provide a model parameter")
    return model


def _opt_int(body: dict[str, Any], *names: str, minimum: int = 1, maximum: int | None = None) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or value < minimum
            or (maximum is not None and value > maximum)
        ):
            raise _ApiError(
                400,
                f"Invalid value for '{name}': expected an integer >= {minimum}"
                + (f" and <= {maximum}" if maximum is not None else "")
                + ".",
                param=name,
                code="invalid_value",
            )
        return value
    return None


def _stop_list(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list):
        return [s for s in stop if isinstance(s, str)]
    return []


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _include_usage(ctx: _Ctx) -> bool:
    opts = ctx.body.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True and ctx.usage_allowed()


async def _open_chunk_stream(ctx: _Ctx) -> tuple[_Sse, bool, dict[str, Any]]:
    """A Chat or Completions stream, started and then held for TTFT before its first chunk (the role
    chunk too, like the real API, so a proxy that times the first chunk and one that times the first
    content agree): the writer, whether a usage chunk ends it, and the `usage: null` every chunk then carries."""
    sse = _Sse(ctx)
    include_usage = _include_usage(ctx)
    await sse.start()
    await ctx.sleep(ctx.ttft_ms())
    return sse, include_usage, {"usage": None} if include_usage else {}


async def _stream_chunks(
    ctx: _Ctx, sse: _Sse, choices: Sequence[_Choice], payload: Callable[[int, str], dict[str, Any]]
) -> bool:
    """Every choice's content chunks, interleaved, one inter-token latency apart, each as `payload(index,
    chunk)` makes it; False where the cut_after fault cut the stream (before, within or after them)."""
    if sse.cut_at(sent_all=False):
        return False
    first = True
    for index, chunk in _interleave(choices):
        if not first:
            await ctx.sleep(ctx.itl_ms())
        first = False
        if not await sse.content(payload(index, chunk)):
            return False
    return not sse.cut_at(sent_all=True)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


async def _json_response(ctx: _Ctx, payload: dict[str, Any]) -> web.StreamResponse:
    body = orjson.dumps(payload)
    if ctx.faults.cut_after is None:
        return web.Response(body=body, content_type="application/json")
    # cut_after on a non-streaming request: promise the full length, deliver half.
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.content_length = len(body)
    await resp.prepare(ctx.request)
    ctx.response = resp
    await resp.write(body[: len(body) // 2])
    _abort(ctx.request)
    return resp


def _abort(request: web.BaseRequest) -> None:
    # Closing the socket mid-body is what a crashed upstream looks like to
    # the proxy; aiohttp swallows the ConnectionError from its write_eof.
    transport = request.transport
    if transport is not None:
        transport.close()


class _Sse:
    """Writes SSE events onto a prepared StreamResponse, one flush per event."""

    def __init__(self, ctx: _Ctx) -> None:
        self.ctx = ctx
        self.resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        self.content_sent = 0
        self.cut = False

    async def start(self) -> None:
        await self.resp.prepare(self.ctx.request)
        self.ctx.response = self.resp

    async def data(self, payload: dict[str, Any] | bytes, event: str | None = None) -> None:
        raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        head = b"event: " + event.encode() + b"\n" if event else b""
        await self.resp.write(head + b"data: " + raw + b"\n\n")

    async def content(self, payload: dict[str, Any], event: str | None = None) -> bool:
        """Sends one content chunk; False once the cut_after fault has fired."""
        await self.data(payload, event)
        self.content_sent += 1
        limit = self.ctx.faults.cut_after
        if limit is not None and self.content_sent >= limit:
            self.cut = True
            _abort(self.ctx.request)
            return False
        return True

    def cut_at(self, sent_all: bool) -> bool:
        """Closes the stream if cut_after fires here: before any content (N=0),
        or after all of it when N is at least the answer's length."""
        limit = self.ctx.faults.cut_after
        if limit is not None and not self.cut and (sent_all or limit == 0):
            self.cut = True
            _abort(self.ctx.request)
        return self.cut

    async def done(self, sentinel: bool = True) -> web.StreamResponse:
        if not self.cut:
            if sentinel:
                await self.resp.write(b"data: [DONE]\n\n")
            await self.resp.write_eof()
        return self.resp


def _interleave(choices: Sequence[_Choice]) -> Iterable[tuple[int, str]]:
    longest = max((len(c.chunks) for c in choices), default=0)
    for pos in range(longest):
        for i, c in enumerate(choices):
            if pos < len(c.chunks):
                yield i, c.chunks[pos]


# ---------------------------------------------------------------------------
# Endpoints


async def _chat(ctx: _Ctx) -> web.StreamResponse:
    body = ctx.body
    model = _require_model(body)
    model = ctx.profile.served_model or model
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _ApiError(
            400, "Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter"
        )
    if ctx.profile.judge_bias is not None:
        from llmwatch.agent.apps.simulator.judge import is_judge_prompt

        if is_judge_prompt(messages):
            return await _judge(ctx, model, messages)
    max_tokens = _opt_int(body, "max_completion_tokens", "max_tokens")
    n = _opt_int(body, "n", maximum=128) or 1
    fmt = body.get("response_format")
    json_mode = isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema")

    texts = [_content_text(m.get("content")) for m in messages if isinstance(m, dict)]
    users = [_content_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    prompt = users[-1] if users else " ".join(texts)
    topic = _pick_topic(prompt) or _pick_topic(" ".join(texts))
    prompt_tokens = sum(_count_tokens(t) for t in texts)
    if ctx.faults.num_ctx is not None:
        # A server that silently keeps only the last num_ctx tokens (llama.cpp, Ollama) reports those.
        prompt_tokens = min(prompt_tokens, ctx.faults.num_ctx)

    stop = _stop_list(body)
    ident = "chatcmpl-" + ctx.ident
    fingerprint = "fp_sim_" + hashlib.blake2b(ctx.profile.name.encode(), digest_size=5).hexdigest()
    head = {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": ctx.created,
        "model": model,
        "system_fingerprint": fingerprint,
    }
    if body.get("tools"):
        planned = [_plan_tool_calls(ctx.rng, ctx.profile, body, messages, prompt) for _ in range(n)]
        if all(p is not None for p in planned):
            return await _chat_tool_calls(ctx, head, [p for p in planned if p is not None], prompt_tokens)
    profile, rng = _stability_answer(ctx, messages)
    choices = [
        _plan_choice(rng, profile, topic, prompt, json_mode=json_mode, max_tokens=max_tokens, stop=stop)
        for _ in range(n)
    ]
    completion_tokens = sum(len(c.chunks) for c in choices)

    if body.get("stream") is True:
        sse, include_usage, extra = await _open_chunk_stream(ctx)
        await sse.data(
            {
                **head,
                "choices": [
                    {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                    for i in range(n)
                ],
                **extra,
            }
        )
        if not await _stream_chunks(
            ctx,
            sse,
            choices,
            lambda index, chunk: {
                **head,
                "choices": [{"index": index, "delta": {"content": chunk}, "logprobs": None, "finish_reason": None}],
                **extra,
            },
        ):
            return await sse.done()
        await sse.data(
            {
                **head,
                "choices": [
                    {"index": i, "delta": {}, "logprobs": None, "finish_reason": c.finish_reason}
                    for i, c in enumerate(choices)
                ],
                **extra,
            }
        )
        if include_usage:
            await sse.data({**head, "choices": [], "usage": _usage(prompt_tokens, completion_tokens)})
        return await sse.done()

    await ctx.generation_delay(max((len(c.chunks) for c in choices), default=0))
    payload: dict[str, Any] = {
        "id": ident,
        "object": "chat.completion",
        "created": ctx.created,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.text, "refusal": None},
                "logprobs": None,
                "finish_reason": c.finish_reason,
            }
            for i, c in enumerate(choices)
        ],
    }
    if ctx.usage_allowed():
        payload["usage"] = _usage(prompt_tokens, completion_tokens)
    return await _json_response(ctx, payload)


async def _chat_tool_calls(
    ctx: _Ctx, head: dict[str, Any], plans: list[list[_ToolCall]], prompt_tokens: int
) -> web.StreamResponse:
    """A chat answer made of tool calls, one list per choice; streamed as the API streams them:
    the first delta of a call carries its id and name, the next ones pieces of its arguments."""
    ctx.request[_TOOL_CALLS_REQ_KEY] = ",".join(sorted({c.broken for plan in plans for c in plan}))
    call_ids = [[f"call_{ctx.ident[:16]}_{i}_{j}" for j in range(len(plan))] for i, plan in enumerate(plans)]
    pieces = [[_chunks(c.arguments) or [""] for c in plan] for plan in plans]
    completion_tokens = sum(len(p) + 1 for per_choice in pieces for p in per_choice)
    if ctx.body.get("stream") is True:
        sse, include_usage, extra = await _open_chunk_stream(ctx)

        def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                **head,
                "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
                **extra,
            }

        for i in range(len(plans)):
            await sse.data(chunk(i, {"role": "assistant", "content": None}))
        if sse.cut_at(sent_all=False):
            return await sse.done()
        for i, plan in enumerate(plans):
            for j, call in enumerate(plan):
                opening = {"index": j, "id": call_ids[i][j], "type": "function"}
                if not await sse.content(
                    chunk(i, {"tool_calls": [{**opening, "function": {"name": call.name, "arguments": ""}}]})
                ):
                    return await sse.done()
                for piece in pieces[i][j]:
                    await ctx.sleep(ctx.itl_ms())
                    if not await sse.content(
                        chunk(i, {"tool_calls": [{"index": j, "function": {"arguments": piece}}]})
                    ):
                        return await sse.done()
        if sse.cut_at(sent_all=True):
            return await sse.done()
        for i in range(len(plans)):
            await sse.data(chunk(i, {}, "tool_calls"))
        if include_usage:
            await sse.data({**head, "choices": [], "usage": _usage(prompt_tokens, completion_tokens)})
        return await sse.done()

    await ctx.generation_delay(max(sum(len(p) + 1 for p in per_choice) for per_choice in pieces))
    payload: dict[str, Any] = {
        **head,
        "object": "chat.completion",
        "choices": [
            {
                "index": i,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": call_ids[i][j],
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for j, c in enumerate(plan)
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
            for i, plan in enumerate(plans)
        ],
    }
    if ctx.usage_allowed():
        payload["usage"] = _usage(prompt_tokens, completion_tokens)
    return await _json_response(ctx, payload)


def _stability_answer(ctx: _Ctx, messages: list[Any]) -> tuple[SimProfile, random.Random]:
    # The version's behaviour over turns, on rephrasings and on re-asks (simulator/stability.py).
    profile = phrasing_profile(conversation_profile(ctx.profile, messages), messages)
    return answer_rng(profile, ctx.rng, ctx.body, ctx.request.app[_RNG_KEY])


async def _judge(ctx: _Ctx, model: str, messages: list[Any]) -> web.StreamResponse:
    """A judge's verdict (judge mode), non-streamed, with usage as a hosted judge reports it."""
    from llmwatch.agent.apps.simulator.judge import judge_reply

    text = judge_reply(messages, ctx.profile.judge_bias or 0.0, ctx.profile.judge_noise)
    prompt_tokens = sum(_count_tokens(_content_text(m.get("content"))) for m in messages if isinstance(m, dict))
    completion_tokens = _count_tokens(text)
    await ctx.generation_delay(completion_tokens)
    payload: dict[str, Any] = {
        "id": "chatcmpl-" + ctx.ident,
        "object": "chat.completion",
        "created": ctx.created,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": "stop"}
        ],
    }
    if ctx.usage_allowed():
        payload["usage"] = _usage(prompt_tokens, completion_tokens)
    return await _json_response(ctx, payload)


async def _completions(ctx: _Ctx) -> web.StreamResponse:
    body = ctx.body
    model = _require_model(body)
    model = ctx.profile.served_model or model
    raw_prompt = body.get("prompt", "")
    if isinstance(raw_prompt, str):
        prompts = [raw_prompt]
    elif isinstance(raw_prompt, list) and raw_prompt and all(isinstance(p, str) for p in raw_prompt):
        prompts = list(raw_prompt)
    elif isinstance(raw_prompt, list) and all(isinstance(p, int) for p in raw_prompt):
        prompts = [" ".join(map(str, raw_prompt))]
    else:
        raise _ApiError(
            400,
            "Invalid type for 'prompt': expected a string or an array of strings.",
            param="prompt",
            code="invalid_type",
        )
    max_tokens = _opt_int(body, "max_tokens")
    n = _opt_int(body, "n", maximum=128) or 1
    stop = _stop_list(body)
    choices = [
        _plan_choice(ctx.rng, ctx.profile, _pick_topic(p), p, json_mode=False, max_tokens=max_tokens, stop=stop)
        for p in prompts
        for _ in range(n)
    ]
    prompt_tokens = sum(_count_tokens(p) for p in prompts)
    completion_tokens = sum(len(c.chunks) for c in choices)
    ident = "cmpl-" + ctx.ident
    head = {"id": ident, "object": "text_completion", "created": ctx.created, "model": model}

    if body.get("stream") is True:
        sse, include_usage, extra = await _open_chunk_stream(ctx)
        if not await _stream_chunks(
            ctx,
            sse,
            choices,
            lambda index, chunk: {
                **head,
                "choices": [{"text": chunk, "index": index, "logprobs": None, "finish_reason": None}],
                **extra,
            },
        ):
            return await sse.done()
        for i, c in enumerate(choices):
            await sse.data(
                {
                    **head,
                    "choices": [{"text": "", "index": i, "logprobs": None, "finish_reason": c.finish_reason}],
                    **extra,
                }
            )
        if include_usage:
            await sse.data({**head, "choices": [], "usage": _usage(prompt_tokens, completion_tokens)})
        return await sse.done()

    await ctx.generation_delay(max((len(c.chunks) for c in choices), default=0))
    payload: dict[str, Any] = {
        **head,
        "choices": [
            {"text": c.text, "index": i, "logprobs": None, "finish_reason": c.finish_reason}
            for i, c in enumerate(choices)
        ],
    }
    if ctx.usage_allowed():
        payload["usage"] = _usage(prompt_tokens, completion_tokens)
    return await _json_response(ctx, payload)


@lru_cache(maxsize=65536)
def _token_vector(token: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).standard_normal(dim)


def _embed(text: str, dim: int) -> np.ndarray:
    # A sum of per-word random vectors: deterministic, and texts that share
    # words land near each other, which embedding-drift detection relies on.
    words = _WORD_RE.findall(text.lower()) or [""]
    vec = np.zeros(dim)
    for w in words:
        vec += _token_vector(w, dim)
    norm = float(np.linalg.norm(vec))
    return (vec / norm if norm > 0 else vec).astype("<f4")


async def _embeddings(ctx: _Ctx) -> web.StreamResponse:
    body = ctx.body
    model = _require_model(body)
    raw = body.get("input")
    if isinstance(raw, str):
        inputs: list[tuple[str, int]] = [(raw, _count_tokens(raw))]
    elif isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        inputs = [(x, _count_tokens(x)) for x in raw]
    elif isinstance(raw, list) and raw and all(isinstance(x, int) for x in raw):
        inputs = [(" ".join(map(str, raw)), len(raw))]
    elif isinstance(raw, list) and raw and all(isinstance(x, list) for x in raw):
        inputs = [(" ".join(map(str, x)), len(x)) for x in raw]
    else:
        raise _ApiError(
            400,
            "Missing required parameter: 'input'."
            if raw is None
            else "Invalid type for 'input': expected a string or an array of strings.",
            param="input",
            code="missing_required_parameter" if raw is None else "invalid_type",
        )
    dim = _opt_int(body, "dimensions", maximum=_MAX_EMBED_DIM) or 8
    b64 = body.get("encoding_format") == "base64"
    data = []
    for i, (text, _) in enumerate(inputs):
        vec = _embed(text, dim)
        emb: Any = base64.b64encode(vec.tobytes()).decode() if b64 else vec.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    await ctx.sleep(0.25 * ctx.ttft_ms())
    tokens = sum(n for _, n in inputs)
    payload: dict[str, Any] = {"object": "list", "data": data, "model": model}
    if ctx.usage_allowed():
        payload["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return await _json_response(ctx, payload)


def _responses_prompt(body: dict[str, Any]) -> tuple[_Topic | None, str, int]:
    raw = body.get("input")
    instructions = body.get("instructions")
    if not isinstance(instructions, str):
        instructions = ""
    if isinstance(raw, str):
        user_texts, all_texts = [raw], [raw]
    elif isinstance(raw, list) and raw:
        all_texts, user_texts = [], []
        for item in raw:
            if isinstance(item, dict):
                text = _content_text(item.get("content"))
                all_texts.append(text)
                if item.get("role") == "user":
                    user_texts.append(text)
            elif isinstance(item, str):
                all_texts.append(item)
                user_texts.append(item)
    else:
        raise _ApiError(400, "Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    prompt = user_texts[-1] if user_texts else " ".join(all_texts)
    topic = _pick_topic(prompt) or _pick_topic(" ".join(all_texts))
    tokens = _count_tokens(instructions) + sum(_count_tokens(t) for t in all_texts)
    return topic, prompt, tokens


async def _responses(ctx: _Ctx) -> web.StreamResponse:
    body = ctx.body
    model = _require_model(body)
    model = ctx.profile.served_model or model
    topic, prompt, input_tokens = _responses_prompt(body)
    max_tokens = _opt_int(body, "max_output_tokens")
    text_opts = body.get("text")
    fmt = text_opts.get("format") if isinstance(text_opts, dict) else None
    json_mode = isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema")
    choice = _plan_choice(ctx.rng, ctx.profile, topic, prompt, json_mode=json_mode, max_tokens=max_tokens, stop=[])
    complete = choice.finish_reason == "stop"
    resp_id, msg_id = "resp_" + ctx.ident, "msg_" + ctx.ident

    def response(status: str, output: list[dict[str, Any]], usage: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": resp_id,
            "object": "response",
            "created_at": ctx.created,
            "status": status,
            "error": None,
            "incomplete_details": None if status != "incomplete" else {"reason": "max_output_tokens"},
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "temperature": body.get("temperature", 1.0),
            "top_p": body.get("top_p", 1.0),
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": fmt if isinstance(fmt, dict) else {"type": "text"}},
        }
        if usage and ctx.usage_allowed():
            out["usage"] = {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": len(choice.chunks),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + len(choice.chunks),
            }
        elif not usage:
            out["usage"] = None
        return out

    final_status = "completed" if complete else "incomplete"
    part = {"type": "output_text", "text": choice.text, "annotations": []}
    item = {"id": msg_id, "type": "message", "status": final_status, "role": "assistant", "content": [part]}

    if body.get("stream") is True:
        sse = _Sse(ctx)
        seq = iter(range(1 << 30))

        async def emit(kind: str, fields: dict[str, Any], content: bool = False) -> bool:
            payload = {"type": kind, "sequence_number": next(seq), **fields}
            if content:
                return await sse.content(payload, event=kind)
            await sse.data(payload, event=kind)
            return True

        await sse.start()
        await emit("response.created", {"response": response("in_progress", [], usage=False)})
        await emit("response.in_progress", {"response": response("in_progress", [], usage=False)})
        await ctx.sleep(ctx.ttft_ms())
        loc = {"item_id": msg_id, "output_index": 0, "content_index": 0}
        await emit(
            "response.output_item.added", {"output_index": 0, "item": {**item, "status": "in_progress", "content": []}}
        )
        await emit("response.content_part.added", {**loc, "part": {**part, "text": ""}})
        if sse.cut_at(sent_all=False):
            return await sse.done()
        for i, chunk in enumerate(choice.chunks):
            if i:
                await ctx.sleep(ctx.itl_ms())
            if not await emit("response.output_text.delta", {**loc, "delta": chunk, "logprobs": []}, content=True):
                return await sse.done()
        if sse.cut_at(sent_all=True):
            return await sse.done()
        await emit("response.output_text.done", {**loc, "text": choice.text, "logprobs": []})
        await emit("response.content_part.done", {**loc, "part": part})
        await emit("response.output_item.done", {"output_index": 0, "item": item})
        # The real API ends a truncated answer with `response.incomplete`.
        await emit(f"response.{final_status}", {"response": response(final_status, [item], usage=True)})
        return await sse.done(sentinel=False)  # the Responses stream has no [DONE]

    await ctx.generation_delay(len(choice.chunks))
    return await _json_response(ctx, response(final_status, [item], usage=True))


def _model_entry(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": _EPOCH, "owned_by": "llmwatch-sim"}


async def _list_models(request: web.Request) -> web.Response:
    payload = {"object": "list", "data": [_model_entry(m) for m in MODELS]}
    return web.Response(body=orjson.dumps(payload), content_type="application/json")


async def _get_model(request: web.Request) -> web.Response:
    # Any model name works on requests, so every name "exists".
    return web.Response(body=orjson.dumps(_model_entry(request.match_info["model"])), content_type="application/json")


async def _fault_prelude(request: web.Request) -> tuple[_Faults, web.Response | None]:
    """The faults that replace the whole response; the others shape it later."""
    faults = _parse_faults(request.headers.get(FAULT_HEADER))
    if faults.slow_ms:
        await asyncio.sleep(faults.slow_ms / 1000.0)
    if faults.status is not None:
        log.debug("simulator.fault", fault="status", status=faults.status)
        return faults, _status_error(faults.status)
    if faults.non_json:
        return faults, web.Response(text="upstream says hi", content_type="text/plain")
    return faults, None


def _simple(fn: Callable[[web.Request], Any]) -> Callable[[web.Request], Any]:
    async def handler(request: web.Request) -> web.StreamResponse:
        _, replaced = await _fault_prelude(request)
        return replaced if replaced is not None else await fn(request)

    return handler


def _endpoint(fn: Callable[[_Ctx], Any]) -> Callable[[web.Request], Any]:
    async def handler(request: web.Request) -> web.StreamResponse:
        profile: SimProfile = request[_PROFILE_REQ_KEY]
        faults, replaced = await _fault_prelude(request)
        if replaced is not None:
            return replaced
        try:
            body = await _read_json(request)
            seeded = _seeded(body, request.path, profile)
            if seeded is not None:
                rng, timing, ident, created = seeded
            else:
                rng = random.Random(request.app[_RNG_KEY].getrandbits(128))
                timing = random.Random(rng.getrandbits(64))
                ident, created = "%024x" % rng.getrandbits(96), int(time.time())
            if rng.random() < profile.error_rate:
                return _status_error(500)
            ctx = _Ctx(request, body, profile, faults, rng, timing, ident, created)
        except _ApiError as exc:
            return _error_response(exc.status, exc.message, exc.type, exc.param, exc.code)
        try:
            return await fn(ctx)
        except _ApiError as exc:
            return _error_response(exc.status, exc.message, exc.type, exc.param, exc.code)
        except ConnectionError:
            # A client that hangs up mid-stream is routine for a proxy's
            # upstream, not a server error worth a traceback.
            log.debug("simulator.client_disconnected", path=request.path)
            return ctx.response or web.Response(status=499)

    return handler


@web.middleware
async def _middleware(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    # One profile per request, so a runtime switch never mixes versions
    # within a single response.
    profile = request.app[_PROFILE_KEY].current()
    request[_PROFILE_REQ_KEY] = profile
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _error_response(404, f"Invalid URL ({request.method} {request.path})")
    except web.HTTPMethodNotAllowed:
        return _error_response(405, f"Invalid method for URL ({request.method} {request.path})")


async def _stamp_version(request: web.Request, response: web.StreamResponse) -> None:
    profile = request.get(_PROFILE_REQ_KEY) or request.app[_PROFILE_KEY].current()
    response.headers["x-model-version"] = profile.name
    tool_calls = request.get(_TOOL_CALLS_REQ_KEY)
    if tool_calls:
        response.headers[TOOL_CALLS_HEADER] = tool_calls


def create_app(
    profile: SimProfile | Callable[[], SimProfile] = SimProfile(), *, seed: int | None = None
) -> web.Application:
    """The simulator as an aiohttp application; `profile` may be a callable read once per request."""
    app = web.Application(middlewares=[_middleware], client_max_size=64 * 1024 * 1024)
    app[_PROFILE_KEY] = _ProfileSource(profile)
    app[_RNG_KEY] = random.Random(seed)
    app.on_response_prepare.append(_stamp_version)
    app.router.add_post("/v1/chat/completions", _endpoint(_chat))
    app.router.add_post("/v1/completions", _endpoint(_completions))
    app.router.add_post("/v1/embeddings", _endpoint(_embeddings))
    app.router.add_post("/v1/responses", _endpoint(_responses))
    app.router.add_get("/v1/models", _simple(_list_models))
    app.router.add_get("/v1/models/{model}", _simple(_get_model))
    return app


class SimulatorHandle:
    """A running simulator; also an async context manager that closes it."""

    def __init__(self, runner: web.AppRunner, app: web.Application, host: str, port: int) -> None:
        self._runner, self._app = runner, app
        self.host, self.port = host, port
        self.url = f"http://{host}:{port}"

    def set_profile(self, profile: SimProfile | Callable[[], SimProfile]) -> None:
        self._app[_PROFILE_KEY].profile = profile

    @property
    def profile(self) -> SimProfile:
        return self._app[_PROFILE_KEY].current()

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> SimulatorHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def start_simulator(
    host: str = "127.0.0.1",
    port: int = 0,
    profile: SimProfile | Callable[[], SimProfile] = SimProfile(),
    seed: int | None = None,
    shutdown_timeout: float = 1.0,
) -> SimulatorHandle:
    """Serve the simulator on the running loop; port 0 picks a free port."""
    app = create_app(profile, seed=seed)
    # A short shutdown timeout (by default) keeps test teardown fast when a client still holds a
    # stream open.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = runner.addresses[0][1] if runner.addresses else port
    display_host = f"[{host}]" if ":" in host else host
    handle = SimulatorHandle(runner, app, display_host, bound)
    log.info("simulator.started", url=handle.url, profile=handle.profile.name)
    return handle


def _profile_from_args(
    name: str,
    latency_scale: float,
    served_model: str | None = None,
    judge_bias: float | None = None,
    judge_noise: float = 0.0,
) -> SimProfile:
    base = PROFILES.get(name) or SimProfile(name=name)
    return SimProfile(
        **{
            **asdict(base),
            "latency_scale": latency_scale,
            "served_model": served_model,
            "judge_bias": judge_bias,
            "judge_noise": judge_noise,
        }
    )


async def serve(args: argparse.Namespace, out: Any = None) -> int:
    """Serve until SIGINT/SIGTERM; say on `out` (stdout) where, so `--port 0` is usable."""
    import sys

    out = out or sys.stdout
    handle = await start_simulator(
        args.host,
        args.port,
        _profile_from_args(
            args.profile,
            args.latency_scale,
            getattr(args, "served_model", None),
            getattr(args, "judge_bias", None),
            getattr(args, "judge_noise", 0.0) or 0.0,
        ),
        seed=args.seed,
        shutdown_timeout=getattr(args, "shutdown_timeout", 1.0),
    )
    from llmwatch.agent.signals import run_until_stopped, until

    async def main(stop: asyncio.Event) -> None:
        # `url=` as in the start-up log line, so one pattern finds the address in either.
        out.write(
            f"llmwatch simulator listening: url={handle.url} (OpenAI base URL {handle.url}/v1), "
            f"profile {handle.profile.name}; Ctrl-C to stop\n"
        )
        out.flush()
        await until(stop)

    async def cleanup() -> None:
        # Streams in flight get the runner's shutdown timeout (--shutdown-timeout) to finish.
        log.info("simulator.stopping", url=handle.url)
        await handle.close()
        log.info("simulator.stopped", url=handle.url)

    await run_until_stopped(main, cleanup)
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(args))
    return uvloop.run(serve(args))


def main(argv: Sequence[str] | None = None) -> None:
    from llmwatch.agent.apps.simulator.options import add_arguments
    from llmwatch.core.logs import configure_logging

    parser = argparse.ArgumentParser(
        prog="python -m llmwatch.agent.apps.simulator",
        description="OpenAI-compatible LLM server simulator (also: llmwatch simulate)",
        allow_abbrev=False,  # as llmwatch's own commands: an abbreviation is refused, not guessed
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging("info")
    try:
        run(args)
    except KeyboardInterrupt:  # a second Ctrl-C during the stop: given up, as `llmwatch simulate` does
        raise SystemExit(130) from None
    except OSError as exc:
        raise SystemExit(
            f"llmwatch simulator: cannot listen on {args.host}:{args.port} (--host/--port): {exc.strerror or exc}"
        ) from None


if __name__ == "__main__":
    main()
