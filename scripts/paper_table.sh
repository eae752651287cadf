#!/usr/bin/env bash
# The paper's Table 3 layout for SmolLM2-135M-Instruct on CPU: closed-book, naive RAG, base tool call and the
# main job's agent (runs/demo/final, from `bash scripts/run.sh`) on the first 100 questions of each shared dev
# sample (HotpotQA dev distractor sample a, 2Wiki dev_503, MuSiQue-Ans dev 100), then `agent-r1 report`.
#
# Every method sees the same env settings as the main job (2 passages of 300 characters per search, at most
# 4 turns of 40 new tokens, 1280 tokens in all; greedy). HotpotQA is in-domain (the main job trains on it);
# 2Wiki and MuSiQue are out-of-domain. Each evaluation is a resumable folder: run the script again to continue
# an interrupted one. One evaluation runs at a time.
#
#   bash scripts/paper_table.sh                      # everything (CPU-heavy: hours on 2 shared cores)
#   METHODS="closed-book naive-rag" LIMIT=20 bash scripts/paper_table.sh
#   SETTINGS_FROM=runs/hotpotqa-sweep/seed0/grpo bash scripts/paper_table.sh   # another agent, its own settings
# Environment: AGENT_R1_SHARED_DATA (default ../shared/data), AGENT (default runs/demo/final, or
# $SETTINGS_FROM/final), OUT (default runs/paper_table), LIMIT (default 100), METHODS (default all four), THREADS
# (torch threads, default 1; auto takes the cores idle at start), SETTINGS_FROM (a training run's folder: every
# method is evaluated with that run's env kwargs and rollout limits, `agent-r1 eval --settings-from`, instead of
# the main job's settings above).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
data="${AGENT_R1_SHARED_DATA:-../shared/data}"
settings_from="${SETTINGS_FROM:-}"
agent="${AGENT:-${settings_from:+$settings_from/final}}"
agent="${agent:-runs/demo/final}"
out="${OUT:-runs/paper_table}"
limit="${LIMIT:-100}"
methods="${METHODS:-closed-book naive-rag base-tool-call agent}"
settings=(--limit "$limit" --env-kwargs '{"top_k": 2, "max_passage_chars": 300}' --max-turns 4
          --max-new-tokens-per-turn 40 --max-total-tokens 1280 --temperature 0 --threads "${THREADS:-1}")
if [ -n "$settings_from" ]; then
  settings=(--limit "$limit" --settings-from "$settings_from" --threads "${THREADS:-1}")
fi
datasets=(
  "hotpotqa AgentR1/HotpotQA-v0 hotpotqa/dev_distractor_sample_a_300.jsonl"
  "2wikimultihopqa AgentR1/2WikiMultihopQA-v0 2wikimultihopqa/dev_503.jsonl"
  "musique AgentR1/MuSiQue-v0 musique/ans_dev_100.json"
)
start=$(date +%s)
for method in $methods; do
  model=smollm2
  label="$method"
  if [ "$method" = agent ]; then
    if [ ! -d "$agent" ]; then
      echo "[paper_table] skipping the agent rows: $agent not found (run bash scripts/run.sh first)"
      continue
    fi
    model="$agent"
    label="agent (${settings_from:-main job})"
  fi
  for row in "${datasets[@]}"; do
    read -r name env file <<<"$row"
    t0=$(date +%s)
    echo "[paper_table] $method on $name ($(uptime | sed 's/.*load average/load average/'))"
    .venv/bin/agent-r1 eval --env "$env" --data-path "$data/$file" --method "$method" --model "$model" \
      --label "$label" --out "$out/$name-$method" "${settings[@]}"
    echo "[paper_table] $method on $name: $(( $(date +%s) - t0 )) s"
  done
done
folders=()  # rows in the order of the methods
for method in closed-book naive-rag base-tool-call agent; do
  for row in "${datasets[@]}"; do
    read -r name _ _ <<<"$row"
    [ -f "$out/$name-$method/summary.json" ] && folders+=("$out/$name-$method")
  done
done
.venv/bin/agent-r1 report "${folders[@]}" --in-domain hotpotqa --out "$out"            # EM: table3.md, table3.csv
.venv/bin/agent-r1 report "${folders[@]}" --in-domain hotpotqa --metric f1 --out "$out/f1"
echo "[paper_table] total $(( $(date +%s) - start )) s"
