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
from typing import TYPE_CHECKING, Any

from agent_trainers.algorithms.shared.names import AdvantageMode, Algorithm

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from agent_trainers.algorithms.ppo.config import (
        PPOConfig as PPOConfig,
    )
    from agent_trainers.algorithms.ppo.trainer import (
        PPOTrainer as PPOTrainer,
    )
    from agent_trainers.algorithms.sft.cold_start import (
        make_sft_config as make_sft_config,
    )
    from agent_trainers.algorithms.sft.cold_start import (
        oracle_episodes as oracle_episodes,
    )
    from agent_trainers.algorithms.sft.cold_start import (
        run_sft as run_sft,
    )
    from agent_trainers.algorithms.shared.advantages import (
        ESTIMATORS as ESTIMATORS,
    )
    from agent_trainers.algorithms.shared.advantages import (
        compute_advantages as compute_advantages,
    )
    from agent_trainers.algorithms.shared.checkpoints import (
        last_complete_checkpoint as last_complete_checkpoint,
    )
    from agent_trainers.algorithms.shared.logprobs import (
        scored_token_logprobs as scored_token_logprobs,
    )
    from agent_trainers.algorithms.shared.rollouts import (
        EnvRollouts as EnvRollouts,
    )
    from agent_trainers.algorithms.shared.rollouts import (
        episode_metrics as episode_metrics,
    )
    from agent_trainers.algorithms.shared.rollouts import (
        grpo_dataset_rows as grpo_dataset_rows,
    )
    from agent_trainers.algorithms.shared.settings import (
        LossType as LossType,
    )
    from agent_trainers.algorithms.shared.settings import (
        ReportTo as ReportTo,
    )
    from agent_trainers.algorithms.shared.settings import (
        RLConfig as RLConfig,
    )
    from agent_trainers.algorithms.shared.settings import (
        ScaleRewards as ScaleRewards,
    )
    from agent_trainers.algorithms.shared.settings import (
        VLLMMode as VLLMMode,
    )
    from agent_trainers.algorithms.shared.tensors import (
        AnchorState as AnchorState,
    )
    from agent_trainers.algorithms.shared.tensors import (
        RewardBatch as RewardBatch,
    )
    from agent_trainers.algorithms.shared.tensors import (
        discounted_returns as discounted_returns,
    )
    from agent_trainers.algorithms.shared.tensors import (
        reward_batch as reward_batch,
    )
    from agent_trainers.algorithms.trl_adapter.env_factory import (
        make_environment_factory as make_environment_factory,
    )
    from agent_trainers.algorithms.trl_adapter.env_factory import (
        trl_dataset_rows as trl_dataset_rows,
    )
    from agent_trainers.algorithms.trl_adapter.grpo import (
        AgentGRPOTrainer as AgentGRPOTrainer,
    )
    from agent_trainers.algorithms.trl_adapter.rollout_func import (
        EnvRolloutFunc as EnvRolloutFunc,
    )
    from agent_trainers.algorithms.trl_adapter.rollout_func import (
        env_reward as env_reward,
    )
    from agent_trainers.algorithms.trl_adapter.trl_args import (
        make_grpo_config as make_grpo_config,
    )
    from agent_trainers.algorithms.trl_adapter.trl_args import (
        micro_batch_args as micro_batch_args,
    )

_LAZY = {
    "ESTIMATORS": "shared.advantages",
    "compute_advantages": "shared.advantages",
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

__all__ = ["AdvantageMode", "Algorithm", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"agent_trainers.algorithms.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'agent_trainers.algorithms' has no attribute {name!r}")
