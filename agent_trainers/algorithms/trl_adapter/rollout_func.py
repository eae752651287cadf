"""Our rollout engine as TRL's ``rollout_func``, the env reward, and per-episode metrics.

* :func:`grpo_dataset_rows` makes one row per task: the env's own opening
  messages as ``prompt`` plus ``task_index`` and ``env_id``;
* :class:`EnvRolloutFunc` is the ``rollout_func``. TRL hands it the prompts,
  each repeated ``num_generations`` times (group members adjacent); it maps
  each group back to its task, plays the ``G`` episodes of every task with
  :func:`agent_trainers.rollout.rollout` and returns ``prompt_ids``,
  ``completion_ids``, ``logprobs``, ``env_mask`` (our ``loss_mask``: env tokens
  are kept out of the loss) and, per rollout, its ``trajectory``. TRL merges
  extra fields into each input row, so the trajectories reach the reward
  function and the trainer's advantage step as data, not shared state;
* :func:`env_reward` is the reward function: the trajectory's total env reward;
  it also logs the episode metrics through TRL's ``log_metric`` hook.

Its state - the call counter that seeds every rollout - is saved in each
checkpoint and restored on resume (:meth:`EnvRolloutFunc.state_dict`).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the environments)
from agent_trainers.policies.sampling import TokenPolicy
from agent_trainers.policies.transformers_policy import TransformersPolicy
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.engine import rollout
from agent_trainers.rollout.types import Trajectory

__all__ = ["EnvRolloutFunc", "env_reward", "episode_metrics", "grpo_dataset_rows", "prompt_key"]


def prompt_key(prompt: Any) -> str:
    """A canonical string of a prompt (messages or text), used to find its task."""
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def grpo_dataset_rows(
    env_id: str, task_indices: Sequence[int], *, env_kwargs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One dataset row per task: the env's opening messages and the task index.

    Returns:
        Rows with ``prompt`` (system and user messages), ``task_index`` and ``env_id``.
    """
    env = gym.make(env_id, **dict(env_kwargs or {}))
    rows = []
    try:
        for index in task_indices:
            _, info = env.reset(seed=0, options={"task_index": int(index)})
            prompt = [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
            rows.append({"prompt": prompt, "task_index": int(index), "env_id": env_id})
    finally:
        env.close()
    return rows


def episode_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Means over episodes of what they report; a metric no episode reports is omitted (never 0.0).

    Keys: ``rollout/turns`` (model turns, over every episode), ``rollout/answered``
    (fraction that ended with an answer), ``rollout/stop/<reason>`` fractions,
    and ``episode/<name>`` for each env metric averaged over the episodes that
    report it (envs report metrics only when an episode ends by itself).
    """
    if not trajectories:
        return {}
    n = len(trajectories)
    out = {"rollout/turns": sum(len(t.turns) for t in trajectories) / n}
    out["rollout/answered"] = sum(t.answered for t in trajectories) / n
    for name in sorted({k for t in trajectories for k in t.metrics}):
        values = [float(t.metrics[name]) for t in trajectories if name in t.metrics]
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            out[f"episode/{name}"] = sum(finite) / len(finite)
    for reason in sorted({t.stop_reason for t in trajectories}):
        out[f"rollout/stop/{reason}"] = sum(t.stop_reason == reason for t in trajectories) / n
    return out


def env_reward(
    completions: list[Any],
    trajectory: list[Trajectory] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: the total env reward of each rollout (and its episode metrics, logged).

    Args:
        completions: Ignored (the reward comes from the env, not the text).
        trajectory: One :class:`~agent_trainers.rollout.Trajectory` per rollout,
            forwarded by TRL from :class:`EnvRolloutFunc`'s output.
        log_metric: TRL's metric hook; receives :func:`episode_metrics`.
        **kwargs: Other columns TRL passes; ignored.

    Raises:
        ValueError: If the rollout function did not provide trajectories.
    """
    if trajectory is None:
        raise ValueError("env_reward needs the `trajectory` field; use it with EnvRolloutFunc as rollout_func")
    if log_metric is not None:
        for name, value in episode_metrics(trajectory).items():
            log_metric(name, value)
    return [t.total_reward for t in trajectory]


def _generation_model(trainer: Any) -> contextlib.AbstractContextManager[Any]:
    """The trainer's model, ready to generate: TRL's ``unwrap_model_for_generation`` (DDP/DeepSpeed/FSDP
    unwrapped, ZeRO-3 parameters gathered as ``ds3_gather_for_generation`` says, gradient checkpointing off);
    with ``use_vllm`` the model does not generate, so it is only unwrapped."""
    if getattr(trainer, "use_vllm", False):
        return contextlib.nullcontext(trainer.accelerator.unwrap_model(trainer.model))
    from trl.models import unwrap_model_for_generation

    return unwrap_model_for_generation(
        trainer.model_wrapped,
        trainer.accelerator,
        gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
        gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
    )


@dataclass
class EnvRolloutFunc:
    """A TRL ``rollout_func`` that plays registered envs with the rollout engine.

    Attributes:
        rows: The training (and eval) dataset rows, to map prompts to tasks.
        env_kwargs: Keyword arguments for ``gymnasium.make``.
        config: Rollout settings; ``temperature`` and ``top_p`` are taken from
            the trainer at each call (TRL's loss uses the same temperature).
        seed: Base seed; call ``k`` plays with seeds derived from ``seed`` and ``k``.
        batch_size: Generation batch size of the default policy.
        loss_mask: Keep env tokens out of the policy loss (``env_mask``); False
            puts them in (the paper's ablation).
        policy_factory: Builds the policy from ``(model, tokenizer, seed)``; default
            :class:`~agent_trainers.policies.TransformersPolicy` on the trainer's
            model, or TRL's vLLM engine when the trainer has ``use_vllm=True``
            (:mod:`agent_trainers.algorithms.trl_adapter.trl_vllm`); pass one for a scripted policy in tests.
        calls: Rollout calls made so far (saved in checkpoints).
    """

    rows: Sequence[Mapping[str, Any]]
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    config: RolloutConfig = field(default_factory=RolloutConfig)
    seed: int = 0
    batch_size: int = 8
    loss_mask: bool = True
    policy_factory: Callable[[Any, Any, int], TokenPolicy] | None = None
    calls: int = 0
    _index: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for row in self.rows:
            self._index[prompt_key(row["prompt"])] = (str(row["env_id"]), int(row["task_index"]))

    def state_dict(self) -> dict[str, int]:
        """What a checkpoint must keep for an exact resume."""
        return {"calls": self.calls, "seed": self.seed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (the seed must match this run's)."""
        if int(state["seed"]) != self.seed:
            raise ValueError(f"checkpoint was made with rollout seed {state['seed']}, this run uses {self.seed}")
        self.calls = int(state["calls"])

    def _tasks(self, prompts: list[Any], group: int) -> list[tuple[str, int]]:
        if len(prompts) % group:
            raise ValueError(f"number of prompts must be divisible by num_generations (got {len(prompts)}, {group})")
        tasks = []
        for start in range(0, len(prompts), group):
            keys = {prompt_key(p) for p in prompts[start : start + group]}
            if len(keys) != 1:
                raise ValueError(f"prompts {start}..{start + group - 1} are not one group of a single task")
            key = keys.pop()
            if key not in self._index:
                raise KeyError("a prompt is not in the rows given to EnvRolloutFunc (build both from the same rows)")
            tasks.append(self._index[key])
        return tasks

    def _policy(self, model: Any, tokenizer: Any, trainer: Any = None) -> TokenPolicy:
        if self.policy_factory is not None:
            return self.policy_factory(model, tokenizer, self.seed + self.calls)
        if getattr(trainer, "use_vllm", False):  # TRL's vLLM engine (GRPOConfig use_vllm=True), experimental
            from agent_trainers.algorithms.trl_adapter.trl_vllm import trl_vllm_policy

            return trl_vllm_policy(trainer, self.seed + self.calls)
        return TransformersPolicy(model, tokenizer, batch_size=self.batch_size, seed=self.seed + self.calls)

    def play(
        self, tasks: list[tuple[str, int]], group: int, policy: TokenPolicy, config: RolloutConfig
    ) -> list[Trajectory]:
        """Play ``group`` episodes of each ``(env_id, task_index)``, in the order given."""
        trajectories: list[Trajectory] = []
        seed = self.seed + 100_003 * self.calls
        for env_id in dict.fromkeys(e for e, _ in tasks):
            indices = [i for e, i in tasks if e == env_id]
            trajectories += rollout(
                policy,
                env_id,
                task_indices=indices,
                group_size=group,
                seed=seed,
                env_kwargs=dict(self.env_kwargs),
                config=config,
            )
        if len({e for e, _ in tasks}) > 1:  # restore the prompt order across envs
            order = {t: k for k, t in enumerate(tasks)}
            trajectories.sort(key=lambda t: order[(t.env_id, t.task_index)])
        return trajectories

    def play_step(self, tasks: list[tuple[str, int]], group: int, model: Any, tokenizer: Any) -> list[Trajectory]:
        """One rollout call outside TRL (PPO): play ``tasks`` with ``model`` (in eval mode), then count the call."""
        trajectories = self.play(tasks, group, self._policy(model, tokenizer), self.config)
        self.calls += 1
        return trajectories

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Play ``len(prompts)`` episodes and return them in TRL's format."""
        training = trainer.model.training
        group = trainer.num_generations if training else trainer.num_generations_eval
        tasks = self._tasks(prompts, group)
        config = replace(self.config, temperature=trainer.temperature, top_p=trainer.top_p)
        try:
            with _generation_model(trainer) as model:
                model.eval()
                trajectories = self.play(tasks, group, self._policy(model, trainer.processing_class, trainer), config)
        finally:
            trainer.model.train(training)
        self.calls += 1
        return {
            "prompt_ids": [list(t.prompt_ids) for t in trajectories],
            "completion_ids": [list(t.completion_ids) for t in trajectories],
            "logprobs": [list(t.logprobs) for t in trajectories],
            "env_mask": [list(t.loss_mask) if self.loss_mask else [1] * len(t.loss_mask) for t in trajectories],
            "trajectory": trajectories,
        }
