"""TRL's ``SFTTrainer`` with the LM head run on the taught positions only, where TRL runs it on every position.

TRL 1.16's SFT loss scores a batch through its fused LM head (``model(..., fused_lm_head=True)``: per-token
log-probs, entropy and top-1 hits without the ``(batch, length, vocabulary)`` logits). On CUDA and XPU it projects
only the positions that carry a label; on other devices - the CPU - it projects every position of the padded
batch, in tiles folded by torch ops, and masks afterwards. A cold-start episode teaches few of its tokens (the
assistant's: ~70 of ~300 in a Calculator-v0 episode, ~40 of ~570 in a HotpotQA one), so on a CPU most of that
work is thrown away.

:class:`AgentSFTTrainer` changes only that: its ``compute_loss`` (the public ``Trainer`` seam) hands TRL's loss a
:class:`TaughtPositionsPolicy` in the model's place. Called with ``fused_lm_head=True`` it runs the backbone once
over the whole batch, as TRL's head does, and projects through the LM head (in chunks,
:func:`~agent_trainers.algorithms.shared.logprobs.chunked_scores`) only the hidden states whose next token is
taught; every other call goes to the model. TRL's loss, its normalisation and its metrics (``entropy``,
``mean_token_accuracy``, ``num_tokens``) are computed by TRL from the same fields its fused head returns, 0 on
the positions not taught. It applies where the log-prob engine can score the model
(:func:`~agent_trainers.algorithms.shared.logprobs.supports_scored_logprobs`), in one process without an MoE
loss, off CUDA and XPU (where TRL's own head is compact); elsewhere TRL's path runs unchanged.
``benchmarks/sft.py`` times both.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import torch
from trl import SFTTrainer

from agent_trainers.algorithms.shared.logprobs import chunked_scores, completion_states, supports_scored_logprobs

__all__ = ["AgentSFTTrainer", "TaughtPositionsPolicy"]

IGNORED = -100
"""The label of a position that is not taught (transformers' and TRL's ``ignore_index``)."""

COMPACT_DEVICES = ("cuda", "xpu")
"""Where TRL's fused head already projects only the labelled positions (its Triton kernels)."""


class TaughtPositionsPolicy:
    """The model as TRL's SFT loss calls it, with the LM head on the taught positions only (the module docstring).

    Args:
        model: A plain ``transformers`` causal LM (:func:`supports_scored_logprobs`).
    """

    def __init__(self, model: Any):
        self.model = model

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        fused_lm_head: bool = False,
        use_cache: bool | None = None,
        **extra: Any,
    ) -> Any:
        """What TRL's fused head returns for a ``fused_lm_head=True`` call: ``log_probs``, ``entropy``, ``is_top1``
        and ``label_mask``, each ``(B, L - 1)`` (position ``t`` scores token ``t + 1``), and ``loss``; any other
        call is the model's own."""
        if not fused_lm_head or labels is None or attention_mask is None or extra:
            kwargs = {"attention_mask": attention_mask, "labels": labels, "use_cache": use_cache, **extra}
            if fused_lm_head:
                kwargs["fused_lm_head"] = True
            return self.model(input_ids=input_ids, **{k: v for k, v in kwargs.items() if v is not None})
        width = input_ids.shape[1] - 1
        targets = labels[:, 1:]
        taught = targets != IGNORED
        states = completion_states(self.model, input_ids, attention_mask, width)
        head = self.model.get_output_embeddings()
        scores = chunked_scores(
            states[taught].to(head.weight.device), targets[taught].to(head.weight.device), head,
            temperature=1.0, entropy=True, top1=True,
        )  # fmt: skip
        where = taught.to(scores.logprobs.device)
        # masked_scatter keeps the log-probs attached to the graph even when nothing is taught
        log_probs = scores.logprobs.new_zeros(where.shape).masked_scatter(where, scores.logprobs)
        entropy = scores.entropies.new_zeros(where.shape).masked_scatter(where, scores.entropies)
        is_top1 = torch.zeros_like(where).masked_scatter(where, scores.top1)
        loss = -log_probs.sum() / where.sum().clamp(min=1)
        return SimpleNamespace(
            loss=loss, log_probs=log_probs, entropy=entropy, is_top1=is_top1, label_mask=where, aux_loss=None
        )


class AgentSFTTrainer(SFTTrainer):
    """TRL's ``SFTTrainer``, its loss scored by :class:`TaughtPositionsPolicy` where that saves work (the module
    docstring)."""

    score_taught_positions_only: ClassVar[bool] = True
    """Hand TRL's loss a :class:`TaughtPositionsPolicy` where it applies (``False``: TRL's own path everywhere; a
    benchmark compares the two)."""

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """TRL's loss, scored by :class:`TaughtPositionsPolicy` when :meth:`scores_taught_positions` says so."""
        if self.scores_taught_positions(model, inputs) and not return_outputs:
            model = TaughtPositionsPolicy(model)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def scores_taught_positions(self, model: Any, inputs: dict[str, Any]) -> bool:
        """Whether this batch's loss goes through :class:`TaughtPositionsPolicy`: a plain causal LM off CUDA and
        XPU, in one process, TRL's NLL or DFT loss without label smoothing, a custom loss or an MoE term, and a
        padded batch (attention mask, no packed positions)."""
        device = getattr(model, "device", torch.device("cpu"))
        return bool(
            self.score_taught_positions_only
            and torch.device(device).type not in COMPACT_DEVICES
            and self.accelerator.num_processes == 1
            and self.compute_loss_func is None
            and self.label_smoother is None
            and not self.aux_loss_enabled
            and "attention_mask" in inputs
            and "labels" in inputs
            and "position_ids" not in inputs
            and supports_scored_logprobs(model)
        )
