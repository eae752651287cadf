"""``python -m agent_trainers.rollout``: the rollout engine's command line (see :mod:`.cli`)."""

from agent_trainers.rollout.cli import run_rollout_cli

raise SystemExit(run_rollout_cli())
