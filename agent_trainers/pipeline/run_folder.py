"""One run per folder: what ``agent-r1 train`` checks of its ``output_dir`` before it writes anything there.

A run started without ``--resume`` in a folder that holds another run's checkpoints, SFT or final model or
metrics is refused; ``--overwrite`` removes what a run writes there (:data:`RUN_OUTPUTS`, nothing else) first;
``--resume`` continues the run there only if its settings are this config's
(:meth:`~agent_trainers.pipeline.config.TrainConfig.run_settings`, saved in ``config.yaml`` and in every
checkpoint's rollout state), from its newest complete checkpoint
(:func:`~agent_trainers.algorithms.shared.checkpoints.last_complete_checkpoint`).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

from agent_gym.core.files import json_lines, write_atomic
from agent_trainers.algorithms.shared.checkpoints import ROLLOUT_STATE, last_complete_checkpoint
from agent_trainers.errors import one_line
from agent_trainers.pipeline.config import TrainConfig, run_settings_of
from agent_trainers.pipeline.config_files import load_yaml
from agent_trainers.pipeline.processes import is_main_process
from agent_trainers.pipeline.stages import checkpoint_layout
from agent_trainers.rollout.training import settings_differences

__all__ = ["RUN_OUTPUTS", "claim_output_dir", "forget_steps_after", "previous_run"]

RUN_OUTPUTS = ("config.yaml", "metrics.jsonl", "sft", "rl", "eval", "final", "plots")
"""What a run writes in its folder (``--overwrite`` removes these, and nothing else there)."""


def previous_run(out: Path) -> list[str]:
    """What of a run the folder ``out`` holds: its checkpoints, SFT model, final model or metrics (empty: none)."""
    held = sorted(
        (p for p in (out / "rl").glob("checkpoint-*") if p.is_dir()),
        key=lambda p: int(p.name.removeprefix("checkpoint-")) if p.name.removeprefix("checkpoint-").isdigit() else -1,
    )
    found = [str(p.relative_to(out)) for p in held[-2:]]
    found += [name for name in ("sft/DONE", "final") if (out / name).exists()]
    metrics = out / "metrics.jsonl"
    if metrics.is_file() and metrics.stat().st_size > 0:
        found.append("metrics.jsonl")
    return found


def claim_output_dir(config: TrainConfig, *, resume: bool = False, overwrite: bool = False) -> Path | None:
    """Make ``config.output_dir`` this run's, before anything is written there; returns the RL checkpoint to
    resume from (None: RL starts afresh).

    * neither flag: the folder must hold no other run (:func:`previous_run`);
    * ``overwrite``: what a run writes there (:data:`RUN_OUTPUTS`) is removed first;
    * ``resume``: the run there must have this config's settings (its ``config.yaml``, and the newest complete RL
      checkpoint: :meth:`~agent_trainers.pipeline.config.TrainConfig.run_settings`).

    Raises:
        ValueError: One line: the folder holds another run, or the settings differ (naming them), or both flags.
    """
    out = Path(config.output_dir)
    if resume and overwrite:
        raise ValueError("--resume continues the run in output_dir, --overwrite clears it: choose one")
    if overwrite:
        if is_main_process():
            for name in RUN_OUTPUTS:
                path = out / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.exists() or path.is_symlink():
                    path.unlink()
        return None
    if not resume:
        held = previous_run(out)
        if held:
            raise ValueError(
                f"output_dir {out} holds another run ({', '.join(held)}): --resume continues it, --overwrite "
                "clears it first, or choose another output_dir"
            )
        return None
    _check_saved_config(config, out / "config.yaml")
    if not config.rl.enabled:
        return None
    checkpoint = last_complete_checkpoint(out / "rl", checkpoint_layout(config.algorithm))
    if checkpoint is not None:  # the rollout state also holds them; the stage checks them when it loads it
        saved = _checkpoint_settings(checkpoint)
        differences = settings_differences(saved, config.run_settings()) if saved else []
        if differences:
            raise ValueError(
                f"{checkpoint} belongs to a run with other settings: {'; '.join(differences)} (--resume continues "
                "a run with its own settings; --overwrite starts this one afresh)"
            )
    return checkpoint


def _check_saved_config(config: TrainConfig, path: Path) -> None:
    """Refuse to resume a run whose saved ``config.yaml`` has other settings than ``config`` (one that cannot be
    read is named in a warning: the checkpoints still hold the settings)."""
    if not path.is_file():
        return
    try:
        saved = load_yaml(path.read_text(encoding="utf-8"), str(path))
    except (ValueError, OSError, UnicodeDecodeError) as error:
        warnings.warn(
            f"{path} is not read ({one_line(error)}): the settings are checked against the checkpoint only",
            stacklevel=3,
        )
        return
    if not isinstance(saved, dict):
        return
    differences = settings_differences(run_settings_of(saved), config.run_settings())
    if differences:
        raise ValueError(
            f"the run in {path.parent} has other settings: {'; '.join(differences)} (--resume continues a run with "
            "its own settings; --overwrite starts this one afresh)"
        )


def _checkpoint_settings(checkpoint: Path) -> dict[str, Any]:
    """The run settings a checkpoint's rollout state holds (``{}`` for a checkpoint written before they were)."""
    state = json.loads((checkpoint / ROLLOUT_STATE).read_text(encoding="utf-8"))
    settings = state.get("settings") if isinstance(state, dict) else None
    return settings if isinstance(settings, dict) else {}


def forget_steps_after(metrics: Path, checkpoint: Path | None) -> None:
    """Drop the RL and evaluation records of the steps after ``checkpoint`` (the one resumed from; None: step 0)
    from ``metrics.jsonl``: a run killed between checkpoints, or one whose newest checkpoint was damaged, plays
    those steps again and logs them anew."""
    step = 0 if checkpoint is None else int(checkpoint.name.removeprefix("checkpoint-"))
    if not metrics.is_file():
        return
    lines = json_lines(metrics.read_text(encoding="utf-8"))
    kept = [line for line in lines if not _after(line, step)]
    if len(kept) < len(lines):
        write_atomic(metrics, "".join(line + "\n" for line in kept))


def _after(line: str, step: int) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False  # kept as it is: not this function's to judge
    return (
        isinstance(record, dict)
        and record.get("stage") in ("rl", "eval")
        and isinstance(record.get("step"), int)
        and record["step"] > step
    )
