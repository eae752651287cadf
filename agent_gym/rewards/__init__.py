"""Reward terms and rubric presets.

Each term is a small pure function of a :class:`~agent_gym.core.rubric.Transition`
with declared bounds. Presets combine them:

* ``"outcome"`` - the paper's outcome-only reward as Agent-R1's code computes
  it: at the final answer, the answer score if every action was well formed,
  otherwise ``format - 1`` (``format`` = the fraction of well-formed actions).
* ``"process"`` - per-step process rewards: a format penalty, a bonus for each
  gold evidence item found for the first time, a repeated-call penalty, a
  small step cost, plus the answer score.

Either preset can add potential-based shaping ``γΦ(s') - Φ(s)`` with Φ the
fraction of gold evidence found (Ng, Harada & Russell, 1999), which leaves the
optimal policy unchanged.

Example:
    >>> rubric = make_rubric("process", answer_metric="f1", shaping_gamma=1.0)
    >>> [t.name for t in rubric.terms]
    ['format', 'evidence', 'repeat', 'step_cost', 'answer', 'shaping']
"""

from __future__ import annotations

from enum import StrEnum
from functools import partial

from agent_gym.core.rubric import RewardTerm, Rubric, Transition

__all__ = [
    "AnswerMetric",
    "Preset",
    "answer_score",
    "evidence_gain",
    "format_penalty",
    "make_rubric",
    "outcome_agent_r1",
    "repeated_call",
    "shaping",
    "step_cost",
]


class AnswerMetric(StrEnum):
    """Which answer score the reward uses."""

    EM = "em"
    F1 = "f1"


class Preset(StrEnum):
    """Named rubrics."""

    OUTCOME = "outcome"
    PROCESS = "process"


def format_penalty(t: Transition) -> float:
    """-1 for a malformed action, else 0."""
    return 0.0 if t.action.well_formed else -1.0


def evidence_gain(t: Transition) -> float:
    """The fraction of the task's gold evidence first revealed by this step."""
    return len(t.new_evidence) / t.evidence_total if t.evidence_total else 0.0


def repeated_call(t: Transition) -> float:
    """-1 if the step repeats an earlier identical tool call, else 0."""
    return -1.0 if t.repeated_calls else 0.0


def step_cost(t: Transition) -> float:
    """-1 for every step that is not the final answer."""
    return 0.0 if t.terminated else -1.0


def answer_score(t: Transition, metric: AnswerMetric = AnswerMetric.F1) -> float:
    """The final answer's score under ``metric`` (0 before the end)."""
    if not t.terminated:
        return 0.0
    if metric.value not in t.answer_scores:
        raise KeyError(f"the env reported no {metric.value!r} answer score (got {sorted(t.answer_scores)})")
    return float(t.answer_scores[metric.value])


def outcome_agent_r1(t: Transition, metric: AnswerMetric = AnswerMetric.EM) -> float:
    """Agent-R1's outcome reward: the answer score if the format was always valid, else format - 1."""
    if not t.terminated:
        return 0.0
    if t.episode_malformed == 0:
        return answer_score(t, metric)
    well_formed_fraction = 1.0 - t.episode_malformed / t.turn
    return well_formed_fraction - 1.0


def shaping(t: Transition, gamma: float = 1.0) -> float:
    """Potential-based shaping γΦ(s') - Φ(s); Φ = fraction of gold evidence found."""
    return gamma * t.potential_after - t.potential_before


def make_rubric(
    preset: str | Preset = Preset.PROCESS,
    *,
    answer_metric: str | AnswerMetric = AnswerMetric.F1,
    shaping_gamma: float | None = None,
    weights: dict[str, float] | None = None,
) -> Rubric:
    """Build a preset rubric.

    Args:
        preset: ``"outcome"`` or ``"process"``.
        answer_metric: ``"em"`` or ``"f1"`` for the answer term.
        shaping_gamma: If set, add the potential-based ``shaping`` term with this γ in (0, 1].
        weights: Override term weights by name (0 turns a term into a logged metric).
    """
    preset = Preset(preset)
    metric = AnswerMetric(answer_metric)
    if preset is Preset.OUTCOME:
        terms = [RewardTerm("outcome", partial(outcome_agent_r1, metric=metric), 1.0, (-1.0, 1.0))]
    else:
        terms = [
            RewardTerm("format", format_penalty, 0.1, (-1.0, 0.0)),
            RewardTerm("evidence", evidence_gain, 0.2, (0.0, 1.0)),
            RewardTerm("repeat", repeated_call, 0.05, (-1.0, 0.0)),
            RewardTerm("step_cost", step_cost, 0.01, (-1.0, 0.0)),
            RewardTerm("answer", partial(answer_score, metric=metric), 1.0, (0.0, 1.0)),
        ]
    if shaping_gamma is not None:
        if not 0.0 < shaping_gamma <= 1.0:
            raise ValueError(f"shaping_gamma must lie in (0, 1] (got {shaping_gamma})")
        terms.append(RewardTerm("shaping", partial(shaping, gamma=shaping_gamma), 0.2, (-1.0, shaping_gamma)))
    rubric = Rubric(terms)
    return rubric.with_weights(**weights) if weights else rubric
