"""A policy that "generates" given texts, for tests and scripted baselines: :class:`ScriptedPolicy`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from transformers import PreTrainedTokenizerBase

from agent_trainers.policies.sampling import (
    FinishReason,
    Generation,
    SamplingParams,
    cut_at_stop,
    end_of_turn_id,
    end_token_ids,
)

__all__ = ["ScriptedPolicy"]


class ScriptedPolicy:
    """Emits scripted texts as token ids, cut like a real generation.

    Each response text is tokenized once; those ids then *are* the model's
    output (exactly as a sampled generation would be), cut by the same stop /
    EOS rule as real backends, and ended with the end-of-turn id when no stop
    string ended them first (``end_with_eos``). Log-probs are 0.0 (a
    deterministic policy). Temperature and top-p are ignored.

    Args:
        tokenizer: The tokenizer whose ids to emit.
        respond: Maps a prompt (token ids) to the response text, or a sequence
            of texts handed out in order, one per prompt.
        end_with_eos: Append the end-of-turn id when the text hits no stop string.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        respond: Callable[[list[int]], str] | Sequence[str],
        *,
        end_with_eos: bool = True,
    ):
        self.tokenizer, self.end_with_eos = tokenizer, end_with_eos
        if callable(respond):
            self._respond = respond
        else:
            queue = list(respond)
            self._respond = lambda _ids: queue.pop(0) if queue else ""
        self._end_ids = end_token_ids(tokenizer)
        self._eos = end_of_turn_id(tokenizer)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Emit each prompt's scripted text as token ids."""
        out = []
        for prompt in prompts:
            ids = list(self.tokenizer(self._respond(list(prompt)), add_special_tokens=False)["input_ids"])
            n, stopped = cut_at_stop(ids, self.tokenizer, params.stop, self._end_ids)
            ids = ids[:n]
            if not stopped and self.end_with_eos:
                ids.append(self._eos)
                stopped = True
            finish = FinishReason.STOP if stopped and len(ids) <= params.max_new_tokens else FinishReason.LENGTH
            ids = ids[: params.max_new_tokens]
            out.append(Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish))
        return out
