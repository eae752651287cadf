"""Run one evaluation into a folder, resumably, with a progress bar: :func:`run_eval`.

Example:
    >>> spec = EvalSpec("AgentR1/HotpotQA-v0", Method.NAIVE_RAG, model="smollm2",
    ...                 env_kwargs={"data_path": "../shared/data/hotpotqa/dev_distractor_sample_a_300.jsonl"}, limit=30)
    >>> from agent_trainers.policies import TransformersPolicy, load_model
    >>> policy = TransformersPolicy(*load_model("smollm2"))  # doctest: +SKIP
    >>> result = run_eval(spec, policy, "runs/eval/hotpotqa-naive-rag")  # doctest: +SKIP
    >>> result.summary["metrics"]["em"]  # doctest: +SKIP
    {'mean': 0.0, 'low': 0.0, 'high': 0.0, 'n': 30}
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the environment ids)
from agent_gym.core.env import ToolEnv
from agent_trainers.evaluation.methods import Method, MethodSettings, play
from agent_trainers.evaluation.outputs import EvalFolder
from agent_trainers.evaluation.records import EpisodeRecord, TaskInfo, describe_tasks, score_names
from agent_trainers.evaluation.stats import RESAMPLES
from agent_trainers.evaluation.summary import EvalSummary
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.progress import RolloutProgress

__all__ = ["EvalRun", "EvalSpec", "run_eval"]


@dataclass(frozen=True)
class EvalSpec:
    """What to evaluate (saved as ``spec.json``; a resumed evaluation must match it).

    Attributes:
        env_id: A registered env id.
        method: The :class:`~agent_trainers.evaluation.methods.Method`.
        model: The model's name, folder or endpoint (recorded, and part of the default label).
        env_kwargs: ``gymnasium.make`` kwargs (``data_path``, ``corpus``, ``split``, ...).
        limit: Evaluate the first ``limit`` tasks (``None``: all of them), counted from ``start``.
        start: The first task index evaluated (0: from the beginning), e.g. to hold aside tasks past the
            ones a run trained on when both come from one task list.
        seed: Episode ``i`` resets with ``seed + i``.
        rollout: Turn and token limits and temperature (greedy by default).
        label: The row name in tables (default: the method, plus the model for ``agent``).
        chunk_size: Questions played (and batched) together; not part of the results.
    """

    env_id: str
    method: Method
    model: str = "smollm2"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None
    start: int = 0
    seed: int = 0
    rollout: RolloutConfig = field(default_factory=lambda: RolloutConfig(temperature=0.0))
    label: str | None = None
    chunk_size: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", Method(self.method))
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 or None (got {self.limit})")
        if self.start < 0:
            raise ValueError(f"start must be >= 0 (got {self.start})")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 (got {self.chunk_size})")

    @property
    def name(self) -> str:
        """The row label."""
        if self.label:
            return self.label
        return f"agent ({self.model})" if self.method is Method.AGENT else str(self.method)

    def to_json(self) -> dict[str, Any]:
        """The settings that determine the results (``chunk_size`` is left out)."""
        return {
            "env_id": self.env_id,
            "method": str(self.method),
            "model": self.model,
            "env_kwargs": self.env_kwargs,
            "limit": self.limit,
            **({"start": self.start} if self.start else {}),  # absent at 0, as in folders written before it
            "seed": self.seed,
            "rollout": dataclasses.asdict(self.rollout),
            "label": self.name,
        }


@dataclass
class EvalRun:
    """A finished evaluation.

    Attributes:
        summary: What ``summary.json`` holds.
        records: Every question's record, by task index.
        folder: Where it was written.
    """

    summary: dict[str, Any]
    records: list[EpisodeRecord]
    folder: Path


def _chunks(items: Sequence[TaskInfo], size: int) -> list[Sequence[TaskInfo]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _task_env(spec: EvalSpec) -> gym.Env:
    """``gym.make`` of the spec's env; an unknown id, a bad kwarg or an env without tasks is a one-line ValueError."""
    try:
        env = gym.make(spec.env_id, **spec.env_kwargs)
    except gym.error.Error as exc:  # an unknown namespace, name or version
        raise ValueError(f"{spec.env_id}: {exc}") from None
    except TypeError as exc:
        if "environment creator" not in str(exc):  # not an argument of the env's constructor: a real bug
            raise
        raise ValueError(f"env kwargs of {spec.env_id}: {exc}") from None
    if not callable(getattr(env.unwrapped, "num_tasks", None)):
        env.close()
        raise ValueError(
            f"{spec.env_id} has no indexed tasks (num_tasks): evaluation plays task envs (`agent-r1 envs` lists them)"
        )
    return env


def _tasks(spec: EvalSpec) -> tuple[list[TaskInfo], tuple[str, ...]]:
    env = _task_env(spec)
    try:
        n = int(cast(ToolEnv[Any], env.unwrapped).num_tasks())  # _task_env checked that it has num_tasks
        end = min(n, spec.start + spec.limit) if spec.limit else n
        if spec.start >= n:
            raise ValueError(f"start {spec.start} is past the last task of {spec.env_id} ({n} tasks)")
        indices = range(spec.start, end)
        return describe_tasks(env, indices), score_names(env, spec.start)
    finally:
        env.close()


def summarize(spec: EvalSpec, records: Sequence[EpisodeRecord], tasks: Sequence[TaskInfo], **kw: Any) -> dict:
    """The ``summary.json`` of an evaluation's records."""
    sources = {t.source for t in tasks}
    return {
        "label": spec.name,
        "method": str(spec.method),
        "model": spec.model,
        "env_id": spec.env_id,
        "dataset": sources.pop() if len(sources) == 1 else "mixed",
        **EvalSummary.from_records(records, **kw).to_json(),
    }


class _EvalProgress:
    """The evaluation's bar: over episode-turns for a multi-turn method (batched episodes end together, so a bar
    over questions would sit at 0 for a whole batched decode), over questions for a one-turn baseline."""

    def __init__(self, spec: EvalSpec, total: int, done: int, *, enabled: bool):
        from tqdm import tqdm

        self.total = total
        self.turns: RolloutProgress | None = None
        self.bar: tqdm | None = None
        if spec.method.multi_turn:
            self.turns = RolloutProgress(total, spec.rollout.max_turns, desc=spec.name, done=done, disable=not enabled)
        else:
            self.bar = tqdm(total=total, initial=done, desc=spec.name, unit="q", disable=not enabled)

    def record(self, r: EpisodeRecord, done: dict[int, EpisodeRecord]) -> None:
        em = f"em {sum(x.scores['em'] for x in done.values()) / len(done):.3f}" if "em" in r.scores else ""
        if self.turns is not None:
            self.turns.set_note(", ".join(x for x in (f"{len(done)}/{self.total} q", em) if x))
        elif self.bar is not None:  # the one-turn baseline's bar (exactly one of the two is set)
            self.bar.update(1)
            if em:
                self.bar.set_postfix_str(em)

    def close(self) -> None:
        if self.turns is not None:
            self.turns.close()
        elif self.bar is not None:
            self.bar.close()


def run_eval(
    spec: EvalSpec,
    policy: Any,
    out_dir: str | Path,
    *,
    resume: bool = True,
    progress: bool = True,
    resamples: int = RESAMPLES,
    on_record: Callable[[EpisodeRecord], None] | None = None,
) -> EvalRun:
    """Evaluate ``policy`` as ``spec`` says, writing everything to ``out_dir``.

    Args:
        spec: What to evaluate.
        policy: A :class:`~agent_trainers.policies.TokenPolicy` or :class:`~agent_trainers.policies.ChatPolicy`.
        out_dir: The evaluation's folder (see :mod:`agent_trainers.evaluation.outputs`).
        resume: Keep the questions already in ``out_dir`` (same spec) and play only the rest;
            ``False`` starts over.
        progress: Show a progress bar with an ETA (tqdm): over episode-turns for a multi-turn method (model
            tokens/s, live episodes, questions done, running EM), over questions for a one-turn baseline.
        resamples: Bootstrap resamples of the intervals.
        on_record: Called after each question is written (e.g. to stop a run in tests).

    Returns:
        The summary and records.

    Raises:
        SpecMismatchError: ``resume`` and ``out_dir`` holds another evaluation.
        MissingMetricError: An answered episode lacks an answer metric the env names.
    """
    start, cpu = time.perf_counter(), time.process_time()
    tasks, names = _tasks(spec)
    folder = EvalFolder(out_dir)
    done = {r.task_index: r for r in folder.start(spec.to_json(), resume=resume)}
    todo = [t for t in tasks if t.index not in done]
    settings = MethodSettings(spec.env_id, dict(spec.env_kwargs), spec.rollout, spec.seed, names)
    bar = _EvalProgress(spec, len(tasks), len(tasks) - len(todo), enabled=progress)

    def record(r: EpisodeRecord) -> None:
        folder.append(r)
        done[r.task_index] = r
        bar.record(r, done)
        if on_record is not None:
            on_record(r)

    try:
        for chunk in _chunks(todo, spec.chunk_size):
            play(spec.method, policy, settings, chunk, record, bar.turns)
    finally:
        bar.close()
    records = [done[t.index] for t in tasks]
    folder.rewrite(records)  # in task order
    summary = summarize(spec, records, tasks, resamples=resamples, seed=spec.seed)
    summary["wall_s"] = round(time.perf_counter() - start, 1)  # of this call (a resumed run counts its part only)
    summary["cpu_s"] = round(time.process_time() - cpu, 1)  # CPU time of this process meanwhile (all threads)
    folder.write_summary(summary)
    return EvalRun(summary, records, folder.path)
