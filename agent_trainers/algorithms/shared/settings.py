"""The RL settings every trainer reads: :class:`RLConfig` (the ``rl:`` section), its async block, and the
training-arguments helpers (device, precision, logger).

As :class:`~agent_trainers.rollout.RolloutConfig` is the one rollout settings
type, :class:`RLConfig` is the one type of what *every* RL trainer reads: the
pipeline's config holds it, and the TRL adapter
(:func:`~agent_trainers.algorithms.trl_adapter.trl_args.grpo_args`) and our PPO
(:class:`~agent_trainers.algorithms.ppo.PPOTrainer`) read it directly. What one
algorithm alone reads is its own section (:mod:`.sections`;
:class:`~agent_trainers.algorithms.ppo.PPOConfig` for PPO).

Example::

    rl:
      steps: 8
      num_generations: 4       # G: rollouts per task
      prompts_per_step: 2
      learning_rate: 1.0e-5
      async_rollouts: {enabled: true, max_staleness: 1}
"""

from __future__ import annotations

import importlib.util
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_trainers.algorithms.shared.names import ISCorrection, OlderCheckpoints
from agent_trainers.policies.device import Device, bf16_enabled, resolve_device

__all__ = ["MOVED_RL_KEYS", "AsyncSettings", "RLConfig", "ReportTo", "check_logger", "device_args"]


class ReportTo(StrEnum):
    """Where training curves go (besides ``metrics.jsonl``)."""

    NONE = "none"
    """Nowhere else."""
    TENSORBOARD = "tensorboard"
    """TensorBoard event files under ``<trainer output_dir>/runs/`` (offline; the ``train`` extra has it)."""
    WANDB = "wandb"
    """Weights & Biases (``pip install wandb``; it needs an account or ``WANDB_MODE=offline``)."""


_FROZEN = ConfigDict(
    extra="forbid", use_attribute_docstrings=True, validate_default=True, frozen=True, allow_inf_nan=False
)


class AsyncSettings(BaseModel):
    """Generation overlapped with training (``rl.async_rollouts``): a generation process plays the next steps'
    episodes with its own copy of the policy, synced after each optimizer step
    (:mod:`~agent_trainers.rollout.async_worker`; a CPU or one GPU, every algorithm). A batch may then come from a
    policy up to ``max_staleness`` steps old, corrected by ``importance_sampling``. ``async_rollouts: true`` is
    short for ``{enabled: true}``."""

    model_config = _FROZEN

    enabled: bool = False
    """Generate the next steps' episodes while this step trains."""
    max_staleness: int = Field(default=1, ge=0, le=64)
    """How many steps ahead episodes are generated, so how many optimizer steps old their policy may be (0: each
    step's episodes come from the current weights, in the worker: the synchronous run; at most 64)."""
    importance_sampling: ISCorrection = ISCorrection.TOKEN_TRUNCATE
    """How a stale batch's policy loss is reweighted by ``pi_train / pi_behaviour`` (TRL's vLLM modes:
    ``token_truncate``, ``token_mask``, ``sequence_truncate``, ``sequence_mask``; or ``none``)."""
    importance_cap: float = Field(default=2.0, gt=1)
    """The bound of ``importance_sampling`` (truncate at it; mask outside [1/cap, cap])."""
    generation_threads: int = Field(default=1, ge=1, le=1024)
    """torch CPU threads of the generation process (``threads`` stays the trainer's; at most 1,024)."""
    generation_timeout: float = Field(default=600.0, gt=0)
    """Seconds without word from the generation process (a job started or finished) before the run stops with an
    error naming it; must exceed one step's generation time."""

    def worker(self, rollouts: Any, model: Any, tokenizer: Any) -> Any:
        """The :class:`~agent_trainers.rollout.async_worker.AsyncRollouts` these settings describe, for the
        rollouts ``rollouts`` (an :class:`~agent_trainers.rollout.training.EnvRollouts`) of ``model``."""
        from agent_trainers.rollout.async_worker import AsyncRollouts

        return AsyncRollouts(
            rollouts,
            model,
            tokenizer,
            max_staleness=self.max_staleness,
            threads=self.generation_threads,
            timeout=self.generation_timeout,
        )

    @model_validator(mode="before")
    @classmethod
    def _switch_alone(cls, data: Any) -> Any:
        return {"enabled": data} if isinstance(data, bool) else data

    @model_validator(mode="after")
    def _settings_need_it_on(self) -> AsyncSettings:
        if not self.enabled:
            for name, info in type(self).model_fields.items():
                if name != "enabled" and getattr(self, name) != info.get_default(call_default_factory=True):
                    raise ValueError(
                        f"rl.async_rollouts.{name} is read only with rl.async_rollouts.enabled: true "
                        f"(got {getattr(self, name)!r})"
                    )
        return self


MOVED_RL_KEYS = {
    "micro_batch": "{algorithm}.micro_batch (ppo: ppo.micro_batch_size)",
    "gradient_checkpointing": "{algorithm}.gradient_checkpointing",
    "loss_type": "{algorithm}.loss_type",
    "advantage": "{algorithm}.advantage",
    "gamma": "{algorithm}.gamma (ppo: ppo.gamma, per token)",
    "scale_rewards": "grpo.scale_rewards or gigpo.scale_rewards",
    "advantage_mask": "ppo.advantage_mask",
    "dynamic_sampling": "{algorithm}.dynamic_sampling (grpo, rloo, reinforce_pp_baseline, gigpo)",
    "dynamic_sampling_tries": "{algorithm}.dynamic_sampling_tries",
    "gigpo_step_weight": "gigpo.step_weight",
    "gigpo_anchor": "gigpo.anchor",
    "vllm": "{algorithm}.vllm",
    "vllm_server_url": "{algorithm}.vllm_server_url",
    "max_staleness": "rl.async_rollouts.max_staleness",
    "importance_sampling": "rl.async_rollouts.importance_sampling",
    "importance_cap": "rl.async_rollouts.importance_cap",
    "generation_threads": "rl.async_rollouts.generation_threads",
    "generation_timeout": "rl.async_rollouts.generation_timeout",
}
"""Keys the ``rl:`` section had before each algorithm got its own section, and where each lives now
(``{algorithm}``: the chosen algorithm's section)."""


def moved_key_error(key: str, algorithm: str = "<algorithm>") -> str:
    """The one line that names where an old ``rl.<key>`` lives now."""
    return f"rl.{key} moved: it is now {MOVED_RL_KEYS[key].format(algorithm=algorithm)}"


class RLConfig(BaseModel):
    """The RL stage (the ``rl:`` section): what every RL trainer reads; ``algorithm`` (top level) chooses the
    trainer and how advantages are made, and its own section holds what it alone reads.

    A pydantic model (frozen): fields are checked when it is built, each field's docstring is its help text.
    """

    model_config = _FROZEN

    enabled: bool = True
    """Run this stage."""
    steps: int = Field(default=8, ge=1, le=1_000_000)
    """Optimizer steps (one generation batch each; at most 1,000,000)."""
    num_generations: int = Field(default=4, ge=2, le=1024)
    """G: rollouts per task (the group; TRL's GRPOTrainer needs at least 2; at most 1,024)."""
    prompts_per_step: int = Field(default=2, ge=1, le=4096)
    """Tasks per step (at most 4,096); a step plays ``prompts_per_step * num_generations`` episodes."""
    learning_rate: float = Field(default=1e-5, gt=0)
    """AdamW's peak learning rate (decayed linearly to 0 over ``steps``)."""
    warmup_steps: int = Field(default=0, ge=0)
    """RL steps over which the learning rate rises linearly from 0 to ``learning_rate`` before its
    decay. Adam's first steps move every weight by about the learning rate whatever the gradient's size
    (its bias correction makes the first update ``lr * sign(grad)``), so on a noisy RL gradient they are the
    largest and least informed moves of the run; a warm-up makes them small."""
    beta: float = Field(default=0.0, ge=0)
    """KL coefficient: for ``grpo`` and ``gigpo`` TRL's KL term in the loss; for ``rloo``/``reinforce_pp``/
    ``reinforce_pp_baseline`` a token-level KL penalty in the reward; for ``ppo`` where ``ppo.kl_penalty``
    says (0: no reference model)."""
    loss_mask: bool = True
    """Keep env tokens out of the policy loss; ``false`` puts them in (the paper's ablation)."""
    step_samples: bool = False
    """Score each turn's tokens after the prompt that turn was generated from (per-step samples,
    :mod:`~agent_trainers.algorithms.shared.sequences`) instead of after the episode's prefix. Always on when
    the env shows a view of its history (``context`` other than ``append``); under ``append`` the two give the
    same loss and gradients (each step's prefix is then run again: slower), so switching changes nothing but
    the cost. Needs ``loss_mask`` (and, with ``ppo``, ``ppo.advantage_mask``): a step sample has no env tokens."""
    save_steps: int = Field(default=4, ge=1)
    """Checkpoint every N steps (and at the end)."""
    older_checkpoints: OlderCheckpoints = OlderCheckpoints.FULL
    """``model``: once a checkpoint is complete, the ones before it keep their model (what choosing a checkpoint
    on dev and evaluating it read) and lose the optimizer, scheduler and RNG states (for SmolLM2-135M under Adam
    1.1 of a checkpoint's 1.6 GB); ``full`` keeps every checkpoint resumable."""
    max_env_errors: float = Field(default=0.5, ge=0, le=1)
    """Stop training when more than this share of a rollout call's episodes end in an env error (the env's
    ``step`` raised), with one line naming the env and the error; 1 never stops. A reward that is not a finite
    number always stops it, naming the reward term."""

    async_rollouts: AsyncSettings = Field(default_factory=AsyncSettings)
    """Generation overlapped with training (:class:`AsyncSettings`; ``true`` is short for ``{enabled: true}``)."""

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key in MOVED_RL_KEYS:
                    raise ValueError(moved_key_error(key))
        return data

    @model_validator(mode="after")
    def _step_samples_score_model_tokens(self) -> RLConfig:
        if self.step_samples and not self.loss_mask:
            raise ValueError(
                "rl.step_samples needs rl.loss_mask true: a per-step sample holds the model's tokens only, so env "
                "tokens cannot enter the loss"
            )
        return self

    @model_validator(mode="after")
    def _warmup_within_the_run(self) -> RLConfig:
        if self.warmup_steps >= self.steps:
            raise ValueError(
                f"rl.warmup_steps ({self.warmup_steps}) must be below rl.steps ({self.steps}): "
                "the learning rate would never reach its peak"
            )
        return self

    @property
    def episodes_per_step(self) -> int:
        """``num_generations * prompts_per_step``: the episodes one step plays (per process)."""
        return self.num_generations * self.prompts_per_step


def device_args(
    device: Device | str = Device.AUTO, bf16: bool | None = None, report_to: ReportTo | str = ReportTo.NONE
) -> dict[str, Any]:
    """``TrainingArguments`` fields for a device, a precision and a logger.

    Args:
        device: ``auto`` (a GPU when present), ``cpu`` or ``cuda``.
        bf16: bf16 autocast; ``None`` turns it on where the device supports it (a CUDA GPU with bf16).
        report_to: A :class:`ReportTo` value.

    Raises:
        ValueError: ``cuda`` without a GPU, or a logger whose package is missing.
    """
    where = resolve_device(device)
    logger = check_logger(report_to)
    return {"use_cpu": where.type == "cpu", "bf16": bf16_enabled(where.type, bf16), "report_to": logger.value}


def check_logger(report_to: ReportTo | str = ReportTo.NONE) -> ReportTo:
    """``report_to`` as a :class:`ReportTo`, refused when its package is not installed (nothing is imported).

    Raises:
        ValueError: A logger whose package is missing, with the command that installs it.
    """
    logger = ReportTo(report_to)
    if logger is not ReportTo.NONE and importlib.util.find_spec(logger.value) is None:
        extra = "pip install 'agent-r1-gym[train]'" if logger is ReportTo.TENSORBOARD else "pip install wandb"
        raise ValueError(f"report_to: {logger.value} is not installed ({extra})")
    return logger
