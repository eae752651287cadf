"""Shared base of the procedurally generated tool tasks (``SQLite-v0``, ``Calculator-v0``).

Task ``i`` is generated from ``(i, task_seed)`` alone, so it is the same on
every machine; ids look like ``<prefix>-<task_seed>-<index>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from agent_gym.core.env import ToolEnv
from agent_gym.core.rubric import RewardTerm, Rubric
from agent_gym.rewards import env_rubric

__all__ = ["ProceduralEnv"]

TaskT = TypeVar("TaskT")


class ProceduralEnv(ToolEnv[TaskT]):
    """A ToolEnv over ``num_tasks`` tasks generated lazily from their index.

    Subclasses set :attr:`id_prefix`, implement ``load_task`` and may add
    env-specific terms to the ``"process"`` preset via :meth:`process_terms`.

    Args:
        num_tasks: How many distinct tasks (generated lazily from the index).
        task_seed: Selects a different family of ``num_tasks`` tasks.
        reward: Rubric preset: ``"gated"`` (the default: evidence paid on the answer), ``"process"`` (evidence
            paid as it is found) or ``"outcome"`` (the paper's).
        answer_metric: ``"em"`` or ``"f1"`` for the answer reward.
        shaping_gamma: Add potential-based shaping with this γ (``None``: off).
        reward_weights: Override rubric term weights by name (of the preset, or of ``rubric``).
        rubric: A complete rubric, replacing the preset (see :func:`agent_gym.rewards.env_rubric`).
        **kwargs: Passed to :class:`~agent_gym.core.env.ToolEnv`.
    """

    id_prefix: ClassVar[str] = ""

    def __init__(
        self,
        *,
        num_tasks: int = 10_000,
        task_seed: int = 0,
        reward: str = "gated",
        answer_metric: str = "em",
        shaping_gamma: float | None = None,
        reward_weights: Mapping[str, float] | None = None,
        rubric: Rubric | None = None,
        **kwargs: Any,
    ):
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1 (got {num_tasks})")
        rubric = env_rubric(
            rubric,
            reward=reward,
            answer_metric=answer_metric,
            shaping_gamma=shaping_gamma,
            reward_weights=reward_weights,
            process_terms=self.process_terms() if rubric is None else (),
        )
        super().__init__(rubric=rubric, **kwargs)
        self._num_tasks = int(num_tasks)
        self.task_seed = int(task_seed)

    def process_terms(self) -> Sequence[RewardTerm]:
        """Env-specific terms appended to the ``"process"`` preset (default none)."""
        return ()

    def num_tasks(self) -> int:
        return self._num_tasks

    def task_index_of(self, task_id: str) -> int:
        match = re.fullmatch(rf"{re.escape(self.id_prefix)}-(-?\d+)-(\d+)", task_id)
        if not match or int(match.group(1)) != self.task_seed or int(match.group(2)) >= self._num_tasks:
            raise KeyError(f"no task with id {task_id!r} (ids look like '{self.id_prefix}-{self.task_seed}-<index>')")
        return int(match.group(2))
