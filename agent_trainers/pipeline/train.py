"""The ``agent-r1 train`` pipeline: run the stage table (:data:`agent_trainers.pipeline.stages.STAGES`).

Everything a run produces goes under ``config.output_dir``::

    config.yaml        the resolved config
    metrics.jsonl      one record per log/eval event ({"stage", "step", ...})
    sft/               the model after SFT (and a DONE marker, for --resume)
    rl/checkpoint-N    TRL checkpoints (model, optimizer, RNG, trainer state, rollout state)
    rl/runs/           TensorBoard event files (report_to: tensorboard)
    final/             the final model and tokenizer
    plots/*.png        held-aside eval and training curves

A folder holds one run (:mod:`~agent_trainers.pipeline.run_folder`: ``--resume`` and ``--overwrite``).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from transformers import TrainerCallback, set_seed

from agent_gym.core.files import write_atomic
from agent_trainers.algorithms.shared.console import harmless_messages_hidden
from agent_trainers.algorithms.shared.diagnostics import DIAGNOSTICS
from agent_trainers.algorithms.shared.settings import device_args
from agent_trainers.evaluation.metrics import Direction, View, metric_spec, shown_in
from agent_trainers.evaluation.summary import EvalSummary
from agent_trainers.pipeline.config import TrainConfig, preflight
from agent_trainers.pipeline.plots import MetricsLog, plot_curves, plot_metrics, read_jsonl
from agent_trainers.pipeline.processes import is_main_process
from agent_trainers.pipeline.run_folder import claim_output_dir, forget_steps_after
from agent_trainers.pipeline.stages import STAGES, RunState
from agent_trainers.policies.loader import load_model
from agent_trainers.policies.threads import apply_threads

__all__ = ["RunResult", "open_run", "run_training", "seed_everything"]


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
    for figure, what in (("reward", "mean training return"), ("tied", "share of groups tied")):
        kinds = sorted({k for r in rl for k in r if k.startswith("by_type/") and k.endswith(f"/{figure}")})
        plot_metrics(rl, out / "plots" / f"by_type_{figure}.png", keys=kinds,
                     title=f"{config.algorithm}: {what}, by task type")  # fmt: skip
    return plot


def open_run(config: TrainConfig, *, resume: bool = False, overwrite: bool = False, checked: bool = False) -> RunState:
    """A run's start: its envs built once and its device and logger checked (a bad ``env:`` section, an env
    without the SFT stage's demonstrator, ``device: cuda`` without a GPU or a logger that is not installed is a
    one-line ``ValueError`` before anything is written), its folder claimed (:func:`claim_output_dir`: a folder
    holding another run is refused), the seeds, the threads, the model, and only then its config saved (a model
    that fails to load leaves no run folder behind); the state the stages take. ``checked``: the config already
    passed :func:`~agent_trainers.pipeline.config.preflight` (the command line runs it before importing this
    module), so the envs are not built again."""
    if not checked:
        preflight(config)  # a bad env section, cuda without a GPU, a missing logger: before any file
    device_args(config.device, config.bf16, config.report_to)  # and bf16 where the device has none
    checkpoint = claim_output_dir(config, resume=resume, overwrite=overwrite)
    out, main = Path(config.output_dir), is_main_process()
    seed_everything(config.seed)
    threads = apply_threads(config.threads)
    if main and config.threads == "auto":
        print(f"[train] threads: auto -> {threads} (cores idle at start)", flush=True)
    model, tokenizer = load_model(config.model.name, device=config.device, seed=config.seed)
    out.mkdir(parents=True, exist_ok=True)
    if main and resume and config.rl.enabled:  # the steps after the checkpoint are played, and logged, again
        forget_steps_after(out / "metrics.jsonl", checkpoint)
    if main:
        write_atomic(out / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=False))
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

    Unless ``config.verbose``, the messages known to be harmless
    (:data:`~agent_trainers.algorithms.shared.console.HARMLESS`) are hidden and the trainers print their
    progress bars without the dict of every logged value.

    Returns:
        The evaluations, output folder and plot path.

    Raises:
        ValueError: The folder holds another run, or (``resume``) a run with other settings; one line.
    """
    with contextlib.nullcontext() if config.verbose else harmless_messages_hidden():
        state = open_run(config, resume=resume, overwrite=overwrite, checked=checked)
        state.callbacks = list(callbacks)
        _run_stages(state)
    out, main = state.out, is_main_process()
    return RunResult(evals=state.evals, output_dir=out, plot=_plots(config, out) if main else None)


def _run_stages(state: RunState) -> None:
    """The enabled stages in order, each announced in one line."""
    start = time.perf_counter()
    for i, stage in enumerate(STAGES, 1):
        if not stage.enabled(state):  # decided in turn: eval_after_sft depends on what sft did
            continue
        if is_main_process():
            minutes = (time.perf_counter() - start) / 60
            print(f"[train] stage {i}/{len(STAGES)}: {stage.name} ({minutes:.1f} min in)", flush=True)
        stage.run(state)
