"""Exact resume: the rollout state saved in each checkpoint, and the last *complete* checkpoint.

TRL/transformers checkpoints (``checkpoint-N/``) hold the model, optimizer,
scheduler, RNG states and trainer state (PPO's, written by ``accelerate``'s ``save_state``, the same under other
names); :class:`RolloutStateCallback` adds ``rollout_state.json`` - the rollout function's call counter, which
seeds every rollout, and the run's settings - once the rest is written. A checkpoint is *complete* when every
file its trainer reads back is there and whole (:class:`CheckpointLayout`: JSON that parses, safetensors whose
header covers the file, torch archives whose every record passes its CRC check - read, never unpickled). A folder
that is not (a run killed while saving, a file cut or lost since) is skipped by :func:`last_complete_checkpoint`
with a warning naming what is wrong, and the newest complete one is resumed from.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

__all__ = [
    "ACCELERATE_CHECKPOINT",
    "MINIMAL_CHECKPOINT",
    "ROLLOUT_STATE",
    "TRAINER_CHECKPOINT",
    "CheckpointLayout",
    "DiskSpaceCheck",
    "DropOlderResumeState",
    "RolloutStateCallback",
    "checkpoint_growth",
    "drop_resume_state",
    "last_complete_checkpoint",
    "load_rollout_state",
    "missing_parts",
]

ROLLOUT_STATE = "rollout_state.json"
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")


@dataclass(frozen=True)
class CheckpointLayout:
    """The files a trainer reads back from its checkpoint to resume exactly.

    Attributes:
        name: Who writes it (shown in messages).
        parts: One entry per part; each names the files that can hold it (e.g. the weights' formats): one of
            them must be there and whole.
    """

    name: str
    parts: tuple[tuple[str, ...], ...]


MINIMAL_CHECKPOINT = CheckpointLayout("any trainer", (("trainer_state.json",), (ROLLOUT_STATE,), _WEIGHTS))
"""What every trainer's checkpoint holds: the trainer state, the rollout state and the weights."""

TRAINER_CHECKPOINT = CheckpointLayout(
    "transformers' Trainer (the TRL trainers)",
    (*MINIMAL_CHECKPOINT.parts, ("optimizer.pt",), ("scheduler.pt",), ("rng_state.pth", "rng_state_0.pth")),
)
"""A ``transformers.Trainer`` checkpoint (``grpo``, ``rloo``, ``reinforce_pp``, ``reinforce_pp_baseline``,
``gigpo``, ``rft``): without ``optimizer.pt`` or ``scheduler.pt`` the Trainer resumes silently with a fresh optimizer
or schedule, so they are required."""

ACCELERATE_CHECKPOINT = CheckpointLayout(
    "accelerate's save_state (PPO)",
    (
        ("trainer_state.json",),
        (ROLLOUT_STATE,),
        ("model.safetensors", "pytorch_model.bin"),
        ("optimizer.bin",),
        ("scheduler.bin",),
        ("random_states_0.pkl",),
    ),
)
"""An ``accelerate`` ``save_state`` checkpoint plus our trainer state (PPO); ``accelerate`` skips RNG states it
cannot read without a word, so they are required."""


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


def _resume_only(layout: CheckpointLayout) -> set[str]:
    """The file names of ``layout``'s parts that :data:`MINIMAL_CHECKPOINT` does not have: what only resuming reads
    (optimizer, scheduler, RNG states)."""
    kept = {name for part in MINIMAL_CHECKPOINT.parts for name in part}
    return {name for part in layout.parts for name in part} - kept


def drop_resume_state(folder: str | Path, keep: Path, layout: CheckpointLayout) -> list[Path]:
    """Delete, from every ``checkpoint-N`` under ``folder`` but ``keep``, the files only resuming reads: those of
    ``layout``'s parts that :data:`MINIMAL_CHECKPOINT` does not have (optimizer, scheduler, RNG states). What
    evaluating a checkpoint reads stays. Returns the deleted files.

    Raises:
        ValueError: ``keep`` is not a complete checkpoint under ``layout`` (nothing is deleted: the run must keep
            one checkpoint it can resume from).
    """
    missing = missing_parts(keep, layout)
    if missing:
        raise ValueError(f"{keep} is not a complete checkpoint ({'; '.join(missing)}): no older one is pruned")
    resume_only = _resume_only(layout)
    deleted = []
    for path in sorted(Path(folder).glob("checkpoint-*")):
        if path.resolve() == keep.resolve() or not path.is_dir():
            continue
        for name in sorted(resume_only):
            if (path / name).is_file():
                (path / name).unlink()
                deleted.append(path / name)
    return deleted


class DropOlderResumeState(TrainerCallback):
    """``rl.older_checkpoints: model``: after each save, once the new checkpoint is complete (its rollout state,
    written last by :class:`RolloutStateCallback`, included), the older checkpoints lose their resume-only files
    (:func:`drop_resume_state`). A save that left the new checkpoint incomplete prunes nothing.

    Args:
        layout: The trainer's checkpoint layout (what makes one complete, and which files only resuming reads).
    """

    def __init__(self, layout: CheckpointLayout):
        self.layout = layout

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        newest = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and newest.is_dir():
            with contextlib.suppress(ValueError):  # incomplete: drop_resume_state checked it (one read) and kept all
                drop_resume_state(args.output_dir, newest, self.layout)


def checkpoint_growth(
    newest: Path, layout: CheckpointLayout, *, steps_left: int, save_steps: int, older_model_only: bool
) -> tuple[int, int, int]:
    """What the run's remaining saves will add to the disk, judged by its newest checkpoint ``newest``.

    A save comes every ``save_steps`` steps and at the last one: ``ceil(steps_left / save_steps)`` more. Each
    writes a checkpoint the size of ``newest``; under ``rl.older_checkpoints: model`` the one before it then
    loses its resume-only files (``layout``'s files beyond :data:`MINIMAL_CHECKPOINT`), so a save adds only a
    checkpoint's model part. The run's ``final/`` model (the model part again) comes at the end.

    Returns:
        ``(bytes to come, saves to come, bytes of one full checkpoint)``.
    """
    files = {p.name: p.stat().st_size for p in newest.iterdir() if p.is_file()}
    full = sum(files.values())
    resume_only = _resume_only(layout)
    model_part = full - sum(size for name, size in files.items() if name in resume_only)
    saves = math.ceil(max(steps_left, 0) / save_steps)
    return saves * (model_part if older_model_only else full) + model_part, saves, full


class DiskSpaceCheck(TrainerCallback):
    """After each save, whether the disk holds the checkpoints still to come (:func:`checkpoint_growth`); when it
    does not, one ``!!`` line says how much they need, how much is free and what to change, once a run (a disk
    that fills mid-save kills the run; the checkpoint it was writing is skipped on resume).

    Args:
        layout: The trainer's checkpoint layout.
        steps: The run's RL steps (``rl.steps``).
        save_steps: Steps between checkpoints (``rl.save_steps``).
        older_model_only: ``rl.older_checkpoints: model`` is set.
    """

    def __init__(self, layout: CheckpointLayout, *, steps: int, save_steps: int, older_model_only: bool):
        self.layout, self.steps, self.save_steps, self.older_model_only = layout, steps, save_steps, older_model_only
        self.warned = False

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        newest = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.warned or not state.is_world_process_zero or not newest.is_dir():
            return
        need, saves, full = checkpoint_growth(
            newest,
            self.layout,
            steps_left=self.steps - int(state.global_step),
            save_steps=self.save_steps,
            older_model_only=self.older_model_only,
        )
        free = shutil.disk_usage(newest).free
        if need <= free:
            return
        self.warned = True
        fix = (
            "a larger rl.save_steps"
            if self.older_model_only
            else "rl.older_checkpoints: model (older checkpoints keep only their model)"
        )
        what = f"the {saves} checkpoints still to come and the final model need" if saves else "the final model needs"
        print(
            f"  !! disk: {what} about {need / 1e9:.1f} GB, "
            f"{free / 1e9:.1f} GB is free under {args.output_dir} ({full / 1e9:.2f} GB a checkpoint); free space "
            f"or set {fix}",
            flush=True,
        )


def missing_parts(folder: Path, layout: CheckpointLayout = MINIMAL_CHECKPOINT) -> list[str]:
    """What a checkpoint folder lacks to resume exactly under ``layout`` (empty when complete): each part that is
    missing (``optimizer.pt missing``), or whose file is damaged (``model.safetensors unreadable: ...``)."""
    problems = []
    for names in layout.parts:
        present = [folder / name for name in names if (folder / name).is_file()]
        if not present:
            problems.append(f"{' or '.join(names) if len(names) < 3 else 'model weights'} missing")
            continue
        damage = _damage(present[0])
        if damage:
            problems.append(f"{present[0].name} unreadable: {damage}")
    return problems


def _damage(path: Path) -> str:
    """Why ``path`` cannot be read back, or ``""`` when it can (its bytes are checked, nothing is unpickled)."""
    try:
        return _check(path)
    except (OSError, ValueError, RecursionError, zipfile.BadZipFile, UnicodeDecodeError) as error:
        return f"{type(error).__name__}: {' '.join(str(error).split())[:200] or 'empty'}"
    except Exception as error:  # e.g. safetensors' SafetensorError
        return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"


def _check_json(path: Path) -> str:
    json.loads(path.read_text(encoding="utf-8"))
    return ""


def _check_safetensors(path: Path) -> str:
    from safetensors import safe_open

    with safe_open(str(path), "pt"):  # parses the header and checks that it covers the file exactly
        return ""


def _check_sharded(path: Path) -> str:
    """A ``*.safetensors.index.json``: it parses, and every shard it names is whole."""
    index = json.loads(path.read_text(encoding="utf-8"))
    shards = sorted(set(index.get("weight_map", {}).values())) if isinstance(index, dict) else []
    if not shards:
        return "names no shard"
    for shard in shards:
        if not (path.parent / shard).is_file():
            return f"shard {shard} missing"
        damage = _check_safetensors(path.parent / shard)
        if damage:
            return f"shard {shard}: {damage}"
    return ""


def _check_torch_archive(path: Path) -> str:
    """``torch.save``'s zip archive (``.pt``, ``.bin``, ``.pth``, ``.pkl``): every record's CRC checks (a file cut
    short has no central directory at its end)."""
    with zipfile.ZipFile(path) as archive:
        bad = archive.testzip()
    return f"record {bad} fails its CRC check" if bad else ""


_CHECKS: dict[str, Callable[[Path], str]] = {".json": _check_json, ".safetensors": _check_safetensors}


def _check(path: Path) -> str:
    if path.name.endswith(".safetensors.index.json"):
        return _check_sharded(path)
    return _CHECKS.get(path.suffix, _check_torch_archive)(path)


def last_complete_checkpoint(folder: str | Path, layout: CheckpointLayout = MINIMAL_CHECKPOINT) -> Path | None:
    """The newest complete ``checkpoint-N`` under ``folder`` (:func:`missing_parts` under ``layout``); newer ones
    that are not complete are skipped with a warning naming what each lacks."""
    found = []
    for path in Path(folder).glob("checkpoint-*"):
        suffix = path.name.removeprefix("checkpoint-")
        if path.is_dir() and suffix.isdigit():
            found.append((int(suffix), path))
    for _, path in sorted(found, reverse=True):
        missing = missing_parts(path, layout)
        if not missing:
            return path
        warnings.warn(
            f"skipping incomplete checkpoint {path} ({'; '.join(missing)}): resuming from an older one",
            stacklevel=2,
        )
    return None


def load_rollout_state(checkpoint: str | Path, rollout: Any) -> None:
    """Restore ``rollout.load_state_dict`` from a checkpoint's ``rollout_state.json`` (and, with asynchronous
    rollouts, the results that were in flight).

    Raises:
        ValueError: The file is not JSON, or the state does not fit this run; the message names the checkpoint.
    """
    path = Path(checkpoint) / ROLLOUT_STATE
    try:
        rollout.load_state_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: {' '.join(str(error).split())}") from None
    pool = getattr(rollout, "asynchronous", None)
    if pool is not None:
        pool.load(checkpoint)
