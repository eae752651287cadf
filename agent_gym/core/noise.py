"""Seeded stochastic tool behaviour: the paper's stochastic transitions.

Real tools are flaky: APIs fail transiently, time out, return noisy or
truncated results. :class:`ToolNoise` models that with a few independent
knobs. Every random choice is drawn from the generator it is given (the
environment's ``np_random``), so ``env.reset(seed=s)`` replays a whole
episode, noise included. The default is no noise at all.

Example:
    >>> import numpy as np
    >>> noise = ToolNoise(failure_prob=1.0)
    >>> result, events = noise.apply("search", ToolResult("hits"), np.random.default_rng(0))
    >>> result.ok, events
    (False, ('failure',))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

import numpy as np

from agent_gym.core.history import ToolResult

__all__ = ["RetrievalNoise", "ToolNoise", "coerce_noise"]

T = TypeVar("T")


def _check_prob(owner: object, name: str) -> None:
    value = getattr(owner, name)
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{type(owner).__name__}.{name} must lie in [0, 1] (got {value})")


@dataclass(frozen=True)
class RetrievalNoise:
    """Noise on ranked result lists (applied by retrieval tools).

    Attributes:
        drop_prob: Each returned passage is dropped with this probability.
        shuffle_prob: With this probability the ranking is randomly permuted.
        distractor_prob: Each passage is replaced, with this probability, by a
            random passage from the corpus that was not retrieved.
    """

    drop_prob: float = 0.0
    shuffle_prob: float = 0.0
    distractor_prob: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_prob(self, f.name)

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) > 0 for f in fields(self))

    def apply(
        self, ranked: Sequence[T], pool: Sequence[T], rng: np.random.Generator
    ) -> tuple[list[T], tuple[str, ...]]:
        """Perturb ``ranked``; ``pool`` supplies distractors. Returns (items, events)."""
        items = list(ranked)
        events: list[str] = []
        if self.distractor_prob > 0 and items:
            candidates = [p for p in pool if p not in items]
            for i in range(len(items)):
                if candidates and rng.random() < self.distractor_prob:
                    items[i] = candidates.pop(int(rng.integers(len(candidates))))
                    events.append("distractor")
        if self.drop_prob > 0 and items:
            keep = rng.random(len(items)) >= self.drop_prob
            if not keep.all():
                events.append("drop")
            items = [x for x, k in zip(items, keep, strict=True) if k]
        if self.shuffle_prob > 0 and len(items) > 1 and rng.random() < self.shuffle_prob:
            items = [items[i] for i in rng.permutation(len(items))]
            events.append("shuffle")
        return items, tuple(events)


@dataclass(frozen=True)
class ToolNoise:
    """Generic faults applied by the environment to any tool's result.

    Attributes:
        failure_prob: Probability that a call fails transiently (an error
            result saying the service is unavailable; retrying may work).
        timeout_prob: Probability that a call times out (an error result).
        truncate_prob: Probability that a successful result is cut short.
        truncate_length: Where to cut: a fixed number of characters, or
            ``None`` for a uniformly random point in the result.
        retrieval: Noise on ranked result lists, applied by retrieval tools.
        exempt_tools: Tool names never subjected to generic faults.
    """

    failure_prob: float = 0.0
    timeout_prob: float = 0.0
    truncate_prob: float = 0.0
    truncate_length: int | None = None
    retrieval: RetrievalNoise = field(default_factory=RetrievalNoise)
    exempt_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("failure_prob", "timeout_prob", "truncate_prob"):
            _check_prob(self, name)
        if self.failure_prob + self.timeout_prob > 1.0:
            raise ValueError(
                f"failure_prob + timeout_prob must be <= 1 (got {self.failure_prob} + {self.timeout_prob})"
            )
        if self.truncate_length is not None and self.truncate_length < 0:
            raise ValueError(f"truncate_length must be >= 0 (got {self.truncate_length})")

    @property
    def active(self) -> bool:
        return self.failure_prob > 0 or self.timeout_prob > 0 or self.truncate_prob > 0

    def apply(self, tool_name: str, result: ToolResult, rng: np.random.Generator) -> tuple[ToolResult, tuple[str, ...]]:
        """The result as the agent will see it, plus the noise events that fired."""
        if not self.active or tool_name in self.exempt_tools:
            return result, ()
        u = rng.random()
        if u < self.failure_prob:
            return ToolResult.error(f"{tool_name} is temporarily unavailable, try again", reason="failure"), (
                "failure",
            )
        if u < self.failure_prob + self.timeout_prob:
            return ToolResult.error(f"{tool_name} timed out", reason="timeout"), ("timeout",)
        if result.ok and self.truncate_prob > 0 and rng.random() < self.truncate_prob:
            text = result.content
            cut = self.truncate_length if self.truncate_length is not None else int(rng.integers(len(text) + 1))
            if cut < len(text):
                return replace(result, content=text[:cut] + " [truncated]"), ("truncate",)
        return result, ()


def coerce_noise(value: ToolNoise | Mapping[str, Any] | None) -> ToolNoise:
    """Accept a :class:`ToolNoise`, a plain dict (as from ``gym.make`` kwargs or YAML), or ``None``."""
    if value is None:
        return ToolNoise()
    if isinstance(value, ToolNoise):
        return value
    if isinstance(value, Mapping):
        data = dict(value)
        unknown = set(data) - {f.name for f in fields(ToolNoise)}
        if unknown:
            raise TypeError(
                f"unknown tool_noise fields {sorted(unknown)}; known: {[f.name for f in fields(ToolNoise)]}"
            )
        if isinstance(data.get("retrieval"), Mapping):
            data["retrieval"] = RetrievalNoise(**data["retrieval"])
        if "exempt_tools" in data:
            data["exempt_tools"] = tuple(data["exempt_tools"])
        return ToolNoise(**data)
    raise TypeError(f"tool_noise must be a ToolNoise, a dict or None, got {type(value).__name__}")
