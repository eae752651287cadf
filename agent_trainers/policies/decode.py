"""The decode loop of :class:`~agent_trainers.policies.TransformersPolicy`: :func:`decode`.

One forward over the uncached prompt tokens, then one ``model(...)`` call per token over a cache with room for
every token to come; per step, besides the forward: one softmax of the batch's logits (the sampling distribution,
and the recorded log-probs as the log of the drawn token's entry), one uniform number per row (inverse-CDF
sampling), and a stop-string check that decodes text only for the rows whose new token can end a stop string
(:class:`StopStrings`). Rows that finished keep their place in the batch and their draw of a uniform number (they
are fed the pad token, as ``model.generate`` does), so a row that ends never changes another row's tokens.

Why not ``model.generate``: with SmolLM2's 49,152-token vocabulary its per-step cost besides the model was
``torch.multinomial`` (16 ms for 16 rows on one CPU thread: an exponential draw per vocabulary entry), a
top-k sort, the log-prob recorder and a ``batch_decode`` of every row's tail, 4.9x the bare forwards with the tiny
model on CPU. It also applied the model's default ``top_k=50``, which :class:`~.sampling.SamplingParams` never asked
for. Here tokens come from ``softmax(logits / temperature)``, cut to the ``top_k`` most likely and then to the
``top_p`` nucleus only when asked (with transformers' ``TopKLogitsWarper`` and ``TopPLogitsWarper``); the recorded
log-probs are always the full softmax's (the policy being trained), as ``model.generate``'s recorder gave them.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, cast

import torch
from transformers import (
    DynamicCache,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.cache_utils import DynamicLayer

from agent_trainers.policies.kv_cache import GrowingLayer, layer_kv
from agent_trainers.policies.sampling import SamplingParams, cut_at_stop, stop_window

__all__ = ["DECODERS", "StopStrings", "decode", "decode_with_generate", "first_argmax", "sample_from"]


_CANDIDATES: weakref.WeakKeyDictionary[Any, dict[frozenset[str], torch.Tensor]] = weakref.WeakKeyDictionary()
"""Per tokenizer, per set of last characters: which tokens can end a stop string (found by decoding each token
once, ~0.35 s for SmolLM2's 49,152), kept while the tokenizer lives."""


class StopStrings:
    """Marks rows whose newest token completed a stop string, decoding text only where that is possible.

    A stop string is completed by the token that brings its last character; a token can bring ``c`` only if its
    own text holds ``c`` or is a partial character (``"\\ufffd"``, a byte-level piece of a multi-byte character).
    Those tokens are found once per vocabulary; a step decodes the tail of just the rows whose new token is one
    of them (the same tail ``cut_at_stop`` decodes), so the rows marked are those a per-step decode of every row
    marks.

    Args:
        tokenizer: The model's tokenizer.
        stop: Non-empty stop strings.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str]):
        self.tokenizer, self.stop, self.window = tokenizer, tuple(stop), stop_window(stop)
        ends = frozenset({s[-1] for s in self.stop} | {"\ufffd"})
        known = _CANDIDATES.setdefault(tokenizer, {})
        if ends not in known or len(known[ends]) != len(tokenizer):
            pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
            known[ends] = torch.tensor([any(c in piece for c in ends) for piece in pieces], dtype=torch.bool)
        self.candidates = known[ends]
        self._can_end = self.candidates.tolist()

    def cut(self, ids: Sequence[int], end_ids: set[int]) -> tuple[int, bool]:
        """:func:`~agent_trainers.policies.sampling.cut_at_stop` of ``ids``, decoding only at tokens that can end a
        stop string: ``(length, stopped)``."""
        return cut_at_stop(ids, self.tokenizer, self.stop, end_ids, can_end=self._can_end)

    def __call__(self, generated: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Of ``rows`` (bool, one per row: still running), those whose text now holds a stop string.

        ``generated`` holds each row's newest tokens (at least the last ``window``), the newest last (any device).
        """
        newest = generated[:, -1].cpu()
        known = newest < len(self.candidates)  # an id past the tokenizer's (a padded embedding) is checked too
        can_end = torch.ones_like(known)
        can_end[known] = self.candidates[newest[known]]
        check = (rows.cpu() & can_end).nonzero().flatten()
        done = torch.zeros(generated.shape[0], dtype=torch.bool)
        if len(check):
            tails = self.tokenizer.batch_decode(
                generated[check, -self.window :].tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            for row, tail in zip(check.tolist(), tails, strict=True):
                done[row] = any(s in tail for s in self.stop)
        return done.to(rows.device)


BLOCK = 256
"""Vocabulary entries per block in :func:`sample_from` and :func:`first_argmax` (a row's scan runs over block sums,
then inside one block: two short passes instead of one sequential pass over the vocabulary)."""


def _blocks(x: torch.Tensor, fill: float) -> torch.Tensor:
    """``x`` (rows, vocab) as (rows, blocks, :data:`BLOCK`), the last block filled up with ``fill``."""
    rows, vocab = x.shape
    short = -vocab % BLOCK
    if short:
        x = torch.nn.functional.pad(x, (0, short), value=fill)
    return x.view(rows, -1, BLOCK)


def sample_from(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` (non-negative, each row's sum > 0, not necessarily 1) by inverse CDF: one
    uniform number per row from torch's generator, found among the block sums, then inside its block. A token
    with probability 0 is never drawn."""
    blocks = _blocks(probs, 0.0)
    rows, n_blocks, _ = blocks.shape
    sums = blocks.sum(dim=-1).cumsum(dim=-1)
    u = torch.rand((rows, 1), device=probs.device, dtype=sums.dtype) * sums[:, -1:]
    block = torch.searchsorted(sums, u, right=True).clamp_(max=n_blocks - 1)
    before = torch.where(block > 0, sums.gather(1, (block - 1).clamp(min=0)), torch.zeros_like(u))
    inside = blocks[torch.arange(rows, device=probs.device), block.squeeze(1)].cumsum(dim=-1)
    offset = torch.searchsorted(inside, u - before, right=True).clamp_(max=BLOCK - 1)
    token = (block * BLOCK + offset).squeeze(1)
    empty = probs.gather(1, token.clamp(max=probs.shape[1] - 1).unsqueeze(1)).squeeze(1) == 0
    if bool(empty.any()):  # u rounded onto a block's or row's end: take the last token with mass before it
        for row in empty.nonzero().flatten().tolist():
            mass = (probs[row, : int(token[row]) + 1] > 0).nonzero()
            token[row] = mass[-1, 0] if len(mass) else probs[row].nonzero()[0, 0]
    return token


def first_argmax(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(dim=-1)`` of a (rows, vocab) tensor (the first index of each row's largest value), by blocks:
    a max per block, the first block holding the row's max, the first index of it there."""
    blocks = _blocks(x, float("-inf"))
    top = blocks.amax(dim=-1)
    block = top.argmax(dim=-1)
    rows = torch.arange(x.shape[0], device=x.device)
    return block * BLOCK + blocks[rows, block].argmax(dim=-1)


def _with_room(cache: DynamicCache, room: int) -> DynamicCache:
    """``cache``'s full-attention layers moved into buffers with ``room`` more positions (decode steps then write in
    place instead of copying the cache); a cache of another kind is returned as it is."""
    if not all(type(layer) is DynamicLayer for layer in cache.layers):
        return cache
    layers: list[Any] = []
    for layer in cache.layers:
        keys, values = layer_kv(layer)
        b, h, n, d = keys.shape
        k_buf, v_buf = keys.new_empty((b, h, n + room, d)), values.new_empty((b, h, n + room, values.shape[3]))
        k_buf[:, :, :n], v_buf[:, :, :n] = keys, values
        layers.append(GrowingLayer(k_buf, v_buf, n))
    grown = DynamicCache()
    grown.layers = layers
    return grown


@torch.inference_mode()
def decode(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    params: SamplingParams,
    *,
    end_ids: set[int],
    pad_id: int,
    past: DynamicCache | None = None,
    stop: StopStrings | None = None,
) -> tuple[torch.Tensor, torch.Tensor, DynamicCache]:
    """Generate up to ``params.max_new_tokens`` tokens after each left-padded row of ``ids``.

    Args:
        model: A causal LM.
        ids: ``(rows, width)`` prompt ids, left-padded.
        mask: Their attention mask (1 on prompt tokens).
        params: How to sample (greedy when ``temperature == 0``).
        end_ids: Token ids that end a row.
        pad_id: What a finished row is fed.
        past: A cache already holding each row's first ``k`` positions (``k < width``; see
            :meth:`~agent_trainers.policies.kv_cache.EpisodeKVCache.stack`), or None.
        stop: Stop strings that end a row (the token completing one is kept).

    Returns:
        ``(tokens, logprobs, cache)``: ``(rows, steps)`` tensors of the tokens drawn and the log of each one's entry
        in ``softmax(logits / T)`` (``T = 1`` when greedy; after a row ends it holds ``pad_id`` and that token's
        log-prob; ``steps`` is where the last row ended, at most ``max_new_tokens``), and the cache holding the
        rows' prompts and every token fed (``past`` itself when given).
    """
    rows, width = ids.shape
    device = ids.device
    full_mask = torch.cat([mask, mask.new_ones((rows, params.max_new_tokens))], dim=1)  # step s sees width + s
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    cached = past.get_seq_length() if past is not None else 0
    past = past if past is not None else DynamicCache(config=model.config)
    temperature = params.temperature if not params.greedy else 1.0
    cuts: list[LogitsProcessor] = [TopKLogitsWarper(params.top_k)] if params.top_k and not params.greedy else []
    cuts += [TopPLogitsWarper(params.top_p)] if params.top_p < 1 and not params.greedy else []
    ends = torch.tensor(sorted(end_ids), device=device)
    running = torch.ones(rows, dtype=torch.bool, device=device)
    tokens, logprobs = [], []
    step_ids, step_pos = ids[:, cached:], positions[:, cached:]
    for step in range(params.max_new_tokens):
        logits = model(
            input_ids=step_ids,
            attention_mask=full_mask[:, : width + step],
            position_ids=step_pos,
            past_key_values=past,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]
        if step == 0 and cached == 0:
            past = _with_room(past, params.max_new_tokens)
        scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
        probs = torch.softmax(scaled, dim=-1)
        if params.greedy:
            token = first_argmax(scaled)
        elif not cuts:
            token = sample_from(probs)
        else:  # transformers' order: top-k, then top-p
            cut = scaled
            for warper in cuts:
                cut = warper(ids, cut)
            token = sample_from(torch.softmax(cut, dim=-1))
        token = torch.where(running, token, torch.full_like(token, pad_id))
        tokens.append(token)
        logprobs.append(probs.gather(1, token.unsqueeze(1)).squeeze(1).log())
        running &= ~torch.isin(token, ends)
        if stop is not None:
            running &= ~stop(torch.stack(tokens[-stop.window :], dim=1), running)
        if not bool(running.any()):
            break
        step_ids, step_pos = token.unsqueeze(1), step_pos[:, -1:] + 1
    return torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1), past


class _RecordLogprobs(LogitsProcessor):
    """Records ``log_softmax(logits / T)`` of each token ``model.generate`` draws, from the same logits (custom
    processors run before the warpers; step t's row is kept until step t+1 shows which token was drawn)."""

    def __init__(self, temperature: float):
        self.temperature = temperature if temperature > 0 else 1.0
        self.prev: torch.Tensor | None = None
        self.taken: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.gather(input_ids[:, -1])
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def gather(self, last: torch.Tensor) -> None:
        if self.prev is not None:
            self.taken.append(self.prev.gather(1, last.view(-1, 1)).squeeze(1))
            self.prev = None


class _StopCriteria(StoppingCriteria):
    """:class:`StopStrings` as a ``model.generate`` stopping criterion."""

    def __init__(self, stop: StopStrings, prompt_len: int):
        self.stop, self.prompt_len = stop, prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        running = torch.ones(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return cast(torch.BoolTensor, self.stop(input_ids[:, self.prompt_len :], running))


@torch.inference_mode()
def decode_with_generate(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    params: SamplingParams,
    *,
    end_ids: set[int],
    pad_id: int,
    past: DynamicCache | None = None,
    stop: StopStrings | None = None,
) -> tuple[torch.Tensor, torch.Tensor, DynamicCache | None]:
    """What :func:`decode` does, through ``model.generate`` (``TransformersPolicy(decoder="generate")``): for a
    model whose forward the loop does not fit, and as the reference the exactness tests and
    ``benchmarks/rollout.py`` compare the loop with. Greedy tokens are the loop's; sampled ones come from the same
    distribution (``params.top_k`` is passed, so the model's default top-k of 50 is never applied unasked) through
    ``torch.multinomial``'s random numbers, so they differ from the loop's for one seed."""
    sample = not params.greedy
    config = GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        do_sample=sample,
        temperature=params.temperature if sample else None,
        top_p=params.top_p if sample else None,
        top_k=params.top_k if sample else None,
        eos_token_id=sorted(end_ids),
        pad_token_id=pad_id,
    )
    recorder = _RecordLogprobs(params.temperature)
    seqs = model.generate(
        input_ids=ids,
        attention_mask=mask,
        past_key_values=past,
        generation_config=config,
        logits_processor=LogitsProcessorList([recorder]),
        stopping_criteria=StoppingCriteriaList([_StopCriteria(stop, ids.shape[1])] if stop else []),
    )
    new = seqs[:, ids.shape[1] :]
    if new.shape[1]:
        recorder.gather(new[:, -1])
    lps = torch.stack(recorder.taken, dim=1) if recorder.taken else torch.zeros_like(new, dtype=torch.float)
    return new, lps, past


DECODERS = {"loop": decode, "generate": decode_with_generate}
"""The decode paths of :class:`~agent_trainers.policies.TransformersPolicy`, by its ``decoder`` argument."""
