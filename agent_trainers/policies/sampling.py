"""What every generation backend shares: the sampling type, the output type, the protocols, stop rules.

* :class:`SamplingParams` - the one sampling-settings type, validated once when
  it is built; backends never re-check it.
* :class:`Generation` - one sampled continuation: token ids exactly as sampled,
  with the log-probability of each under the *sampling* distribution:
  ``log_softmax(logits / temperature)`` of the very logits the token was drawn
  from (top-p filtering is applied for sampling but not renormalised into the
  log-probs); with ``temperature == 0`` (greedy), ``log_softmax(logits)``.
* :class:`TokenPolicy` - token ids in, :class:`Generation` s out (trainable
  backends). :class:`ChatPolicy` - chat messages in, text out (evaluation
  through an OpenAI-compatible server; no token ids).

A generation stops at EOS / ``<|im_end|>`` (the id is kept: it is the model's
own end of turn), or right after the token whose decoding completes one of the
``stop`` strings (:func:`cut_at_stop`). Ids are never re-encoded.

A backend may keep state between calls: within an episode each prompt is the
previous prompt plus the previous generation plus the env's tokens, so earlier
prompts are always prefixes of later ones. vLLM finds such prefixes itself
(prefix caching); a :class:`SessionPolicy` (``TransformersPolicy``) is told
which episode each prompt belongs to and when episodes end, and keeps one KV
cache per episode. The rollout engine passes sessions to backends that take them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "ChatPolicy",
    "FinishReason",
    "Generation",
    "SamplingParams",
    "SessionPolicy",
    "TokenPolicy",
    "cut_at_stop",
    "end_of_turn_id",
    "end_token_ids",
    "stop_window",
    "token_id",
]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one continuation; checked once, here.

    Attributes:
        max_new_tokens: Most tokens to generate (>= 1).
        temperature: Softmax temperature; 0 means greedy.
        top_p: Nucleus mass in (0, 1].
        top_k: Draw only from the ``top_k`` most likely tokens (0: no cut). The recorded log-probs stay those of
            the full ``softmax(logits / temperature)``, the policy being trained, as with ``top_p``.
        stop: Strings that end the generation (kept in the output).

    Example:
        >>> SamplingParams(max_new_tokens=8, temperature=0.0).greedy
        True
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop))
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise TypeError(f"max_new_tokens must be an int (got {self.max_new_tokens!r})")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 (got {self.max_new_tokens})")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p})")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0, 0 meaning no cut (got {self.top_k!r})")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings (got {self.stop!r})")

    @property
    def greedy(self) -> bool:
        """True when decoding is greedy (``temperature == 0``)."""
        return self.temperature == 0


class FinishReason(StrEnum):
    """Why a generation ended."""

    STOP = "stop"
    """EOS / end of turn, or a stop string."""
    LENGTH = "length"
    """``max_new_tokens`` ran out."""


@dataclass
class Generation:
    """One sampled continuation.

    Attributes:
        token_ids: The generated ids, cut after EOS or after the token that
            completes a stop string (empty for chat backends).
        logprobs: One sampling log-prob per id (see the module docstring).
        finish_reason: :class:`FinishReason` (a ``str``).
        text: The decoded text; for chat backends the only output.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    text: str | None = None


@runtime_checkable
class TokenPolicy(Protocol):
    """A trainable generation backend: token-id prompts in, :class:`Generation` s out."""

    tokenizer: PreTrainedTokenizerBase

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Continue each prompt (token ids) once, in order."""
        ...


@runtime_checkable
class SessionPolicy(Protocol):
    """A :class:`TokenPolicy` that keeps per-episode state (a KV cache) between calls.

    ``generate`` takes one session key per prompt (an episode); the backend may
    reuse what it kept for that key where the prompt extends the key's earlier
    prompt and generation. ``end_sessions`` frees the state of ended episodes.
    Results must equal those of calls without sessions.
    """

    tokenizer: PreTrainedTokenizerBase

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, *, sessions: Sequence[Hashable] | None = None
    ) -> list[Generation]:
        """Continue each prompt once, in order; ``sessions[i]`` names the episode of ``prompts[i]``."""
        ...

    def end_sessions(self, sessions: Iterable[Hashable]) -> None:
        """Forget what was kept for ``sessions``."""
        ...


@runtime_checkable
class ChatPolicy(Protocol):
    """A text-only backend (e.g. an OpenAI-compatible server): messages in, text out."""

    def generate_chat(self, conversations: list[list[dict[str, Any]]], params: SamplingParams) -> list[Generation]:
        """One completion per conversation; ``Generation.text`` holds it."""
        ...


def token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int | None:
    """The id of ``token`` when the vocabulary has it, else None (cheap: no vocabulary copy)."""
    found = tokenizer.convert_tokens_to_ids(token)
    return found if isinstance(found, int) and found != tokenizer.unk_token_id else None


def end_token_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Ids that end an assistant turn: the tokenizer's EOS and ``<|im_end|>`` if it exists."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    im_end = token_id(tokenizer, "<|im_end|>")
    if im_end is not None:
        ids.add(im_end)
    return ids


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id a model writes to close its turn: ``<|im_end|>`` when the vocabulary has it, else EOS.

    Raises:
        ValueError: The tokenizer has neither.
    """
    im_end = token_id(tokenizer, "<|im_end|>")
    if im_end is not None:
        return im_end
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has neither <|im_end|> nor an EOS token to end a turn")
    return int(tokenizer.eos_token_id)


def stop_window(stop: Sequence[str]) -> int:
    """How many trailing tokens to decode to see a stop string that the newest token completed."""
    return max((len(s) for s in stop), default=0) + 2


def cut_at_stop(
    ids: Sequence[int],
    tokenizer: PreTrainedTokenizerBase,
    stop: Sequence[str],
    end_ids: set[int],
    can_end: Sequence[bool] | None = None,
) -> tuple[int, bool]:
    """Where a generation ends: ``(length, stopped)``.

    ``length`` is one past the first EOS id, or one past the token whose decoding
    first makes the text contain a stop string; ``stopped`` tells whether either
    happened (else the whole sequence is kept and it ran out of length).
    ``can_end`` (by token id; :class:`~agent_trainers.policies.decode.StopStrings`)
    marks the tokens that can complete a stop string: text is decoded only at those
    (and at ids past its end), with the same result.
    """
    window = stop_window(stop)
    for t, tok in enumerate(ids):
        if tok in end_ids:
            return t + 1, True
        if stop and (can_end is None or tok >= len(can_end) or can_end[tok]):
            tail = tokenizer.decode(
                list(ids[max(0, t + 1 - window) : t + 1]), skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            if any(s in tail for s in stop):
                return t + 1, True
    return len(ids), False
