"""The KL reference policy: the policy as the RL stage starts, saved once under ``<output_dir>/reference``.

Every trainer with a KL term (``rl.beta > 0``) takes its reference from here: TRL builds its own reference model
from a path (:func:`snapshot_reference` points the policy's ``_name_or_path`` at the snapshot), the REINFORCE
family and PPO score a frozen copy (:func:`reference_policy`). The snapshot is written on the first start and
kept: a resumed run (whose model, when the trainer is built, is the one the stage started from) keeps the same
reference, and the policy after SFT - not the path it was loaded from - is what the KL is taken to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_trainers.algorithms.shared.logprobs import freeze, frozen_copy

__all__ = ["REFERENCE_FOLDER", "reference_policy", "snapshot_reference"]

REFERENCE_FOLDER = "reference"
"""The snapshot's folder under a trainer's ``output_dir``."""


def _save_once(model: Any, folder: Path, main_process: bool) -> bool:
    """Save ``model`` to ``folder`` unless a snapshot is there already; True when one was there."""
    if (folder / "config.json").is_file():
        return True
    if main_process:
        model.save_pretrained(folder)
    return False


def snapshot_reference(model: Any, output_dir: str | Path, *, main_process: bool = True) -> Path:
    """Save the reference snapshot (once) and point ``model.config._name_or_path`` at it, where TRL's
    ``GRPOTrainer`` builds its reference model from. Returns the folder."""
    folder = Path(output_dir) / REFERENCE_FOLDER
    _save_once(model, folder, main_process)
    model.config._name_or_path = str(folder)
    return folder


def reference_policy(model: Any, output_dir: str | Path, *, main_process: bool = True) -> Any:
    """A frozen reference policy: the snapshot when one exists (a resumed run), else a frozen copy of ``model``,
    saved as the snapshot."""
    folder = Path(output_dir) / REFERENCE_FOLDER
    if _save_once(model, folder, main_process):
        reference = type(model).from_pretrained(folder, dtype=model.dtype, local_files_only=True)
        return freeze(reference.to(model.device))
    return frozen_copy(model)
