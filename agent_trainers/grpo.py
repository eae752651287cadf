"""GRPO through TRL, with our rollout engine as its ``rollout_func``.

TRL's :class:`~trl.GRPOTrainer` does the optimisation; this module only plugs
our environments into it:

* :func:`grpo_dataset_rows` makes one row per task: the env's own opening
  messages as ``prompt`` plus ``task_index`` and ``env_id``;
* :class:`EnvRolloutFunc` is the ``rollout_func``. TRL hands it the prompts,
  each repeated ``num_generations`` times (group members adjacent); it maps
  each group back to its task, plays the ``G`` episodes of every task with
  :func:`agent_trainers.rollout.rollout` (group-consistent resets, exact token
  ids) and returns ``prompt_ids``, ``completion_ids``, ``logprobs``,
  ``env_mask`` (our ``loss_mask``: env tokens are kept out of the loss) and,
  per rollout, ``env_reward`` and the episode metrics;
* :func:`env_reward` is the reward function: TRL merges the extra fields of a
  ``rollout_func`` into each row before calling reward functions, so it just
  returns the trajectory's total env reward;
* :class:`AgentGRPOTrainer` adds ``advantage="turn"`` (see
  :mod:`agent_trainers.advantages`). The smallest hook is
  ``_generate_and_score_completions``: we call TRL's, then replace its
  ``(B,)`` ``advantages`` with ``(B, T)`` per-token ones. TRL's loss accepts
  ``(B, T)`` advantages as they are (it only unsqueezes ``(B,)`` ones), and
  its batch shuffling/splitting slices any tensor along dim 0.

Group normalisation of turn-level advantages uses the local batch only, so
with several processes each group must stay on one process (true for one
process, the CPU setting).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
from trl import GRPOConfig, GRPOTrainer

import agent_gym  # noqa: F401  (registers the environments)
from agent_trainers.advantages import AdvantageMode, turn_level_advantages
from agent_trainers.policies import Policy, TransformersPolicy
from agent_trainers.rollout import RolloutConfig, Trajectory, rollout

__all__ = ["AgentGRPOTrainer", "EnvRolloutFunc", "env_reward", "grpo_dataset_rows", "prompt_key"]


def prompt_key(prompt: Any) -> str:
    """A canonical string of a prompt (messages or text), used to find its task."""
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def grpo_dataset_rows(
    env_id: str, task_indices: Sequence[int], *, env_kwargs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One GRPO dataset row per task: the env's opening messages and the task index.

    Args:
        env_id: A registered environment id.
        task_indices: Tasks to include.
        env_kwargs: Keyword arguments for ``gymnasium.make``.

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


def env_reward(completions: list[Any], env_reward: list[float] | None = None, **kwargs: Any) -> list[float]:
    """TRL reward function: the total env reward of each rollout.

    Args:
        completions: Ignored (the reward comes from the env, not the text).
        env_reward: One float per rollout, forwarded by TRL from
            :class:`EnvRolloutFunc`'s output.
        **kwargs: Other columns TRL passes; ignored.

    Raises:
        ValueError: If the rollout function did not provide ``env_reward``.
    """
    if env_reward is None:
        raise ValueError("env_reward needs the `env_reward` field; use it with EnvRolloutFunc as rollout_func")
    return [float(r) for r in env_reward]


@dataclass
class EnvRolloutFunc:
    """A TRL ``rollout_func`` that plays registered envs with the rollout engine.

    Attributes:
        rows: The training (and eval) dataset rows, to map prompts to tasks.
        env_kwargs: Keyword arguments for ``gymnasium.make``.
        config: Rollout settings; ``group_size`` and ``temperature`` are taken
            from the trainer at each call.
        seed: Base seed; each call uses a fresh seed derived from it.
        batch_size: Generation batch size of the default policy.
        policy_factory: Builds the policy from ``(model, tokenizer, seed)``; default
            :class:`~agent_trainers.policies.TransformersPolicy` on the trainer's
            model (pass one for vLLM, or a scripted policy in tests).
        last_trajectories: The trajectories of the latest call (read by
            :class:`AgentGRPOTrainer` and by logging).
    """

    rows: Sequence[Mapping[str, Any]]
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    config: RolloutConfig = field(default_factory=RolloutConfig)
    seed: int = 0
    batch_size: int = 8
    policy_factory: Callable[[Any, Any, int], Policy] | None = None
    last_trajectories: list[Trajectory] = field(default_factory=list)
    _calls: int = 0
    _index: dict[str, tuple[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for row in self.rows:
            self._index[prompt_key(row["prompt"])] = (str(row["env_id"]), int(row["task_index"]))

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

    def __call__(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        """Play ``len(prompts)`` episodes and return them in TRL's format."""
        training = trainer.model.training
        group = trainer.num_generations if training else trainer.num_generations_eval
        tasks = self._tasks(prompts, group)
        model = trainer.accelerator.unwrap_model(trainer.model)
        model.eval()
        if self.policy_factory is not None:
            policy = self.policy_factory(model, trainer.processing_class, self.seed + self._calls)
        else:
            policy = TransformersPolicy(
                model, trainer.processing_class, batch_size=self.batch_size, seed=self.seed + self._calls
            )
        config = replace(self.config, group_size=group, temperature=trainer.temperature, top_p=trainer.top_p)
        trajectories: list[Trajectory] = []
        for env_id in dict.fromkeys(e for e, _ in tasks):
            indices = [i for e, i in tasks if e == env_id]
            seed = self.seed + 100_003 * self._calls
            trajectories += rollout(
                policy, env_id, task_indices=indices, seed=seed, env_kwargs=dict(self.env_kwargs), config=config
            )
        if len({e for e, _ in tasks}) > 1:  # restore the prompt order across envs
            order = {t: k for k, t in enumerate(tasks)}
            trajectories.sort(key=lambda t: order[(t.env_id, t.task_index)])
        self._calls += 1
        trainer.model.train(training)
        self.last_trajectories = trajectories
        return _to_trl(trajectories)


def _to_trl(trajectories: Sequence[Trajectory]) -> dict[str, list[Any]]:
    metric_names = sorted({k for t in trajectories for k in t.metrics})
    out: dict[str, list[Any]] = {
        "prompt_ids": [list(t.prompt_ids) for t in trajectories],
        "completion_ids": [list(t.completion_ids) for t in trajectories],
        "logprobs": [list(t.logprobs) for t in trajectories],
        "env_mask": [list(t.loss_mask) for t in trajectories],
        "env_reward": [t.total_reward for t in trajectories],
        "num_turns": [len(t.turns) for t in trajectories],
        "stop_reason": [t.stop_reason for t in trajectories],
    }
    for name in metric_names:
        out[f"metric_{name}"] = [float(t.metrics.get(name, 0.0)) for t in trajectories]
    return out


class AgentGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` plus turn-level advantages from process rewards.

    Args:
        *args: As for ``GRPOTrainer``; ``rollout_func`` must be an :class:`EnvRolloutFunc`.
        advantage: ``"outcome"`` (TRL's GRPO) or ``"turn"``.
        gamma: Discount of the per-turn returns-to-go (``"turn"`` only).
        **kwargs: As for ``GRPOTrainer``.
    """

    def __init__(
        self, *args: Any, advantage: AdvantageMode | str = AdvantageMode.OUTCOME, gamma: float = 1.0, **kwargs: Any
    ):
        super().__init__(*args, **kwargs)
        self.advantage_mode = AdvantageMode(advantage)
        self.turn_gamma = float(gamma)
        if not isinstance(self.rollout_func, EnvRolloutFunc):
            raise TypeError(f"AgentGRPOTrainer needs an EnvRolloutFunc rollout_func (got {type(self.rollout_func)})")

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if self.advantage_mode is AdvantageMode.TURN and self.model.training:
            trajs = self.rollout_func.last_trajectories
            adv = turn_level_advantages(
                [t.turn_rewards for t in trajs],
                [[(s.start, s.end) for s in t.turns] for t in trajs],
                group_size=self.num_generations,
                length=output["completion_ids"].shape[1],
                gamma=self.turn_gamma,
                scale=self.scale_rewards != "none",
            )
            output["advantages"] = adv.to(output["advantages"].device)
        return output


def make_grpo_config(**overrides: Any) -> GRPOConfig:
    """A ``GRPOConfig`` with CPU-friendly defaults for our rollout path (override any field)."""
    defaults: dict[str, Any] = {
        "report_to": "none",
        "use_cpu": True,
        "logging_steps": 1,
        "save_strategy": "no",
        "mask_truncated_completions": False,
        "beta": 0.0,
        "bf16": False,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": False,
    }
    defaults.update(overrides)
    return GRPOConfig(**defaults)
