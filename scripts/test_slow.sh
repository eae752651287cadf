#!/usr/bin/env bash
# The slow tests CI runs after the default suite (.ci/run): the learning smoke (every algorithm must raise the bandit
# toy's held-aside reward on one of two seeds), the Ray fault tests (a killed actor, a hung step), the SIGKILL-during-
# resume test and the resumes from the other damaged checkpoints, the asynchronous-rollout runs and worker faults, the
# two-process GRPO run, the tiny sweeps, the training runs of the CLI, the docs pages whose code blocks train a model,
# the docstring examples that load the dense retriever's encoder, the site build, the headless-browser page, the
# TextWorld cache's other damages. Each file's slow tests only (`-m slow`); the rest of those files runs in the default
# suite. Extra arguments go to pytest.
# 23.6 min for its 77 tests with an empty AGENT_R1_CACHE (18.6 min for 72 with a warm one) on 2 cores (AMD EPYC,
# AVX2, 2026-12-05), two pytest-xdist workers; the docstring examples of agent_gym.retrieval.dense joined later (~15 s).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$root/scripts/test.sh" -q -m slow \
  tests/benchmarks/test_learning_smoke.py \
  tests/benchmarks/test_idle_micro_batches_bench.py \
  tests/benchmarks/test_kl_reference_bench.py \
  tests/benchmarks/test_sft_bench.py \
  tests/agent_trainers/policies/test_loader.py \
  tests/agent_trainers/rollout/test_ray_pool.py \
  tests/agent_trainers/rollout/test_async_worker.py \
  tests/agent_trainers/rollout/test_rollout_cli.py \
  tests/agent_trainers/evaluation/test_durable_writes.py \
  tests/agent_trainers/evaluation/test_viewer.py \
  tests/agent_trainers/evaluation/test_view_command.py \
  tests/agent_trainers/pipeline/test_async_rollouts.py \
  tests/agent_trainers/pipeline/test_resume.py \
  tests/agent_trainers/pipeline/test_agent_r1_cli.py \
  tests/agent_trainers/pipeline/test_eval_settings_from.py \
  tests/agent_trainers/pipeline/test_run_folder.py \
  tests/agent_trainers/pipeline/test_micro_batch.py \
  tests/agent_trainers/pipeline/test_sft_only.py \
  tests/agent_trainers/pipeline/test_env_failures.py \
  tests/agent_trainers/experiments/test_sweep_archive.py \
  tests/agent_trainers/experiments/test_sweep_report.py \
  tests/agent_trainers/algorithms/trl_adapter/test_grpo_multiprocess.py \
  tests/agent_trainers/algorithms/sft/test_sft.py \
  tests/agent_gym/integrations/test_verifiers.py \
  tests/agent_gym/envs/test_textworld_games.py \
  tests/docs/test_code_blocks.py \
  tests/docs/test_custom_env.py \
  tests/docs/test_api_pages.py \
  tests/docs/test_doctests.py \
  "$@"
