"""RL algorithms over rollouts (the layer above :mod:`agent_trainers.rollout`), in four rooms.

* :mod:`.shared` - what every algorithm shares: the one batch type built from trajectories
  (:class:`AgentBatch`: ids, masks, rewards, per-step samples, behaviour log-probs, and what the trainers
  fill in), the ``rl:`` settings (:class:`RLConfig`) and one section per estimator (:mod:`.shared.sections`),
  the advantage estimator registry (:class:`Algorithm`, :class:`AdvantageMode`; outcome- and turn-level, and
  GiGPO's step level over anchor states), the one chunked log-prob engine, off-policy weights, the reference
  snapshot, exact resume;
* :mod:`.trl_adapter` - TRL's ``GRPOTrainer`` with our rollouts and advantages (:class:`AgentGRPOTrainer`,
  :class:`EnvRolloutFunc`, :func:`env_reward`, :func:`make_grpo_config`), vLLM, ``environment_factory``;
* :mod:`.ppo` - our PPO (:class:`PPOTrainer`, :class:`PPOConfig`);
* :mod:`.sft` - cold-start SFT on oracle trajectories.

``shared`` imports no room; the other rooms import ``shared`` only (``tests/agent_trainers/test_layers.py``).
The training rollouts live a floor down (:mod:`agent_trainers.rollout.training`), evaluation beside this package
(:mod:`agent_trainers.evaluation`). Names are imported lazily, so ``from agent_trainers.algorithms import
Algorithm`` does not import TRL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from agent_trainers.algorithms.ppo.config import PPOConfig as PPOConfig
    from agent_trainers.algorithms.ppo.trainer import PPOTrainer as PPOTrainer
    from agent_trainers.algorithms.sft.cold_start import make_sft_config as make_sft_config
    from agent_trainers.algorithms.sft.cold_start import oracle_episodes as oracle_episodes
    from agent_trainers.algorithms.sft.cold_start import run_sft as run_sft
    from agent_trainers.algorithms.shared.advantages import ESTIMATORS as ESTIMATORS
    from agent_trainers.algorithms.shared.advantages import compute_advantages as compute_advantages
    from agent_trainers.algorithms.shared.advantages import register as register
    from agent_trainers.algorithms.shared.batch import AgentBatch as AgentBatch
    from agent_trainers.algorithms.shared.batch import discounted_returns as discounted_returns
    from agent_trainers.algorithms.shared.checkpoints import last_complete_checkpoint as last_complete_checkpoint
    from agent_trainers.algorithms.shared.logprobs import scored_token_logprobs as scored_token_logprobs
    from agent_trainers.algorithms.shared.names import AdvantageMode as AdvantageMode
    from agent_trainers.algorithms.shared.names import Algorithm as Algorithm
    from agent_trainers.algorithms.shared.names import AnchorState as AnchorState
    from agent_trainers.algorithms.shared.names import LossType as LossType
    from agent_trainers.algorithms.shared.names import ScaleRewards as ScaleRewards
    from agent_trainers.algorithms.shared.names import VLLMMode as VLLMMode
    from agent_trainers.algorithms.shared.sections import GiGPOSettings as GiGPOSettings
    from agent_trainers.algorithms.shared.sections import GRPOSettings as GRPOSettings
    from agent_trainers.algorithms.shared.sections import ReinforcePPBaselineSettings as ReinforcePPBaselineSettings
    from agent_trainers.algorithms.shared.sections import ReinforcePPSettings as ReinforcePPSettings
    from agent_trainers.algorithms.shared.sections import RFTSettings as RFTSettings
    from agent_trainers.algorithms.shared.sections import RLOOSettings as RLOOSettings
    from agent_trainers.algorithms.shared.sections import TRLSettings as TRLSettings
    from agent_trainers.algorithms.shared.settings import ReportTo as ReportTo
    from agent_trainers.algorithms.shared.settings import RLConfig as RLConfig
    from agent_trainers.algorithms.trl_adapter.env_factory import make_environment_factory as make_environment_factory
    from agent_trainers.algorithms.trl_adapter.env_factory import trl_dataset_rows as trl_dataset_rows
    from agent_trainers.algorithms.trl_adapter.grpo import AgentGRPOTrainer as AgentGRPOTrainer
    from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc as EnvRolloutFunc
    from agent_trainers.algorithms.trl_adapter.rollout_func import env_reward as env_reward
    from agent_trainers.algorithms.trl_adapter.trl_args import grpo_args as grpo_args
    from agent_trainers.algorithms.trl_adapter.trl_args import make_grpo_config as make_grpo_config
    from agent_trainers.algorithms.trl_adapter.trl_args import micro_batch_args as micro_batch_args

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "ppo.config": ["PPOConfig"],
        "ppo.trainer": ["PPOTrainer"],
        "sft.cold_start": ["make_sft_config", "oracle_episodes", "run_sft"],
        "shared.advantages": ["ESTIMATORS", "compute_advantages", "register"],
        "shared.batch": ["AgentBatch", "discounted_returns"],
        "shared.checkpoints": ["last_complete_checkpoint"],
        "shared.logprobs": ["scored_token_logprobs"],
        "shared.names": ["AdvantageMode", "Algorithm", "AnchorState", "LossType", "ScaleRewards", "VLLMMode"],
        "shared.sections": [
            "GRPOSettings",
            "GiGPOSettings",
            "RLOOSettings",
            "ReinforcePPBaselineSettings",
            "RFTSettings",
            "ReinforcePPSettings",
            "TRLSettings",
        ],
        "shared.settings": ["RLConfig", "ReportTo"],
        "trl_adapter.env_factory": ["make_environment_factory", "trl_dataset_rows"],
        "trl_adapter.grpo": ["AgentGRPOTrainer"],
        "trl_adapter.rollout_func": ["EnvRolloutFunc", "env_reward"],
        "trl_adapter.trl_args": ["grpo_args", "make_grpo_config", "micro_batch_args"],
    },
)
