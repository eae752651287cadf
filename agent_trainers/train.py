"""The ``agent-r1 train`` pipeline: evaluate, cold-start SFT, GRPO, evaluate.

Everything a run produces goes under ``config.output_dir``::

    config.yaml        the resolved config
    metrics.jsonl      one record per log/eval event ({"stage", "step", ...})
    sft/               the model after SFT (and a DONE marker, for --resume)
    grpo/checkpoint-N  TRL checkpoints (model, optimizer, RNG, trainer state)
    final/             the final model and tokenizer
    results.json       before/after evaluation table
    plots/*.png        reward and EM over GRPO steps
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from transformers import TrainerCallback, set_seed
from trl import SFTConfig

from agent_trainers.config import ModelName, TrainConfig
from agent_trainers.evaluate import EvalResult, evaluate
from agent_trainers.grpo import AgentGRPOTrainer, EnvRolloutFunc, env_reward, grpo_dataset_rows, make_grpo_config
from agent_trainers.plots import MetricsLog, plot_metrics, read_jsonl
from agent_trainers.policies import TransformersPolicy
from agent_trainers.rollout import RolloutConfig
from agent_trainers.sft import oracle_episodes, run_sft

__all__ = ["RunResult", "load_policy_model", "run_training", "seed_everything"]


@dataclass
class RunResult:
    """What a run measured.

    Attributes:
        evals: ``(phase, result)`` in order: ``before``, ``after_sft``, ``grpo_step_N``..., ``final``.
        output_dir: Where everything was written.
        plot: The reward/EM plot, if one was drawn.
    """

    evals: list[tuple[str, EvalResult]]
    output_dir: Path
    plot: Path | None


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (and transformers' helpers)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    set_seed(seed)


def load_policy_model(config: TrainConfig, path: Path | None = None) -> tuple[Any, Any]:
    """The configured model and tokenizer (from ``path`` if given, e.g. a checkpoint)."""
    from transformers import AutoModelForCausalLM

    from agent_trainers.models import load_smollm2, load_smollm2_tokenizer, tiny_random_model, tool_chat_template

    source = path or (Path(config.model.path) if config.model.path else None)
    if source is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(source))
        tok.chat_template = tool_chat_template()
        tok.padding_side = "left"
        return AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32), tok
    if config.model.name is ModelName.TINY_RANDOM:
        return tiny_random_model(load_smollm2_tokenizer(), seed=config.seed)
    return load_smollm2()


def _num_tasks(env_id: str, kwargs: dict[str, Any]) -> int:
    env = gym.make(env_id, **kwargs)
    try:
        return int(env.unwrapped.num_tasks())
    finally:
        env.close()


def _rollout_config(config: TrainConfig, temperature: float) -> RolloutConfig:
    g = config.grpo
    return RolloutConfig(
        max_turns=g.max_turns,
        max_new_tokens_per_turn=g.max_new_tokens_per_turn,
        max_total_tokens=g.max_total_tokens,
        temperature=temperature,
    )


class _Evaluator:
    """Evaluates on the fixed held-aside tasks and logs the result."""

    def __init__(self, config: TrainConfig, log: MetricsLog, evals: list[tuple[str, EvalResult]]):
        self.config, self.log, self.evals = config, log, evals
        n = _num_tasks(config.env.id, config.env.eval_kwargs)
        self.tasks = list(range(min(config.eval.tasks, n)))

    def __call__(self, model: Any, tokenizer: Any, phase: str, step: int) -> EvalResult:
        was_training = model.training
        model.eval()
        policy = TransformersPolicy(model, tokenizer, batch_size=8, seed=self.config.seed)
        rc = _rollout_config(self.config, self.config.eval.temperature)
        result = evaluate(
            policy, self.config.env.id, self.tasks, env_kwargs=self.config.env.eval_kwargs, config=rc, seed=12345
        )
        model.train(was_training)
        self.evals.append((phase, result))
        self.log.write({"stage": "eval", "phase": phase, "step": step, **result.as_dict()})
        return result


class _GRPOCallback(TrainerCallback):
    """Logs TRL's metrics to JSONL and evaluates every ``eval.every`` steps."""

    def __init__(self, log: MetricsLog, evaluate_fn: Callable[[int], None], every: int):
        self.log, self.evaluate_fn, self.every = log, evaluate_fn, every

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        numeric = {k: float(v) for k, v in (logs or {}).items() if isinstance(v, int | float)}
        self.log.write({"stage": "grpo", "step": int(state.global_step), **numeric})

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.every and state.global_step % self.every == 0 and state.global_step < state.max_steps:
            self.evaluate_fn(int(state.global_step))


def _train_tasks(config: TrainConfig) -> list[int]:
    n = _num_tasks(config.env.id, config.env.train_kwargs)
    if config.env.train_tasks is not None:
        n = min(n, config.env.train_tasks)
    return list(range(n))


def _sft_stage(config: TrainConfig, model: Any, tok: Any, out: Path, resume: bool) -> tuple[Any, Any, bool]:
    """Run (or, with resume, reload) the SFT stage; returns the model, tokenizer and whether it ran."""
    sft_dir = out / "sft"
    if resume and (sft_dir / "DONE").is_file():
        model, tok = load_policy_model(config, sft_dir)
        return model, tok, False
    tasks = _train_tasks(config)
    picks = [tasks[i % len(tasks)] for i in range(config.sft.episodes)]
    episodes = oracle_episodes(config.env.id, picks, env_kwargs=config.env.train_kwargs, seed=config.seed)
    args = SFTConfig(
        output_dir=str(sft_dir / "trainer"),
        num_train_epochs=config.sft.epochs,
        learning_rate=config.sft.learning_rate,
        per_device_train_batch_size=config.sft.batch_size,
        max_length=config.sft.max_length,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        seed=config.seed,
        bf16=False,
    )
    model.train()
    run_sft(model, tok, episodes, args)
    model.eval()
    model.save_pretrained(sft_dir)
    tok.save_pretrained(sft_dir)
    (sft_dir / "DONE").write_text(f"{len(episodes)} oracle episodes\n")
    return model, tok, True


def _grpo_stage(config: TrainConfig, model: Any, tok: Any, out: Path, resume: bool, ev: _Evaluator) -> Any:
    g = config.grpo
    rows = grpo_dataset_rows(config.env.id, _train_tasks(config), env_kwargs=config.env.train_kwargs)
    from datasets import Dataset

    rollout_fn = EnvRolloutFunc(
        rows, env_kwargs=config.env.train_kwargs, config=_rollout_config(config, g.temperature), seed=config.seed
    )
    args = make_grpo_config(
        output_dir=str(out / "grpo"),
        max_steps=g.steps,
        per_device_train_batch_size=g.num_generations * g.prompts_per_step,
        num_generations=g.num_generations,
        gradient_accumulation_steps=1,
        learning_rate=g.learning_rate,
        beta=g.beta,
        temperature=g.temperature,
        loss_type=g.loss_type.value,
        save_strategy="steps",
        save_steps=g.save_steps,
        seed=config.seed,
        max_completion_length=g.max_total_tokens,
    )
    trainer = AgentGRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[env_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        rollout_func=rollout_fn,
        advantage=g.advantage,
        gamma=g.gamma,
    )
    log = ev.log
    trainer.add_callback(
        _GRPOCallback(log, lambda step: ev(trainer.model, tok, f"grpo_step_{step}", step), config.eval.every)
    )
    checkpoint = _last_checkpoint(out / "grpo") if resume else None
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    return trainer.model


def _last_checkpoint(folder: Path) -> Path | None:
    found = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return found[-1] if found else None


def run_training(config: TrainConfig, *, resume: bool = False) -> RunResult:
    """Run the configured stages end to end.

    Args:
        config: The validated configuration.
        resume: Continue an interrupted run in ``config.output_dir``: a finished
            SFT stage is reloaded, GRPO resumes from its last checkpoint.

    Returns:
        The evaluations, output folder and plot path.
    """
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    seed_everything(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    log = MetricsLog(out / "metrics.jsonl")
    evals: list[tuple[str, EvalResult]] = []
    ev = _Evaluator(config, log, evals)
    model, tok = load_policy_model(config)
    if not (resume and _last_checkpoint(out / "grpo")):
        ev(model, tok, "before", 0)
    if config.sft.enabled:
        model, tok, ran = _sft_stage(config, model, tok, out, resume)
        if ran:
            ev(model, tok, "after_sft", 0)
    if config.grpo.enabled:
        model = _grpo_stage(config, model, tok, out, resume, ev)
    ev(model, tok, "final", config.grpo.steps if config.grpo.enabled else 0)
    model.save_pretrained(out / "final")
    tok.save_pretrained(out / "final")
    records = read_jsonl(out / "metrics.jsonl")
    plot = plot_metrics(
        [r for r in records if r.get("stage") == "eval"],
        out / "plots" / "eval.png",
        keys=["reward", "em", "f1", "tool_call_rate"],
        title=f"{config.env.id}: held-aside eval",
    )
    plot_metrics([r for r in records if r.get("stage") == "grpo"], out / "plots" / "train.png", keys=["reward", "loss"])
    return RunResult(evals=evals, output_dir=out, plot=plot)
