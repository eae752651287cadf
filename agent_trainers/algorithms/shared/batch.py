"""One batch type between rollouts and every trainer: :class:`AgentBatch`, built once from trajectories.

A step's episodes become an :class:`AgentBatch` (:meth:`AgentBatch.from_trajectories`): token ids, per-token
rewards, masks, turn indices and anchor states, per-step samples, the behaviour policy's log-probs and how stale
it is. The trainers then fill in what they compute from it - advantages (every estimator, or PPO's GAE), the
log-probs before the update, the reference's log-probs when a KL term needs them, the critic's values and
returns, the importance weights of a stale batch - and read it as it is: PPO directly, the TRL adapter by
handing its fields to TRL as the ``inputs`` TRL's loss reads.

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

from agent_trainers.algorithms.shared.names import AnchorState, ISCorrection
from agent_trainers.algorithms.shared.offpolicy import importance_weights
from agent_trainers.algorithms.shared.sequences import StepSpan, step_spans
from agent_trainers.rollout.types import Trajectory

__all__ = ["AgentBatch", "AnchorState", "discounted_returns", "turn_states"]


@dataclass
class AgentBatch:
    """A step's episodes as one batch (``(B, T)`` tensors over the completions, unless said otherwise).

    Built by :meth:`from_trajectories`; the fields after ``staleness`` are filled by the trainer that reads it.

    Attributes:
        prompt_ids: Prompt ids per episode.
        completion_ids: Completion ids per episode (model and env tokens interleaved).
        token_rewards: Turn rewards on the last model token of each turn, 0 elsewhere.
        model_mask: True on model-generated tokens.
        valid: True on completion tokens (False on padding).
        turn_index: Turn of each token (model and env tokens of a turn share it); -1 on padding.
        turn_starts: Per row, the first token of each turn.
        turn_states: Per row, the state each turn was taken from, as the tuple of its token ids
            (:func:`turn_states`): equal tuples are the same state, exactly (a hash would risk merging two
            states on a collision; a tuple costs at most the sequence's length per turn).
        scores: ``(B,)`` total env reward of each trajectory (undiscounted).
        behaviour_logprobs: The log-probs recorded as each model token was sampled (0 on env tokens and padding):
            the behaviour policy's.
        group_size: Rollouts per task; row ``b`` is in group ``b // group_size``.
        policy_mask: Tokens in the policy loss: the model's (every completion token with ``loss_mask=False``,
            the paper's ablation).
        advantage_mask: Tokens a critic values and GAE runs over: the model's (every completion token with
            ``advantage_mask=False``); PPO's ``value: step`` narrows it to the step positions.
        steps: Per-step samples of each episode (each turn scored after the prompt it was generated from), or
            None: every turn scored after the episode's prefix (see :func:`needs_step_samples`).
        staleness: Optimizer steps between the behaviour policy and the one trained (0: on-policy).
        advantages: Per-token advantages (an estimator's, or PPO's GAE).
        old_logprobs: ``log pi_old`` before the update (PPO's clipped ratio is taken against it).
        ref_logprobs: The reference policy's log-probs, when a KL term needs them.
        values: The critic's values at rollout time (PPO).
        returns: The critic's targets (PPO).
        is_weights: Importance weights of a stale batch's policy loss (None: not stale).
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    token_rewards: torch.Tensor
    model_mask: torch.Tensor
    valid: torch.Tensor
    turn_index: torch.Tensor
    turn_starts: list[list[int]]
    turn_states: list[list[tuple[int, ...]]]
    scores: torch.Tensor
    behaviour_logprobs: torch.Tensor
    group_size: int
    policy_mask: torch.Tensor
    advantage_mask: torch.Tensor
    steps: list[list[StepSpan]] | None = None
    staleness: int = 0
    advantages: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(B, T)``."""
        return (int(self.token_rewards.shape[0]), int(self.token_rewards.shape[1]))

    @classmethod
    def from_trajectories(
        cls,
        trajectories: Sequence[Trajectory],
        *,
        group_size: int,
        width: int | None = None,
        device: torch.device | str = "cpu",
        loss_mask: bool = True,
        advantage_mask: bool = True,
        step_samples: bool = False,
        anchor: AnchorState | str = AnchorState.OBSERVATION,
        staleness: int = 0,
    ) -> AgentBatch:
        """Lay ``trajectories`` out as one batch (see the module docstring).

        Args:
            trajectories: Token-mode trajectories, group members adjacent.
            group_size: Rollouts per task.
            width: Padded completion width (default: the longest completion).
            device: Where the tensors go.
            loss_mask: Keep env tokens out of the policy loss (``rl.loss_mask``).
            advantage_mask: Keep env tokens out of the critic and GAE (``ppo.advantage_mask``).
            step_samples: Score each turn after its own step prompt (``rl.step_samples``); always so for episodes
                played under a context other than ``append`` (:func:`needs_step_samples`).
            anchor: Which tokens name the state of each turn (``turn_states``; read by ``gigpo`` only).
            staleness: How many optimizer steps old the policy that played them is.

        Raises:
            ValueError: The batch is not made of whole groups, a completion is longer than ``width``, a
                text-mode trajectory (no tokens) has turns, or per-step samples with a mask switched off.
        """
        n = len(trajectories)
        if group_size < 1 or n % group_size:
            raise ValueError(f"batch size must be divisible by group_size (got {n} and {group_size})")
        longest = max((len(t.completion_ids) for t in trajectories), default=0)
        length = longest if width is None else width
        if longest > length:
            raise ValueError(f"a completion has {longest} tokens, more than the batch width {length}")
        batch = cls(
            prompt_ids=[list(t.prompt_ids) for t in trajectories],
            completion_ids=[list(t.completion_ids) for t in trajectories],
            token_rewards=torch.zeros(n, length),
            model_mask=torch.zeros(n, length, dtype=torch.bool),
            valid=torch.zeros(n, length, dtype=torch.bool),
            turn_index=torch.full((n, length), -1, dtype=torch.long),
            turn_starts=[],
            turn_states=[],
            scores=torch.tensor([t.total_reward for t in trajectories], dtype=torch.float32),
            behaviour_logprobs=torch.zeros(n, length),
            group_size=group_size,
            policy_mask=torch.zeros(0),
            advantage_mask=torch.zeros(0),
            steps=_step_samples(trajectories, step_samples, loss_mask, advantage_mask),
            staleness=int(staleness),
        )
        for b, traj in enumerate(trajectories):
            if traj.turns and not traj.completion_ids:
                raise ValueError(f"trajectory {b} has turns but no token ids (text mode cannot be trained on)")
            _fill_row(batch, b, traj, AnchorState(anchor))
        for name in ("token_rewards", "model_mask", "valid", "turn_index", "scores", "behaviour_logprobs"):
            setattr(batch, name, getattr(batch, name).to(device))
        batch.policy_mask = batch.model_mask if loss_mask else batch.valid
        batch.advantage_mask = batch.model_mask if advantage_mask else batch.valid
        return batch

    def stale_weights(
        self, train_logprobs: torch.Tensor, mode: ISCorrection | str, cap: float
    ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """``pi_train / pi_behaviour`` per model token of a stale batch and its statistics (:mod:`.offpolicy`);
        ``(None, {})`` for an on-policy one (``staleness`` 0), whose weight is 1 on every token.

        Args:
            train_logprobs: ``log pi_train`` of the completion tokens (detached), ``(B, T')`` for ``T' <= T``
                (a micro-batch may be narrower than the batch).
            mode: How the ratio is bounded (:class:`~.names.ISCorrection`).
            cap: Its bound.
        """
        if not self.staleness:
            return None, {}
        width = train_logprobs.shape[1]
        mask = (self.policy_mask & self.model_mask)[:, :width]  # env tokens were not sampled: no behaviour log-prob
        stale = torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device)
        return importance_weights(train_logprobs, self.behaviour_logprobs[:, :width], mask, stale, mode, cap)


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


def needs_step_samples(trajectories: Sequence[Trajectory], step_samples: bool = False) -> bool:
    """Whether a trainer must score these episodes by step: asked to (``rl.step_samples``), or some episode was
    played under a context other than ``append`` (it has ``step_prompts``)."""
    return bool(step_samples) or any(t.step_prompts for t in trajectories)


def _step_samples(
    trajectories: Sequence[Trajectory], step_samples: bool, loss_mask: bool, advantage_mask: bool
) -> list[list[StepSpan]] | None:
    if not needs_step_samples(trajectories, step_samples):
        return None
    if not (loss_mask and advantage_mask):
        raise ValueError(
            "these episodes are scored by step (rl.step_samples, or a context other than append), and a step "
            "sample holds no env tokens: rl.loss_mask (and ppo.advantage_mask) must be true"
        )
    return [step_spans(t) for t in trajectories]


def _fill_row(batch: AgentBatch, b: int, traj: Trajectory, anchor: AnchorState) -> None:
    n = len(traj.completion_ids)
    batch.valid[b, :n] = True
    batch.model_mask[b, :n] = torch.tensor([bool(m) for m in traj.loss_mask], dtype=torch.bool) if n else False
    if traj.logprobs:
        batch.behaviour_logprobs[b, :n] = torch.tensor(traj.logprobs, dtype=torch.float32)
    for k, turn in enumerate(traj.turns):
        batch.turn_index[b, turn.start : turn.env_end] = k
        if turn.end <= turn.start:
            if turn.reward != 0.0:
                raise ValueError(f"trajectory {b}: turn {k} has a reward but no model token to carry it")
            continue
        batch.token_rewards[b, turn.end - 1] += float(turn.reward)
    batch.turn_starts.append([t.start for t in traj.turns])
    batch.turn_states.append(turn_states(traj, anchor))


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
