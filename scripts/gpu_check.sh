#!/usr/bin/env bash
# One short check for a lent GPU machine (torch and transformers there; no TRL, no vLLM, no weights, no
# internet): a Qwen2.5-3B-shaped model with random bf16 weights, tokens/s of our rollout engine, and one
# GRPO step (TRL) and one PPO step (ours, when this checkout has it) with their time and peak memory,
# printed as a table (scripts/gpu_check.py).
#
#   bash scripts/gpu_check.sh --fetch-wheels   # here, with internet: the missing packages as wheels in .whl/
#   bash scripts/gpu_check.sh                  # there (carry .whl): install .whl/ to /tmp/site, then run
#   bash scripts/gpu_check.sh --tiny           # anywhere: a toy model of the same family, about 20 s on a CPU
#
# The wheels are those the GPU image (Python 3.12, torch, transformers, accelerate, pyarrow, pandas, httpx,
# ...) lacks: TRL and datasets, and what agent_gym / agent_trainers import (gymnasium, jsonschema, bm25s,
# PyStemmer, pydantic) and gpu_check.py's argument parser (tyro), at the versions constraints.txt pins; about 6 MB.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && python=.venv/bin/python
wheels="${GPU_CHECK_WHEELS:-.whl}"

if [ "${1:-}" = "--fetch-wheels" ]; then
  mkdir -p "$wheels"
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$wheels" \
    trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gymnasium==1.4.0 Farama-Notifications==0.0.6 \
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
    bm25s==0.3.16 PyStemmer==3.1.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 tyro==1.0.16 typeguard==4.6.1 docstring-parser==0.18.0 typing-extensions==4.16.0
  du -sh "$wheels"
  exit 0
fi

if ! "$python" -c "import trl, gymnasium, pydantic, tyro" 2>/dev/null; then
  if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
    echo "gpu_check: TRL/gymnasium/pydantic/tyro are missing and $wheels/ holds no wheels (run --fetch-wheels where pip works)" >&2
    exit 1
  fi
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
# The GPU image has JAX, which something in the import chain loads: by default it grabs 75% of the GPU in each
# process (trainer and generation worker), which leaves the async rows out of memory.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
exec "$python" scripts/gpu_check.py "$@"
