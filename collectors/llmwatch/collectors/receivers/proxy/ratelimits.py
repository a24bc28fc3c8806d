"""The upstream's rate-limit budget, read from the response headers the proxy relays anyway.

OpenAI and the servers that copy it send `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`,
`x-ratelimit-reset-requests` and the same three for `-tokens` on every answer, and `retry-after`
on a 429 or 503. They are read from the headers the capture keeps (`RATE_LIMIT_HEADERS`, lower
case), after the client has its response: the forwarded bytes are never touched. Each becomes a
gauge per upstream, model (the proxy's capped label) and resource (`requests` or `tokens`), with the
time it was last seen, so an alert can tell a budget running low now from an old reading.
"""

from __future__ import annotations

import re
import time
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Mapping

__all__ = ["RATE_LIMIT_HEADERS", "duration_s", "observe", "read_rate_limits", "retry_after_s"]

RESOURCES = ("requests", "tokens")
RATE_LIMIT_HEADERS = frozenset(
    [f"x-ratelimit-{kind}-{resource}" for kind in ("limit", "remaining", "reset") for resource in RESOURCES]
    + ["retry-after"]
)
# Go-style durations as OpenAI writes resets: "1s", "6m0s", "20ms", "1h2m3.5s".
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# A header value longer than this is no budget figure: not parsed.
_MAX_VALUE = 64
_MAX_SECONDS = 366 * 86400.0


def _number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if 0 <= number < 1e15 else None  # also refuses nan and inf


def duration_s(value: str) -> float | None:
    """Seconds of "1s", "6m0s", "20ms", "1h2m3.5s" or a plain number of seconds; None for anything else."""
    value = value.strip()
    if not value or len(value) > _MAX_VALUE:
        return None
    plain = _number(value)
    if plain is not None:
        return min(plain, _MAX_SECONDS)
    parts = _PART_RE.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    return min(sum(float(n) * _UNIT_S[u] for n, u in parts), _MAX_SECONDS)


def retry_after_s(value: str, now: float | None = None) -> float | None:
    """Seconds to wait from a `retry-after` of delay-seconds or an HTTP date."""
    value = value.strip()
    if not value or len(value) > _MAX_VALUE:
        return None
    plain = _number(value)
    if plain is not None:
        return min(plain, _MAX_SECONDS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return min(max(when.timestamp() - (time.time() if now is None else now), 0.0), _MAX_SECONDS)


def read_rate_limits(headers: Mapping[str, str]) -> dict[tuple[str, str], float]:
    """{(kind, resource): value} of the budget headers present; kind is limit, remaining or reset."""
    out: dict[tuple[str, str], float] = {}
    for resource in RESOURCES:
        for kind in ("limit", "remaining", "reset"):
            raw = headers.get(f"x-ratelimit-{kind}-{resource}")
            if raw is None or len(raw) > _MAX_VALUE:
                continue
            value = duration_s(raw) if kind == "reset" else _number(raw.strip())
            if value is not None:
                out[(kind, resource)] = value
    return out


def _labels(metric: Any, labels: tuple[str, ...]) -> Any:
    return metric.labels(*labels)


def observe(
    metrics: Any,
    headers: Mapping[str, str],
    upstream: str,
    model_label: str,
    child: Callable[[Any, tuple[str, ...]], Any] = _labels,
) -> None:
    """Set the rate-limit gauges of `metrics` (ProxyMetrics) from one response's headers; `child`
    finds a metric's child for a label tuple (the proxy passes its cache of them)."""
    if not headers.keys() & RATE_LIMIT_HEADERS:
        return  # most upstreams send none of them: one set intersection and done
    budget = read_rate_limits(headers)
    if budget:
        now = time.time()
        gauges = {
            "limit": metrics.ratelimit_limit,
            "remaining": metrics.ratelimit_remaining,
            "reset": metrics.ratelimit_reset,
        }
        seen = set()
        for (kind, resource), value in budget.items():
            child(gauges[kind], (upstream, model_label, resource)).set(value)
            seen.add(resource)
        for resource in seen:
            child(metrics.ratelimit_observed, (upstream, model_label, resource)).set(now)
    raw = headers.get("retry-after")
    if raw is not None:
        wait = retry_after_s(raw)
        if wait is not None:
            child(metrics.retry_after, (upstream, model_label)).set(wait)
            child(metrics.retry_after_responses, (upstream, model_label)).inc()
