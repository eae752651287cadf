#!/usr/bin/env bash
# Set up .venv (if needed) and run the default test suite (under 10 minutes on
# 2 cores). Extra arguments go to pytest, e.g. `-m slow` or `-k hotpotqa`.
# pytest-xdist runs a worker per core (at most 4; `-n 0` runs in one process, as a debugger wants): on 2 cores the
# suite takes about half the time it takes in one process.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -p no:cacheprovider -n auto --maxprocesses 4 "$@"
