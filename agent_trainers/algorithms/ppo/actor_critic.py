"""PPO's actor-critic: a causal-LM policy plus a critic, scored in chunks so full-vocabulary logits stay small.

The critic (:class:`CriticKind`) is either

* ``value_head`` - a linear value head on the policy's own last hidden states:
  one backbone forward gives both the log-probs and the values, and the value
  loss trains the shared backbone too; or
* ``separate`` - its own backbone (a copy of the policy's as RL starts, or
  another model) with its own value head: more memory, no interference
  between the two losses.

Positions: the value of completion token ``t`` is read from the same hidden
state as its log-prob - the state *before* the token is generated - so
``V[t] = V(s_t)``, the state in which action ``a_t`` is taken.

Memory: logits are computed only at the scored completion tokens, ``chunk``
tokens at a time, by the log-prob engine every trainer shares
(:func:`~agent_trainers.algorithms.shared.logprobs.chunked_logprobs`): the
batch's ``tokens x vocabulary`` logits are never materialised, only one
``chunk x vocabulary`` block at a time, recomputed in the backward pass.

Example:
    >>> from agent_trainers.policies import load_model
    >>> model, tok = load_model("tiny-random", device="cpu")
    >>> ac = ActorCritic(model, CriticKind.VALUE_HEAD)
    >>> batch = pack_sequences([[1, 2, 3]], [[4, 5]], pad_id=0)
    >>> logp, values, _ = ac(**batch.model_inputs(), temperature=1.0)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from transformers import PreTrainedModel

from agent_trainers.algorithms.ppo.config import CriticKind
from agent_trainers.algorithms.shared.logprobs import completion_states, logit_transform, model_config, project_scored
from agent_trainers.algorithms.shared.sequences import SequenceBatch, StepSpan, covered, pack_sequences, step_states

__all__ = ["ActorCritic", "CriticKind", "SequenceBatch", "pack_sequences", "policy_scores"]


def policy_scores(
    policy: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    prompt_width: int,
    valid: torch.Tensor,
    *,
    temperature: float,
    chunk: int,
    entropy: bool = False,
    steps: Sequence[Sequence[StepSpan]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Log-probs of the completion tokens under a causal LM, logits in chunks.

    Args:
        policy: A ``transformers`` causal LM.
        inputs: ``input_ids``, ``attention_mask``, ``position_ids`` of a :class:`SequenceBatch`.
        prompt_width: Its ``prompt_width``.
        valid: ``(B, T)``: the completion tokens to score (its ``valid`` mask, or a part of it).
        temperature: Logits are divided by it (the sampling temperature).
        chunk: Completion tokens per block of logits.
        entropy: Also return per-token entropies.
        steps: Per-step samples of each row (:func:`~agent_trainers.algorithms.shared.sequences.step_spans`):
            each turn is then scored after its own step prompt; ``valid`` must lie inside the spans.

    Returns:
        ``(logprobs, entropies or None, hidden)``: ``(B, T)`` tensors (0 outside
        ``valid``) and the ``(B, T, H)`` hidden states before every completion token.
    """
    ids, width = inputs["input_ids"], valid.shape[1]
    if steps is not None:
        before = _step_states(policy.base_model, ids, prompt_width, steps, width, valid)
    else:
        completion = ids.shape[1] - prompt_width
        states = completion_states(policy, ids, inputs["attention_mask"], completion, inputs["position_ids"])
        before = states[:, :width]  # the state before each completion token
    targets = ids[:, prompt_width : prompt_width + width]
    logprobs, entropies = project_scored(
        policy, before, targets, valid, temperature=temperature, compute_entropy=entropy, chunk=chunk
    )
    return logprobs, entropies, before


def _step_states(
    backbone: nn.Module,
    ids: torch.Tensor,
    prompt_width: int,
    steps: Sequence[Sequence[StepSpan]],
    width: int,
    scored: torch.Tensor,
) -> torch.Tensor:
    """:func:`~agent_trainers.algorithms.shared.sequences.step_states` of a packed batch's completions."""
    inside = covered(steps, width, scored.device)
    if bool((scored.bool() & ~inside).any()):
        raise ValueError(
            "per-step samples score the model's tokens only, and a token outside every step was asked for "
            "(rl.loss_mask: false or rl.advantage_mask: false with step samples)"
        )
    completions = ids[:, prompt_width : prompt_width + width].tolist()
    return step_states(backbone, completions, steps, width, pad_id=0)


def _check_plain_lm_head(model: nn.Module) -> None:
    name = logit_transform(model)
    if name is not None:
        raise ValueError(
            f"{type(model).__name__} transforms its logits ({name}); PPO's chunked scoring assumes a plain lm_head"
        )


class ActorCritic(nn.Module):
    """A causal-LM policy and its critic, as one module (one state dict, one optimizer, one checkpoint).

    Args:
        policy: A ``transformers`` causal LM (Llama, Qwen, SmolLM, Mistral, ...).
        critic: ``value_head`` or ``separate``.
        critic_backbone: For ``separate``: the critic's backbone (a ``transformers``
            base model); default a copy of the policy's backbone.
        chunk: Completion tokens per block of logits.

    Raises:
        ValueError: A model whose logits are not a plain ``lm_head`` projection.
    """

    def __init__(
        self,
        policy: PreTrainedModel,
        critic: CriticKind | str = CriticKind.VALUE_HEAD,
        *,
        critic_backbone: nn.Module | None = None,
        chunk: int = 512,
    ):
        super().__init__()
        _check_plain_lm_head(policy)
        self.kind = CriticKind(critic)
        self.chunk = int(chunk)
        self.policy = policy
        self.critic: nn.Module | None = None
        if self.kind is CriticKind.SEPARATE:
            self.critic = critic_backbone if critic_backbone is not None else copy.deepcopy(policy.base_model)
        hidden = model_config(self.critic if self.critic is not None else policy).hidden_size
        self.value_head = nn.Linear(hidden, 1, dtype=torch.float32, device=next(policy.parameters()).device)
        nn.init.zeros_(self.value_head.weight)  # values start at 0; the head learns from the first value loss
        nn.init.zeros_(self.value_head.bias)

    def _values(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        prompt_width: int,
        valid: torch.Tensor,
        *,
        temperature: float,
        scored: torch.Tensor | None = None,
        values: bool = True,
        entropy: bool = False,
        steps: Sequence[Sequence[StepSpan]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Score the completion tokens of a :class:`SequenceBatch`.

        Args:
            input_ids: From :class:`SequenceBatch`.
            attention_mask: From :class:`SequenceBatch`.
            position_ids: From :class:`SequenceBatch`.
            prompt_width: From :class:`SequenceBatch`.
            valid: From :class:`SequenceBatch`.
            temperature: The sampling temperature.
            scored: ``(B, T)`` tokens whose log-probs are needed (default ``valid``);
                logits are computed only there (e.g. agent tokens only).
            values: Also return values (on every ``valid`` token; the head is cheap).
            entropy: Also return entropies (on ``scored`` tokens).
            steps: Per-step samples (see :func:`policy_scores`); the critic then reads each turn's states
                after its own step prompt too, and values are 0 outside the steps.

        Returns:
            ``(logprobs, values, entropies)``, each ``(B, T)`` with 0 outside
            ``scored`` (values: ``valid``); ``values`` None unless asked, ``entropies`` None unless asked.
        """
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        scored = valid if scored is None else scored & valid
        logprobs, entropies, before = policy_scores(
            self.policy,
            inputs,
            prompt_width,
            scored,
            temperature=temperature,
            chunk=self.chunk,
            entropy=entropy,
            steps=steps,
        )
        if not values:
            return logprobs, None, entropies
        if steps is not None:
            valid = valid & covered(steps, valid.shape[1], valid.device)
            if self.critic is not None:
                before = _step_states(self.critic, input_ids, prompt_width, steps, valid.shape[1], valid)
        elif self.critic is not None:
            critic_hidden = self.critic(**inputs, use_cache=False).last_hidden_state
            before = critic_hidden[:, prompt_width - 1 : prompt_width - 1 + valid.shape[1]]
        v = self._values(before) * valid
        return logprobs, v, entropies
