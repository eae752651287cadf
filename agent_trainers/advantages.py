"""Turn-level advantages from per-turn (process) rewards.

GRPO (Shao et al., 2024) gives every token of a completion the same advantage:
the completion's total reward, normalised within its group of ``G`` rollouts
of the same task. Multi-turn episodes carry more: the env rewards every turn
(evidence found, malformed call, repeated query, ...). With
``advantage="turn"`` each model turn ``k`` of rollout ``i`` gets its own
advantage:

1. returns-to-go ``R[i,k] = sum_{j >= k} gamma**(j-k) * r[i,j]`` (what the turn
   and everything after it earned);
2. normalised within the group: ``A[i,k] = (R[i,k] - mean) / (std + eps)``,
   mean and std over all turns of all ``G`` rollouts of the task (std scaling
   optional, as TRL's ``scale_rewards="none"``);
3. spread over that turn's model tokens ``[start, end)``; env tokens get 0
   (they are masked out of the loss anyway).

This is the process-supervision variant of GRPO from DeepSeekMath (§4.1.3),
with discounted returns-to-go in place of the plain sum of later normalised
rewards. With a single turn it reduces to outcome GRPO.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import torch

__all__ = ["AdvantageMode", "returns_to_go", "turn_level_advantages"]


class AdvantageMode(StrEnum):
    """How rewards become advantages."""

    OUTCOME = "outcome"
    """TRL's GRPO: one group-normalised scalar per rollout (its total reward)."""
    TURN = "turn"
    """Per-turn group-normalised returns-to-go, applied to that turn's tokens."""


def returns_to_go(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    """Discounted returns-to-go of one episode's per-turn rewards.

    Example:
        >>> returns_to_go([1.0, 0.0, 2.0], gamma=0.5)
        [1.5, 1.0, 2.0]
    """
    out = [0.0] * len(rewards)
    running = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        running = float(rewards[k]) + gamma * running
        out[k] = running
    return out


def turn_level_advantages(
    turn_rewards: Sequence[Sequence[float]],
    turn_spans: Sequence[Sequence[tuple[int, int]]],
    *,
    group_size: int,
    length: int,
    gamma: float = 1.0,
    scale: bool = True,
    eps: float = 1e-4,
) -> torch.Tensor:
    """Per-token advantages ``(B, length)`` from per-turn rewards.

    Args:
        turn_rewards: For each rollout, the reward of each model turn.
        turn_spans: For each rollout, ``(start, end)`` of each model turn's
            tokens in its completion (same length as its ``turn_rewards``).
        group_size: Rollouts per task; rollout ``b`` is in group ``b // group_size``.
        length: Width of the output (the padded completion length).
        gamma: Discount of the returns-to-go.
        scale: Divide by the group's standard deviation (else only centre).
        eps: Added to the standard deviation.

    Returns:
        A float tensor; tokens outside every turn span are 0.

    Raises:
        ValueError: If the batch is not made of whole groups or a span is
            out of range.
    """
    batch = len(turn_rewards)
    if group_size < 1 or batch % group_size:
        raise ValueError(f"batch size must be divisible by group_size (got {batch} and {group_size})")
    if len(turn_spans) != batch:
        raise ValueError(f"turn_spans has {len(turn_spans)} rollouts, turn_rewards has {batch}")
    out = torch.zeros(batch, length, dtype=torch.float32)
    returns = [returns_to_go(r, gamma) for r in turn_rewards]
    for g in range(0, batch, group_size):
        pooled = torch.tensor([x for b in range(g, g + group_size) for x in returns[b]], dtype=torch.float64)
        if pooled.numel() == 0:
            continue
        mean = pooled.mean()
        std = pooled.std(unbiased=False) if pooled.numel() > 1 else torch.zeros((), dtype=torch.float64)
        for b in range(g, g + group_size):
            if len(turn_spans[b]) != len(returns[b]):
                raise ValueError(f"rollout {b}: {len(turn_spans[b])} spans but {len(returns[b])} turn rewards")
            for (start, end), ret in zip(turn_spans[b], returns[b], strict=True):
                if not 0 <= start <= end <= length:
                    raise ValueError(f"rollout {b}: turn span ({start}, {end}) outside [0, {length}]")
                adv = (ret - mean) / (std + eps) if scale else ret - mean
                out[b, start:end] = float(adv)
    return out
