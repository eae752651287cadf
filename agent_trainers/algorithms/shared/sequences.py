"""Prompt + completion layouts, and per-step samples: each turn scored after the prompt it was generated from.

:func:`pack_sequences` lays out a batch of ``prompt + completion`` rows
(prompts left-padded to one width, completions right-padded, positions
counting real tokens only). A trainer's row is one trajectory: its prompt and
its completion (model and env tokens interleaved, :mod:`~agent_trainers.algorithms.shared.batch`).

**Per-step samples.** Under a context policy other than ``"append"``
(:mod:`agent_gym.core.context`) turn ``k`` was generated from the env's view,
not from the row's prefix: ``Trajectory.step_prompts[k]``. :func:`step_states`
then computes, for every model token of turn ``k``, the hidden state before it
in the sequence ``step_prompts[k] + turn k's tokens`` - the sample the model
actually produced - and lays those states out where the tokens sit in the row
(0 at env tokens and padding). Log-probs, entropies and a critic's values read
them exactly as they read the states of one pass over the row, so advantages,
masks and losses keep the row's layout and every estimator works unchanged.

Under ``"append"`` turn ``k``'s prompt *is* the row's prefix (:meth:`Trajectory.step_prompt`), so per-step
scoring gives the log-probs of the single pass (a causal model's state before a token depends only on the
tokens before it) up to float rounding: the same loss and gradients, at the cost of running each step's
prefix again (``tests/agent_trainers/algorithms/shared/test_step_samples.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from agent_trainers.algorithms.shared.logprobs import model_config
from agent_trainers.rollout.types import Trajectory

__all__ = [
    "STEP_ROWS",
    "SequenceBatch",
    "StepSpan",
    "covered",
    "pack_sequences",
    "step_spans",
    "step_states",
]

STEP_ROWS = 16
"""Step samples per backbone pass of :func:`step_states`."""


@dataclass
class SequenceBatch:
    """Prompt + completion ids of a batch: prompts left-padded to one width, completions right-padded.

    Attributes:
        input_ids: ``(B, P + T)``.
        attention_mask: ``(B, P + T)``, 1 on real tokens.
        position_ids: ``(B, P + T)``, counting real tokens only (left padding does not shift positions).
        prompt_width: ``P``; completion token ``t`` sits at column ``P + t``.
        valid: ``(B, T)`` bool, True on real completion tokens.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    prompt_width: int
    valid: torch.Tensor

    def model_inputs(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`ActorCritic.forward`."""
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
            "prompt_width": self.prompt_width,
            "valid": self.valid,
        }


def pack_sequences(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    pad_id: int,
    width: int | None = None,
    device: torch.device | str = "cpu",
) -> SequenceBatch:
    """Lay out ``prompts[i] + completions[i]`` as a :class:`SequenceBatch`.

    Args:
        prompts: Prompt ids per row (each non-empty).
        completions: Completion ids per row.
        pad_id: Id written into padding (masked out).
        width: Completion width ``T`` (default: the longest completion).
        device: Where the tensors go.

    Raises:
        ValueError: An empty prompt, or a completion longer than ``width``.
    """
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (the first completion token is predicted from it)")
    p_w = max(len(p) for p in prompts)
    t_w = max((len(c) for c in completions), default=0) if width is None else width
    if any(len(c) > t_w for c in completions):
        raise ValueError(f"a completion is longer than the width {t_w}")
    n = len(prompts)
    ids = torch.full((n, p_w + t_w), pad_id, dtype=torch.long)
    attn = torch.zeros((n, p_w + t_w), dtype=torch.long)
    for row, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        ids[row, p_w - len(p) : p_w] = torch.tensor(list(p), dtype=torch.long)
        ids[row, p_w : p_w + len(c)] = torch.tensor(list(c), dtype=torch.long)
        attn[row, p_w - len(p) : p_w + len(c)] = 1
    positions = (attn.cumsum(dim=1) - 1).clamp(min=0)
    valid = attn[:, p_w:].bool()
    return SequenceBatch(ids.to(device), attn.to(device), positions.to(device), p_w, valid.to(device))


@dataclass(frozen=True)
class StepSpan:
    """One per-step sample of a row: the prompt turn ``k`` was generated from, and where its tokens sit.

    Attributes:
        prompt: The prompt ids, exactly as fed to the model.
        start: The turn's first model token in the row's completion.
        end: One past its last model token.
    """

    prompt: tuple[int, ...]
    start: int
    end: int


def step_spans(traj: Trajectory) -> list[StepSpan]:
    """The per-step samples of ``traj``: one per turn with model tokens (see :meth:`Trajectory.step_prompt`)."""
    if traj.step_prompts and len(traj.step_prompts) != len(traj.turns):
        raise ValueError(
            f"trajectory {traj.task_id!r} has {len(traj.step_prompts)} step prompts for {len(traj.turns)} turns"
        )
    return [
        StepSpan(tuple(traj.step_prompt(k)), turn.start, turn.end)
        for k, turn in enumerate(traj.turns)
        if turn.end > turn.start
    ]


def step_states(
    backbone: nn.Module,
    completions: Sequence[Sequence[int]],
    spans: Sequence[Sequence[StepSpan]],
    width: int,
    *,
    pad_id: int,
    rows_per_pass: int = STEP_ROWS,
) -> torch.Tensor:
    """The ``(B, width, H)`` hidden states before each completion token, each turn after its own step prompt.

    Args:
        backbone: A ``transformers`` base model (a causal LM's ``base_model``, or a critic's backbone).
        completions: Each row's completion ids (the row's model tokens are read from here).
        spans: Each row's per-step samples (:func:`step_spans`).
        width: The completion width ``T`` of the result.
        pad_id: Id written into padding.
        rows_per_pass: Step samples run together (left-padded) per backbone pass.

    Returns:
        States at each span's token positions (the state before turn ``k``'s token ``i`` is the step
        sequence's state before it); zeros elsewhere (env tokens, padding), without gradient there.

    Raises:
        ValueError: A span outside its row, or ``rows_per_pass < 1``.
    """
    if rows_per_pass < 1:
        raise ValueError(f"rows_per_pass must be >= 1 (got {rows_per_pass})")
    work = [(r, s) for r, row in enumerate(spans) for s in row if s.end > s.start]
    for r, s in work:
        if s.start < 0 or s.end > min(len(completions[r]), width) or not s.prompt:
            raise ValueError(f"row {r}: step span {s.start}:{s.end} lies outside its completion (or has no prompt)")
    device = next(backbone.parameters()).device
    hidden_size = model_config(backbone).hidden_size
    out: torch.Tensor | None = None
    for i in range(0, len(work), rows_per_pass):
        part = work[i : i + rows_per_pass]
        packed = pack_sequences(
            [s.prompt for _, s in part],
            [completions[r][s.start : s.end] for r, s in part],
            pad_id=pad_id,
            device=device,
        )
        hidden = backbone(
            input_ids=packed.input_ids,
            attention_mask=packed.attention_mask,
            position_ids=packed.position_ids,
            use_cache=False,
        ).last_hidden_state
        if out is None:
            out = hidden.new_zeros((len(completions), width, hidden_size))
        p = packed.prompt_width
        for k, (r, s) in enumerate(part):  # the state before token j of the turn sits at column p - 1 + j
            out[r, s.start : s.end] = hidden[k, p - 1 : p - 1 + s.end - s.start]
    if out is None:  # nothing to score
        dtype = next(backbone.parameters()).dtype
        out = torch.zeros((len(completions), width, hidden_size), device=device, dtype=dtype)
    return out


def covered(spans: Sequence[Sequence[StepSpan]], width: int, device: Any = "cpu") -> torch.Tensor:
    """``(B, width)`` bool: the positions some span scores (the model tokens of per-step samples)."""
    mask = torch.zeros((len(spans), width), dtype=torch.bool, device=device)
    for r, row in enumerate(spans):
        for s in row:
            mask[r, s.start : min(s.end, width)] = True
    return mask
