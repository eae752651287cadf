"""The one evaluation summary: :class:`EvalSummary` - every metric of the table with its bootstrap interval.

An evaluation folder's ``summary.json`` is one (:meth:`EvalSummary.to_json`);
the training run reads it back (:meth:`EvalSummary.from_json`) for its
``metrics.jsonl``, plots and console table instead of summarising the same
episodes again. :func:`evaluate` plays tasks in memory and summarises them the
same way (no folder).

Example:
    >>> summary = evaluate(policy, "AgentR1/HotpotQA-v0", range(16), env_kwargs={"split": "test"})  # doctest: +SKIP
    >>> summary.em, summary.metrics["em"].format()  # doctest: +SKIP
    (0.125, '0.125 [0.000, 0.312]')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agent_trainers.evaluation.metrics import METRICS
from agent_trainers.evaluation.records import EpisodeRecord, describe_tasks, record_from_trajectory, score_names
from agent_trainers.evaluation.stats import RESAMPLES, Interval, summarize_by_type, summarize_records
from agent_trainers.policies.sampling import ChatPolicy, TokenPolicy
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.engine import rollout

__all__ = ["EvalSummary", "evaluate"]

_NAMES = frozenset(m.name for m in METRICS)


def _intervals(data: Mapping[str, Mapping[str, Any]]) -> dict[str, Interval]:
    return {k: Interval(float(v["mean"]), float(v["low"]), float(v["high"]), int(v["n"])) for k, v in data.items()}


@dataclass(frozen=True)
class EvalSummary:
    """A method's metrics over its questions; a metric no question has is absent (never 0.0).

    Each metric of the table reads as an attribute too: ``summary.em`` is the
    mean of ``em``, or ``None`` where it is absent.

    Attributes:
        episodes: Questions evaluated.
        metrics: Metric name -> mean with its bootstrap 95% interval (table order).
        by_type: Question type -> the answer scores and ``answer_rate`` of that type's questions.
    """

    episodes: int
    metrics: dict[str, Interval]
    by_type: dict[str, dict[str, Interval]] = field(default_factory=dict)

    @classmethod
    def from_records(
        cls, records: Sequence[EpisodeRecord], *, resamples: int = RESAMPLES, seed: int = 0
    ) -> EvalSummary:
        """Summarise per-question records.

        Raises:
            ValueError: No records.
        """
        metrics = summarize_records(records, resamples=resamples, seed=seed)
        return cls(len(records), metrics, summarize_by_type(records, resamples=resamples, seed=seed))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalSummary:
        """Read back :meth:`to_json` (the ``episodes``, ``metrics`` and ``by_type`` of a ``summary.json``)."""
        by_type = {t: _intervals(m) for t, m in data.get("by_type", {}).items()}
        return cls(int(data["episodes"]), _intervals(data["metrics"]), by_type)

    def to_json(self) -> dict[str, Any]:
        """``{"episodes", "metrics", "by_type"}`` with each interval as ``{"mean", "low", "high", "n"}``."""
        return {
            "episodes": self.episodes,
            "metrics": {k: v.as_dict() for k, v in self.metrics.items()},
            "by_type": {t: {k: v.as_dict() for k, v in m.items()} for t, m in self.by_type.items()},
        }

    def mean(self, name: str) -> float | None:
        """The mean of ``name``, or ``None`` where it is absent."""
        return self.metrics[name].mean if name in self.metrics else None

    def means(self) -> dict[str, float]:
        """Every present metric's mean (what ``metrics.jsonl`` records of an evaluation)."""
        return {k: v.mean for k, v in self.metrics.items()}

    def __getattr__(self, name: str) -> float | None:
        if name in _NAMES:
            return self.mean(name)
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")


def evaluate(
    policy: TokenPolicy | ChatPolicy,
    env_id: str,
    task_indices: Sequence[int],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    config: RolloutConfig | None = None,
    seed: int = 0,
    resamples: int = RESAMPLES,
) -> EvalSummary:
    """Play each task once, in memory, and summarise (:func:`~agent_trainers.evaluation.run_eval` writes a folder).

    Args:
        policy: The policy (greedy when ``config.temperature == 0``).
        env_id: A registered environment id.
        task_indices: The fixed evaluation tasks.
        env_kwargs: Keyword arguments for ``gymnasium.make`` (e.g. ``{"split": "test"}``).
        config: Rollout settings (default: greedy, the env's turn limit).
        seed: Env seed (tool noise), fixed so evaluations are comparable.
        resamples: Bootstrap resamples of the intervals.

    Raises:
        MissingMetricError: An answered episode lacks an answer metric the env names.
    """
    config = config if config is not None else RolloutConfig(temperature=0.0)
    indices, kwargs = [int(i) for i in task_indices], dict(env_kwargs or {})
    env = gym.make(env_id, **kwargs)
    try:
        tasks = {t.index: t for t in describe_tasks(env, indices)}
        names = score_names(env, indices[0]) if indices else ()
    finally:
        env.close()
    trajectories = rollout(policy, env_id, task_indices=indices, seed=seed, env_kwargs=kwargs, config=config)
    records = [record_from_trajectory(t, tasks[t.task_index], names) for t in trajectories]
    return EvalSummary.from_records(records, resamples=resamples, seed=seed)
