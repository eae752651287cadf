"""TRL/transformers training arguments: the device, precision and logger settings every trainer shares."""

from __future__ import annotations

import importlib.util
from enum import StrEnum
from typing import Any

from trl import GRPOConfig, SFTConfig

from agent_trainers.policies.loader import Device, resolve_device

__all__ = ["ReportTo", "device_args", "make_grpo_config", "make_sft_config", "micro_batch_args"]


class ReportTo(StrEnum):
    """Where training curves go (besides ``metrics.jsonl``)."""

    NONE = "none"
    """Nowhere else."""
    TENSORBOARD = "tensorboard"
    """TensorBoard event files under ``<trainer output_dir>/runs/`` (offline; the ``train`` extra has it)."""
    WANDB = "wandb"
    """Weights & Biases (``pip install wandb``; it needs an account or ``WANDB_MODE=offline``)."""


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
    import torch

    where = resolve_device(device)
    logger = ReportTo(report_to)
    if logger is not ReportTo.NONE and importlib.util.find_spec(logger.value) is None:
        extra = "pip install 'agent-r1-gym[train]'" if logger is ReportTo.TENSORBOARD else "pip install wandb"
        raise ValueError(f"report_to: {logger.value} is not installed ({extra})")
    if bf16 is None:
        bf16 = where.type == "cuda" and torch.cuda.is_bf16_supported()
    return {"use_cpu": where.type == "cpu", "bf16": bool(bf16), "report_to": logger.value}


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
    defaults: dict[str, Any] = {
        "logging_steps": 1,
        "save_strategy": "no",
        "mask_truncated_completions": False,
        "beta": 0.0,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": False,
    }
    return GRPOConfig(**(defaults | device_args(device, bf16, report_to) | overrides))


def make_sft_config(
    *,
    device: Device | str = Device.AUTO,
    bf16: bool | None = None,
    report_to: ReportTo | str = "none",
    **overrides: Any,
) -> SFTConfig:
    """An ``SFTConfig`` with the same device, precision and logger rules (override any field)."""
    defaults: dict[str, Any] = {"logging_steps": 1, "save_strategy": "no"}
    return SFTConfig(**(defaults | device_args(device, bf16, report_to) | overrides))
