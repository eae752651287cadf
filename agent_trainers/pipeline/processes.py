"""Which process writes: under ``accelerate launch`` (or ``torchrun``) only rank 0 writes run files.

Every process runs the same stages (the training itself is distributed by
TRL and accelerate; evaluations are repeated on every rank, so the ranks
stay in step), but ``config.yaml``, ``metrics.jsonl``, plots, ``sft/``,
``final/`` and the printed table come from rank 0 alone. The rank is read from
the ``RANK`` variable the launchers set, so asking does not initialise
``torch.distributed`` (TRL's trainer does that, with gloo on CPUs).
"""

from __future__ import annotations

import os

__all__ = ["is_main_process", "process_rank"]


def process_rank() -> int:
    """This process's global rank (0 when not launched by a distributed launcher)."""
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """True on rank 0 (and in a plain single-process run)."""
    return process_rank() == 0
