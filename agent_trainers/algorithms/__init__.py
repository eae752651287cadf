"""RL algorithms over rollouts (the layer above :mod:`agent_trainers.rollout`), in four rooms.

* :mod:`.shared` - what every algorithm shares: the RL settings (:class:`RLConfig` and its enums),
  trajectories -> tensors, the advantage estimator registry (:class:`Algorithm`, :class:`AdvantageMode`;
  outcome- and turn-level, and GiGPO's step level over anchor states), the one chunked log-prob engine,
  the training rollouts (:class:`EnvRollouts`), exact resume;
* :mod:`.trl_adapter` - TRL's ``GRPOTrainer`` with our rollouts and advantages (:class:`AgentGRPOTrainer`,
  :class:`EnvRolloutFunc`, :func:`env_reward`, :func:`make_grpo_config`), vLLM, ``environment_factory``;
* :mod:`.ppo` - our PPO (:class:`PPOTrainer`, :class:`PPOConfig`);
* :mod:`.sft` - cold-start SFT on oracle trajectories.

``shared`` imports no room; the other rooms import ``shared`` only (``tests/agent_trainers/test_layers.py``).
Evaluation lives beside this package (:mod:`agent_trainers.evaluation`). Names are imported lazily, so
``from agent_trainers.algorithms import Algorithm`` does not import TRL.
"""

from __future__ import annotations

import importlib
from typing import Any

from agent_trainers.algorithms.shared.advantages import ESTIMATORS, AdvantageMode, Algorithm, compute_advantages

_LAZY = {
    "AgentGRPOTrainer": "trl_adapter.grpo",
    "EnvRolloutFunc": "trl_adapter.rollout_func",
    "env_reward": "trl_adapter.rollout_func",
    "EnvRollouts": "shared.rollouts",
    "episode_metrics": "shared.rollouts",
    "grpo_dataset_rows": "shared.rollouts",
    "AnchorState": "shared.tensors",
    "RewardBatch": "shared.tensors",
    "reward_batch": "shared.tensors",
    "discounted_returns": "shared.tensors",
    "ReportTo": "shared.settings",
    "RLConfig": "shared.settings",
    "LossType": "shared.settings",
    "ScaleRewards": "shared.settings",
    "VLLMMode": "shared.settings",
    "PPOConfig": "ppo.config",
    "PPOTrainer": "ppo.trainer",
    "make_grpo_config": "trl_adapter.trl_args",
    "make_sft_config": "sft.cold_start",
    "micro_batch_args": "trl_adapter.trl_args",
    "scored_token_logprobs": "shared.logprobs",
    "last_complete_checkpoint": "shared.checkpoints",
    "oracle_episodes": "sft.cold_start",
    "run_sft": "sft.cold_start",
    "make_environment_factory": "trl_adapter.env_factory",
    "trl_dataset_rows": "trl_adapter.env_factory",
}

__all__ = ["ESTIMATORS", "AdvantageMode", "Algorithm", "compute_advantages", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"agent_trainers.algorithms.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'agent_trainers.algorithms' has no attribute {name!r}")
