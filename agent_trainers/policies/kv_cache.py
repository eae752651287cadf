"""Per-episode KV caches for :class:`~agent_trainers.policies.TransformersPolicy`: :class:`EpisodeKVCache`.

Within an episode every prompt is the previous prompt plus the previous
generation plus the env's tokens (see :mod:`agent_trainers.policies.sampling`),
so the keys and values of everything but the new env tokens are already known.
:class:`EpisodeKVCache` keeps them per episode ("session") between generate
calls, as one ``(1, heads, length, head_dim)`` pair of tensors per layer:

1. :meth:`~EpisodeKVCache.prepare` makes each session's entry hold exactly
   ``prompt[:-1]``: it keeps the longest prefix the entry shares with the prompt
   (cutting anything after it) and runs the model over the rest only, at each
   episode's own positions: the ongoing episodes' new env tokens in one padded,
   masked batch, a new episode's prompt on its own. Sessions
   with no entry whose prefixes are identical (a GRPO group's first turn) are
   computed once and share the tensors; a new session whose prompt shares at
   least :data:`MIN_SHARED_PREFIX` tokens with one computed earlier in the call
   (the system prompt of every task of an evaluation) starts from that one's
   keys and values and runs the model over the rest only.
2. :meth:`~EpisodeKVCache.stack` left-pads the entries to the batch width minus
   one into a ``DynamicCache`` whose layers have room for the tokens to come
   (:class:`GrowingLayer`: each decode step writes its keys and values in place
   instead of copying the whole cache, as the stock layer's ``torch.cat`` does);
   ``model.generate`` then feeds only the last prompt token of each row. The
   padded slots are masked by the attention mask and positions come from its
   cumulative sum, so a row sees exactly the positions and keys it would see in
   a plain batched ``generate``.
3. :meth:`~EpisodeKVCache.keep` cuts each row back out: the prompt and all but
   the last kept generated token (the last sampled token was never fed), which
   drops the padding and any tokens generated past a row's stop.

Only full-attention ``DynamicLayer`` caches are handled; models whose cache
has other layer types (sliding windows, linear attention) are reported
unsupported by :func:`supports_kv_reuse` and decode without reuse.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import CacheLayerMixin, DynamicLayer, LinearAttentionCacheLayerMixin

__all__ = ["CacheLayer", "CacheStats", "EpisodeKVCache", "GrowingLayer", "layer_kv", "supports_kv_reuse"]

KV = tuple[torch.Tensor, torch.Tensor]

CacheLayer = CacheLayerMixin | LinearAttentionCacheLayerMixin
"""What a ``transformers`` cache holds per layer (the type of ``Cache.layers``' items)."""


def layer_kv(layer: CacheLayer) -> KV:
    """The keys and values of a filled attention cache layer (the only kind the caches built here hold).

    Raises:
        TypeError: A linear-attention layer (no keys and values), or one not filled yet.
    """
    if not isinstance(layer, CacheLayerMixin) or layer.keys is None or layer.values is None:
        raise TypeError(f"expected a filled attention cache layer, got {type(layer).__name__}")
    return layer.keys, layer.values


def supports_kv_reuse(model: Any) -> bool:
    """True when ``model`` is a decoder-only LM whose dynamic cache is made of plain full-attention layers."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    layers = DynamicCache(config=config).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class GrowingLayer(DynamicLayer):
    """A full-attention cache layer in a buffer with room to grow: appending writes in place.

    ``keys`` / ``values`` are always views of the first ``length`` positions of
    the buffer, so attention sees exactly what a ``DynamicLayer`` would hold. An
    append that does not fit, or a layer whose tensors were replaced (beam
    reordering, batch selection), falls back to ``DynamicLayer``'s copy.

    Args:
        keys: ``(B, heads, capacity, head_dim)``: the buffer, its first ``length`` positions filled.
        values: The matching values' buffer.
        length: Positions already filled.
    """

    keys: torch.Tensor  # set here, never None (``CacheLayerMixin`` starts them as None)
    values: torch.Tensor

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self._k, self._v = keys, values
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> KV:
        """Append ``key_states`` / ``value_states`` along the sequence and return the whole keys and values."""
        length, n = self.keys.shape[-2], key_states.shape[-2]
        in_buffer = self.keys.data_ptr() == self._k.data_ptr() and self.keys.shape[0] == self._k.shape[0]
        if not in_buffer or length + n > self._k.shape[2]:
            return super().update(key_states, value_states, *args, **kwargs)
        self._k[:, :, length : length + n] = key_states
        self._v[:, :, length : length + n] = value_states
        self.keys, self.values = self._k[:, :, : length + n], self._v[:, :, : length + n]
        return self.keys, self.values


MIN_SHARED_PREFIX = 16
"""A new episode starts from another one's keys and values when they share at least this many prompt tokens."""


@dataclass
class CacheStats:
    """Token counts of the cache path (for benchmarks and logs).

    Attributes:
        prefilled: Prompt tokens run through the model by :meth:`EpisodeKVCache.prepare`.
        reused: Prompt tokens whose keys and values were taken from a session's entry.
        shared: Prompt tokens taken from another session's entry in the same call (its identical prompt, or
            the prefix a new episode shares with it, such as the system prompt).
    """

    prefilled: int = 0
    reused: int = 0
    shared: int = 0


@dataclass
class _Entry:
    """The cached ids of one session and their keys and values (one pair per layer)."""

    tokens: list[int] = field(default_factory=list)
    layers: list[KV] = field(default_factory=list)

    def cut(self, length: int) -> None:
        """Keep only the first ``length`` positions."""
        if length < len(self.tokens):
            self.tokens = self.tokens[:length]
            self.layers = [(k[:, :, :length], v[:, :, :length]) for k, v in self.layers] if length else []


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class EpisodeKVCache:
    """Keys and values of each live episode of one model, kept between generate calls.

    Args:
        model: The causal LM (see :func:`supports_kv_reuse`).
    """

    def __init__(self, model: Any):
        self.model = model
        self.entries: dict[Hashable, _Entry] = {}
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self.entries)

    def drop(self, sessions: Iterable[Hashable]) -> None:
        """Forget the entries of ``sessions`` (finished episodes); unknown keys are ignored."""
        for key in sessions:
            self.entries.pop(key, None)

    @torch.inference_mode()
    def prepare(self, sessions: Sequence[Hashable], prompts: Sequence[Sequence[int]]) -> None:
        """Make the entry of each session hold exactly ``prompt[:-1]`` (prompts are non-empty)."""
        ready: dict[tuple[int, ...], _Entry] = {}  # this call's finished entries, by their ids
        pending: list[tuple[_Entry, list[int]]] = []  # ongoing episodes: extended together below
        for key, prompt in zip(sessions, prompts, strict=True):
            target = list(prompt[:-1])
            entry = self.entries.get(key) or _Entry()
            entry.cut(_common_prefix(entry.tokens, target))
            twin = ready.get(tuple(target)) if not entry.tokens else None
            if twin is not None:  # tensors are never changed in place, so sharing them is safe
                entry = _Entry(list(twin.tokens), list(twin.layers))
                self.stats.shared += len(target)
            elif entry.tokens:
                self.stats.reused += len(entry.tokens)
                if len(target) > len(entry.tokens):
                    pending.append((entry, target[len(entry.tokens) :]))
            else:  # a new episode: start from the longest prefix another one computed
                entry = self._shared_prefix(ready.values(), target)
                self._extend(entry, target[len(entry.tokens) :])
                ready.setdefault(tuple(target), entry)
            self.entries[key] = entry
        self._extend_together(pending)

    def _extend_together(self, pending: Sequence[tuple[_Entry, list[int]]]) -> None:
        """Run the model once over every pending entry's new tokens (each turn's env text), as a batch.

        Row ``r`` is laid out ``[pad][entry r][pad][new r]``: its cached keys and values left-padded to the
        longest entry, its new tokens left-padded to the most new tokens. Padding is masked out and each
        row's positions continue its own entry, so every row computes what a forward of it alone would; the
        pads are cut away again when the entries are stored.
        """
        if len(pending) < 2:
            for entry, new in pending:
                self._extend(entry, new)
            return
        device = next(self.model.parameters()).device
        old = max(len(e.tokens) for e, _ in pending)
        width = max(len(n) for _, n in pending)
        rows, ids = len(pending), torch.full((len(pending), width), 0, dtype=torch.long)
        mask = torch.zeros((rows, old + width), dtype=torch.long)
        positions = torch.zeros((rows, width), dtype=torch.long)
        for r, (entry, new) in enumerate(pending):
            n, k = len(new), len(entry.tokens)
            ids[r, width - n :] = torch.tensor(new, dtype=torch.long)
            mask[r, old - k : old] = 1
            mask[r, old + width - n :] = 1
            positions[r, width - n :] = torch.arange(k, k + n)
        layers = []
        for i, (k_ref, v_ref) in enumerate(pending[0][0].layers):
            keys = k_ref.new_zeros((rows, k_ref.shape[1], old, k_ref.shape[3]))
            values = v_ref.new_zeros((rows, v_ref.shape[1], old, v_ref.shape[3]))
            for r, (entry, _) in enumerate(pending):
                k = len(entry.tokens)
                keys[r, :, old - k :] = entry.layers[i][0][0]
                values[r, :, old - k :] = entry.layers[i][1][0]
            layers.append((keys, values))
        past = DynamicCache(ddp_cache_data=layers)
        self.model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            past_key_values=past,
            use_cache=True,
            logits_to_keep=1,
        )

        def cut(t: torch.Tensor, r: int, k: int, n: int) -> torch.Tensor:
            """Row ``r``'s ``k`` cached positions and ``n`` new ones, without the padding."""
            return torch.cat([t[r : r + 1, :, old - k : old], t[r : r + 1, :, old + width - n :]], dim=2)

        for r, (entry, new) in enumerate(pending):
            n, k = len(new), len(entry.tokens)
            entry.layers = [(cut(keys, r, k, n), cut(values, r, k, n)) for keys, values in map(layer_kv, past.layers)]
            entry.tokens = entry.tokens + new
            self.stats.prefilled += n

    def _shared_prefix(self, ready: Iterable[_Entry], target: list[int]) -> _Entry:
        """A new entry holding the longest prefix of ``target`` that an entry of this call already computed
        (e.g. the system prompt every task of an evaluation shares), as views of that entry's tensors."""
        best, length = None, 0
        for other in ready:
            n = _common_prefix(other.tokens, target)
            if n > length:
                best, length = other, n
        if best is None or length < MIN_SHARED_PREFIX:
            return _Entry()
        self.stats.shared += length
        shared = _Entry(list(best.tokens), list(best.layers))
        shared.cut(length)
        return shared

    def _extend(self, entry: _Entry, new: list[int]) -> None:
        """Run the model over ``new`` after ``entry``'s tokens (positions continue from there)."""
        if not new:
            return
        device = next(self.model.parameters()).device
        past = DynamicCache(ddp_cache_data=entry.layers) if entry.layers else DynamicCache()
        start = len(entry.tokens)
        self.model(
            input_ids=torch.tensor([new], dtype=torch.long, device=device),
            position_ids=torch.arange(start, start + len(new), device=device).unsqueeze(0),
            past_key_values=past,
            use_cache=True,
            logits_to_keep=1,
        )
        entry.layers = [layer_kv(layer) for layer in past.layers]
        entry.tokens = entry.tokens + new
        self.stats.prefilled += len(new)

    def stack(self, sessions: Sequence[Hashable], width: int, room: int = 0) -> DynamicCache:
        """One left-padded ``DynamicCache`` of ``width - 1`` positions for a batch padded to ``width``.

        Its layers are :class:`GrowingLayer` buffers with ``room`` more positions
        (the tokens ``generate`` will feed).
        """
        entries = [self.entries[key] for key in sessions]
        if width <= 1 or not any(e.layers for e in entries):
            return DynamicCache()
        ref = next(e.layers for e in entries if e.layers)
        layers: list[CacheLayer] = []
        for i, (k_ref, v_ref) in enumerate(ref):
            keys = k_ref.new_zeros((len(entries), k_ref.shape[1], width - 1 + room, k_ref.shape[3]))
            values = v_ref.new_zeros((len(entries), v_ref.shape[1], width - 1 + room, v_ref.shape[3]))
            for row, entry in enumerate(entries):
                n = len(entry.tokens)
                if n:
                    keys[row, :, width - 1 - n : width - 1] = entry.layers[i][0][0]
                    values[row, :, width - 1 - n : width - 1] = entry.layers[i][1][0]
            layers.append(GrowingLayer(keys, values, width - 1))
        cache = DynamicCache()
        cache.layers = layers
        return cache

    def keep(
        self,
        sessions: Sequence[Hashable],
        prompts: Sequence[Sequence[int]],
        cache: DynamicCache,
        width: int,
        generated: Sequence[Sequence[int]],
    ) -> None:
        """Store each row of ``cache`` (after ``generate``) as its session's entry.

        Row ``r`` holds ``prompts[r]`` left-padded to ``width``, then the generated
        ids; its entry becomes ``prompts[r] + generated[r][:-1]``.
        """
        length = cache.get_seq_length()
        for row, (key, prompt, gen) in enumerate(zip(sessions, prompts, generated, strict=True)):
            tokens = list(prompt) + list(gen[:-1])
            start, end = width - len(prompt), width - len(prompt) + len(tokens)
            if end > length:
                raise RuntimeError(f"the cache holds {length} positions; row {row} needs {end}")
            layers = [
                (keys[row : row + 1, :, start:end].clone(), values[row : row + 1, :, start:end].clone())
                for keys, values in map(layer_kv, cache.layers)
            ]
            self.entries[key] = _Entry(tokens, layers)
