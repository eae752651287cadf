"""Generation backends behind one small interface (:class:`Policy`).

A policy maps token-id prompts to :class:`Generation` s: the sampled token ids,
exactly as sampled, with the log-probability of each under the *sampling*
distribution. Which distribution that is, precisely: at each step,
``log_softmax(logits / temperature)`` of the very logits the token was sampled
from (top-p filtering is applied for sampling but not renormalised into the
log-probs); with ``temperature == 0`` (greedy), ``log_softmax(logits)``.

Generation stops at EOS / ``<|im_end|>`` (the token is kept, it is the model's
own "end of turn"), or as soon as the *decoded* new text contains one of the
``stop`` strings; the ids are then cut right after the token that completes the
stop string. Ids are never re-encoded.

Backends:

* :class:`TransformersPolicy` - any ``transformers`` causal LM (CPU default).
* :class:`VLLMPolicy` - vLLM for GPU users (optional extra ``vllm==0.31.0``).
* :class:`OpenAIPolicy` - any OpenAI-compatible chat endpoint, for evaluation
  only: it returns text, not token ids (``text_only = True``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)

__all__ = [
    "Generation",
    "OpenAIPolicy",
    "Policy",
    "ScriptedPolicy",
    "TransformersPolicy",
    "VLLMPolicy",
    "cut_at_stop",
    "end_token_ids",
]


@dataclass
class Generation:
    """One sampled continuation.

    Attributes:
        token_ids: The generated ids, cut after EOS or after the token that
            completes a stop string (empty for text-only backends).
        logprobs: One sampling log-prob per id (see the module docstring).
        finish_reason: ``"stop"`` (EOS or a stop string) or ``"length"``.
        text: The decoded text; for text-only backends the only output.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    text: str | None = None


@runtime_checkable
class Policy(Protocol):
    """What the rollout engine needs from a generation backend."""

    tokenizer: PreTrainedTokenizerBase

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop: Sequence[str],
    ) -> list[Generation]:
        """Continue each prompt (token ids) once."""
        ...


def end_token_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Ids that end an assistant turn: the tokenizer's EOS and ``<|im_end|>`` if it exists."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return ids


def _stop_window(stop: Sequence[str]) -> int:
    """Tokens to decode when looking for a stop string that the newest token completed."""
    return max((len(s) for s in stop), default=0) + 2


def cut_at_stop(
    ids: Sequence[int], tokenizer: PreTrainedTokenizerBase, stop: Sequence[str], end_ids: set[int]
) -> tuple[int, bool]:
    """Where a generation ends: ``(length, stopped)``.

    ``length`` is one past the first EOS id, or one past the token whose decoding
    first makes the text contain a stop string; ``stopped`` tells whether either
    happened (else the whole sequence is kept and it ran out of length).
    """
    window = _stop_window(stop)
    for t, tok in enumerate(ids):
        if tok in end_ids:
            return t + 1, True
        if stop:
            tail = tokenizer.decode(ids[max(0, t + 1 - window) : t + 1], skip_special_tokens=False)
            if any(s in tail for s in stop):
                return t + 1, True
    return len(ids), False


class _RecordLogprobs(LogitsProcessor):
    """Records ``log_softmax(logits / T)`` of each sampled token, from the same logits.

    transformers runs custom processors before its temperature / top-p warpers,
    so ``scores`` here are the model's logits; the row of step t is kept until
    step t+1 reveals which token was sampled from it.
    """

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


class _StopOnText(StoppingCriteria):
    """Marks a row done once its newest tokens decode to text containing a stop string."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str], prompt_len: int):
        self.tokenizer, self.stop, self.prompt_len = tokenizer, list(stop), prompt_len
        self.window = _stop_window(stop)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        start = max(self.prompt_len, input_ids.shape[1] - self.window)
        tails = self.tokenizer.batch_decode(input_ids[:, start:], skip_special_tokens=False)
        for i, tail in enumerate(tails):
            done[i] = any(s in tail for s in self.stop)
        return done


class TransformersPolicy:
    """Batched sampling with a ``transformers`` causal LM (CPU by default).

    Args:
        model: A causal LM (e.g. from :func:`agent_trainers.models.load_smollm2`).
        tokenizer: Its tokenizer (padding is done here, on the left).
        batch_size: Prompts per ``model.generate`` call.
        seed: Seeds torch's RNG before each call (call ``k`` uses ``seed + k``),
            so a rollout is reproducible given the seed.

    Example:
        >>> policy = TransformersPolicy(*tiny_random_model())  # doctest: +SKIP
        >>> gen = policy.generate([[1, 2, 3]], max_new_tokens=4, temperature=1.0, top_p=1.0, stop=[])
    """

    def __init__(self, model: Any, tokenizer: PreTrainedTokenizerBase, *, batch_size: int = 8, seed: int = 0):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.seed = batch_size, seed
        self._calls = 0
        self._end_ids = end_token_ids(tokenizer)
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._end_ids)

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop: Sequence[str],
    ) -> list[Generation]:
        """Sample one continuation per prompt (see the module docstring for the semantics)."""
        _check_sampling(max_new_tokens, temperature, top_p)
        out: list[Generation] = []
        for i in range(0, len(prompts), self.batch_size):
            out.extend(self._generate_batch(prompts[i : i + self.batch_size], max_new_tokens, temperature, top_p, stop))
        return out

    def _pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            if not p:
                raise ValueError("every prompt needs at least one token")
            ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[row, width - len(p) :] = 1
        device = next(self.model.parameters()).device
        return ids.to(device), mask.to(device)

    @torch.inference_mode()
    def _generate_batch(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float, top_p: float, stop: Sequence[str]
    ) -> list[Generation]:
        ids, mask = self._pad(prompts)
        recorder = _RecordLogprobs(temperature)
        sample = temperature > 0
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=top_p if sample else None,
            top_k=None,
            eos_token_id=sorted(self._end_ids),
            pad_token_id=self._pad_id,
        )
        criteria = StoppingCriteriaList([_StopOnText(self.tokenizer, stop, ids.shape[1])] if stop else [])
        torch.manual_seed(self.seed + self._calls)
        self._calls += 1
        seqs = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=config,
            logits_processor=LogitsProcessorList([recorder]),
            stopping_criteria=criteria,
        )
        new = seqs[:, ids.shape[1] :]
        if new.shape[1]:
            recorder.gather(new[:, -1])
        lps = torch.stack(recorder.taken, dim=1) if recorder.taken else torch.zeros_like(new, dtype=torch.float)
        return [self._finish(new[r].tolist(), lps[r].tolist(), stop) for r in range(new.shape[0])]

    def _finish(self, ids: list[int], lps: list[float], stop: Sequence[str]) -> Generation:
        n, stopped = cut_at_stop(ids, self.tokenizer, stop, self._end_ids)
        return Generation(token_ids=ids[:n], logprobs=lps[:n], finish_reason="stop" if stopped else "length")


class ScriptedPolicy:
    """A policy that "generates" given texts: for tests and scripted baselines.

    Each response text is tokenized once; those ids then *are* the model's
    output (exactly as a sampled generation would be), cut by the same stop /
    EOS rule as real backends, and ended with ``<|im_end|>`` when no stop string
    ended them first (``end_with_eos``). Log-probs are 0.0 (a deterministic policy).

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
        self._eos = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        if self._eos is None:
            self._eos = tokenizer.eos_token_id

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop: Sequence[str],
    ) -> list[Generation]:
        """Emit each prompt's scripted text as token ids (temperature/top_p are ignored)."""
        _check_sampling(max_new_tokens, temperature, top_p)
        out = []
        for prompt in prompts:
            ids = list(self.tokenizer(self._respond(list(prompt)), add_special_tokens=False)["input_ids"])
            n, stopped = cut_at_stop(ids, self.tokenizer, stop, self._end_ids)
            ids = ids[:n]
            if not stopped and self.end_with_eos and self._eos is not None:
                ids.append(self._eos)
                stopped = True
            finish = "stop" if stopped and len(ids) <= max_new_tokens else "length"
            ids = ids[:max_new_tokens]
            out.append(Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish))
        return out


def _check_sampling(max_new_tokens: int, temperature: float, top_p: float) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (got {temperature})")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (got {top_p})")


class VLLMPolicy:
    """vLLM generation for GPU users (extra ``vllm==0.31.0``); same interface.

    Experimental: written against vLLM's documented API but never run by this
    project's CI (no GPU, no vLLM wheel there); it warns when constructed.

    Prompts go in as ``TokensPrompt`` s and the sampled ``token_ids`` come back
    unchanged; ``SamplingParams(logprobs=0)`` returns the sampled token's
    log-prob, with ``logprobs_mode="processed_logprobs"`` so that it is taken
    after temperature scaling, matching :class:`TransformersPolicy` (vLLM also
    applies top-p before its processed log-probs; with ``top_p=1`` both agree).

    Args:
        model: A model name or path for ``vllm.LLM``, or a ready ``vllm.LLM``.
        tokenizer: The matching Hugging Face tokenizer (with the tool template).
        seed: Base seed of the sampling params (call ``k`` uses ``seed + k``).
        **llm_kwargs: Passed to ``vllm.LLM`` when ``model`` is a name.
    """

    def __init__(self, model: Any, tokenizer: PreTrainedTokenizerBase, *, seed: int = 0, **llm_kwargs: Any):
        try:
            import vllm
            from vllm.inputs import TokensPrompt
        except ImportError as exc:
            raise ImportError("VLLMPolicy needs vLLM: pip install 'agent-r1-gym[vllm]' (vllm==0.31.0)") from exc
        warnings.warn(
            "VLLMPolicy is experimental: it is not exercised by the test suite; check its log-probs "
            "against TransformersPolicy on your model before training with it",
            stacklevel=2,
        )
        self._vllm, self._tokens_prompt = vllm, TokensPrompt
        self.tokenizer, self.seed, self._calls = tokenizer, seed, 0
        if isinstance(model, str):
            llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
            model = vllm.LLM(model=model, seed=seed, **llm_kwargs)
        self.llm = model
        self._end_ids = end_token_ids(tokenizer)

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop: Sequence[str],
    ) -> list[Generation]:
        """Sample one continuation per prompt with ``vllm.LLM.generate``."""
        _check_sampling(max_new_tokens, temperature, top_p)
        params = self._vllm.SamplingParams(
            n=1,
            max_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=list(stop) or None,
            stop_token_ids=sorted(self._end_ids),
            include_stop_str_in_output=True,
            skip_special_tokens=False,
            logprobs=0,
            seed=self.seed + self._calls,
        )
        self._calls += 1
        token_prompts = [self._tokens_prompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(token_prompts, params, use_tqdm=False)
        return [self._convert(o.outputs[0], stop) for o in outputs]

    def _convert(self, completion: Any, stop: Sequence[str]) -> Generation:
        ids = list(completion.token_ids)
        lps = [float(step[tok].logprob) for tok, step in zip(ids, completion.logprobs or [], strict=False)]
        if len(lps) != len(ids):
            raise RuntimeError(f"vLLM returned {len(lps)} log-probs for {len(ids)} tokens")
        n, stopped = cut_at_stop(ids, self.tokenizer, stop, self._end_ids)
        finish = "stop" if stopped or completion.finish_reason == "stop" else "length"
        return Generation(token_ids=ids[:n], logprobs=lps[:n], finish_reason=finish)


class OpenAIPolicy:
    """Any OpenAI-compatible ``/chat/completions`` endpoint, for evaluation.

    Text only: the server's tokenizer is unknown, so there are no token ids or
    log-probs; :func:`agent_trainers.rollout.rollout` then runs in text mode
    (``loss_mask`` and ``logprobs`` stay empty). Use it to evaluate, never to train.

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000/v1"``.
        model: The ``model`` field of each request.
        api_key: Sent as a bearer token when given.
        timeout_s: Per-request time-out.
    """

    text_only = True

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 60.0):
        self.base_url, self.model, self.api_key, self.timeout_s = base_url.rstrip("/"), model, api_key, timeout_s
        self.tokenizer: Any = None

    def generate(self, prompts: list[list[int]], **kwargs: Any) -> list[Generation]:
        """Not available: an OpenAI endpoint takes messages; use :meth:`generate_chat`."""
        raise TypeError("OpenAIPolicy is text-only; the rollout engine calls generate_chat(messages)")

    def generate_chat(
        self,
        conversations: list[list[dict[str, Any]]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop: Sequence[str],
    ) -> list[Generation]:
        """One completion per conversation (sequentially; eval is not the hot path)."""
        _check_sampling(max_new_tokens, temperature, top_p)
        return [self._complete(c, max_new_tokens, temperature, top_p, stop) for c in conversations]

    def _complete(
        self, messages: list[dict[str, Any]], max_new_tokens: int, temperature: float, top_p: float, stop: Sequence[str]
    ) -> Generation:
        body = {"model": self.model, "messages": messages, "max_tokens": max_new_tokens}
        body |= {"temperature": temperature, "top_p": top_p} | ({"stop": list(stop)[:4]} if stop else {})
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(
            f"{self.base_url}/chat/completions", data=json.dumps(body).encode(), headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                payload = json.loads(resp.read().decode("utf-8"))
            choice = payload["choices"][0]
        except (urllib.error.URLError, TimeoutError, KeyError, IndexError, json.JSONDecodeError) as exc:
            raise RuntimeError(f"OpenAI-compatible endpoint {self.base_url} failed: {exc}") from exc
        text = choice["message"].get("content") or ""
        reason = choice.get("finish_reason") or "stop"
        if reason == "stop" and stop and not any(s in text for s in stop):
            # OpenAI servers drop the matched stop string; the env needs the closed tag.
            text += _closing_stop(text, stop)
        return Generation(
            token_ids=[], logprobs=[], finish_reason="length" if reason == "length" else "stop", text=text
        )


def _closing_stop(text: str, stop: Sequence[str]) -> str:
    """The stop string a server stripped from ``text``: the one whose opening tag is still open."""
    for s in stop:
        opening = s.replace("</", "<", 1)
        if s.startswith("</") and text.rfind(opening) > text.rfind(s):
            return s
    return ""
