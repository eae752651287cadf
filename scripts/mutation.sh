#!/usr/bin/env bash
# Mutation testing with mutmut 3 (not part of CI): plants small bugs in the modules where a silent
# bug would corrupt research results and checks that the test suite notices each one.
#
#   bash scripts/mutation.sh            # the default group, `gym`
#   bash scripts/mutation.sh gym        # action parsing, rubric and reward terms, answer metrics,
#                                       # SQL and calculator tools, noise, the conformance kit
#   bash scripts/mutation.sh list       # the groups and their modules
#
# Every mutant of the group is (re)tested, then per-module scores and the surviving mutants are
# printed by scripts/mutation_report.py (also written to mutants/report.md). The `gym` group took
# about 2 hours on 2 shared CPU cores. Re-test single mutants while working on a test with
# `.venv/bin/mutmut run 'agent_gym.core.parsing.x_parse_hermes__mutmut_7'`, show one with
# `.venv/bin/mutmut show NAME`; results stay in mutants/ (git-ignored).
#
# Adding a group (e.g. `trainer`: advantage estimators, loss masks, PPO/GRPO loss pieces): add its
# files to `only_mutate` and its test folders to `pytest_add_cli_args_test_selection` in setup.cfg
# ([mutmut]), then one line to MODULE_GROUPS below. Modules that import torch may need
# `process_isolation = forkserver` in that section (mutmut forks a worker per mutant).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

declare -A MODULE_GROUPS=(
  [gym]="agent_gym/core/parsing.py agent_gym/core/scanning.py agent_gym/core/rubric.py agent_gym/rewards/__init__.py
         agent_gym/datasets/metrics.py agent_gym/tools/sql.py agent_gym/tools/sql_budget.py
         agent_gym/tools/calculator.py agent_gym/core/noise.py agent_gym/testing/__init__.py"
)

group="${1:-gym}"
if [[ "$group" == "list" ]]; then
  for g in "${!MODULE_GROUPS[@]}"; do echo "$g:" ${MODULE_GROUPS[$g]}; done
  exit 0
fi
if [[ -z "${MODULE_GROUPS[$group]+x}" ]]; then
  echo "unknown group '$group'; known: ${!MODULE_GROUPS[*]}" >&2
  exit 2
fi

modules=(${MODULE_GROUPS[$group]})
patterns=()
for module in "${modules[@]}"; do
  grep -qxF "    $module" setup.cfg || { echo "$module is not in [mutmut] only_mutate of setup.cfg" >&2; exit 2; }
  name="${module%.py}"
  name="${name%/__init__}"
  patterns+=("${name//\//.}.*")
done

[[ -x .venv/bin/mutmut ]] || .venv/bin/python -m pip install -q 'mutmut==3.8.1'
# Property tests run 30 examples per mutant (the `dev` profile; the exact tests do most of the killing);
# HYPOTHESIS_PROFILE=default runs 200, about twice as long.
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-dev}"
start=$(date +%s)
.venv/bin/mutmut run --max-children "${MUTMUT_CHILDREN:-$(nproc)}" "${patterns[@]}"
echo "mutmut run took $(( $(date +%s) - start )) s"
.venv/bin/python scripts/mutation_report.py "${modules[@]}" | tee mutants/report.md
