"""Reward terms and rubric presets.

Each term is a small pure function of a :class:`~agent_gym.core.rubric.Transition`
with declared bounds. Presets combine them:

* ``"outcome"`` - the paper's outcome-only reward as Agent-R1's code computes
  it: at the final answer, the answer score if every action was well formed,
  otherwise ``format - 1`` (``format`` = the fraction of well-formed actions).
* ``"process"`` - per-step process rewards: a format penalty, a bonus for each
  gold evidence item found for the first time, a repeated-call penalty, a
  small step cost, plus the answer score.
* ``"gated"`` (the default) - the same terms, but the evidence bonus is paid
  once, on the answer, for all the evidence the episode found: an episode that
  never answers earns only its penalties. Under ``"process"`` searching until
  the turn limit can pay more than a (wrong) answer; under ``"gated"`` it cannot.

Either preset can add potential-based shaping ``γΦ(s') - Φ(s)`` with Φ the
fraction of gold evidence found (Ng, Harada & Russell, 1999), which leaves the
optimal policy unchanged.

Every term declares its bounds on final (answer) and non-final steps, so
``Rubric.reward_range`` is the exact per-step range. For ``"gated"`` it is
``(-0.16, 1.2)`` (a correct answer with all the evidence). For ``"process"`` with
the default weights it is ``(-0.16, 1.0)``: the low end is a malformed
action that repeats a call (``-0.1 - 0.05 - 0.01``), the high end a correct
answer; a non-final step earns at most ``0.2 - 0.01``. Shaping with γ adds
``0.2 (γ - 1)`` to the low end (a step that finds nothing once all evidence
is found) and leaves the high end at 1.0. For ``"outcome"`` it is
``(-1.0, 1.0)``: ``-1`` is approached, never reached (``-(T-1)/T`` after T
turns with one well-formed action).

Example:
    >>> rubric = make_rubric("process", answer_metric="f1", shaping_gamma=1.0)
    >>> [t.name for t in rubric.terms]
    ['format', 'evidence', 'repeat', 'step_cost', 'answer', 'shaping']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from functools import partial
from typing import TypeVar

from agent_gym.core.rubric import RewardTerm, Rubric, Transition

__all__ = [
    "AnswerMetric",
    "Preset",
    "RewardTerm",
    "Rubric",
    "Transition",
    "answer_score",
    "env_rubric",
    "evidence_at_answer",
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
    GATED = "gated"


def format_penalty(t: Transition) -> float:
    """-1 for a malformed action, else 0."""
    return 0.0 if t.action.well_formed else -1.0


def evidence_gain(t: Transition) -> float:
    """The fraction of the task's gold evidence first revealed by this step."""
    return len(t.new_evidence) / t.evidence_total if t.evidence_total else 0.0


def evidence_at_answer(t: Transition) -> float:
    """On the answer: the fraction of the task's gold evidence the episode found; 0 on every other step."""
    return t.potential_after if t.terminated else 0.0


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


_ZERO = (0.0, 0.0)


_E = TypeVar("_E", bound=StrEnum)


def _choice(enum: type[_E], value: object, name: str) -> _E:
    options = [m.value for m in enum]
    if value not in options:
        raise ValueError(f"{name} must be one of {options} (got {value!r})")
    return enum(value)


def _outcome_terms(metric: AnswerMetric) -> list[RewardTerm]:
    """Zero until the end; at the end in ``[-1, 1]``."""
    return [RewardTerm("outcome", partial(outcome_agent_r1, metric=metric), 1.0, (-1.0, 1.0), nonfinal_bounds=_ZERO)]


def _process_terms(metric: AnswerMetric) -> list[RewardTerm]:
    """A final step is a well-formed answer that runs no tool: only ``answer`` can be non-zero there."""
    return [
        RewardTerm("format", format_penalty, 0.1, (-1.0, 0.0), final_bounds=_ZERO),
        RewardTerm("evidence", evidence_gain, 0.2, (0.0, 1.0), final_bounds=_ZERO),
        RewardTerm("repeat", repeated_call, 0.05, (-1.0, 0.0), final_bounds=_ZERO),
        RewardTerm("step_cost", step_cost, 0.01, (-1.0, 0.0), final_bounds=_ZERO, nonfinal_bounds=(-1.0, -1.0)),
        RewardTerm("answer", partial(answer_score, metric=metric), 1.0, (0.0, 1.0), nonfinal_bounds=_ZERO),
    ]


def _gated_terms(metric: AnswerMetric) -> list[RewardTerm]:
    """``process`` with the evidence bonus moved to the answer: nothing is earned without answering."""
    terms = [t for t in _process_terms(metric) if t.name != "evidence"]
    gated = RewardTerm("evidence", evidence_at_answer, 0.2, (0.0, 1.0), nonfinal_bounds=_ZERO)
    return [terms[0], gated, *terms[1:]]


def _shaping_term(gamma: float) -> RewardTerm:
    """``γΦ' - Φ`` with ``0 <= Φ <= Φ' <= 1`` (evidence is never lost); on a final step ``Φ' = Φ``."""
    return RewardTerm(
        "shaping", partial(shaping, gamma=gamma), 0.2, (gamma - 1.0, gamma), final_bounds=(gamma - 1.0, 0.0)
    )


def make_rubric(
    preset: str | Preset = Preset.GATED,
    *,
    answer_metric: str | AnswerMetric = AnswerMetric.F1,
    shaping_gamma: float | None = None,
    weights: dict[str, float] | None = None,
) -> Rubric:
    """Build a preset rubric.

    Args:
        preset: ``"gated"`` (the default), ``"process"`` or ``"outcome"``.
        answer_metric: ``"em"`` or ``"f1"`` for the answer term.
        shaping_gamma: If set, add the potential-based ``shaping`` term with this γ in (0, 1].
        weights: Override term weights by name (0 turns a term into a logged metric).

    Raises:
        ValueError: An unknown preset or metric, or ``shaping_gamma`` outside (0, 1].
        KeyError: ``weights`` names a term the preset does not have.
    """
    chosen = _choice(Preset, preset, "reward")
    metric = _choice(AnswerMetric, answer_metric, "answer_metric")
    terms = {Preset.OUTCOME: _outcome_terms, Preset.PROCESS: _process_terms, Preset.GATED: _gated_terms}[chosen](metric)
    if shaping_gamma is not None:
        if isinstance(shaping_gamma, bool) or not isinstance(shaping_gamma, (int, float)):
            raise ValueError(f"shaping_gamma must be a number in (0, 1] or None (got {shaping_gamma!r})")
        if not 0.0 < shaping_gamma <= 1.0:
            raise ValueError(f"shaping_gamma must lie in (0, 1] (got {shaping_gamma})")
        if chosen is Preset.GATED:
            raise ValueError(
                "shaping_gamma pays for evidence on every step, which the gated preset pays only on the answer; "
                "use reward='process' with shaping, or 'gated' without it"
            )
        terms.append(_shaping_term(float(shaping_gamma)))
    rubric = Rubric(terms)
    return rubric.with_weights(**weights) if weights else rubric


def env_rubric(
    rubric: Rubric | None = None,
    *,
    reward: str | Preset = Preset.GATED,
    answer_metric: str | AnswerMetric = AnswerMetric.F1,
    shaping_gamma: float | None = None,
    reward_weights: Mapping[str, float] | None = None,
    process_terms: Sequence[RewardTerm] = (),
) -> Rubric:
    """The rubric of a built-in env from its ``rubric=`` / ``reward=`` / ``reward_weights=`` arguments.

    Args:
        rubric: A complete rubric of your own; ``reward``, ``answer_metric``, ``shaping_gamma`` and
            ``process_terms`` are then not read.
        reward: The preset's name (see :func:`make_rubric`), used without ``rubric``.
        answer_metric: The preset's answer metric, used without ``rubric``.
        shaping_gamma: The preset's shaping discount, used without ``rubric``.
        reward_weights: Term weights by name, applied last (to ``rubric`` too); 0 makes a term a logged metric.
        process_terms: Env-specific terms appended to the ``"process"`` and ``"gated"`` presets.

    Raises:
        TypeError: ``rubric`` is not a :class:`Rubric`.
        KeyError: ``reward_weights`` names a term the rubric does not have.

    Example:
        >>> [t.weight for t in env_rubric(reward="outcome", reward_weights={"outcome": 2.0}).terms]
        [2.0]
    """
    if rubric is None:
        rubric = make_rubric(reward, answer_metric=answer_metric, shaping_gamma=shaping_gamma)
        if process_terms and _choice(Preset, reward, "reward") in (Preset.PROCESS, Preset.GATED):
            rubric = Rubric([*rubric.terms, *process_terms])
    elif not isinstance(rubric, Rubric):
        raise TypeError(f"rubric must be a Rubric, got {type(rubric).__name__}")
    return rubric.with_weights(**reward_weights) if reward_weights else rubric
