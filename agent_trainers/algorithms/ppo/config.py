"""PPO's settings: :class:`PPOConfig` (the ``ppo:`` section of an ``agent-r1`` config) and :class:`PPOArgs`.

Names follow the PPO paper (Schulman et al., 2017), GAE (Schulman et al.,
2016) and CleanRL's ``ppo.py``: ``gamma``, ``lam``, ``clip_coef``,
``vf_coef``, ``ent_coef``, ``update_epochs``, ``num_minibatches``,
``max_grad_norm``, ``target_kl``, ``norm_adv``, ``clip_vloss``.

Example::

    ppo:
      critic: value_head       # value_head | separate
      gamma: 1.0               # per agent token (the paper's default: gamma = lam = 1)
      lam: 1.0
      clip_coef: 0.2
      vf_coef: 0.5
      update_epochs: 2
      num_minibatches: 2
      micro_batch_size: 4
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

from agent_trainers.algorithms.ppo.actor_critic import CriticKind

__all__ = ["KLPlacement", "PPOArgs", "PPOConfig"]


class KLPlacement(StrEnum):
    """Where the KL to the reference policy (coefficient ``rl.beta``) enters PPO."""

    REWARD = "reward"
    """``-beta * (log pi_old - log pi_ref)`` added to the reward of every agent token (InstructGPT); GAE spreads it."""
    LOSS = "loss"
    """``beta * k3`` (Schulman's estimator, mean over agent tokens) added to the loss, as GRPO does."""


@dataclass(config=ConfigDict(extra="forbid", use_attribute_docstrings=True))
class PPOConfig:
    """PPO's hyperparameters (the ``ppo:`` section). Shared RL settings (steps, learning rate, group
    size, ``beta``, the loss and advantage masks) live in the ``rl:`` section."""

    critic: CriticKind = CriticKind.VALUE_HEAD
    """``value_head``: a linear head on the policy's backbone; ``separate``: a critic with its own backbone."""
    critic_model: str | None = None
    """``separate`` only: the critic backbone's initial weights - ``null`` copies the policy as RL starts
    (after SFT), or a model name or folder as ``model.name`` takes."""
    gamma: float = Field(default=1.0, ge=0, le=1)
    """γ: discount per agent token (env tokens are skipped unless ``rl.advantage_mask`` is false)."""
    lam: float = Field(default=1.0, ge=0, le=1)
    """λ of GAE."""
    clip_coef: float = Field(default=0.2, gt=0)
    """ε: the policy ratio is clipped to ``[1 - ε, 1 + ε]`` in the surrogate."""
    clip_vloss: bool = True
    """Clip the value loss around the values the critic gave at rollout time."""
    vf_clip: float = Field(default=0.2, gt=0)
    """How far a value may move from its rollout-time value before the clipped value loss takes over."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Weight of the value loss."""
    ent_coef: float = Field(default=0.0, ge=0)
    """Weight of the entropy bonus (0: entropies are not computed)."""
    norm_adv: bool = True
    """Whiten advantages (mean 0, std 1) over the tokens in the policy loss."""
    kl_penalty: KLPlacement = KLPlacement.REWARD
    """Where ``rl.beta`` puts the KL to the reference: ``reward`` (per token, before GAE) or ``loss``."""
    update_epochs: int = Field(default=2, ge=1)
    """Passes over each step's batch."""
    num_minibatches: int = Field(default=2, ge=1)
    """Optimizer steps per pass (the batch's episodes are shuffled and split into this many minibatches)."""
    micro_batch_size: int = Field(default=4, ge=1)
    """Episodes per forward/backward; gradients accumulate over a minibatch's micro-batches."""
    max_grad_norm: float = Field(default=1.0, gt=0)
    """Global gradient-norm clip."""
    critic_learning_rate: float | None = Field(default=None, gt=0)
    """Learning rate of the value head and critic backbone (``null``: ``rl.learning_rate``)."""
    critic_warmup_steps: int = Field(default=0, ge=0)
    """The first N RL steps train the critic only (the policy terms are left out of the loss), so that its
    values have learnt the returns before its advantages steer the policy. With ``critic: value_head`` the
    value loss still moves the shared backbone; ``separate`` keeps the policy fixed meanwhile."""
    target_kl: float | None = Field(default=None, gt=0)
    """Stop a step's epochs early once the mean approximate KL to the rollout policy exceeds this."""
    logit_chunk: int = Field(default=512, ge=1)
    """Completion tokens per block of full-vocabulary logits (memory: one block at a time)."""


@dataclass(config=ConfigDict(extra="forbid", use_attribute_docstrings=True))
class PPOArgs(PPOConfig):
    """Everything a PPO run needs: :class:`PPOConfig` plus the settings it shares with the other algorithms."""

    steps: int = Field(default=8, ge=1)
    """RL steps; each plays ``prompts_per_step * num_generations`` episodes, then updates."""
    num_generations: int = Field(default=4, ge=1)
    """Episodes per task in a step (PPO needs no group; the pipeline uses the same G for every algorithm)."""
    prompts_per_step: int = Field(default=2, ge=1)
    """Tasks per step (per process)."""
    learning_rate: float = Field(default=1e-5, gt=0)
    """AdamW learning rate of the policy (linear decay to 0 over the run, as TRL's default)."""
    kl_coef: float = Field(default=0.0, ge=0)
    """β of the KL to the reference (a frozen copy of the policy as RL starts); 0: no reference model."""
    loss_mask: bool = True
    """Keep env tokens out of the policy loss (false: the paper's ablation)."""
    advantage_mask: bool = True
    """Run GAE over agent tokens only, bootstrapping across env tokens (false: over every token)."""
    save_steps: int = Field(default=4, ge=1)
    """Checkpoint every N steps (and at the end)."""
    seed: int = 0
    """Seeds the task order and the minibatch shuffles (rollouts are seeded by the rollout function)."""
    device: str = "auto"
    """``auto``, ``cpu`` or ``cuda``."""
    bf16: bool | None = None
    """bf16 autocast (``null``: where the device supports it)."""

    def __post_init__(self) -> None:
        if self.critic_warmup_steps >= self.steps:
            raise ValueError(
                f"ppo.critic_warmup_steps must be < the RL steps (got {self.critic_warmup_steps} and {self.steps})"
            )
        episodes = self.num_generations * self.prompts_per_step
        if self.num_minibatches > episodes:
            raise ValueError(
                f"ppo.num_minibatches must be <= the episodes per step (got {self.num_minibatches} and {episodes})"
            )
