#!/usr/bin/env bash
# Mutation testing with mutmut 3 (not part of CI): plants small bugs in the modules where a silent
# bug would corrupt research results and checks that the test suite notices each one.
#
#   bash scripts/mutation.sh            # the default group, `gym`
#   bash scripts/mutation.sh gym        # action parsing, rubric and reward terms, answer metrics,
#                                       # SQL and calculator tools, noise, the conformance kit
#   bash scripts/mutation.sh trainer    # advantage estimators, trajectories -> tensors, GAE, whitening,
#                                       # clipped losses, KL placement, incremental tokenisation (masks)
#   bash scripts/mutation.sh list       # the groups and what they mutate
#   bash scripts/mutation.sh gym NAME.. # re-test only these mutants (names or globs), then the report
#
# Every mutant of the group is (re)tested, then per-module scores and the surviving mutants are
# printed by scripts/mutation_report.py (also written to mutants/report.md of the group's folder).
# Run times on 2 shared CPU cores are in docs/mutation.md (`gym` about 2 hours).
# Re-test single mutants while working on a test with
# `.venv/bin/mutmut run 'agent_gym.core.parsing.x_parse_hermes__mutmut_7'`, show one with
# `.venv/bin/mutmut show NAME` (for another group, run these inside build/mutation/<group>/ with
# that folder's setup.cfg, e.g. `../../../.venv/bin/mutmut show NAME`).
#
# Where the groups run: `gym` in the repository root with the [mutmut] section of setup.cfg (results
# in mutants/, git-ignored); any other group in its own copy of the code, build/mutation/<group>/,
# refreshed from the working tree on each run, whose setup.cfg is the [mutmut:<group>] section of
# setup.cfg. mutmut reads one config per folder and resets every cached result when the test
# selection changes, so two groups cannot share a folder.
#
# Adding a group: a [mutmut:<group>] section in setup.cfg (files in `only_mutate`, test files in
# `pytest_add_cli_args_test_selection`), then one line to PATTERNS below: mutant-name globs, either a
# whole module (`pkg.module.*`) or single functions (`pkg.module.x_func__mutmut_*`,
# `pkg.module.xǁClassǁmethod__mutmut_*`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

declare -A PATTERNS=(
  [gym]="agent_gym.core.parsing.* agent_gym.core.scanning.* agent_gym.core.rubric.* agent_gym.rewards.*
         agent_gym.datasets.metrics.* agent_gym.tools.sql.* agent_gym.tools.sql_budget.*
         agent_gym.tools.calculator.* agent_gym.core.noise.* agent_gym.testing.*"
  # whole modules: the estimators, the tensors, PPO's pure functions; of the tokeniser, the engine and the
  # trainers only the functions that build token ids and masks, place rewards and KL, and assemble the loss
  [trainer]="agent_trainers.algorithms.shared.advantages.* agent_trainers.algorithms.shared.batch.*
             agent_trainers.algorithms.ppo.core.*
             agent_trainers.rollout.chat.x_tokenize_chat__mutmut_*
             agent_trainers.rollout.chat.xǁChatTokenizerǁenv_text__mutmut_*
             agent_trainers.rollout.chat.xǁChatTokenizerǁenv_ids__mutmut_*
             agent_trainers.rollout.chat.xǁChatTokenizerǁsplit_turn__mutmut_*
             agent_trainers.rollout.chat.xǁChatTokenizerǁprompt_ids__mutmut_*
             agent_trainers.rollout.chat.xǁChatTokenizerǁencode__mutmut_*
             agent_trainers.rollout.chat.xǁChatTokenizerǁdecode__mutmut_*
             agent_trainers.rollout.engine.xǁ_Episodeǁadd_model_turn__mutmut_*
             agent_trainers.rollout.engine.xǁ_Episodeǁapply_step__mutmut_*
             agent_trainers.algorithms.ppo.trainer.xǁPPOTrainerǁprepare__mutmut_*
             agent_trainers.algorithms.ppo.trainer.xǁPPOTrainerǁ_batch__mutmut_*
             agent_trainers.algorithms.ppo.trainer.xǁPPOTrainerǁ_scored__mutmut_*
             agent_trainers.algorithms.ppo.trainer.xǁPPOTrainerǁ_micro_loss__mutmut_*
             agent_trainers.algorithms.trl_adapter.grpo.xǁAgentGRPOTrainerǁcompute_loss__mutmut_*
             agent_trainers.algorithms.trl_adapter.grpo.xǁAgentGRPOTrainerǁ_drop_signal_free_update__mutmut_*
             agent_trainers.algorithms.trl_adapter.scoring.*
             agent_trainers.algorithms.trl_adapter.grpo.xǁAgentGRPOTrainerǁ_generate_and_score_completions__mutmut_*
             agent_trainers.algorithms.trl_adapter.grpo.xǁAgentGRPOTrainerǁ_token_kl__mutmut_*"
)

group="${1:-gym}"
if [[ "$group" == "list" ]]; then
  for g in "${!PATTERNS[@]}"; do echo "$g:" ${PATTERNS[$g]}; done
  exit 0
fi
if [[ -z "${PATTERNS[$group]+x}" ]]; then
  echo "unknown group '$group'; known: ${!PATTERNS[*]}" >&2
  exit 2
fi
patterns=(${PATTERNS[$group]})
tried=("${patterns[@]}")
(( $# > 1 )) && tried=("${@:2}")  # `mutation.sh GROUP NAME...`: re-test only these mutants (names or globs)

[[ -x .venv/bin/mutmut ]] || .venv/bin/python -m pip install -q 'mutmut==3.8.1'
python="$root/.venv/bin/python"
work="$root"
if [[ "$group" != gym ]]; then
  work="$root/build/mutation/$group"
  mkdir -p "$work"
  items=(agent_gym agent_trainers tests benchmarks configs scripts agent_r1_gym.py README.md pyproject.toml)
  (cd "$work" && rm -rf "${items[@]}")
  tar -C "$root" --exclude=__pycache__ --exclude=.hypothesis -cf - "${items[@]}" | tar -C "$work" -xf -
  # the group's section becomes the copy's [mutmut] section
  "$python" - "$root/setup.cfg" "mutmut:$group" "$work/setup.cfg" <<'EOF'
import configparser
import sys

src, section, dst = sys.argv[1:]
cfg = configparser.RawConfigParser()
cfg.read(src)
if not cfg.has_section(section):
    sys.exit(f"setup.cfg has no [{section}] section")
out = configparser.RawConfigParser()
out["mutmut"] = dict(cfg[section])
with open(dst, "w") as f:
    out.write(f)
EOF
  # torch is imported and used by the stats run before mutmut forks a worker per mutant: one thread
  # keeps the forked workers safe (and fair to the other core)
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
fi
cd "$work"

# the group's modules, for the report: each file of only_mutate that one of the patterns names
modules=()
while IFS= read -r module; do
  [[ -n "$module" ]] || continue
  dotted="${module%.py}"
  dotted="${dotted%/__init__}"
  dotted="${dotted//\//.}"
  for p in "${patterns[@]}"; do
    rest="${p#"$dotted".}"
    if [[ "$rest" != "$p" && "$rest" != *.* ]]; then
      modules+=("$module")
      break
    fi
  done
done < <("$python" -c "import configparser; c = configparser.RawConfigParser(); c.read('setup.cfg'); print(c['mutmut']['only_mutate'])" | sed 's/^ *//')

# Property tests run 30 examples per mutant (the `dev` profile; the exact tests do most of the killing);
# HYPOTHESIS_PROFILE=default runs 200, about twice as long.
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-dev}"
start=$(date +%s)
"$root/.venv/bin/mutmut" run --max-children "${MUTMUT_CHILDREN:-$(nproc)}" "${tried[@]}"
echo "mutmut run took $(( $(date +%s) - start )) s"
"$python" "$root/scripts/mutation_report.py" "${modules[@]}" | tee mutants/report.md
