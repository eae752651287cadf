"""Which process writes: under ``accelerate launch`` (or ``torchrun``) only rank 0 writes run files.

Every process runs the same stages (the training itself is distributed by
TRL and accelerate; evaluations are repeated on every rank, so the ranks
stay in step), but ``config.yaml``, ``metrics.jsonl``, plots, ``sft/``,
``final/`` and the printed table come from rank 0 alone. The rank is read from
the ``RANK`` variable the launchers set, so asking does not initialise
``torch.distributed`` (TRL's trainer does that, with gloo on CPUs).

:func:`torch_threads` turns a ``threads`` setting into a torch thread count
(``auto``: the cores this process may use minus the 1-minute load average).
"""

from __future__ import annotations

import os

__all__ = ["idle_cores", "is_main_process", "process_rank", "torch_threads"]


def process_rank() -> int:
    """This process's global rank (0 when not launched by a distributed launcher)."""
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """True on rank 0 (and in a plain single-process run)."""
    return process_rank() == 0


def idle_cores() -> int:
    """The CPU cores not busy right now: usable cores minus the 1-minute load average, at least 1.

    Example: 2 cores with one other busy process (load 1.0) -> 1; an idle 2-core machine -> 2.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - round(os.getloadavg()[0])) if hasattr(os, "getloadavg") else cores


def torch_threads(setting: int | str) -> int | None:
    """The torch CPU thread count a ``threads`` setting asks for: ``"auto"`` -> :func:`idle_cores`, 0 -> None
    (torch's default), else the number."""
    if setting == "auto":
        return idle_cores()
    return int(setting) or None
