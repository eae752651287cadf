"""Rubrics: per-step rewards as a weighted sum of small named terms.

The paper rewards intermediate steps ("process rewards") as well as the final
outcome. A :class:`Rubric` is a list of :class:`RewardTerm` objects; each is a
small pure function of one typed :class:`Transition` with declared bounds.
The step reward is the weighted sum; ``info["reward_terms"]`` holds every
weighted part (they sum to the reward) and ``info["reward_raw"]`` the
unweighted values, so a zero-weight term is a logged metric.

A term that returns something that is not a finite number, or leaves its
declared bounds, raises :class:`RewardError`: rewards fail loudly, they are
never silently scored 0.

A term may declare tighter bounds for the two kinds of step, a *final* step
(a well-formed answer: it runs no tool) and a *non-final* step, which makes
:attr:`Rubric.reward_range` exact: e.g. the answer term is 0 on non-final
steps and the evidence term 0 on final ones, so the process preset's highest
step reward is the answer's 1.0, not 1.0 plus the evidence bonus.

Example:
    >>> step = RewardTerm("step_cost", lambda t: 0.0 if t.terminated else -1.0, weight=0.1,
    ...                   bounds=(-1.0, 0.0), final_bounds=(0.0, 0.0), nonfinal_bounds=(-1.0, -1.0))
    >>> answer = RewardTerm("answer", lambda t: 1.0 if t.terminated else 0.0,
    ...                     bounds=(0.0, 1.0), nonfinal_bounds=(0.0, 0.0))
    >>> Rubric([step, answer]).reward_range
    (-0.1, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent_gym.core.history import ToolCall, ToolResult
from agent_gym.core.parsing import ParsedAction

__all__ = ["RewardError", "RewardTerm", "Rubric", "Transition"]


class RewardError(RuntimeError):
    """A reward term misbehaved (raised, returned a non-number, or left its bounds)."""


@dataclass(frozen=True)
class Transition:
    """Everything a reward term may look at for one step.

    Attributes:
        turn: 1 for the first step of an episode, 2 for the second, ...
        action: The parsed action.
        results: ``(call, result)`` pairs as the agent saw them (after noise).
        terminated: The episode ended with this step (a final answer).
        answer_scores: Scores of the final answer (e.g. ``em``, ``f1``,
            ``substring``), empty unless the step gave a well-formed answer.
        new_evidence: Gold evidence items revealed for the first time by
            this step (supporting paragraphs, needed tables, intermediate values).
        evidence_total: How many gold evidence items the task has.
        repeated_calls: Calls identical to an earlier call of the episode.
        potential_before: Potential Φ(s) before the step (fraction of gold
            evidence found so far).
        potential_after: Potential Φ(s') after the step.
        episode_malformed: Malformed actions so far, this step included.
        noise_events: Names of the noise events that fired this step.
    """

    turn: int
    action: ParsedAction
    results: tuple[tuple[ToolCall, ToolResult], ...] = ()
    terminated: bool = False
    answer_scores: Mapping[str, float] = field(default_factory=dict)
    new_evidence: frozenset[str] = frozenset()
    evidence_total: int = 0
    repeated_calls: int = 0
    potential_before: float = 0.0
    potential_after: float = 0.0
    episode_malformed: int = 0
    noise_events: tuple[str, ...] = ()


Bounds = tuple[float, float]


@dataclass(frozen=True)
class RewardTerm:
    """One named, weighted reward term.

    Attributes:
        name: The key in ``info["reward_terms"]``.
        fn: A pure function ``Transition -> float``.
        weight: Multiplies the raw value; 0 makes the term a logged metric.
        bounds: The raw value's ``(low, high)`` on any step.
        final_bounds: The raw value's bounds on a final step (a well-formed
            answer); default ``bounds``. Must lie inside ``bounds``.
        nonfinal_bounds: The raw value's bounds on every other step; default
            ``bounds``. Must lie inside ``bounds``.

    The bounds of the step's kind are checked on every call.
    """

    name: str
    fn: Callable[[Transition], float]
    weight: float = 1.0
    bounds: Bounds = (-1.0, 1.0)
    final_bounds: Bounds | None = None
    nonfinal_bounds: Bounds | None = None

    def __post_init__(self) -> None:
        low, high = self.bounds
        for name in ("bounds", "final_bounds", "nonfinal_bounds"):
            value = getattr(self, name)
            if value is None:
                continue
            a, b = value
            if not (math.isfinite(a) and math.isfinite(b) and a <= b and low <= a and b <= high):
                raise ValueError(f"term {self.name!r}: {name} must be finite, ordered and inside bounds (got {value})")
        if not math.isfinite(self.weight):
            raise ValueError(f"term {self.name!r}: weight must be finite (got {self.weight})")

    def bounds_for(self, final: bool) -> Bounds:
        """The raw bounds on a final (``True``) or non-final step."""
        specific = self.final_bounds if final else self.nonfinal_bounds
        return specific if specific is not None else self.bounds

    def weighted_bounds(self, final: bool | None = None) -> Bounds:
        """``weight`` times the bounds (of one kind of step, or of any step when ``final`` is ``None``)."""
        low, high = self.bounds if final is None else self.bounds_for(final)
        a, b = self.weight * low, self.weight * high
        return min(a, b), max(a, b)


@dataclass(frozen=True)
class Rubric:
    """A weighted list of reward terms.

    Attributes:
        terms: The terms, in the order they are reported.
    """

    terms: tuple[RewardTerm, ...]

    def __init__(self, terms: Iterable[RewardTerm]):
        terms = tuple(terms)
        names = [t.name for t in terms]
        if len(set(names)) != len(names):
            raise ValueError(f"reward term names must be unique (got {names})")
        object.__setattr__(self, "terms", terms)

    def step_range(self, final: bool) -> Bounds:
        """The smallest and largest reward of a final (``True``) or non-final step."""
        parts = [t.weighted_bounds(final) for t in self.terms]
        return float(sum(p[0] for p in parts)), float(sum(p[1] for p in parts))

    @property
    def reward_range(self) -> Bounds:
        """The smallest and largest possible step reward.

        The envelope of :meth:`step_range` over final and non-final steps. It
        is exact when each term's per-kind bounds are attainable together on
        one step (true of the presets in :mod:`agent_gym.rewards`, whose
        tests reach both ends).
        """
        (final_low, final_high), (low, high) = self.step_range(True), self.step_range(False)
        return min(final_low, low), max(final_high, high)

    def score(self, transition: Transition) -> tuple[dict[str, float], dict[str, float]]:
        """``(weighted, raw)`` term values for one step; ``sum(weighted)`` is the reward."""
        weighted: dict[str, float] = {}
        raw: dict[str, float] = {}
        for term in self.terms:
            try:
                value = term.fn(transition)
            except Exception as exc:
                raise RewardError(f"reward term {term.name!r} raised {type(exc).__name__}: {exc}") from exc
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise RewardError(f"reward term {term.name!r} returned {value!r}, not a finite number")
            low, high = term.bounds_for(transition.terminated)
            if not low - 1e-9 <= value <= high + 1e-9:
                kind = "final" if transition.terminated else "non-final"
                raise RewardError(
                    f"reward term {term.name!r} returned {value} on a {kind} step, outside its bounds {(low, high)}"
                )
            raw[term.name] = float(value)
            weighted[term.name] = float(term.weight * value)
        return weighted, raw

    def with_weights(self, **weights: float) -> Rubric:
        """A copy with some weights changed (unknown names are an error)."""
        unknown = set(weights) - {t.name for t in self.terms}
        if unknown:
            raise KeyError(f"unknown reward terms {sorted(unknown)}; known: {[t.name for t in self.terms]}")
        return Rubric(replace(t, weight=weights.get(t.name, t.weight)) for t in self.terms)

    def describe(self) -> list[dict[str, Any]]:
        """Name, weight and bounds of each term (for logs and READMEs)."""
        return [
            {
                "name": t.name,
                "weight": t.weight,
                "bounds": list(t.bounds),
                "final_bounds": list(t.bounds_for(True)),
                "nonfinal_bounds": list(t.bounds_for(False)),
            }
            for t in self.terms
        ]
