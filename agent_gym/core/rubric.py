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

Example:
    >>> rubric = Rubric([RewardTerm("step_cost", lambda t: -1.0, weight=0.1, bounds=(-1.0, -1.0))])
    >>> rubric.reward_range
    (-0.1, -0.1)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class RewardTerm:
    """One named, weighted reward term.

    Attributes:
        name: The key in ``info["reward_terms"]``.
        fn: A pure function ``Transition -> float``.
        weight: Multiplies the raw value; 0 makes the term a logged metric.
        bounds: The raw value's ``(low, high)``; checked on every call.
    """

    name: str
    fn: Callable[[Transition], float]
    weight: float = 1.0
    bounds: tuple[float, float] = (-1.0, 1.0)

    def weighted_bounds(self) -> tuple[float, float]:
        a, b = self.weight * self.bounds[0], self.weight * self.bounds[1]
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
        for t in terms:
            if not math.isfinite(t.weight) or t.bounds[0] > t.bounds[1]:
                raise ValueError(f"term {t.name!r}: weight must be finite and bounds ordered (got {t})")
        object.__setattr__(self, "terms", terms)

    @property
    def reward_range(self) -> tuple[float, float]:
        """The smallest and largest possible step reward."""
        lows, highs = zip(*(t.weighted_bounds() for t in self.terms), strict=True) if self.terms else ((0.0,), (0.0,))
        return float(sum(lows)), float(sum(highs))

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
            low, high = term.bounds
            if not low - 1e-9 <= value <= high + 1e-9:
                raise RewardError(f"reward term {term.name!r} returned {value}, outside its bounds {term.bounds}")
            raw[term.name] = float(value)
            weighted[term.name] = float(term.weight * value)
        return weighted, raw

    def with_weights(self, **weights: float) -> Rubric:
        """A copy with some weights changed (unknown names are an error)."""
        unknown = set(weights) - {t.name for t in self.terms}
        if unknown:
            raise KeyError(f"unknown reward terms {sorted(unknown)}; known: {[t.name for t in self.terms]}")
        return Rubric(RewardTerm(t.name, t.fn, weights.get(t.name, t.weight), t.bounds) for t in self.terms)

    def describe(self) -> list[dict[str, Any]]:
        """Name, weight and bounds of each term (for logs and READMEs)."""
        return [{"name": t.name, "weight": t.weight, "bounds": list(t.bounds)} for t in self.terms]
