"""PPO's settings: :class:`PPOConfig` (the ``ppo:`` section of an ``agent-r1`` config, the algorithm's own
section) and the rules across it and the shared RL settings (:func:`check_ppo_settings`).

The trainer takes :class:`~agent_trainers.algorithms.shared.settings.RLConfig`
(steps, learning rate, group size, ``beta``, the loss mask) and :class:`PPOConfig` as they are.

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

from pydantic import BaseModel, ConfigDict, Field

from agent_trainers.algorithms.shared.settings import RLConfig
from agent_trainers.rollout.config import RolloutConfig

__all__ = ["CriticKind", "KLPlacement", "PPOConfig", "ValueLevel", "check_ppo_settings"]


class CriticKind(StrEnum):
    """Where PPO's value estimates come from."""

    VALUE_HEAD = "value_head"
    """A linear value head on the policy's backbone (shared weights)."""
    SEPARATE = "separate"
    """A separate backbone with its own value head."""


class ValueLevel(StrEnum):
    """What PPO's critic values and GAE runs over."""

    TOKEN = "token"
    """Every agent token is a state (the paper's PPO): GAE over agent tokens, ``gamma`` per token."""
    STEP = "step"
    """Every turn is a state (Agent-R1 v0.1.0): the value read at each step's last prompt token, GAE over
    steps (:func:`~agent_trainers.algorithms.ppo.core.step_gae`), ``gamma`` per step; each token of a turn
    gets its step's advantage and the critic is trained at the step positions only."""


class KLPlacement(StrEnum):
    """Where the KL to the reference policy (coefficient ``rl.beta``) enters PPO."""

    REWARD = "reward"
    """``-beta * (log pi_old - log pi_ref)`` added to the reward of every agent token (InstructGPT); GAE spreads it."""
    LOSS = "loss"
    """``beta * k3`` (Schulman's estimator, mean over agent tokens) added to the loss, as GRPO does."""


class PPOConfig(BaseModel):
    """PPO's hyperparameters (the ``ppo:`` section). Shared RL settings (steps, learning rate, group
    size, ``beta``, the loss mask) live in the ``rl:`` section.

    A pydantic model (frozen): fields are checked when it is built, each field's docstring is its help text.
    """

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_default=True, frozen=True, allow_inf_nan=False
    )

    critic: CriticKind = CriticKind.VALUE_HEAD
    """``value_head``: a linear head on the policy's backbone; ``separate``: a critic with its own backbone.
    With ``value_head`` the value loss trains the shared backbone too, and Adam moves each weight it reaches
    by about the learning rate however small ``vf_coef`` is; at a policy learning rate that suits the policy
    this can wreck it (the bandit toy: 1 collapse in 5 seeds with ``value_head``, none with ``separate``;
    docs/algorithms.md). ``separate`` costs a second backbone's memory."""
    critic_model: str | None = None
    """``separate`` only: the critic backbone's initial weights - ``null`` copies the policy as RL starts
    (after SFT), or a model name or folder as ``model.name`` takes."""
    value: ValueLevel = ValueLevel.TOKEN
    """``token``: GAE over agent tokens (the paper's); ``step``: the critic values each step (turn) at its last
    prompt token and GAE runs over steps (Agent-R1 v0.1.0, StepPO)."""
    advantage_mask: bool = True
    """GAE over agent tokens, bootstrapping across env tokens (the paper's advantage alignment); ``false`` runs it
    over every token (the paper's ablation)."""
    gamma: float = Field(default=1.0, ge=0, le=1)
    """γ: discount per agent token (env tokens are skipped unless ``advantage_mask`` is false); per step
    with ``value: step``."""
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
    """Weight of the entropy bonus (0: none; the entropy is logged either way)."""
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


def check_ppo_settings(rl: RLConfig, ppo: PPOConfig, rollout: RolloutConfig) -> None:
    """The rules across PPO's settings, the shared RL settings and the rollout settings.

    Raises:
        ValueError: One line naming the broken rule.
    """
    if not rollout.temperature > 0:
        raise ValueError("ppo scores log-probs at the sampling temperature: rollout.temperature must be > 0")
    if ppo.value is ValueLevel.STEP and not ppo.advantage_mask:
        raise ValueError(
            "ppo.value: step runs GAE over steps, so ppo.advantage_mask: false (GAE over every token) does not apply"
        )
    if rl.step_samples and not ppo.advantage_mask:
        raise ValueError(
            "rl.step_samples needs ppo.advantage_mask true: a per-step sample holds the model's tokens only, so env "
            "tokens cannot enter GAE"
        )
    if ppo.critic_warmup_steps >= rl.steps:
        raise ValueError(
            f"ppo.critic_warmup_steps must be < the RL steps (got {ppo.critic_warmup_steps} and {rl.steps})"
        )
    if ppo.num_minibatches > rl.episodes_per_step:
        raise ValueError(
            "ppo.num_minibatches must be <= rl.num_generations * rl.prompts_per_step "
            f"(got {ppo.num_minibatches} and {rl.episodes_per_step})"
        )
