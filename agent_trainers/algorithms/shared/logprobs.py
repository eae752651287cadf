"""The one log-prob engine of every trainer: log-probs of the scored completion tokens only, in chunks.

:func:`chunked_logprobs` is the projection: the LM head over ``chunk`` hidden
states at a time, ``log_softmax`` in float32, the target's entry kept; with
gradients each chunk is checkpointed (recomputed in the backward pass), so at
most one ``chunk x vocabulary`` block of logits is alive. Both trainers score
with it: the TRL adapter through :func:`scored_token_logprobs` /
:func:`shared_prompt_token_logprobs`, PPO through :func:`completion_states`
and :func:`project_scored` (its critic reads the same hidden states).
:func:`frozen_copy` makes the KL reference policy they score.

TRL 1.16 scores a batch through a fused LM head (``add_fused_lm_head``) that
never builds ``(batch, length, vocabulary)`` logits: it projects hidden states
in tiles of up to 4,096 positions x 32,768 vocabulary entries. On CUDA/XPU it
projects only positions that carry a label (every completion token, env tokens
included); on other devices - the CPU - it projects *every* position of the
padded batch (prompt, env tokens, padding) and masks afterwards.

In a multi-turn episode most completion tokens are env tokens, and the loss
and TRL's metrics only look at the model's own tokens (the loss mask). This
function runs the model's backbone once over the whole sequences - the same
single forward pass - and projects through the LM head, with TRL's own
``ChunkedLogProbFunction``, only the hidden states whose next token is
scored. Log-probs and entropies are exact (the same kernel, fewer rows) and 0
elsewhere. On SmolLM2 the LM head is about a quarter of a forward/backward's
arithmetic per position, and it is then paid on the scored positions only.

:func:`supports_scored_logprobs` says when this applies: a plain (unwrapped,
non-PEFT) ``transformers`` causal LM whose logits are a bare linear projection
(no soft-capping or logit scaling) with ordinary tensor weights; otherwise the
caller keeps TRL's path.

:func:`shared_prompt_token_logprobs` gives the same numbers with less work when
rows share a prompt (a GRPO group: ``G`` rollouts of one task). It runs the
backbone over each distinct prompt once, keeping its keys and values with their
gradients, then over each row's completion alone, up to its last scored token,
on top of that prompt's keys and values: no prompt is run twice and no
right-padding or trailing env tokens are run at all. Positions, masks and
attention are those of the single pass (the prompt's keys are the same
tensors), so log-probs agree to float rounding and gradients flow back into
the prompt once per row that reads it.

Under gradient checkpointing (``model.gradient_checkpointing_enable()``, the
default ``use_reentrant=False``) the shared-prompt path keeps working:
transformers' checkpointed layers normally drop the cache, because a layer's
replay in the backward pass would append its keys and values a second time.
The caches used here never change after the prompt is recorded (the prompt
pass records each layer's keys and values once and hands a replay back what it
passed; a row's pass reads the prompt's keys and values and appends nothing),
so the layers are told they may keep them. Each layer then stores only its
input and recomputes the rest in the backward pass: a group costs one prompt
and its completions, and its activation memory is that of checkpointing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar, cast

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache, PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

from agent_trainers.policies.kv_cache import CacheLayer, layer_kv, supports_kv_reuse

__all__ = [
    "TOKEN_CHUNK",
    "ChunkScores",
    "chunked_logprobs",
    "chunked_scores",
    "completion_states",
    "freeze",
    "frozen_copy",
    "logit_transform",
    "model_config",
    "project_scored",
    "scored_token_logprobs",
    "shared_prompt_token_logprobs",
    "supports_scored_logprobs",
]

KV = tuple[torch.Tensor, torch.Tensor]
"""One layer's keys and values."""

TOKEN_CHUNK = 512
"""Hidden states per block of full-vocabulary logits (PPO's ``ppo.logit_chunk`` sets its own)."""

_ModuleT = TypeVar("_ModuleT", bound=nn.Module)

_SOFTCAP_FIELDS = ("final_logit_softcapping",)
_SCALE_FIELDS = ("logit_scale", "output_multiplier", "output_multiplier_scale", "lm_head_multiplier", "logits_scaling")


def logit_transform(model: Any) -> str | None:
    """The config field by which ``model``'s logits are more than a plain LM-head projection (soft-capping, or a
    scale other than 1), or ``None``: the engine assumes a plain projection."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in _SOFTCAP_FIELDS:
        if getattr(text, name, None) is not None:
            return name
    for name in _SCALE_FIELDS:
        if getattr(text, name, None) not in (None, 1.0):
            return name
    return None


def model_config(model: nn.Module) -> PreTrainedConfig:
    """The ``config`` of a ``transformers`` model held as a plain ``nn.Module`` (a causal LM's ``base_model``,
    a critic's backbone), which types any attribute it does not declare as a parameter or a submodule."""
    return cast(PreTrainedConfig, model.config)


def freeze(model: _ModuleT) -> _ModuleT:
    """``model`` in eval mode with every parameter's gradient off (returned for chaining)."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def frozen_copy(model: _ModuleT) -> _ModuleT:
    """A frozen deep copy of ``model``: the KL reference policy as RL starts."""
    return freeze(copy.deepcopy(model))


def supports_scored_logprobs(model: Any) -> bool:
    """True when :func:`scored_token_logprobs` can score ``model`` (else use TRL's own path)."""
    if not isinstance(model, PreTrainedModel) or getattr(model, "peft_config", None):
        return False
    text = model.config.get_text_config()
    if text is not model.config or logit_transform(model) is not None:
        return False
    if getattr(text, "output_router_logits", False):
        return False
    head = model.get_output_embeddings()
    return head is not None and not isinstance(head.weight, DTensor)


class ChunkScores(NamedTuple):
    """What :func:`chunked_scores` gives for ``N`` target tokens."""

    logprobs: torch.Tensor
    """``(N,)`` float32 log-probs of the targets."""
    entropies: torch.Tensor
    """``(N,)`` float32 entropies of the distributions (0 unless asked)."""
    top1: torch.Tensor
    """``(N,)`` bool: the target is the first most likely token (False unless asked)."""


def _chunk_scores(
    hidden: torch.Tensor, targets: torch.Tensor, lm_head: nn.Module, temperature: float, entropy: bool, top1: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = lm_head(hidden).float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1) if entropy else torch.zeros_like(logp)
    hit = logits.argmax(-1) == targets if top1 else torch.zeros_like(targets, dtype=torch.bool)
    return logp, ent, hit


def chunked_scores(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    lm_head: nn.Module,
    *,
    temperature: float,
    chunk: int = TOKEN_CHUNK,
    entropy: bool = False,
    top1: bool = False,
) -> ChunkScores:
    """Log-probs of ``targets`` from ``(N, H)`` hidden states, ``chunk`` rows of logits at a time; on request the
    entropies and whether each target is the argmax (the first one, as ``torch.argmax`` and TRL's token accuracy).

    With gradients enabled each chunk is checkpointed (recomputed in backward),
    so at most one ``chunk x vocabulary`` block of logits is alive.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 (got {chunk})")
    grad = torch.is_grad_enabled() and hidden.requires_grad
    parts = []
    for s in range(0, hidden.shape[0], chunk) or [0]:  # no rows: one empty chunk, still attached to the graph
        h, y = hidden[s : s + chunk], targets[s : s + chunk]
        if grad:
            parts.append(checkpoint(_chunk_scores, h, y, lm_head, temperature, entropy, top1, use_reentrant=False))
        else:
            parts.append(_chunk_scores(h, y, lm_head, temperature, entropy, top1))
    return ChunkScores(*(torch.cat([p[i] for p in parts]) for i in range(3)))


def chunked_logprobs(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    lm_head: nn.Module,
    *,
    temperature: float,
    chunk: int = TOKEN_CHUNK,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (and entropies) of ``targets`` from ``(N, H)`` hidden states (:func:`chunked_scores`).

    Returns:
        ``(logprobs, entropies)``, each ``(N,)`` float32 (entropies are 0 unless ``entropy``).
    """
    scores = chunked_scores(hidden, targets, lm_head, temperature=temperature, chunk=chunk, entropy=entropy)
    return scores.logprobs, scores.entropies


def completion_states(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``(B, C, H)`` hidden states *before* each of the last ``logits_to_keep`` tokens (one backbone pass).

    The token at position ``t`` is predicted by the hidden state at ``t - 1``.
    """
    extra = {} if position_ids is None else {"position_ids": position_ids}
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **extra)
    width = input_ids.shape[1]
    return hidden.last_hidden_state[:, width - logits_to_keep - 1 : width - 1]


def project_scored(
    model: PreTrainedModel,
    states: torch.Tensor,
    targets: torch.Tensor,
    scored: torch.Tensor,
    *,
    temperature: float = 1.0,
    compute_entropy: bool = False,
    chunk: int = TOKEN_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of ``targets`` ``(B, C)`` from ``states`` ``(B, C, H)`` where ``scored``.

    Returns:
        ``(logps, entropies)``, each ``(B, C)`` float32 and 0 where not scored (entropies None unless asked).
    """
    where = scored.bool()
    return _project(model, states[where], targets[where], where, temperature, compute_entropy, chunk)


def scored_token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    scored: torch.Tensor,
    *,
    temperature: float = 1.0,
    compute_entropy: bool = False,
    position_ids: torch.Tensor | None = None,
    chunk: int = TOKEN_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of the last ``logits_to_keep`` tokens, computed where ``scored``.

    Args:
        model: A model for which :func:`supports_scored_logprobs` holds.
        input_ids: ``(B, P + C)`` prompt and completion ids.
        attention_mask: ``(B, P + C)``.
        logits_to_keep: ``C``, the completion width.
        scored: ``(B, C)``; nonzero where a completion token's log-prob is needed.
        temperature: The logits are divided by it.
        compute_entropy: Also return the entropy of each scored position's distribution.
        position_ids: ``(B, P + C)`` positions (default: the backbone's own, counting from 0).
        chunk: Scored positions per block of full-vocabulary logits.

    Returns:
        ``(logps, entropies)``, each ``(B, C)`` and 0 where not scored (entropies None unless asked).
    """
    states = completion_states(model, input_ids, attention_mask, logits_to_keep, position_ids)
    targets = input_ids[:, input_ids.shape[1] - logits_to_keep :]
    return project_scored(
        model, states, targets, scored, temperature=temperature, compute_entropy=compute_entropy, chunk=chunk
    )


def _project(
    model: PreTrainedModel,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    where: torch.Tensor,
    temperature: float,
    compute_entropy: bool,
    chunk: int = TOKEN_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of ``targets`` from the ``(N, H)`` states before them, scattered to ``where``."""
    head = model.get_output_embeddings()
    logps, entropy = chunked_logprobs(
        hidden.to(head.weight.device),
        targets.to(head.weight.device),
        head,
        temperature=temperature,
        chunk=chunk,
        entropy=compute_entropy,
    )
    mask = where.to(logps.device)
    # masked_scatter keeps the result attached to the graph even when nothing is scored
    logps = logps.new_zeros(mask.shape).masked_scatter(mask, logps)
    entropies = entropy.new_zeros(mask.shape).masked_scatter(mask, entropy) if compute_entropy else None
    return logps, entropies


def shared_prompt_token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    scored: torch.Tensor,
    *,
    temperature: float = 1.0,
    compute_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`scored_token_logprobs` with each distinct prompt run once and no completion padding run.

    Same arguments and results (see the module docstring). Models whose cache is
    not made of plain full-attention layers (:func:`~agent_trainers.policies.kv_cache.supports_kv_reuse`),
    models training with reentrant gradient checkpointing (which cannot pass
    gradients into a prompt's keys and values), and batches with nothing scored,
    go through :func:`scored_token_logprobs`.
    """
    width = input_ids.shape[1]
    p = width - logits_to_keep
    where = scored.bool()
    if p < 1 or not bool(where.any()) or _reentrant_checkpointing(model) or not supports_kv_reuse(model):
        return scored_token_logprobs(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            scored,
            temperature=temperature,
            compute_entropy=compute_entropy,
        )
    prompts: dict[tuple[tuple[int, ...], ...], _PromptStates] = {}
    groups: dict[tuple[tuple[int, ...], ...], list[tuple[int, int]]] = {}  # rows sharing a prompt, with their ends
    for row in range(input_ids.shape[0]):
        columns = where[row].nonzero()
        if len(columns):  # the states before completion tokens 0 .. end - 1 are needed
            key = (tuple(input_ids[row, :p].tolist()), tuple(attention_mask[row, :p].tolist()))
            groups.setdefault(key, []).append((row, int(columns[-1]) + 1))
    states: dict[int, torch.Tensor] = {}
    with _layers_keep_caches(model):
        for members in groups.values():
            states.update(_group_states(model.base_model, input_ids, attention_mask, p, members, prompts))
    rows = [states[r][where[r, : states[r].shape[0]]] for r in sorted(states)]
    return _project(model, torch.cat(rows), input_ids[:, p:][where], where, temperature, compute_entropy)


def _reentrant_checkpointing(model: PreTrainedModel) -> bool:
    """The model trains with gradient checkpointing of the reentrant kind (``use_reentrant=True``)."""
    if not (model.training and getattr(model, "is_gradient_checkpointing", False)):
        return False
    for layer in model.modules():
        if isinstance(layer, GradientCheckpointingLayer) and layer.gradient_checkpointing:
            keywords = getattr(layer._gradient_checkpointing_func, "keywords", {})
            return keywords.get("use_reentrant", True) is not False  # torch's own default is reentrant
    return False


@contextmanager
def _layers_keep_caches(model: PreTrainedModel) -> Iterator[None]:
    """Let checkpointed layers keep the (never-changing) caches of this module (see its docstring)."""
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    before = [m.__dict__.get("_can_checkpoint_with_cache") for m in layers]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m, value in zip(layers, before, strict=True):
            if value is None:
                del m._can_checkpoint_with_cache
            else:
                m._can_checkpoint_with_cache = value


class _RecordOnce(DynamicLayer):
    """A prompt pass's cache layer: records the first keys and values it gets; a checkpoint replay gets its own back."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> KV:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.keys, self.values = key_states, value_states
        return key_states, value_states


class _ReadOnlyPrefix(DynamicLayer):
    """A row pass's cache layer: a prompt's keys and values, read and never appended to."""

    keys: torch.Tensor  # set here, never None (``CacheLayerMixin`` starts them as None)
    values: torch.Tensor

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> KV:
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)


def _cache(layers: list[CacheLayer]) -> DynamicCache:
    cache = DynamicCache()
    cache.layers = layers
    return cache


_PromptStates = tuple[list[KV], torch.Tensor]
"""A prompt's keys and values per layer, and its last hidden state ``(1, H)``."""


def _group_states(
    base: torch.nn.Module,
    ids: torch.Tensor,
    attention: torch.Tensor,
    p: int,
    members: list[tuple[int, int]],
    prompts: dict[tuple[tuple[int, ...], ...], _PromptStates],
) -> dict[int, torch.Tensor]:
    """The hidden states of rows that share one prompt: the prompt once, then their completions in one batch.

    ``members`` are ``(row, end)`` pairs. The completions run together up to the longest ``end``; a shorter
    row's later tokens are computed and dropped (causal attention keeps them out of its earlier states).
    """
    if len(members) == 1:
        row, end = members[0]
        return {row: _row_states(base, ids[row], attention[row], p, end, prompts)}
    first = members[0][0]
    _row_states(base, ids[first], attention[first], p, 1, prompts)  # records the prompt (once)
    layers, last = prompts[(tuple(ids[first, :p].tolist()), tuple(attention[first, :p].tolist()))]
    end = max(e for _, e in members)
    if end == 1:
        return {row: last for row, _ in members}
    rows = torch.tensor([r for r, _ in members], device=ids.device)
    n = len(members)
    out = base(
        input_ids=ids[rows, p : p + end - 1],
        attention_mask=attention[rows, : p + end - 1],
        past_key_values=_cache([_ReadOnlyPrefix(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in layers]),
        use_cache=False,
    ).last_hidden_state
    return {row: torch.cat([last, out[k, : e - 1]]) for k, (row, e) in enumerate(members)}


def _row_states(
    base: torch.nn.Module,
    ids: torch.Tensor,
    attention: torch.Tensor,
    p: int,
    end: int,
    prompts: dict[tuple[tuple[int, ...], ...], _PromptStates],
) -> torch.Tensor:
    """The ``(end, H)`` hidden states before completion tokens ``0 .. end - 1`` of one row (prompt width ``p``).

    The row's prompt is run (with its keys and values kept) the first time it
    is met and taken from ``prompts`` afterwards; the completion tokens up to
    ``end - 2`` are run after it, positions continuing from ``p``.
    """
    key = (tuple(ids[:p].tolist()), tuple(attention[:p].tolist()))
    if key not in prompts:
        cache = _cache([_RecordOnce() for _ in range(model_config(base).num_hidden_layers)])
        out = base(input_ids=ids[None, :p], attention_mask=attention[None, :p], past_key_values=cache, use_cache=False)
        prompts[key] = ([layer_kv(layer) for layer in cache.layers], out.last_hidden_state[0, -1:])
    layers, last = prompts[key]
    if end == 1:
        return last
    out = base(
        input_ids=ids[None, p : p + end - 1],
        attention_mask=attention[None, : p + end - 1],
        past_key_values=_cache([_ReadOnlyPrefix(k, v) for k, v in layers]),
        use_cache=False,
    )
    return torch.cat([last, out.last_hidden_state[0]])
