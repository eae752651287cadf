"""The names a config chooses among (closed choices as enums): no torch, no TRL.

The config (:mod:`agent_trainers.pipeline.config`) validates ``algorithm:`` and every choice of the RL
sections before anything heavy is imported, so that a wrong setting is a one-line error in about a second.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AdvantageMode",
    "Algorithm",
    "AnchorState",
    "ISCorrection",
    "LossType",
    "OlderCheckpoints",
    "ScaleRewards",
    "VLLMMode",
]


class Algorithm(StrEnum):
    """RL algorithms ``agent-r1`` can train with (``algorithm:`` in a config)."""

    GRPO = "grpo"
    """Group-normalised advantages; KL (``beta``) in TRL's loss."""
    RLOO = "rloo"
    """Leave-one-out group baseline."""
    REINFORCE_PP = "reinforce_pp"
    """REINFORCE++: global batch normalisation; token-level KL in the reward."""
    REINFORCE_PP_BASELINE = "reinforce_pp_baseline"
    """REINFORCE++-baseline: group-mean baseline, then global batch normalisation."""
    GIGPO = "gigpo"
    """GiGPO: GRPO's episode advantage plus a step advantage over turns taken from the same (anchor) state."""
    PPO = "ppo"
    """PPO: a critic, GAE over agent tokens (its own trainer, :mod:`agent_trainers.algorithms.ppo`)."""
    RFT = "rft"
    """Rejection-sampling fine-tuning (online): each step samples what an RL step samples, keeps the episodes whose
    return passes a threshold and takes one supervised step on their model tokens - the non-RL baseline."""


class ScaleRewards(StrEnum):
    """How ``grpo`` and ``gigpo`` scale centred values (TRL's ``scale_rewards``)."""

    GROUP = "group"
    """By the std of the group's units (outcome: its rollouts; turn: the step's turn values; gigpo's step
    advantage: the anchor group's turn values)."""
    BATCH = "batch"
    """By the std of every unit of the batch."""
    NONE = "none"
    """Not at all: only centre."""


class AdvantageMode(StrEnum):
    """What an advantage judges."""

    OUTCOME = "outcome"
    """One value per rollout: its (discounted) episode return."""
    TURN = "turn"
    """Per token: the return-to-go from its turn on (process rewards reach earlier turns)."""


class AnchorState(StrEnum):
    """Which tokens name the state a turn was taken from (GiGPO's anchor states; ``gigpo.anchor``)."""

    OBSERVATION = "observation"
    """The last thing the env said: the prompt for turn 0, else the env tokens between the previous turn's model
    tokens and this turn's (GiGPO's "identical environment state"; earlier turns may differ)."""
    HISTORY = "history"
    """The whole token prefix before the turn (prompt and completion so far): identical only when everything
    the agent saw and did so far was identical."""


class ISCorrection(StrEnum):
    """How a batch an older policy generated is reweighted (``rl.async_rollouts.importance_sampling``; TRL's modes).

    The weight of a model token is ``w = pi_train / pi_behaviour`` (the policy being trained over the one that
    sampled it, from the log-probs recorded at generation); per token, or per sequence as the product over its
    model tokens. It multiplies the token's policy loss, detached (truncated importance sampling).
    """

    TOKEN_TRUNCATE = "token_truncate"
    """Per token, capped: ``min(w, cap)``."""
    TOKEN_MASK = "token_mask"
    """Per token; a token whose ``w`` lies outside ``[1/cap, cap]`` leaves the loss (weight 0), else ``w``."""
    SEQUENCE_TRUNCATE = "sequence_truncate"
    """Per sequence (the product of its tokens' ratios), capped."""
    SEQUENCE_MASK = "sequence_mask"
    """Per sequence; a sequence whose ``w`` lies outside ``[1/cap, cap]`` leaves the loss."""
    NONE = "none"
    """No reweighting: stale batches are trained as if on-policy."""


class LossType(StrEnum):
    """TRL's loss aggregations we expose."""

    GRPO = "grpo"
    DAPO = "dapo"
    DR_GRPO = "dr_grpo"
    BNPO = "bnpo"


class VLLMMode(StrEnum):
    """Where RL rollouts are generated (TRL's ``use_vllm`` / ``vllm_mode``; vLLM is experimental here)."""

    NONE = "none"
    """With the trained model itself (transformers ``generate``)."""
    COLOCATE = "colocate"
    """With a vLLM engine inside each training process (extra ``vllm``, GPUs)."""
    SERVER = "server"
    """With a ``trl vllm-serve`` server at ``vllm_server_url`` (its own GPUs)."""


class OlderCheckpoints(StrEnum):
    """What a checkpoint keeps once a newer one is complete (``rl.older_checkpoints``)."""

    FULL = "full"
    """Everything: any checkpoint can be resumed from (transformers' own behaviour)."""
    MODEL = "model"
    """What evaluating it reads (weights, model config, tokenizer, trainer and rollout state); the optimizer,
    scheduler and RNG states - only resuming reads them, and under Adam they are two thirds of the bytes - are
    deleted. The newest complete checkpoint always keeps them, so a run still resumes from its last one."""
