"""Where a model runs: the ``device:`` setting, checked without importing transformers (torch only for CUDA)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["Device", "check_device", "resolve_device"]


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
