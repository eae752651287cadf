"""Exact resume: the rollout state saved in each checkpoint, and the last *complete* checkpoint.

TRL/transformers checkpoints (``checkpoint-N/``) hold the model, optimizer,
scheduler, RNG states and trainer state; :class:`RolloutStateCallback` adds
``rollout_state.json`` - the rollout function's call counter, which seeds
every rollout - once the rest is written. A folder without it (a run killed
while saving, or an empty leftover) is incomplete: :func:`last_complete_checkpoint`
skips it with a warning and falls back to the newest complete one.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

__all__ = ["ROLLOUT_STATE", "RolloutStateCallback", "last_complete_checkpoint", "load_rollout_state", "missing_parts"]

ROLLOUT_STATE = "rollout_state.json"
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")


class RolloutStateCallback(TrainerCallback):
    """Writes ``rollout.state_dict()`` into each checkpoint folder, after the trainer saved it.

    Args:
        rollout: An object with ``state_dict()`` (e.g. :class:`~agent_trainers.algorithms.EnvRolloutFunc`).
    """

    def __init__(self, rollout: Any):
        self.rollout = rollout

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if not state.is_world_process_zero or not folder.is_dir():
            return
        pool = getattr(self.rollout, "asynchronous", None)
        if pool is not None:  # the results of the jobs in flight, for an exact resume (before the marker)
            pool.save(folder)
        tmp = folder / (ROLLOUT_STATE + ".tmp")
        tmp.write_text(json.dumps(self.rollout.state_dict()), encoding="utf-8")
        os.replace(tmp, folder / ROLLOUT_STATE)


def missing_parts(folder: Path) -> list[str]:
    """What a checkpoint folder lacks to resume exactly (empty when complete)."""
    missing = [name for name in ("trainer_state.json", ROLLOUT_STATE) if not (folder / name).is_file()]
    if not any((folder / w).is_file() for w in _WEIGHTS):
        missing.append("model weights")
    return missing


def last_complete_checkpoint(folder: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` under ``folder``; newer incomplete ones are skipped with a warning."""
    found = []
    for path in Path(folder).glob("checkpoint-*"):
        suffix = path.name.removeprefix("checkpoint-")
        if path.is_dir() and suffix.isdigit():
            found.append((int(suffix), path))
    for _, path in sorted(found, reverse=True):
        missing = missing_parts(path)
        if not missing:
            return path
        warnings.warn(f"skipping incomplete checkpoint {path} (missing {', '.join(missing)})", stacklevel=2)
    return None


def load_rollout_state(checkpoint: str | Path, rollout: Any) -> None:
    """Restore ``rollout.load_state_dict`` from a checkpoint's ``rollout_state.json`` (and, with asynchronous
    rollouts, the results that were in flight)."""
    rollout.load_state_dict(json.loads((Path(checkpoint) / ROLLOUT_STATE).read_text(encoding="utf-8")))
    pool = getattr(rollout, "asynchronous", None)
    if pool is not None:
        pool.load(checkpoint)
