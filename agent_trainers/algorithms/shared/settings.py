"""The RL settings every trainer takes as they are: :class:`RLConfig` (the ``rl:`` section) and its enums.

As :class:`~agent_trainers.rollout.RolloutConfig` is the one rollout settings
type, :class:`RLConfig` is the one RL settings type: the pipeline's config
holds it, and the TRL adapter (:func:`~agent_trainers.algorithms.trl_adapter.trl_args.grpo_args`)
and our PPO (:class:`~agent_trainers.algorithms.ppo.PPOTrainer`) read it
directly. PPO's own settings are :class:`~agent_trainers.algorithms.ppo.PPOConfig`.

Each trainer declares which of these settings it reads (:class:`Reads`); a
setting changed from its default that the chosen algorithm does not read is
refused (:meth:`Reads.refuse_unread`), so none is ignored without a word.

Example::

    rl:
      steps: 8
      num_generations: 4       # G: rollouts per task
      prompts_per_step: 2
      advantage: turn          # outcome | turn
      loss_type: dapo          # the TRL algorithms only
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_trainers.algorithms.shared.names import AdvantageMode, AnchorState, ISCorrection, ScaleRewards
from agent_trainers.policies.device import Device, resolve_device

__all__ = [
    "ASYNC_SETTINGS",
    "AnchorState",
    "ISCorrection",
    "LossType",
    "RLConfig",
    "Reads",
    "ReportTo",
    "ScaleRewards",
    "VLLMMode",
    "bf16_enabled",
    "changed_settings",
    "cpu_has_native_bf16",
    "device_args",
]


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
    """With a ``trl vllm-serve`` server at ``rl.vllm_server_url`` (its own GPUs)."""


class ReportTo(StrEnum):
    """Where training curves go (besides ``metrics.jsonl``)."""

    NONE = "none"
    """Nowhere else."""
    TENSORBOARD = "tensorboard"
    """TensorBoard event files under ``<trainer output_dir>/runs/`` (offline; the ``train`` extra has it)."""
    WANDB = "wandb"
    """Weights & Biases (``pip install wandb``; it needs an account or ``WANDB_MODE=offline``)."""


class RLConfig(BaseModel):
    """The RL stage (the ``rl:`` section); ``algorithm`` (top level) chooses how advantages are made.

    A pydantic model (frozen): fields are checked when it is built, each field's docstring is its help text.
    """

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_default=True, frozen=True, allow_inf_nan=False
    )

    enabled: bool = True
    """Run this stage."""
    steps: int = Field(default=8, ge=1)
    """Optimizer steps (one generation batch each)."""
    num_generations: int = Field(default=4, ge=2)
    """G: rollouts per task (the group; TRL's GRPOTrainer needs at least 2)."""
    prompts_per_step: int = Field(default=2, ge=1)
    """Tasks per step; a step plays ``prompts_per_step * num_generations`` episodes."""
    micro_batch: int = Field(default=1, ge=1)
    """Rollouts per forward/backward pass (gradients accumulate over a step's passes); must divide
    ``prompts_per_step * num_generations``. ``num_generations`` puts a whole group in one pass, so the
    task's prompt is run once for all its rollouts (more memory, less compute). ``ppo`` has ``ppo.micro_batch_size``."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: each layer keeps only its input (less memory, one
    more forward of compute). The shared prompt of ``micro_batch`` stays shared. Set for the RL stage
    whatever the SFT stage left (TRL's SFT turns it on)."""
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
    loss_type: LossType = LossType.DAPO
    """TRL's loss aggregation."""
    advantage: AdvantageMode = AdvantageMode.TURN
    """``outcome`` (one value per rollout) or ``turn`` (per-turn returns-to-go from process rewards). For
    ``gigpo`` it values the turns its step advantage compares (``turn``: their returns-to-go, the paper's;
    ``outcome``: their episode's return); its episode advantage is the outcome one either way."""
    gamma: float = Field(default=1.0, gt=0, le=1)
    """Per-turn discount of returns."""
    scale_rewards: ScaleRewards = ScaleRewards.GROUP
    """``grpo`` and ``gigpo`` only: divide by the group's std (``group``; ``gigpo``'s step advantage: the anchor
    group's), the batch's (``batch``) or not (``none``)."""
    loss_mask: bool = True
    """Keep env tokens out of the policy loss; ``false`` puts them in (the paper's ablation)."""
    advantage_mask: bool = True
    """``ppo`` only: GAE over agent tokens, bootstrapping across env tokens; ``false`` runs it over every
    token (the paper's ablation). The other algorithms have no per-token value to bootstrap."""
    step_samples: bool = False
    """Score each turn's tokens after the prompt that turn was generated from (per-step samples,
    :mod:`~agent_trainers.algorithms.shared.sequences`) instead of after the episode's prefix. Always on when
    the env shows a view of its history (``context`` other than ``append``); under ``append`` the two give the
    same loss and gradients (each step's prefix is then run again: slower), so switching changes nothing but
    the cost. Needs ``loss_mask`` and ``advantage_mask`` (a step sample has no env tokens)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: a group whose rollouts all earn the same return carries no signal for a group
    baseline, so it is dropped and its slot refilled with a fresh training task's group, for up to
    ``dynamic_sampling_tries`` extra rounds per step (groups still tied after them stay). ``grpo``, ``rloo``,
    ``reinforce_pp_baseline`` and ``gigpo`` (the algorithms with a group baseline)."""
    dynamic_sampling_tries: int = Field(default=3, ge=1)
    """With ``dynamic_sampling``: the most extra rollout rounds per step (each plays one fresh group per tied slot)."""
    gigpo_step_weight: float = Field(default=1.0, ge=0)
    """``gigpo`` only: omega, the weight of the step advantage in ``A = A_episode + omega * A_step`` (0: GRPO's
    outcome advantage)."""
    gigpo_anchor: AnchorState = AnchorState.OBSERVATION
    """``gigpo`` only: which turns share an anchor state - ``observation`` (the same last env observation, the
    prompt for turn 0: GiGPO's "identical environment state") or ``history`` (the same whole token prefix)."""
    save_steps: int = Field(default=4, ge=1)
    """Checkpoint every N steps (and at the end)."""
    vllm: VLLMMode = VLLMMode.NONE
    """Generate RL rollouts with TRL's vLLM engine: ``none``, ``colocate`` or ``server`` (experimental, GPU)."""
    vllm_server_url: str = "http://127.0.0.1:8000"
    """The ``trl vllm-serve`` server (``vllm: server``)."""
    async_rollouts: bool = False
    """Generate the next steps' episodes while this step trains, in a separate generation process with its own
    copy of the policy, synced after each optimizer step (:mod:`~agent_trainers.algorithms.shared.generation_worker`;
    a CPU or one GPU, every algorithm). A batch may then come from a policy up to ``max_staleness`` steps old,
    corrected by ``importance_sampling``."""
    max_staleness: int = Field(default=1, ge=0)
    """With ``async_rollouts``: how many steps ahead episodes are generated, so how many optimizer steps old their
    policy may be (0: each step's episodes come from the current weights, in the worker: the synchronous run)."""
    importance_sampling: ISCorrection = ISCorrection.TOKEN_TRUNCATE
    """With ``async_rollouts``: how a stale batch's policy loss is reweighted by ``pi_train / pi_behaviour``
    (TRL's vLLM modes: ``token_truncate``, ``token_mask``, ``sequence_truncate``, ``sequence_mask``; or ``none``)."""
    importance_cap: float = Field(default=2.0, gt=1)
    """With ``async_rollouts``: the bound of ``importance_sampling`` (truncate at it; mask outside [1/cap, cap])."""
    generation_threads: int = Field(default=1, ge=1)
    """With ``async_rollouts``: torch CPU threads of the generation process (``threads`` stays the trainer's)."""
    generation_timeout: float = Field(default=600.0, gt=0)
    """With ``async_rollouts``: seconds without word from the generation process (a job started or finished)
    before the run stops with an error naming it; must exceed one step's generation time."""

    @model_validator(mode="after")
    def _step_samples_score_model_tokens(self) -> RLConfig:
        if self.step_samples and not (self.loss_mask and self.advantage_mask):
            raise ValueError(
                "rl.step_samples needs rl.loss_mask and rl.advantage_mask true: a per-step sample holds the "
                "model's tokens only, so env tokens cannot enter the loss or GAE"
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

    @model_validator(mode="after")
    def _async_settings_need_async(self) -> RLConfig:
        if self.async_rollouts and self.vllm is not VLLMMode.NONE:
            raise ValueError(
                "rl.async_rollouts generates with transformers in a worker process; with rl.vllm the generation is "
                "vLLM's and overlapping it with training is not implemented here (set one of them off)"
            )
        if not self.async_rollouts:
            for key in sorted(ASYNC_SETTINGS):
                name = key.removeprefix("rl.")
                if getattr(self, name) != type(self).model_fields[name].default:
                    raise ValueError(f"{key} is read only with rl.async_rollouts: true (got {getattr(self, name)!r})")
        return self

    @property
    def episodes_per_step(self) -> int:
        """``num_generations * prompts_per_step``: the episodes one step plays (per process)."""
        return self.num_generations * self.prompts_per_step


ASYNC_SETTINGS = frozenset(
    {
        "rl.max_staleness",
        "rl.importance_sampling",
        "rl.importance_cap",
        "rl.generation_threads",
        "rl.generation_timeout",
    }
)
"""The settings of ``rl.async_rollouts`` (every trainer reads them; without it they must keep their defaults)."""


def changed_settings(section: str, settings: Any) -> dict[str, tuple[Any, Any]]:
    """``{"<section>.<field>": (value, default)}`` for each field of a pydantic settings type set away from its
    default."""
    out = {}
    for name, info in type(settings).__pydantic_fields__.items():
        default, value = info.get_default(call_default_factory=True), getattr(settings, name)
        if value != default:
            out[f"{section}.{name}"] = (value, default)
    return out


@dataclass(frozen=True)
class Reads:
    """The settings a trainer reads, as dotted config keys (``rl.micro_batch``, ``report_to``).

    Attributes:
        trainer: Who reads them (an algorithm name, for messages).
        settings: The keys it reads.
        instead: For a key it does not read, what to do instead (shown in the refusal).
    """

    trainer: str
    settings: frozenset[str]
    instead: Mapping[str, str] = field(default_factory=dict)

    def refuse_unread(self, changed: Mapping[str, tuple[Any, Any]]) -> None:
        """Raise on the first setting of ``changed`` (key -> ``(value, default)``) that this trainer does not read.

        Raises:
            ValueError: One line naming the setting and the trainer, e.g. ``rl.micro_batch is not read by
                ppo (ppo has ppo.micro_batch_size); leave it at its default 1 (got 4)``.
        """
        for key, (value, default) in changed.items():
            if key in self.settings:
                continue
            hint = f" ({self.instead[key]})" if key in self.instead else ""
            raise ValueError(
                f"{key} is not read by {self.trainer}{hint}; leave it at its default {_shown(default)} "
                f"(got {_shown(value)})"
            )

    def with_hints(self, instead: Mapping[str, str]) -> Reads:
        """These reads, with ``instead`` added for the keys it does not read (e.g. another room's own settings)."""
        more = {k: v for k, v in instead.items() if k not in self.settings}
        return Reads(self.trainer, self.settings, {**self.instead, **more})


def _shown(value: Any) -> str:
    return repr(value.value) if isinstance(value, StrEnum) else repr(value)


def bf16_enabled(device: Device | str = Device.AUTO, bf16: bool | None = None) -> bool:
    """Whether to train in bf16: ``bf16`` as given, or (``None``) where the device supports it (a CUDA GPU).

    Raises:
        ValueError: ``bf16`` is true on a CPU without native bf16 matrix units (AVX512-BF16 or AMX): torch
            then multiplies bf16 matrices in a fallback loop, measured 70x slower than fp32 on a 2-core AVX2
            EPYC (a 1024x576 @ 576x1536 product: 1.45 s against 21 ms).
    """
    import torch

    if bf16 is None:
        return resolve_device(device).type == "cuda" and torch.cuda.is_bf16_supported()
    if bf16 and resolve_device(device).type == "cpu" and not cpu_has_native_bf16():
        raise ValueError(
            f"bf16: true on a CPU without native bf16 (torch sees {torch.backends.cpu.get_cpu_capability()}, no "
            "AVX512-BF16 or AMX): its bf16 matrix products run ~70x slower than fp32; set bf16: null (or false)"
        )
    return bool(bf16)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (oneDNN with AVX512-BF16 or AMX)."""
    import torch

    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


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
