"""One evaluated question as a typed record: :class:`EpisodeRecord`, and what the runner knows of each task.

Every method (closed-book, naive RAG, base tool call, agent) produces the same
record, so metrics, tables and paired comparisons treat them alike. A record
keeps the episode's trajectory (for the viewer) next to the numbers.

Absent is absent: ``evidence_recall`` is ``None`` for a task without gold
evidence, ``format_errors`` is ``None`` where the model never wrote an env
action itself (the baselines' harness does), and a renamed answer metric
raises :class:`MissingMetricError`. Which metrics there are, and how each is
read from a record, is the table of :mod:`agent_trainers.evaluation.metrics`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from agent_trainers.evaluation.metrics import ANSWER_METRICS, METRICS
from agent_trainers.rollout.export import trajectory_to_dict
from agent_trainers.rollout.types import Trajectory

if TYPE_CHECKING:
    from agent_gym.core.env import ToolEnv

__all__ = [
    "EpisodeRecord",
    "MissingMetricError",
    "TaskInfo",
    "describe_tasks",
    "gold_texts",
    "record_from_trajectory",
]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


_VALUES = {m.name: m.value for m in METRICS if m.value is not None}
"""The per-question value of each metric that is not an answer score."""


class MissingMetricError(KeyError):
    """An answered episode lacks a required answer metric (renamed or dropped by the env)."""


@dataclass(frozen=True)
class TaskInfo:
    """What the evaluation reads about a task before playing it.

    Attributes:
        index: The task index (``options={"task_index": ...}``).
        id: The env's task id.
        question: The question text (the task's ``question`` or the first user message).
        answers: Gold answers when the task lists them (display only).
        question_type: The dataset's question type, or ``None`` when it has none.
        source: The dataset (``hotpotqa``, ``2wikimultihopqa``, ``musique``, ...) or the env id.
    """

    index: int
    id: str
    question: str
    answers: tuple[str, ...]
    question_type: str | None
    source: str


@dataclass
class EpisodeRecord:
    """One question, evaluated.

    Attributes:
        task_index: The task index.
        task_id: The env's task id.
        question: The question.
        gold: The gold answers (display only; scores come from the env).
        question_type: The dataset's question type, or ``None``.
        answer: The final answer given (``None``: the episode ended without one).
        answered: The episode ended with a well-formed answer (``terminated``).
        scores: Answer metrics by the env's names (``em``, ``f1``, ``substring``);
            an unanswered question scores 0 on each (a missing answer is a wrong one).
        model_turns: Turns the model generated.
        tool_calls: Tool calls the model itself made (well formed, as the env parsed them).
        format_errors: Model actions the env refused as malformed; ``None`` when the
            model never wrote an env action (baselines: the harness wraps its reply).
        evidence_recall: Fraction of the task's gold evidence revealed in the episode;
            ``None`` when the task has no gold evidence.
        reward: The env's episode return.
        stop_reason: Why the episode ended.
        trajectory: The episode (:func:`~agent_trainers.rollout.trajectory_to_dict`), for the viewer.
    """

    task_index: int
    task_id: str
    question: str
    gold: list[str]
    question_type: str | None
    answer: str | None
    answered: bool
    scores: dict[str, float]
    model_turns: int
    tool_calls: int
    format_errors: int | None
    evidence_recall: float | None
    reward: float
    stop_reason: str
    trajectory: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (one line of ``episodes.jsonl``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeRecord:
        """Rebuild a record written by :meth:`to_dict`.

        Raises:
            ValueError: Fields are missing or unknown.
        """
        names = set(cls.__dataclass_fields__)
        missing, unknown = names - set(data) - {"trajectory"}, set(data) - names
        if missing or unknown:
            raise ValueError(f"bad episode record: missing {sorted(missing)}, unknown {sorted(unknown)}")
        return cls(**dict(data))

    def queries(self) -> list[str]:
        """The queries the model wrote (a search's keywords, an SQL statement): the ``query`` argument of each of
        its tool calls, in order.

        Read from the trajectory's assistant messages; a record without a trajectory (or whose calls take no
        ``query``) has none.
        """
        out = []
        for m in self.trajectory.get("messages") or ():
            if m.get("role") != "assistant":
                continue
            for call in m.get("tool_calls") or ():
                args = call.get("function", {}).get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except json.JSONDecodeError:
                        continue
                if isinstance(args, dict) and isinstance(args.get("query"), str):
                    out.append(args["query"])
        return out

    def metric(self, name: str) -> float | None:
        """The per-episode value behind a summary metric (``None``: absent for this episode).

        The metrics of :data:`~agent_trainers.evaluation.metrics.METRICS` (``answer_rate``, ``tool_call_rate``,
        ``turns``, ``tool_calls``, ``evidence_recall``, ``format_error_rate``, ``reward``, ``answer_words``,
        ``query_words``, ``query_copied``), and the answer scores the env reported (``em``, ``f1``,
        ``substring``, ...).

        Raises:
            KeyError: An unknown metric name.
        """
        if name in self.scores:
            return self.scores[name]
        if name in ANSWER_METRICS:
            return None  # this env does not report it
        if name not in _VALUES:
            raise KeyError(f"unknown metric {name!r} (the record has scores {sorted(self.scores)})")
        return _VALUES[name](self)


def gold_texts(value: Any) -> list[str]:
    """A task's gold answer(s) as display strings: lists and tuples flattened (SQLite's rows of values), an
    exact fraction as its decimal when it has one (Calculator's ``Fraction(2078, 25)`` as ``83.12``), ``None``
    dropped.

    Example:
        >>> gold_texts([(26.74,), Fraction(2078, 25), Fraction(1, 3), "Paris", None])
        ['26.74', '83.12', '1/3', 'Paris']
    """
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [text for item in value for text in gold_texts(item)]
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return [str(value.numerator)]
        decimal = Decimal(value.numerator) / Decimal(value.denominator)
        return [format(decimal.normalize(), "f") if Fraction(decimal) == value else str(value)]
    return [str(value)]


def describe_tasks(env: gym.Env, indices: Sequence[int]) -> list[TaskInfo]:
    """Read each task's id, question, gold answers, type and source (no episode is played).

    The task records are read from ``env.unwrapped`` (metadata only: every
    episode is played through the env as ``gymnasium.make`` returns it).
    """
    base = cast("ToolEnv[Any]", env.unwrapped)
    out = []
    for i in indices:
        task = base.load_task(int(i))
        question = getattr(task, "question", None)
        if not isinstance(question, str):
            question = base.user_prompt(task)
        answers = getattr(task, "answers", None) or (getattr(task, "answer", None),)
        gold = tuple(gold_texts(answers))
        source = getattr(task, "source", None) or (env.spec.id if env.spec else type(base).__name__)
        out.append(TaskInfo(int(i), base.task_id(task), question, gold, base.task_type(task), str(source)))
    return out


def score_names(env: gym.Env, index: int) -> tuple[str, ...]:
    """The names of the env's answer scores (e.g. ``("em", "f1", "substring")``), probed with an empty answer."""
    base = cast("ToolEnv[Any]", env.unwrapped)
    return tuple(base.score_answer(base.load_task(int(index)), ""))


def answer_scores(metrics: Mapping[str, float], answered: bool, names: Sequence[str], task_id: str) -> dict[str, float]:
    """The answer scores of an episode: 0 each when unanswered, else ``metrics["answer_<name>"]``.

    Raises:
        MissingMetricError: An answered episode lacks one of them (a renamed or dropped metric).
    """
    if not answered:
        return {n: 0.0 for n in names}
    missing = [n for n in names if f"answer_{n}" not in metrics]
    if missing:
        raise MissingMetricError(
            f"episode of task {task_id!r} answered but its metrics lack {'answer_' + missing[0]!r} "
            f"(it reported {sorted(metrics)}); was the metric renamed?"
        )
    return {n: float(metrics[f"answer_{n}"]) for n in names}


def final_answer(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The text inside the last ``<answer>`` tags of the last assistant message (display only)."""
    for m in reversed(messages):
        if m.get("role") == "assistant":
            found = _ANSWER.findall(str(m.get("content") or ""))
            return found[-1].strip() if found else None
    return None


def record_from_trajectory(traj: Trajectory, info: TaskInfo, names: Sequence[str]) -> EpisodeRecord:
    """The record of an agent (or base-tool-call) episode played by the rollout engine.

    Its trajectory gets ``group_id`` 0 (one episode per task; the engine's
    position within a batch would differ between an interrupted and a resumed run).
    """
    calls = sum(len(m.get("tool_calls") or []) for m in traj.messages if m.get("role") == "assistant")
    return EpisodeRecord(
        task_index=traj.task_index,
        task_id=traj.task_id or info.id,
        question=info.question,
        gold=list(info.answers),
        question_type=info.question_type,
        answer=final_answer(traj.messages) if traj.answered else None,
        answered=traj.answered,
        scores=answer_scores(traj.metrics, traj.answered, names, traj.task_id),
        model_turns=len(traj.turns),
        tool_calls=calls,
        format_errors=sum(1 for t in traj.turns if t.format_errors),
        evidence_recall=traj.evidence_found / traj.evidence_total if traj.evidence_total else None,
        reward=traj.total_reward,
        stop_reason=traj.stop_reason,
        trajectory=trajectory_to_dict(dataclasses.replace(traj, group_id=0)),
    )
