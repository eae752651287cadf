"""Evaluation of a policy on a fixed sample of tasks: reward, EM, F1, tool-call rate.

Example:
    >>> result = evaluate(policy, "AgentR1/HotpotQA-v0", range(16), env_kwargs={"split": "test"})  # doctest: +SKIP
    >>> result.tool_call_rate  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agent_trainers.policies.sampling import ChatPolicy, TokenPolicy
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.engine import rollout
from agent_trainers.rollout.types import Trajectory

__all__ = ["REQUIRED_METRICS", "EvalResult", "MissingMetricError", "evaluate", "summarize"]

REQUIRED_METRICS = ("answer_em", "answer_f1")
"""Metrics every answered episode must report (``info["metrics"]`` of the final step)."""


class MissingMetricError(KeyError):
    """An answered episode lacks a required metric (renamed or dropped by the env)."""


@dataclass(frozen=True)
class EvalResult:
    """Means over the evaluated episodes.

    Attributes:
        episodes: Number of episodes.
        reward: Mean total env reward.
        em: Mean exact match over all episodes; an episode that gave no answer
            is wrong by definition (scores 0), an answered one must report ``answer_em``.
        f1: Mean token F1, likewise.
        tool_call_rate: Fraction of episodes in which the model made at least one tool call.
        answer_rate: Fraction of episodes that ended with an answer.
        turns: Mean number of model turns.
    """

    episodes: int
    reward: float
    em: float
    f1: float
    tool_call_rate: float
    answer_rate: float
    turns: float

    def as_dict(self) -> dict[str, float]:
        """The fields as a dict (for JSONL metrics)."""
        return {k: float(v) for k, v in asdict(self).items()}


def _made_tool_call(traj: Trajectory) -> bool:
    return any(m.get("role") == "assistant" and m.get("tool_calls") for m in traj.messages)


def _answer_score(traj: Trajectory, name: str) -> float:
    """The episode's answer metric; 0 only when it never answered (a missing answer is a wrong one)."""
    if not traj.answered:
        return 0.0
    if name not in traj.metrics:
        raise MissingMetricError(
            f"episode of task {traj.task_id!r} answered but its metrics lack {name!r} "
            f"(it reported {sorted(traj.metrics)}); was the metric renamed?"
        )
    return float(traj.metrics[name])


def summarize(trajectories: Sequence[Trajectory]) -> EvalResult:
    """Aggregate trajectories into an :class:`EvalResult`.

    Raises:
        ValueError: If there are no trajectories.
        MissingMetricError: An answered episode lacks ``answer_em`` or ``answer_f1``.
    """
    n = len(trajectories)
    if n == 0:
        raise ValueError("summarize needs at least one trajectory")

    def mean(values: Sequence[float]) -> float:
        return float(sum(values) / n)

    return EvalResult(
        episodes=n,
        reward=mean([t.total_reward for t in trajectories]),
        em=mean([_answer_score(t, "answer_em") for t in trajectories]),
        f1=mean([_answer_score(t, "answer_f1") for t in trajectories]),
        tool_call_rate=mean([float(_made_tool_call(t)) for t in trajectories]),
        answer_rate=mean([float(t.stop_reason == "answer") for t in trajectories]),
        turns=mean([float(len(t.turns)) for t in trajectories]),
    )


def evaluate(
    policy: TokenPolicy | ChatPolicy,
    env_id: str,
    task_indices: Sequence[int],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    config: RolloutConfig | None = None,
    seed: int = 0,
) -> EvalResult:
    """Play each task once and summarise.

    Args:
        policy: The policy (greedy when ``config.temperature == 0``).
        env_id: A registered environment id.
        task_indices: The fixed evaluation tasks.
        env_kwargs: Keyword arguments for ``gymnasium.make`` (e.g. ``{"split": "test"}``).
        config: Rollout settings (default: greedy, the env's turn limit).
        seed: Env seed (tool noise), fixed so evaluations are comparable.

    Returns:
        The aggregated result.
    """
    config = config if config is not None else RolloutConfig(temperature=0.0)
    trajs = rollout(
        policy, env_id, task_indices=list(task_indices), seed=seed, env_kwargs=dict(env_kwargs or {}), config=config
    )
    return summarize(trajs)
