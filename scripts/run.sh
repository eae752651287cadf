#!/usr/bin/env bash
# Set up .venv (if needed) and run the project's main job (`agent-r1 demo`): real HotpotQA data from
# ../shared/data when present, else the embedded sample. Extra arguments go to `agent-r1 demo`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/agent-r1 demo "$@"
