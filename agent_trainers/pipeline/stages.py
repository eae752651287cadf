"""The stage table of ``agent-r1 train``: stages are data, run in order.

=================  =====================================  ==================================
stage              runs when                              does
=================  =====================================  ==================================
``eval_before``    ``eval.before``, not resuming RL       evaluate the loaded model
``sft``            ``sft.enabled``                        cold-start SFT (or reload it on resume)
``eval_after_sft`` SFT ran in this call, or a resumed      evaluate
                   run's evaluation of it never finished
``rl``             ``rl.enabled``                         RL with ``algorithm`` (see :data:`RL_TRAINERS`)
``eval_final``     always                                 evaluate, save ``final/``
=================  =====================================  ==================================

:data:`RL_TRAINERS` maps each :class:`~agent_trainers.algorithms.Algorithm` to
the function that runs its RL stage; an algorithm with its own trainer (PPO:
:func:`run_ppo_stage`) is one entry here plus one enum value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import TrainerCallback

from agent_gym.core.files import write_atomic
from agent_trainers.algorithms.shared.checkpoints import (
    ACCELERATE_CHECKPOINT,
    TRAINER_CHECKPOINT,
    CheckpointLayout,
    DiskSpaceCheck,
    DropOlderResumeState,
    load_rollout_state,
)
from agent_trainers.algorithms.shared.console import progress_bar_only
from agent_trainers.algorithms.shared.diagnostics import StopOnNonFinite, alarms, canonical, step_line
from agent_trainers.algorithms.shared.names import Algorithm, OlderCheckpoints
from agent_trainers.algorithms.shared.sections import ESTIMATOR_SECTIONS, TRLSettings
from agent_trainers.algorithms.shared.settings import ReportTo
from agent_trainers.evaluation.summary import EvalSummary
from agent_trainers.pipeline.config import TrainConfig, task_split
from agent_trainers.pipeline.plots import MetricsLog
from agent_trainers.pipeline.processes import is_main_process
from agent_trainers.policies.device import bf16_enabled
from agent_trainers.policies.loader import load_model
from agent_trainers.policies.transformers_policy import TransformersPolicy
from agent_trainers.rollout.training import EnvRollouts, task_rows

if TYPE_CHECKING:
    from agent_trainers.evaluation import EvalSpec, Method

__all__ = [
    "EVAL_SEED",
    "RL_TRAINERS",
    "STAGES",
    "RunState",
    "Stage",
    "checkpoint_layout",
    "eval_spec",
    "evaluate_model",
    "evaluation_settings",
    "phase_label",
    "train_tasks",
]

EVAL_SEED = 12345
"""Env seed of every evaluation (tool noise), so evaluations are comparable."""


@contextlib.contextmanager
def _own_rng() -> Iterator[None]:
    """Run a block without disturbing torch's global RNG (evaluations must not shift training's samples)."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        yield


@dataclass
class RunState:
    """What flows between stages.

    Attributes:
        config: The validated config.
        out: The run folder.
        model: The current policy.
        tokenizer: Its tokenizer.
        log: ``metrics.jsonl``.
        resume: Continue an interrupted run.
        evals: ``(phase, result)`` in order.
        callbacks: Extra ``TrainerCallback`` s for the RL trainer (e.g. tests stopping a run).
        sft_ran: SFT trained in this call (not reloaded).
        rl_checkpoint: The RL checkpoint being resumed from, if any.
    """

    config: TrainConfig
    out: Path
    model: Any
    tokenizer: Any
    log: MetricsLog
    resume: bool = False
    evals: list[tuple[str, EvalSummary]] = field(default_factory=list)
    callbacks: list[TrainerCallback] = field(default_factory=list)
    sft_ran: bool = False
    rl_checkpoint: Path | None = None

    def evaluate(self, phase: str, step: int, model: Any | None = None) -> EvalSummary:
        """Evaluate ``model`` (default: the current one) on the held-aside tasks and log it.

        Every question's record goes to ``eval/<phase>/`` (an :mod:`agent_trainers.evaluation`
        folder: episodes, summary with bootstrap intervals, CSV, Markdown), so the phases can
        be compared question by question (``agent-r1 report``, the demo's paired comparisons).
        That folder's summary is the one returned and logged (every present metric's mean).
        """
        summary = evaluate_model(
            self.config, self.model if model is None else model, self.tokenizer, self.out / "eval" / phase, phase=phase
        )
        return self._record(phase, step, summary)

    def reuse_evaluation(self, done: str, phase: str, step: int) -> EvalSummary:
        """Record the evaluation ``done`` again as ``phase`` (the same model): its folder is copied, not re-run."""
        if is_main_process():
            shutil.copytree(self.out / "eval" / done, self.out / "eval" / phase, dirs_exist_ok=True)
        return self._record(phase, step, dict(self.evals)[done])

    def _record(self, phase: str, step: int, summary: EvalSummary) -> EvalSummary:
        self.evals.append((phase, summary))
        bounds = {f"{k}_{end}": getattr(v, end) for k, v in summary.metrics.items() for end in ("low", "high")}
        self.log.write(
            {"stage": "eval", "phase": phase, "step": step, "episodes": summary.episodes, **summary.means(), **bounds}
        )
        return summary


def evaluate_model(
    config: TrainConfig,
    model: Any,
    tokenizer: Any,
    out: Path,
    *,
    phase: str,
    tasks: TaskRange | None = None,
    label: str | None = None,
    method: Method | None = None,
) -> EvalSummary:
    """Evaluate ``model`` as ``config``'s evaluation says (greedy by default, the rollout limits, the env seed
    :data:`EVAL_SEED`), on its held-aside tasks or on ``tasks`` (another set: the env kwargs, first task and
    count), into the evaluation folder ``out``; the model is left in the mode it was in.

    ``phase`` names what is evaluated: ``before`` is the base model with tools (or, with ``method``, another
    untrained baseline: closed-book, naive-rag), anything else the agent.
    """
    from agent_trainers.evaluation import run_eval

    c = config
    was_training = model.training
    model.eval()
    policy = TransformersPolicy(model, tokenizer, **_eval_policy_kwargs(c))
    with _own_rng():
        run = run_eval(eval_spec(c, phase=phase, tasks=tasks, label=label, method=method), policy, out, resume=False)
    model.train(was_training)
    return EvalSummary.from_json(run.summary)


def eval_spec(
    config: TrainConfig,
    *,
    phase: str,
    tasks: TaskRange | None = None,
    label: str | None = None,
    method: Method | None = None,
) -> EvalSpec:
    """The :class:`~agent_trainers.evaluation.EvalSpec` :func:`evaluate_model` evaluates under."""
    from agent_trainers.evaluation import EvalSpec, Method

    c = config
    env_kwargs, first, limit = tasks or (dict(c.env.eval_kwargs), c.eval.first_task, c.eval.tasks)
    if method is not None and (phase == "before") != (method is not Method.AGENT):
        raise ValueError(
            f"phase {phase!r} evaluates {'a baseline' if phase == 'before' else 'the agent'}, not {method}"
        )
    return EvalSpec(
        c.env.id,
        method or (Method.BASE_TOOL_CALL if phase == "before" else Method.AGENT),
        model=c.model.name if phase == "before" else f"{c.output_dir} ({phase})",
        env_kwargs=env_kwargs,
        limit=limit,
        start=first,
        seed=EVAL_SEED,
        rollout=dataclasses.replace(c.rollout, temperature=c.eval.temperature),
        label=label or phase_label(phase, c),
        chunk_size=c.eval.batch_size,
    )


def evaluation_settings(config: TrainConfig, *, phase: str, tasks: TaskRange | None = None) -> dict[str, Any]:
    """Everything :func:`evaluate_model`'s results depend on besides the model's weights (JSON-able): two
    evaluations of one model with equal settings are the same evaluation (greedy decoding, a fixed env seed).
    The spec's ``model`` and ``label`` name the evaluation and are left out."""
    spec = eval_spec(config, phase=phase, tasks=tasks).to_json()
    del spec["model"], spec["label"]
    policy = {**_eval_policy_kwargs(config), "device": str(config.device)}
    return json.loads(json.dumps({"spec": spec, "policy": policy}, default=str))


def _eval_policy_kwargs(config: TrainConfig) -> dict[str, Any]:
    """The evaluation policy's settings: its batch, its seed, and the precision the model trains at."""
    return {"batch_size": config.eval.batch_size, "seed": config.seed, "bf16": bf16_enabled(config.device, config.bf16)}


TaskRange = tuple[dict[str, Any], int, int]
"""Evaluation tasks: ``(env kwargs, first task, count)``."""


def phase_label(phase: str, config: TrainConfig) -> str:
    """The row name of an evaluation phase: ``before`` is the base model with tools, the rest the agent."""
    trained = " + ".join(
        name for name, on in (("SFT", config.sft.enabled), (str(config.algorithm), config.rl.enabled)) if on
    )
    labels = {"before": "base tool call", "after_sft": "agent (SFT)", "final": f"agent ({trained})"}
    if phase.startswith("rl_step_"):
        return f"agent ({config.algorithm} step {phase.removeprefix('rl_step_')})"
    return labels.get(phase, phase)


def train_tasks(config: TrainConfig) -> list[int]:
    """The training task indices: the first ``env.train_tasks`` (or all) of the training env's tasks, less the
    evaluation's when both envs pose one task list (:func:`~agent_trainers.pipeline.config.task_split`)."""
    return task_split(config).train


# --------------------------------------------------------------------- SFT
def run_sft_stage(state: RunState) -> None:
    """Cold-start SFT on oracle episodes, or reload a finished one when resuming."""
    from agent_trainers.algorithms.sft import make_sft_config, oracle_episodes, run_sft

    c, sft_dir = state.config, state.out / "sft"
    if state.resume and (sft_dir / "DONE").is_file():
        state.model, state.tokenizer = load_model(sft_dir, device=c.device)
        return
    tasks = train_tasks(c)
    picks = [tasks[i % len(tasks)] for i in range(c.sft.episodes)]
    episodes = oracle_episodes(
        c.env.id, picks, env_kwargs=c.env.train_kwargs, seed=c.seed, flawed_share=c.sft.flawed_share
    )
    args = make_sft_config(
        device=c.device,
        bf16=c.bf16,
        report_to=c.report_to,
        output_dir=str(sft_dir / "trainer"),
        num_train_epochs=c.sft.epochs,
        learning_rate=c.sft.learning_rate,
        per_device_train_batch_size=c.sft.batch_size,
        max_length=c.sft.max_length,
        gradient_checkpointing=c.sft.gradient_checkpointing,
        seed=c.seed,
    )
    state.model.train()
    trainer = run_sft(state.model, state.tokenizer, episodes, args, print_logs=c.verbose)
    state.model.eval()
    for record in trainer.state.log_history:
        numeric = {k: float(v) for k, v in record.items() if isinstance(v, int | float)}
        state.log.write({**numeric, "stage": "sft", "step": int(record.get("step", 0))})
    if is_main_process():
        state.model.save_pretrained(sft_dir)
        state.tokenizer.save_pretrained(sft_dir)
        write_atomic(sft_dir / "DONE", f"{len(episodes)} oracle episodes\n")
    state.sft_ran = True


# ---------------------------------------------------------------------- RL
class _RLCallback(TrainerCallback):
    """Logs the metrics and the step diagnostics (:mod:`~agent_trainers.algorithms.shared.diagnostics`) to
    ``metrics.jsonl``, prints each step's line and its alarms, evaluates every ``eval.every`` steps."""

    def __init__(self, state: RunState, trainer: Any):
        self.state, self.trainer = state, trainer
        self.step_times: list[float] = []
        self.first: dict[str, float] | None = None
        self.began = time.perf_counter()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.began = time.perf_counter()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        numeric = {k: float(v) for k, v in (logs or {}).items() if isinstance(v, int | float)}
        diagnostics = canonical(numeric)
        self.state.log.write(
            {
                **numeric,
                **diagnostics,
                "stage": "rl",
                "algorithm": str(self.state.config.algorithm),
                "step": int(state.global_step),
                "rl_seconds": time.perf_counter() - self.began,  # wall time since this stage's training began
            }
        )
        if "step_time" in numeric and is_main_process():
            self.step_times.append(numeric["step_time"])
            self.first = self.first or diagnostics
            print(step_line(int(state.global_step), int(state.max_steps), self.step_times, diagnostics), flush=True)
            for alarm in alarms(diagnostics, self.first):
                print(f"  !! {alarm}", flush=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        every = self.state.config.eval.every
        if every and state.global_step % every == 0 and state.global_step < state.max_steps:
            step = int(state.global_step)
            self.state.evaluate(f"rl_step_{step}", step, model=self.trainer.model)


class _TensorBoardLog(TrainerCallback):
    """PPO's per-step logs as TensorBoard scalars under ``<run>/rl/runs/`` (TRL's trainers write their own)."""

    def __init__(self, folder: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(folder))

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        numeric = {k: float(v) for k, v in (logs or {}).items() if isinstance(v, int | float)}
        for name, value in {**numeric, **canonical(numeric)}.items():
            self.writer.add_scalar(f"train/{name}", value, int(state.global_step))
        self.writer.flush()


def training_rollouts(state: RunState, rollouts_type: type[EnvRollouts] = EnvRollouts, **extra: Any) -> EnvRollouts:
    """The RL stage's rollouts (every trainer's): the training tasks' rows, the rollout settings, the seed, the
    precision, one generation batch per step, the run's settings (saved in each checkpoint) and how many env
    errors stop training."""
    c, r = state.config, state.config.rl
    rows = task_rows(c.env.id, train_tasks(c), env_kwargs=c.env.train_kwargs)
    return rollouts_type(
        rows,
        env_kwargs=c.env.train_kwargs,
        config=c.rollout,
        seed=c.seed,
        bf16=bf16_enabled(c.device, c.bf16),
        batch_size=r.episodes_per_step,
        run_settings=c.run_settings(),
        max_env_errors=r.max_env_errors,
        **extra,
    )


def checkpoint_layout(algorithm: Algorithm) -> CheckpointLayout:
    """The files the RL trainer of ``algorithm`` reads back from a checkpoint (what makes one complete)."""
    return ACCELERATE_CHECKPOINT if RL_TRAINERS[algorithm] is run_ppo_stage else TRAINER_CHECKPOINT


def _add_callbacks(state: RunState, trainer: Any) -> None:
    r = state.config.rl
    trainer.add_callback(_RLCallback(state, trainer))
    layout, older_model_only = checkpoint_layout(state.config.algorithm), r.older_checkpoints is OlderCheckpoints.MODEL
    if older_model_only:  # after the trainer's own rollout-state marker
        trainer.add_callback(DropOlderResumeState(layout))
    disk = DiskSpaceCheck(layout, steps=r.steps, save_steps=r.save_steps, older_model_only=older_model_only)
    trainer.add_callback(disk)  # after the pruning, so the space it freed counts
    trainer.add_callback(StopOnNonFinite("rl"))  # after the log row is written
    for callback in state.callbacks:
        trainer.add_callback(callback)


def run_trl_rl_stage(state: RunState) -> None:
    """RL through TRL's ``GRPOTrainer`` with our rollouts; the algorithm picks the advantage estimator."""
    from datasets import Dataset

    from agent_trainers.algorithms.trl_adapter.grpo import AgentGRPOTrainer
    from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc, env_reward
    from agent_trainers.algorithms.trl_adapter.trl_args import grpo_args

    c, r = state.config, state.config.rl
    settings = c.algorithm_settings
    assert isinstance(settings, TRLSettings)
    loss_mask = r.loss_mask
    rollout_fn = training_rollouts(
        state,
        EnvRolloutFunc,
        loss_mask=loss_mask,
        dynamic_sampling=getattr(settings, "dynamic_sampling", False),
        dynamic_sampling_tries=getattr(settings, "dynamic_sampling_tries", 3),
    )
    out = str(state.out / "rl")
    args = grpo_args(
        r, settings, c.rollout, output_dir=out, seed=c.seed, device=c.device, bf16=c.bf16, report_to=c.report_to
    )
    if not settings.gradient_checkpointing and getattr(state.model, "is_gradient_checkpointing", False):
        state.model.gradient_checkpointing_disable()  # left on by SFT (sft.gradient_checkpointing); TRL would keep it
    trainer = AgentGRPOTrainer(
        model=state.model,
        reward_funcs=[env_reward],
        args=args,
        processing_class=state.tokenizer,
        train_dataset=Dataset.from_list(list(rollout_fn.rows)),
        rollout_func=rollout_fn,
        algorithm=c.algorithm,
        settings=settings,
        step_samples=r.step_samples,
        importance_sampling=r.async_rollouts.importance_sampling,
        importance_cap=r.async_rollouts.importance_cap,
    )
    if not c.verbose:
        progress_bar_only(trainer)
    _add_callbacks(state, trainer)
    if r.async_rollouts.enabled:  # a generation worker plays the next steps' episodes while this one trains
        rollout_fn.asynchronous = r.async_rollouts.worker(rollout_fn, state.model, state.tokenizer)
    try:
        checkpoint = state.rl_checkpoint
        if checkpoint is not None:
            load_rollout_state(checkpoint, rollout_fn)
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        if rollout_fn.asynchronous is not None:
            rollout_fn.asynchronous.close()
    state.model = trainer.model


def run_ppo_stage(state: RunState) -> None:
    """RL with our PPO (:class:`~agent_trainers.algorithms.ppo.PPOTrainer`): same rollouts, tasks and callbacks."""
    from agent_trainers.algorithms.ppo import PPOConfig, PPOTrainer

    c = state.config
    assert isinstance(c.algorithm_settings, PPOConfig)
    rollout_fn = training_rollouts(state)
    trainer = PPOTrainer(
        state.model,
        state.tokenizer,
        rollout_fn,
        c.rl,
        c.algorithm_settings,
        output_dir=state.out / "rl",
        seed=c.seed,
        device=c.device,
        bf16=c.bf16,
    )
    if c.report_to is ReportTo.TENSORBOARD and is_main_process():
        trainer.add_callback(_TensorBoardLog(state.out / "rl" / "runs"))
    _add_callbacks(state, trainer)
    trainer.train(resume_from_checkpoint=state.rl_checkpoint)  # it closes the generation worker it started
    state.model = trainer.model


RL_TRAINERS: dict[Algorithm, Callable[[RunState], None]] = {
    **{algorithm: run_trl_rl_stage for algorithm in ESTIMATOR_SECTIONS},  # an estimator trains through TRL
    Algorithm.PPO: run_ppo_stage,
}
"""Which function runs the RL stage of each algorithm (what each one reads: its section,
:data:`~.config.ALGORITHM_SECTIONS`)."""


def run_rl_stage(state: RunState) -> None:
    """Dispatch to the algorithm's RL trainer."""
    RL_TRAINERS[state.config.algorithm](state)


def run_final_stage(state: RunState) -> None:
    """Evaluate the final model and save it with its tokenizer under ``final/``."""
    c = state.config
    if not c.rl.enabled and state.evals and state.evals[-1][0] == "after_sft":  # the model evaluated just now
        state.reuse_evaluation("after_sft", "final", 0)
    else:
        state.evaluate("final", c.rl.steps if c.rl.enabled else 0)
    if not is_main_process():
        return
    state.model.save_pretrained(state.out / "final")
    state.tokenizer.save_pretrained(state.out / "final")
    write_atomic(state.out / "final" / "agent_r1.json", json.dumps({"algorithm": str(c.algorithm)}) + "\n")


@dataclass(frozen=True)
class Stage:
    """One row of the stage table."""

    name: str
    """Stage name (shown in logs)."""
    enabled: Callable[[RunState], bool]
    """Whether it runs, given the state so far."""
    run: Callable[[RunState], None]
    """What it does."""


def _eval_before(state: RunState) -> None:
    state.evaluate("before", 0)


def _eval_after_sft(state: RunState) -> None:
    state.evaluate("after_sft", 0)


def _after_sft_due(state: RunState) -> bool:
    """SFT trained in this call, or a resumed run reloaded SFT whose evaluation was cut before its summary."""
    if state.sft_ran:
        return True
    finished = (state.out / "eval" / "after_sft" / "summary.json").is_file()
    return state.resume and state.config.sft.enabled and not finished


STAGES: tuple[Stage, ...] = (
    Stage("eval_before", lambda s: s.rl_checkpoint is None and s.config.eval.before, _eval_before),
    Stage("sft", lambda s: s.config.sft.enabled, run_sft_stage),
    Stage("eval_after_sft", _after_sft_due, _eval_after_sft),
    Stage("rl", lambda s: s.config.rl.enabled, run_rl_stage),
    Stage("eval_final", lambda s: True, run_final_stage),
)
"""The stages of ``agent-r1 train``, in order."""
