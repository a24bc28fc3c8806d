"""llmwatch: a production traffic observability sidecar for OpenAI-compatible LLM services.

One import namespace over the repository's folders (pyproject's package-dir maps them):

- `llmwatch.core`: records, config, errors, OpenAI wire helpers, JSON Lines I/O, metrics.
  Imports nothing above it.
- `llmwatch.scorers` (folder `scorers/`): processors - sample, redact, check, aggregate, drift,
  evaluation. Import only the core.
- `llmwatch.collectors` (folder `collectors/`): ways in and out - the proxy, OTLP ingest and
  export, files, Kafka, the metrics/health server, webhooks.
- `llmwatch.agent` (folder `agent/`): the runtime that wires them, and the command line.

docs/architecture.md draws the layers and the pipeline.
"""

__version__ = "0.2.0"

# In a source checkout, agent/, collectors/ and scorers/ sit beside this folder (an installed copy
# has them inside it). Python run from the checkout's root finds this folder first, through the
# current directory; let the subpackages resolve from the sibling folders then, as pyproject maps them.
import os as _os

_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if all(_os.path.isfile(_os.path.join(_checkout, d, "__init__.py")) for d in ("agent", "collectors", "scorers")):
    __path__.append(_checkout)
del _os, _checkout
