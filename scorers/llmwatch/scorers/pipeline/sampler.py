"""Which calls become samples.

The decision is a pure function of the request id, the route, the model and the outcome, so
replaying the same traffic keeps the same samples, and several sidecars that see the same
request id (retries through different replicas) agree. Errors and slow calls are always kept.
"""

from __future__ import annotations

import hashlib
from fnmatch import fnmatchcase
from functools import lru_cache

from pydantic import Field, model_validator

from llmwatch.core.config import Section

_SCALE = float(1 << 64)


# --- the `sampling` section ------------------------------------------------------------------


class SamplingOverride(Section):
    route: str | None = None  # exact path or glob, e.g. /v1/embeddings
    model: str | None = None  # glob on the request model, e.g. gpt-4o*
    rate: float = Field(ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _needs_a_selector(self) -> "SamplingOverride":
        if self.route is None and self.model is None:
            raise ValueError("an override needs `route` and/or `model` to say what it applies to")
        return self


class SamplingSection(Section):
    rate: float = Field(0.1, ge=0.0, le=1.0)
    keep_errors: bool = True
    # Requests slower than this are always kept: they are the ones an on-call engineer asks about.
    slow_ms: float | None = Field(10_000.0, gt=0)
    # The hash of this header's value decides sampling, so replays of a request agree.
    request_id_header: str = "x-request-id"
    overrides: list[SamplingOverride] = Field(default_factory=list)


# --- the sampler -----------------------------------------------------------------------------


def hash_fraction(request_id: str) -> float:
    """Map an id to [0, 1) uniformly and identically in every process (unlike `hash()`)."""
    digest = hashlib.blake2b(request_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


class Sampler:
    def __init__(self, cfg: SamplingSection) -> None:
        self._cfg = cfg
        self.rate_for = lru_cache(maxsize=2048)(self._rate_for)

    def _rate_for(self, route: str, model: str | None) -> float:
        for override in self._cfg.overrides:
            if override.route is not None and not fnmatchcase(route, override.route):
                continue
            if override.model is not None and not fnmatchcase(model or "", override.model):
                continue
            return override.rate
        return self._cfg.rate

    def decide(self, request_id: str, route: str, model: str | None, *, error: bool, latency_ms: float) -> str | None:
        """The reason to keep this call ("error", "slow", "rate"), or None to skip it."""
        cfg = self._cfg
        if error and cfg.keep_errors:
            return "error"
        if cfg.slow_ms is not None and latency_ms >= cfg.slow_ms:
            return "slow"
        rate = self.rate_for(route, model)
        if rate > 0.0 and hash_fraction(request_id) < rate:
            return "rate"
        return None
