#!/usr/bin/env bash
# Set up .venv (if needed) and run the project's main job: does RL make the agent better than SFT?
# SmolLM2-135M-Instruct is cloned from partly flawed demonstrations on AgentR1/Calculator-v0, then trained with
# GRPO; both are evaluated on 100 dev tasks of another task family (the table the earlier runs recorded) and, once
# the choices are frozen, on 100 test tasks of a family never evaluated before; the last lines say what RL changed
# with paired 95% intervals (agent_trainers/sweeps/learn_main.yaml; ~1 hour on 2 idle cores; rerunning continues
# or skips finished runs). Extra arguments go to `agent-r1 sweep` (e.g. --plan, --seeds 0,1,2).
# The HotpotQA job (SFT + GRPO, then five methods on 30 held-aside questions) is `.venv/bin/agent-r1 demo`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/agent-r1 sweep learn_main --out runs/main "$@"
