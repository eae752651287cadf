"""RL algorithms over rollouts (the layer above :mod:`agent_trainers.rollout`).

* :mod:`.tensors` - trajectories -> per-token rewards, masks, turn indices;
* :mod:`.advantages` - the estimator registry (:class:`Algorithm`: ``grpo``,
  ``rloo``, ``reinforce_pp``, ``reinforce_pp_baseline``; :class:`AdvantageMode`);
* :mod:`.rollout_func` - our engine as TRL's ``rollout_func`` (:class:`EnvRolloutFunc`), :func:`env_reward`;
* :mod:`.grpo` - :class:`AgentGRPOTrainer`: TRL's ``GRPOTrainer`` with advantages from the registry;
* :mod:`.checkpoints` - exact resume (rollout state in checkpoints, last complete checkpoint);
* :mod:`.trl_args` - device / precision / logger arguments (:func:`make_grpo_config`, :func:`make_sft_config`),
  micro-batches (:func:`micro_batch_args`);
* :mod:`.logprobs` - log-probs of the loss-mask tokens only, in vocabulary chunks (:func:`scored_token_logprobs`);
* :mod:`.sft` - cold-start SFT on oracle trajectories;
* :mod:`.env_factory` - a TRL ``environment_factory`` from an env id;
* :mod:`.evaluate` - evaluation on held-aside tasks.

Names are imported lazily, so ``from agent_trainers.algorithms import Algorithm``
does not import TRL.
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
