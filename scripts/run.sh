#!/usr/bin/env bash
# Set up .venv (if needed) and run the project's main job: does RL make the agent better than SFT?
# SmolLM2-135M-Instruct is cloned from partly flawed demonstrations on AgentR1/Calculator-v0, then trained with
# GRPO; both are evaluated on 100 held-aside tasks of another task family, and the last lines say what RL
# changed with paired 95% intervals (configs/learn_main.yaml; 17.8 min measured on 2 idle cores; rerunning continues or
# skips finished stages). Extra arguments go to benchmarks/learning.py (e.g. --algorithms grpo,rloo).
# The HotpotQA job (SFT + GRPO, then five methods on 30 held-aside questions) is `.venv/bin/agent-r1 demo`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/python benchmarks/learning.py --config configs/learn_main.yaml --out runs/main "$@"
