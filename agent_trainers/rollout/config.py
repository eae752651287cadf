"""How rollouts are played: :class:`RolloutConfig` (the one rollout settings type)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

from agent_trainers.policies.sampling import SamplingParams

__all__ = ["MAX_TOKENS", "RolloutConfig"]

MAX_TOKENS = 2**20
"""The largest token budget a rollout setting takes (1,048,576: beyond any model's context window)."""


@dataclass(config=ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False))
class RolloutConfig:
    """How rollouts are played (the ``rollout:`` section of an ``agent-r1`` config).

    A pydantic dataclass: field types are checked when it is built, and each
    field's docstring is its help text (the rollout CLI's options are made from
    these fields). The group size is not here: it belongs to the caller (GRPO's
    ``num_generations``, ``--group-size``), and is an argument of
    :func:`agent_trainers.rollout.rollout`.
    """

    max_turns: Annotated[int, Field(le=10_000)] | None = None
    """Turn limit (``max_episode_steps``, at most 10,000); ``None`` keeps the env's registered limit."""
    max_new_tokens_per_turn: Annotated[int, Field(le=MAX_TOKENS)] = 256
    """Most tokens the model may generate in one turn."""
    max_total_tokens: Annotated[int, Field(le=MAX_TOKENS)] = 2048
    """Token budget per trajectory (prompt + completion; at most :data:`MAX_TOKENS`, 1,048,576); exceeding it ends
    the episode ("token_budget")."""
    temperature: float = 1.0
    """Sampling temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    top_k: int = 0
    """Draw only from the ``top_k`` most likely tokens; 0 (the default) draws from the whole softmax."""
    decoder: Literal["loop", "generate"] = "loop"
    """How a ``transformers`` model decodes in training rollouts: the policy's own loop, or ``model.generate``
    (the engine before 2026-12-05: its random numbers, so a recorded sampled run reproduces to the digit; greedy
    tokens are the same under both)."""
    tool_workers: Annotated[int, Field(le=1024)] = 8
    """Threads that run env steps (tool calls) concurrently (at most 1,024)."""
    tool_timeout_s: float = 30.0
    """Per-step time-out; a step that takes longer ends its episode ("tool_timeout", truncated)."""
    same_noise_in_group: bool = False
    """Reset all members of a group with the same seed (same tool noise) instead of distinct seeds."""
    render_tools: bool = False
    """Pass ``info["tools"]`` to the chat template as ``tools=``. Off by default: a ToolEnv's
    system prompt already lists its tools, and listing them twice wastes context."""
    env_actors: Annotated[int, Field(le=1024)] = 0
    """Run the envs in this many Ray actors (``agent_trainers.rollout.ray_pool``, extra ``ray``; one pool
    per process, started on first use; at most 1,024); 0 keeps them in this process."""

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 or None (got {self.max_turns})")
        for name in ("max_total_tokens", "tool_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.env_actors < 0:
            raise ValueError(f"env_actors must be >= 0 (got {self.env_actors})")
        if self.max_new_tokens_per_turn >= self.max_total_tokens:
            raise ValueError(
                "max_total_tokens must exceed max_new_tokens_per_turn "
                f"(got {self.max_total_tokens} and {self.max_new_tokens_per_turn})"
            )
        if not self.tool_timeout_s > 0:
            raise ValueError(f"tool_timeout_s must be > 0 (got {self.tool_timeout_s})")
        self.sampling()  # the sampling fields are checked by SamplingParams, the one place that does

    def sampling(self, stop: Sequence[str] = (), max_new_tokens: int | None = None) -> SamplingParams:
        """The :class:`SamplingParams` of a turn (``max_new_tokens`` defaults to the per-turn limit)."""
        limit = self.max_new_tokens_per_turn if max_new_tokens is None else max_new_tokens
        return SamplingParams(
            max_new_tokens=limit,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop=tuple(stop),
        )
