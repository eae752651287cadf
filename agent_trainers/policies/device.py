"""Where a model runs and at what precision: the ``device:`` setting, checked without importing transformers
(torch only for CUDA), and whether bf16 runs natively here."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["Device", "bf16_enabled", "check_device", "cpu_has_native_bf16", "resolve_device"]


class Device(StrEnum):
    """Where a model runs."""

    AUTO = "auto"
    """A CUDA GPU when one is visible, else the CPU."""
    CPU = "cpu"
    """The CPU."""
    CUDA = "cuda"
    """The first visible CUDA GPU (an error when there is none)."""


def _choice(device: Device | str) -> Device:
    try:
        return Device(device)
    except ValueError:
        raise ValueError(f"device must be one of {[d.value for d in Device]} (got {device!r})") from None


def check_device(device: Device | str = Device.AUTO) -> Device:
    """``device`` as a :class:`Device`, refused when it cannot run here; imports torch only for ``cuda``.

    Raises:
        ValueError: Unknown name, or ``cuda`` without a visible CUDA device.
    """
    choice = _choice(device)
    if choice is Device.CUDA:
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                "device 'cuda' was asked for, but torch sees no CUDA device (torch.cuda.is_available() is False)"
            )
    return choice


def resolve_device(device: Device | str = Device.AUTO) -> torch.device:
    """The ``torch.device`` that ``device`` means on this machine.

    Raises:
        ValueError: Unknown name, or ``cuda`` without a visible CUDA device.
    """
    import torch

    choice = check_device(device)
    has_cuda = torch.cuda.is_available()
    return torch.device("cuda" if choice is Device.CUDA or (choice is Device.AUTO and has_cuda) else "cpu")


def bf16_enabled(device: Device | str = Device.AUTO, bf16: bool | None = None) -> bool:
    """Whether to run in bf16: ``bf16`` as given, or (``None``) where the device supports it (a CUDA GPU).

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
