"""Evaluation of a policy on a fixed sample of tasks: reward, EM, F1, tool-call rate.

Example:
    >>> result = evaluate(policy, "AgentR1/HotpotQA-v0", range(16), env_kwargs={"split": "test"})  # doctest: +SKIP
    >>> result.tool_call_rate  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agent_trainers.policies import Policy
from agent_trainers.rollout import RolloutConfig, Trajectory, rollout

__all__ = ["EvalResult", "evaluate", "summarize"]


@dataclass(frozen=True)
class EvalResult:
    """Means over the evaluated episodes.

    Attributes:
        episodes: Number of episodes.
        reward: Mean total env reward.
        em: Mean exact match of the final answer (0 when no answer).
        f1: Mean token F1 of the final answer (0 when no answer).
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


def summarize(trajectories: Sequence[Trajectory]) -> EvalResult:
    """Aggregate trajectories into an :class:`EvalResult`.

    Raises:
        ValueError: If there are no trajectories.
    """
    n = len(trajectories)
    if n == 0:
        raise ValueError("summarize needs at least one trajectory")

    def mean(values: Sequence[float]) -> float:
        return float(sum(values) / n)

    return EvalResult(
        episodes=n,
        reward=mean([t.total_reward for t in trajectories]),
        em=mean([float(t.metrics.get("answer_em", 0.0)) for t in trajectories]),
        f1=mean([float(t.metrics.get("answer_f1", 0.0)) for t in trajectories]),
        tool_call_rate=mean([float(_made_tool_call(t)) for t in trajectories]),
        answer_rate=mean([float(t.stop_reason == "answer") for t in trajectories]),
        turns=mean([float(len(t.turns)) for t in trajectories]),
    )


def evaluate(
    policy: Policy,
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
