#!/usr/bin/env bash
# The per-algorithm comparison of docs/algorithms.md (issue 11 point 5): SmolLM2-135M-Instruct on
# AgentR1/Calculator-v0. ONE cold-start SFT checkpoint (trained once, reused), evaluated once on the
# held-aside tasks; then the same RL budget for every algorithm, each starting from that checkpoint
# and evaluated on the same tasks; then the table and plot (scripts/algorithms_report.py).
#
#   bash scripts/compare_algorithms.sh                       # everything (skips an SFT already trained)
#   ALGOS="grpo ppo" STEPS=3 bash scripts/compare_algorithms.sh
#
# Settings (environment variables): OUT (runs/calc), ALGOS, STEPS (RL steps, 3), GENS (episodes per
# step, 4), EVAL_TASKS (16). It runs for about 50 minutes on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/calc}
ALGOS=${ALGOS:-grpo ppo rloo reinforce_pp reinforce_pp_baseline}
STEPS=${STEPS:-3}
GENS=${GENS:-4}
EVAL_TASKS=${EVAL_TASKS:-16}
CONFIG=configs/calculator_smollm2.yaml
BIN=.venv/bin/agent-r1
SFT=$OUT-sft
timed() {  # wall and CPU seconds and peak RSS per run; a failed run is reported and the next one still runs
  local name=$1 rc=0; shift
  /usr/bin/time -o "$OUT-$name.time" -f "wall_s=%e cpu_s=%U+%S peak_rss_kb=%M" "$@" > "$OUT-$name.log" 2>&1 || rc=$?
  echo "$name rc=$rc $(tail -1 "$OUT-$name.time")" | tee -a "$OUT-timing.txt"
}

# 1. cold-start SFT, once (rl off; its own eval is skipped: step 2 evaluates the checkpoint)
if [ ! -f "$SFT/sft/DONE" ]; then
  timed sft $BIN train --config $CONFIG --set rl.enabled=false --set eval.before=false \
      --set eval.tasks="$EVAL_TASKS" --set output_dir="$SFT"
fi
# 2. the SFT checkpoint on the held-aside tasks: the same spec as the pipeline's eval (seed 12345, greedy)
timed eval_sft $BIN eval --env AgentR1/Calculator-v0 --env-kwargs '{"task_seed": 1}' --method agent \
    --model "$SFT/sft" --label "agent (SFT)" --limit "$EVAL_TASKS" --seed 12345 --max-turns 6 \
    --max-new-tokens-per-turn 40 --max-total-tokens 1024 --temperature 0 --out "$SFT/eval/sft" --overwrite
# 3. the same RL budget per algorithm, from the SFT checkpoint (ppo: one epoch, one minibatch: one pass
#    over each step's episodes, like the TRL-based algorithms)
for a in $ALGOS; do
  timed "$a" $BIN train --config $CONFIG --set sft.enabled=false --set eval.before=false \
      --set model.name="$SFT/sft" --set algorithm="$a" --set rl.steps="$STEPS" --set rl.num_generations="$GENS" \
      --set rl.save_steps="$STEPS" --set eval.tasks="$EVAL_TASKS" --set ppo.update_epochs=1 \
      --set output_dir="$OUT-$a"
done
# 4. table and plot
.venv/bin/python scripts/algorithms_report.py --sft "$SFT" --runs $(for a in $ALGOS; do echo "$OUT-$a"; done) \
    --out docs/algorithms
