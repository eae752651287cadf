"""The ``agent-r1 train`` pipeline: run the stage table (:data:`agent_trainers.pipeline.stages.STAGES`).

Everything a run produces goes under ``config.output_dir``::

    config.yaml        the resolved config
    metrics.jsonl      one record per log/eval event ({"stage", "step", ...})
    sft/               the model after SFT (and a DONE marker, for --resume)
    rl/checkpoint-N    TRL checkpoints (model, optimizer, RNG, trainer state, rollout state)
    rl/runs/           TensorBoard event files (report_to: tensorboard)
    final/             the final model and tokenizer
    plots/*.png        held-aside eval and training curves

A folder holds one run. A run started without ``--resume`` in a folder that holds another's checkpoints, final
model or metrics is refused (``--overwrite`` clears them first); ``--resume`` continues the run there only if
its settings are this config's (:meth:`~agent_trainers.pipeline.config.TrainConfig.run_settings`, saved in
``config.yaml`` and in every checkpoint), from its newest complete checkpoint
(:func:`~agent_trainers.algorithms.shared.checkpoints.last_complete_checkpoint`).
"""

from __future__ import annotations

import json
import random
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from transformers import TrainerCallback, set_seed

from agent_gym.core.files import json_lines, write_atomic
from agent_trainers.algorithms.shared.checkpoints import ROLLOUT_STATE, last_complete_checkpoint
from agent_trainers.algorithms.shared.diagnostics import DIAGNOSTICS
from agent_trainers.algorithms.shared.settings import device_args
from agent_trainers.errors import one_line
from agent_trainers.evaluation.metrics import Direction, View, metric_spec, shown_in
from agent_trainers.evaluation.summary import EvalSummary
from agent_trainers.pipeline.config import TrainConfig, load_yaml, preflight, run_settings_of
from agent_trainers.pipeline.plots import MetricsLog, plot_curves, plot_metrics, read_jsonl
from agent_trainers.pipeline.processes import is_main_process
from agent_trainers.pipeline.stages import STAGES, RunState, checkpoint_layout
from agent_trainers.policies.loader import load_model
from agent_trainers.policies.threads import apply_threads
from agent_trainers.rollout.training import settings_differences

__all__ = ["RUN_OUTPUTS", "RunResult", "claim_output_dir", "open_run", "run_training", "seed_everything"]

RUN_OUTPUTS = ("config.yaml", "metrics.jsonl", "sft", "rl", "eval", "final", "plots")
"""What a run writes in its folder (``--overwrite`` removes these, and nothing else there)."""


@dataclass
class RunResult:
    """What a run measured.

    Attributes:
        evals: ``(phase, result)`` in order: ``before``, ``after_sft``, ``rl_step_N``..., ``final``.
        output_dir: Where everything was written.
        plot: The held-aside eval plot, if one was drawn.
    """

    evals: list[tuple[str, EvalSummary]]
    output_dir: Path
    plot: Path | None


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (and transformers' helpers)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    set_seed(seed)


def _plots(config: TrainConfig, out: Path) -> Path | None:
    records = read_jsonl(out / "metrics.jsonl")
    keys = shown_in(View.PLOT)
    better = {k: f"{k} ({metric_spec(k).direction} is better)" for k in keys}
    plot = plot_curves(
        [r for r in records if r.get("stage") == "eval"],
        out / "plots" / "eval.png",
        keys=keys,
        title=f"{config.env.id}: held-aside eval (mean, 95% interval; dashed: after SFT)",
        titles={k: t for k, t in better.items() if metric_spec(k).direction is not Direction.NEITHER},
    )
    rl = [r for r in records if r.get("stage") == "rl"]
    plot_metrics(rl, out / "plots" / "train.png", keys=["reward", "loss", "rollout/turns", "episode/answer_f1"],
                 title=f"{config.algorithm} training")  # fmt: skip
    names = [d.name for d in DIAGNOSTICS if not d.optional]
    optional = [d.name for d in DIAGNOSTICS if d.optional]  # async rollouts: drawn only when logged
    for part, chunk in enumerate((names[:7], names[7:], optional), 1):
        plot_metrics(rl, out / "plots" / f"diagnostics_{part}.png", keys=chunk,
                     title=f"{config.algorithm}: per-step diagnostics ({part})")  # fmt: skip
    return plot


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


def _step_of(checkpoint: Path | None) -> int:
    return 0 if checkpoint is None else int(checkpoint.name.removeprefix("checkpoint-"))


def _forget_steps_after(metrics: Path, step: int) -> None:
    """Drop the RL and evaluation records of steps after ``step`` (the checkpoint resumed from) from
    ``metrics.jsonl``: a run killed between checkpoints, or one whose newest checkpoint was damaged, plays those
    steps again and logs them anew."""
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


def open_run(config: TrainConfig, *, resume: bool = False, overwrite: bool = False, checked: bool = False) -> RunState:
    """A run's start: its envs built once and its device and logger checked (a bad ``env:`` section, ``device: cuda``
    without a GPU or a logger that is not installed is a one-line ``ValueError`` before anything is written), its
    folder claimed (:func:`claim_output_dir`) and its config saved, the seeds, the threads, the model; the state the
    stages take. ``checked``: the config already passed :func:`~agent_trainers.pipeline.config.preflight` (the
    command line runs it before importing this module), so the envs are not built again."""
    if not checked:
        preflight(config)  # a bad env section, cuda without a GPU, a missing logger: before any file
    device_args(config.device, config.bf16, config.report_to)  # and bf16 where the device has none
    checkpoint = claim_output_dir(config, resume=resume, overwrite=overwrite)
    out, main = Path(config.output_dir), is_main_process()
    out.mkdir(parents=True, exist_ok=True)
    if main and resume and config.rl.enabled:
        _forget_steps_after(out / "metrics.jsonl", _step_of(checkpoint))
    if main:
        write_atomic(out / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=False))
    seed_everything(config.seed)
    threads = apply_threads(config.threads)
    if main and config.threads == "auto":
        print(f"[train] threads: auto -> {threads} (cores idle at start)", flush=True)
    model, tokenizer = load_model(config.model.name, device=config.device, seed=config.seed)
    log = MetricsLog(out / "metrics.jsonl", enabled=main)
    return RunState(config, out, model, tokenizer, log, resume=resume, rl_checkpoint=checkpoint)


def run_training(
    config: TrainConfig,
    *,
    resume: bool = False,
    callbacks: Sequence[TrainerCallback] = (),
    checked: bool = False,
    overwrite: bool = False,
) -> RunResult:
    """Run the enabled stages of :data:`~agent_trainers.pipeline.stages.STAGES` end to end.

    Args:
        config: The validated configuration.
        resume: Continue an interrupted run in ``config.output_dir`` (it must have this config's settings): a
            finished SFT stage is reloaded, RL resumes exactly from its last complete checkpoint.
        callbacks: Extra ``TrainerCallback`` s for the RL trainer.
        checked: ``config`` already passed :func:`~agent_trainers.pipeline.config.preflight`.
        overwrite: Clear what another run left in ``config.output_dir`` first (without it, or ``resume``, a folder
            holding another run is refused).

    Returns:
        The evaluations, output folder and plot path.

    Raises:
        ValueError: The folder holds another run, or (``resume``) a run with other settings; one line.
    """
    state = open_run(config, resume=resume, overwrite=overwrite, checked=checked)
    out, main = state.out, is_main_process()
    state.callbacks = list(callbacks)
    start = time.perf_counter()
    for i, stage in enumerate(STAGES, 1):
        if not stage.enabled(state):  # decided in turn: eval_after_sft depends on what sft did
            continue
        if main:
            minutes = (time.perf_counter() - start) / 60
            print(f"[train] stage {i}/{len(STAGES)}: {stage.name} ({minutes:.1f} min in)", flush=True)
        stage.run(state)
    return RunResult(evals=state.evals, output_dir=out, plot=_plots(config, out) if main else None)
