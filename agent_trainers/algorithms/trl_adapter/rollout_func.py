"""Our rollout engine as TRL's ``rollout_func`` (:class:`EnvRolloutFunc`), and the env reward.

* :class:`EnvRolloutFunc` is an :class:`~agent_trainers.rollout.training.EnvRollouts`
  that TRL calls as its ``rollout_func``. TRL hands it the prompts,
  each repeated ``num_generations`` times (group members adjacent); it finds
  each group's task (from the trainer's ``tasks_in_generation``, since tasks may share a prompt, as a
  bandit's arms do), plays the ``G`` episodes of every task
  and returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``
  (our ``loss_mask``: env tokens are kept out of the loss), per rollout its
  ``trajectory``, and for the call its ``staleness`` (steps between the policy that played it and the one
  trained: 0 unless ``rl.async_rollouts``) and ``rollout_stats`` (dynamic sampling's and the async worker's
  figures, ``time/rollout``). TRL merges these extra fields into each input row, so they reach the reward
  function and the trainer's advantage step as data; the rollout function writes nothing into the trainer;
* :func:`env_reward` is the reward function: the trajectory's total env reward;
  it also logs the episode metrics and the call's figures through TRL's ``log_metric`` hook.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agent_trainers.policies.sampling import TokenPolicy
from agent_trainers.rollout.training import EnvRollouts, Task, episode_metrics, prompt_key
from agent_trainers.rollout.types import Trajectory

__all__ = ["EnvRolloutFunc", "env_reward"]


def env_reward(
    completions: list[Any],
    trajectory: list[Trajectory] | None = None,
    rollout_stats: list[dict[str, float]] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: the total env reward of each rollout (and its episode metrics, logged).

    Args:
        completions: Ignored (the reward comes from the env, not the text).
        trajectory: One :class:`~agent_trainers.rollout.Trajectory` per rollout,
            forwarded by TRL from :class:`EnvRolloutFunc`'s output.
        rollout_stats: The rollout call's figures, the same on every row (logged once).
        log_metric: TRL's metric hook; receives :func:`~agent_trainers.rollout.training.episode_metrics` and
            ``rollout_stats``.
        **kwargs: Other columns TRL passes; ignored.

    Raises:
        ValueError: If the rollout function did not provide trajectories.
    """
    if trajectory is None:
        raise ValueError("env_reward needs the `trajectory` field; use it with EnvRolloutFunc as rollout_func")
    if log_metric is not None:
        for name, value in episode_metrics(trajectory).items():
            log_metric(name, value)
        for name, value in (rollout_stats[0] if rollout_stats else {}).items():
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
class EnvRolloutFunc(EnvRollouts):
    """A TRL ``rollout_func`` that plays registered envs with the rollout engine (see the module docstring).

    Its attributes are :class:`~agent_trainers.rollout.training.EnvRollouts`'; ``config.temperature``
    and ``config.top_p`` are taken from the trainer at each call (TRL's loss uses the same temperature). With a
    trainer built with ``use_vllm=True`` the default policy is TRL's vLLM engine
    (:mod:`agent_trainers.algorithms.trl_adapter.trl_vllm`).
    With ``asynchronous`` set (``rl.async_rollouts``) the training calls are played by its worker, ahead of
    time; the next calls' tasks come from the trainer's step schedule (``upcoming_tasks``).
    """

    def _tasks(self, prompts: list[Any], group: int, trainer: Any) -> list[Task]:
        """Each group's task: the trainer's (``tasks_in_generation``, :class:`AgentGRPOTrainer`'s) where it says,
        checked against the prompt; else the one task of :attr:`rows` with that prompt.

        Raises:
            ValueError: A group is not ``group`` copies of one task's prompt, or the trainer's task has another prompt.
            KeyError: A prompt is in none of :attr:`rows`.
            ValueError: Without the trainer's tasks, several tasks share a group's prompt (the prompt cannot tell
                which to play).
        """
        if len(prompts) % group:
            raise ValueError(f"number of prompts must be divisible by num_generations (got {len(prompts)}, {group})")
        posed = getattr(trainer, "tasks_in_generation", None)
        if posed is not None and len(posed) != len(prompts):
            raise ValueError(f"the trainer poses {len(posed)} tasks for {len(prompts)} prompts")
        tasks = []
        for start in range(0, len(prompts), group):
            keys = {prompt_key(p) for p in prompts[start : start + group]}
            if len(keys) != 1 or (posed is not None and len(set(posed[start : start + group])) != 1):
                raise ValueError(f"prompts {start}..{start + group - 1} are not one group of a single task")
            candidates = self._index.get(keys.pop())
            if candidates is None:
                raise KeyError("a prompt is not in the rows given to EnvRolloutFunc (build both from the same rows)")
            if posed is not None:
                if posed[start] not in candidates:
                    raise ValueError(f"task {posed[start]} has another prompt than the one TRL is generating for")
                tasks.append(posed[start])
            elif len(candidates) == 1:
                tasks.append(candidates[0])
            else:
                raise ValueError(
                    f"tasks {candidates} share one prompt, and the trainer does not say which it generates for "
                    "(AgentGRPOTrainer does: tasks_in_generation)"
                )
        return tasks

    def _policy(self, model: Any, tokenizer: Any, trainer: Any = None) -> TokenPolicy:
        if self.policy_factory is None and getattr(trainer, "use_vllm", False):  # TRL's vLLM engine, experimental
            from agent_trainers.algorithms.trl_adapter.trl_vllm import trl_vllm_policy

            return trl_vllm_policy(trainer, self.seed + self.calls)
        return super()._policy(model, tokenizer, trainer)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play ``len(prompts)`` episodes and return them in TRL's format."""
        training = trainer.model.training
        group = trainer.num_generations if training else trainer.num_generations_eval
        tasks = self._tasks(prompts, group, trainer)
        config = replace(self.config, temperature=trainer.temperature, top_p=trainer.top_p)
        began, staleness = time.perf_counter(), 0
        if self.asynchronous is not None and training:
            trajectories, staleness = self._play_async(tasks, group, config, trainer)
        else:
            try:
                with _generation_model(trainer) as model:
                    model.eval()
                    policy = self._policy(model, trainer.processing_class, trainer)
                    trajectories = self.play(tasks, group, policy, config)
            finally:
                trainer.model.train(training)
        self.calls += 1
        self.last_stats["time/rollout"] = time.perf_counter() - began
        return {
            "prompt_ids": [list(t.prompt_ids) for t in trajectories],
            "completion_ids": [list(t.completion_ids) for t in trajectories],
            "logprobs": [list(t.logprobs) for t in trajectories],
            "env_mask": [list(t.loss_mask) if self.loss_mask else [1] * len(t.loss_mask) for t in trajectories],
            "trajectory": trajectories,
            "staleness": staleness,
            "rollout_stats": dict(self.last_stats),
        }

    def _play_async(self, tasks: list[Task], group: int, config: Any, trainer: Any) -> tuple[list[Trajectory], int]:
        """This call's episodes from the generation worker (maybe generated steps ago) and how stale they are;
        submits the next calls."""
        upcoming = trainer.upcoming_tasks(tasks, self.asynchronous.max_staleness)
        trajectories, self.last_stats = self.asynchronous.rollouts_for(
            self.calls,
            tasks,
            group,
            config,
            trainer.accelerator.unwrap_model(trainer.model),
            version=int(trainer.state.global_step),
            upcoming=upcoming,
        )
        return trajectories, int(self.last_stats["async/staleness"])
