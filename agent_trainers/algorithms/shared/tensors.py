"""Trajectories -> tensors: per-token rewards, masks and turn indices of a padded batch.

Layout of one row (the completion of one trajectory, right-padded to ``T``)::

    turn 0 model tokens | turn 0 env tokens | turn 1 model tokens | ... | padding
    reward r_0 on the last model token of turn 0, r_1 on the last of turn 1, ...

* every turn's env reward - process terms and, on the last turn, the outcome -
  sits on the **last model token of that turn** (the end of the agent's step);
* ``turn_index`` numbers the turn each token belongs to: a turn's model tokens
  and the env tokens that answer them share it (padding is -1);
* :func:`discounted_returns` discounts by ``gamma`` once per turn boundary, so
  ``gamma`` is a per-turn (per agent step) discount, as in the paper's MDP;
* ``turn_states`` names the state each turn was taken from (:class:`AnchorState`
  chooses which tokens make it), so that a step-level estimator (GiGPO) can
  group the turns of a group's rollouts taken from one identical state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agent_trainers.algorithms.shared.names import AnchorState
from agent_trainers.rollout.types import Trajectory

__all__ = ["AnchorState", "RewardBatch", "discounted_returns", "reward_batch", "turn_states"]


@dataclass
class RewardBatch:
    """Rewards and masks of a batch of trajectories, as ``(B, T)`` tensors.

    Attributes:
        token_rewards: Turn rewards on the last model token of each turn, 0 elsewhere.
        model_mask: True on model-generated tokens.
        valid: True on completion tokens (False on padding).
        turn_index: Turn of each token (model and env tokens of a turn share it); -1 on padding.
        turn_starts: Per row, the first token of each turn.
        turn_states: Per row, the state each turn was taken from, as the tuple of its token ids
            (:func:`turn_states`): equal tuples are the same state, exactly (a hash would risk merging two
            states on a collision; a tuple costs at most the sequence's length per turn).
        scores: ``(B,)`` total env reward of each trajectory (undiscounted).
        sampling_logprobs: The rollout's sampling log-probs (0 on env tokens and padding).
        group_size: Rollouts per task; row ``b`` is in group ``b // group_size``.
    """

    token_rewards: torch.Tensor
    model_mask: torch.Tensor
    valid: torch.Tensor
    turn_index: torch.Tensor
    turn_starts: list[list[int]]
    turn_states: list[list[tuple[int, ...]]]
    scores: torch.Tensor
    sampling_logprobs: torch.Tensor
    group_size: int

    @property
    def shape(self) -> tuple[int, int]:
        """``(B, T)``."""
        return (int(self.token_rewards.shape[0]), int(self.token_rewards.shape[1]))


def turn_states(traj: Trajectory, anchor: AnchorState | str = AnchorState.OBSERVATION) -> list[tuple[int, ...]]:
    """The state each turn of ``traj`` was taken from, as token ids (see :class:`AnchorState`).

    Example:
        >>> from agent_trainers.rollout.types import TurnSpan
        >>> t = Trajectory("E-v0", {}, 0, "t", 0, 0, prompt_ids=[7], completion_ids=[1, 2, 8, 9, 3])
        >>> t.turns = [TurnSpan(0, 2, 4), TurnSpan(4, 5, 5)]  # model [0, 2), env [2, 4), model [4, 5)
        >>> turn_states(t, "observation"), turn_states(t, "history")
        ([(7,), (8, 9)], [(7,), (7, 1, 2, 8, 9)])
    """
    ids, prompt = traj.completion_ids, tuple(traj.prompt_ids)
    if AnchorState(anchor) is AnchorState.HISTORY:
        return [prompt + tuple(ids[: turn.start]) for turn in traj.turns]
    states: list[tuple[int, ...]] = []
    previous_end: int | None = None  # the observation before a turn begins where the previous turn's model tokens end
    for turn in traj.turns:
        states.append(prompt if previous_end is None else tuple(ids[previous_end : turn.start]))
        previous_end = turn.end
    return states


def _fill_row(batch: RewardBatch, b: int, traj: Trajectory, anchor: AnchorState) -> None:
    n = len(traj.completion_ids)
    batch.valid[b, :n] = True
    batch.model_mask[b, :n] = torch.tensor([bool(m) for m in traj.loss_mask], dtype=torch.bool) if n else False
    if traj.logprobs:
        batch.sampling_logprobs[b, :n] = torch.tensor(traj.logprobs, dtype=torch.float32)
    for k, turn in enumerate(traj.turns):
        batch.turn_index[b, turn.start : turn.env_end] = k
        if turn.end <= turn.start:
            if turn.reward != 0.0:
                raise ValueError(f"trajectory {b}: turn {k} has a reward but no model token to carry it")
            continue
        batch.token_rewards[b, turn.end - 1] += float(turn.reward)
    batch.turn_starts.append([t.start for t in traj.turns])
    batch.turn_states.append(turn_states(traj, anchor))


def reward_batch(
    trajectories: Sequence[Trajectory],
    *,
    group_size: int,
    length: int,
    device: torch.device | str = "cpu",
    anchor: AnchorState | str = AnchorState.OBSERVATION,
) -> RewardBatch:
    """Lay ``trajectories`` out as ``(B, length)`` tensors (see the module docstring).

    Args:
        trajectories: Token-mode trajectories, group members adjacent.
        group_size: Rollouts per task.
        length: Padded completion width (at least the longest completion).
        device: Where the tensors go.
        anchor: Which tokens name the state of each turn (``turn_states``; read by ``gigpo`` only).

    Raises:
        ValueError: The batch is not made of whole groups, a completion is
            longer than ``length``, or a text-mode trajectory (no tokens) has turns.
    """
    n = len(trajectories)
    if group_size < 1 or n % group_size:
        raise ValueError(f"batch size must be divisible by group_size (got {n} and {group_size})")
    longest = max((len(t.completion_ids) for t in trajectories), default=0)
    if longest > length:
        raise ValueError(f"a completion has {longest} tokens, more than the batch width {length}")
    batch = RewardBatch(
        token_rewards=torch.zeros(n, length),
        model_mask=torch.zeros(n, length, dtype=torch.bool),
        valid=torch.zeros(n, length, dtype=torch.bool),
        turn_index=torch.full((n, length), -1, dtype=torch.long),
        turn_starts=[],
        turn_states=[],
        scores=torch.tensor([t.total_reward for t in trajectories], dtype=torch.float32),
        sampling_logprobs=torch.zeros(n, length),
        group_size=group_size,
    )
    for b, traj in enumerate(trajectories):
        if traj.turns and not traj.completion_ids:
            raise ValueError(f"trajectory {b} has turns but no token ids (text mode cannot be trained on)")
        _fill_row(batch, b, traj, AnchorState(anchor))
    for name in ("token_rewards", "model_mask", "valid", "turn_index", "scores", "sampling_logprobs"):
        setattr(batch, name, getattr(batch, name).to(device))
    return batch


def discounted_returns(rewards: torch.Tensor, turn_index: torch.Tensor, gamma: float) -> torch.Tensor:
    """Returns-to-go ``G[b, t] = r[b, t] + d * G[b, t + 1]``, with ``d = gamma`` across a turn boundary, else 1.

    Args:
        rewards: ``(B, T)`` per-token rewards (0 on padding).
        turn_index: ``(B, T)`` turn of each token (-1 on padding).
        gamma: Per-turn discount in (0, 1].

    Returns:
        ``(B, T)`` returns; 0 on padding.

    Example:
        >>> r = torch.tensor([[0.0, 1.0, 0.0, 4.0]])  # two turns of two tokens, rewards 1 and 4
        >>> discounted_returns(r, torch.tensor([[0, 0, 1, 1]]), gamma=0.5).tolist()
        [[3.0, 3.0, 4.0, 4.0]]
    """
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0]) if rewards.shape[1] else rewards.new_zeros(rewards.shape[0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        if t + 1 < rewards.shape[1]:
            crossing = turn_index[:, t + 1] != turn_index[:, t]
            running = running * torch.where(crossing, gamma, 1.0)
        running = rewards[:, t] + running
        out[:, t] = running
    return out * (turn_index >= 0)
