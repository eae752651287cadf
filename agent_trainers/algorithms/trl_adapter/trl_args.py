"""Our settings as TRL's arguments: :func:`grpo_args` (a ``GRPOConfig`` from the ``rl:`` section and the
algorithm's own), and micro-batches.

The mapping from our RL, algorithm and rollout settings to TRL's ``GRPOConfig`` fields
is written here once; the pipeline hands the settings over as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_trainers.algorithms.shared.names import ScaleRewards, VLLMMode
from agent_trainers.algorithms.shared.sections import TRLSettings
from agent_trainers.algorithms.shared.settings import ReportTo, RLConfig, device_args
from agent_trainers.policies.device import Device
from agent_trainers.rollout.config import RolloutConfig

if TYPE_CHECKING:
    from trl import GRPOConfig

__all__ = ["grpo_args", "make_grpo_config", "micro_batch_args", "vllm_args"]


def micro_batch_args(rollouts_per_step: int, micro_batch: int = 1) -> dict[str, int]:
    """``GRPOConfig`` batch fields: ``rollouts_per_step`` rollouts generated at once, trained ``micro_batch`` at a time.

    One generation batch per optimizer step; the forward/backward then runs on
    micro-batches with TRL's gradient accumulation (TRL scales every loss type
    for it, so the gradient is the whole batch's). On SmolLM2 (CPU, ~860-token
    sequences) one sequence per forward/backward took 61 s and 2.6 GB peak,
    four at once 310 s and 7.5 GB: activations grow with the batch, padding
    goes away, and unpadded sequences take PyTorch's fused causal attention.

    Raises:
        ValueError: ``micro_batch`` does not divide ``rollouts_per_step``.

    Example:
        >>> micro_batch_args(4)
        {'per_device_train_batch_size': 1, 'gradient_accumulation_steps': 4, 'steps_per_generation': 4}
    """
    if micro_batch < 1 or rollouts_per_step % micro_batch:
        raise ValueError(
            f"micro_batch must be >= 1 and divide the rollouts per step (got {micro_batch} and {rollouts_per_step})"
        )
    steps = rollouts_per_step // micro_batch
    return {
        "per_device_train_batch_size": micro_batch,
        "gradient_accumulation_steps": steps,
        "steps_per_generation": steps,
    }


def vllm_args(settings: TRLSettings) -> dict[str, Any]:
    """``GRPOConfig`` fields for the section's ``vllm`` (nothing for ``none``)."""
    if settings.vllm is VLLMMode.NONE:
        return {}
    return {"use_vllm": True, "vllm_mode": settings.vllm.value, "vllm_server_base_url": settings.vllm_server_url}


def grpo_args(
    rl: RLConfig,
    settings: TRLSettings,
    rollout: RolloutConfig,
    *,
    output_dir: str,
    seed: int = 0,
    device: Device | str = Device.AUTO,
    bf16: bool | None = None,
    report_to: ReportTo | str = ReportTo.NONE,
) -> GRPOConfig:
    """The ``GRPOConfig`` of an RL stage: the ``rl:`` section, the algorithm's section and the rollout settings as
    TRL's fields (one generation per step).

    Raises:
        ValueError: The section's ``micro_batch`` does not divide the episodes per step (or a bad device / logger).
    """
    return make_grpo_config(
        device=device,
        bf16=bf16,
        report_to=report_to,
        output_dir=output_dir,
        max_steps=rl.steps,
        **micro_batch_args(rl.episodes_per_step, settings.micro_batch),
        gradient_checkpointing=settings.gradient_checkpointing,
        num_generations=rl.num_generations,
        learning_rate=rl.learning_rate,
        warmup_steps=rl.warmup_steps,
        beta=rl.beta,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        loss_type=settings.loss_type.value,
        scale_rewards=getattr(settings, "scale_rewards", ScaleRewards.GROUP).value,  # TRL's own (replaced) advantages
        save_strategy="steps",
        save_steps=rl.save_steps,
        seed=seed,
        max_completion_length=rollout.max_total_tokens,
        **vllm_args(settings),
    )


def make_grpo_config(
    *,
    device: Device | str = Device.AUTO,
    bf16: bool | None = None,
    report_to: ReportTo | str = "none",
    **overrides: Any,
) -> GRPOConfig:
    """A ``GRPOConfig`` for our rollout path (override any field).

    Defaults: no checkpoints unless asked, no truncated-completion masking (our
    episodes end on their own terms), ``beta = 0`` (no reference model), log every step.
    """
    from trl import GRPOConfig

    defaults: dict[str, Any] = {
        "logging_steps": 1,
        "logging_nan_inf_filter": False,  # a NaN loss is logged as NaN (StopOnNonFinite stops the run on it)
        "save_strategy": "no",
        "mask_truncated_completions": False,
        "beta": 0.0,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": False,
    }
    return GRPOConfig(**(defaults | device_args(device, bf16, report_to) | overrides))
