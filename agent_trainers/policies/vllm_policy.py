"""vLLM generation for GPU users, experimental: :class:`VLLMPolicy` and :class:`VLLMServerPolicy`.

* :class:`VLLMPolicy` drives a colocated ``vllm.LLM`` (one per training
  process; TRL's ``vllm_mode="colocate"`` engine can be passed in as it is);
* :class:`VLLMServerPolicy` talks to a vLLM server through TRL's
  ``VLLMClient`` (``trl vllm-serve``, TRL's ``vllm_mode="server"``): one HTTP
  request per prompt, sent concurrently (the server batches them).

Both send token ids and get token ids back, so nothing is re-tokenized; each
prompt gets its own sampling seed (``seed + 1_000_003 * call + index``): vLLM
seeds one generator per request, so a seed shared by a batch would give the
identical opening prompts of a GRPO group identical samples. The returned
log-probs are vLLM's for the sampled token; start the engine with
``logprobs_mode="processed_logprobs"`` (``trl vllm-serve`` does; this module
sets it when it builds the ``vllm.LLM``) so they are taken after temperature
scaling, like :class:`~agent_trainers.policies.TransformersPolicy`'s (with
``top_p < 1`` vLLM also masks the tail before its processed log-probs; the
transformers policy does not).

Both are tested here against fakes that mimic vLLM's output types and the
server's endpoints (``tests/agent_trainers/policies/vllm_fakes.py``), never
against vLLM itself on a GPU: they warn when constructed.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from transformers import PreTrainedTokenizerBase

from agent_trainers.policies.sampling import FinishReason, Generation, SamplingParams, cut_at_stop, end_token_ids

__all__ = ["VLLM_VERSION", "VLLMPolicy", "VLLMServerPolicy", "request_seed"]

VLLM_VERSION = "0.31.0"
"""The vLLM release of the ``vllm`` extra (the newest TRL 1.16 accepts; it requires torch 2.13.0)."""

_EXPERIMENTAL = (
    "{name} is experimental: it has been tested against fakes of vLLM only, never on a GPU; compare its "
    "log-probs with TransformersPolicy's on your model before training with it"
)


def request_seed(seed: int, call: int, index: int) -> int:
    """The sampling seed of prompt ``index`` in generate call ``call`` (distinct per prompt and call)."""
    return seed + 1_000_003 * call + index


def _finish(
    ids: Sequence[int],
    lps: Sequence[float],
    tokenizer: PreTrainedTokenizerBase,
    params: SamplingParams,
    end_ids: set[int],
    engine_stopped: bool,
) -> Generation:
    """Cut a vLLM completion by our stop rule and wrap it (vLLM keeps the ids after a stop string's token)."""
    ids, lps = [int(t) for t in ids], [float(x) for x in lps]
    if len(lps) != len(ids):
        raise RuntimeError(f"vLLM returned {len(lps)} log-probs for {len(ids)} tokens")
    n, stopped = cut_at_stop(ids, tokenizer, params.stop, end_ids)
    finish = FinishReason.STOP if stopped or engine_stopped else FinishReason.LENGTH
    return Generation(token_ids=ids[:n], logprobs=lps[:n], finish_reason=finish)


class VLLMPolicy:
    """A colocated ``vllm.LLM`` (extra ``vllm==0.31.0``) as a :class:`~agent_trainers.policies.TokenPolicy`.

    Prompts go in as ``TokensPrompt`` s, one ``vllm.SamplingParams`` each (own
    seed, ``logprobs=0``: the sampled token's log-prob), and the sampled
    ``token_ids`` come back unchanged, cut by the same stop rule as every backend.

    Args:
        model: A model name or path for ``vllm.LLM``, or a ready engine (e.g.
            ``trainer.vllm_generation.llm`` of TRL's colocate mode).
        tokenizer: The matching Hugging Face tokenizer (from :func:`~agent_trainers.policies.load_tokenizer`).
        seed: Base seed (see :func:`request_seed`).
        **llm_kwargs: Passed to ``vllm.LLM`` when ``model`` is a name (with
            ``logprobs_mode="processed_logprobs"`` and ``enable_prefix_caching=True``
            unless given).

    Example:
        >>> from agent_trainers.policies import load_tokenizer
        >>> name = "Qwen/Qwen2.5-3B-Instruct"
        >>> policy = VLLMPolicy(name, load_tokenizer(name), gpu_memory_utilization=0.4)  # doctest: +SKIP
    """

    def __init__(self, model: Any, tokenizer: PreTrainedTokenizerBase, *, seed: int = 0, **llm_kwargs: Any):
        try:
            import vllm
            from vllm.inputs import TokensPrompt
        except ImportError as exc:
            hint = f"pip install 'agent-r1-gym[vllm]' (vllm=={VLLM_VERSION})"
            raise ImportError(f"VLLMPolicy needs vLLM: {hint}") from exc
        warnings.warn(_EXPERIMENTAL.format(name="VLLMPolicy"), stacklevel=2)
        self._vllm, self._tokens_prompt = vllm, TokensPrompt
        self.tokenizer, self.seed, self.calls = tokenizer, seed, 0
        if isinstance(model, str):
            llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
            # each turn's prompt is the previous turn's prompt + generation + the env's tokens: with prefix
            # caching vLLM prefills only the new tokens (what TransformersPolicy's per-episode KV cache does)
            llm_kwargs.setdefault("enable_prefix_caching", True)
            model = vllm.LLM(model=model, seed=seed, **llm_kwargs)
        self.llm = model
        self._end_ids = end_token_ids(tokenizer)

    def _sampling_params(self, params: SamplingParams, seed: int) -> Any:
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k or -1,
            stop=list(params.stop) or None,
            stop_token_ids=sorted(self._end_ids),
            include_stop_str_in_output=True,
            skip_special_tokens=False,
            logprobs=0,
            seed=seed,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt with ``vllm.LLM.generate`` (one batch, one seed per prompt)."""
        call, self.calls = self.calls, self.calls + 1
        per_prompt = [self._sampling_params(params, request_seed(self.seed, call, i)) for i in range(len(prompts))]
        token_prompts = [self._tokens_prompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(token_prompts, per_prompt, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        return [self._convert(o.outputs[0], params) for o in outputs]

    def _convert(self, completion: Any, params: SamplingParams) -> Generation:
        ids = list(completion.token_ids)
        steps = completion.logprobs or []
        lps = [float(step[tok].logprob) for tok, step in zip(ids, steps, strict=False)]
        return _finish(ids, lps, self.tokenizer, params, self._end_ids, completion.finish_reason == "stop")


class VLLMServerPolicy:
    """A vLLM server (``trl vllm-serve`` / ``vllm serve``) through TRL's ``VLLMClient``, as a token policy.

    Each prompt is one ``client.generate(prompts=[ids], n=1, logprobs=0, ...)``
    call with its own seed, stop strings and end-of-turn ids passed as vLLM
    request fields (``generation_kwargs``); up to ``max_concurrency`` run at once.

    Args:
        client: A ``trl.generation.vllm_client.VLLMClient`` (or an object with its ``generate`` signature),
            e.g. ``trainer.vllm_generation.vllm_client`` on the main process.
        tokenizer: The tokenizer of the served model.
        seed: Base seed (see :func:`request_seed`).
        max_concurrency: Requests in flight at once.

    Example:
        >>> from agent_trainers.rollout import rollout
        >>> policy = VLLMServerPolicy.connect("http://127.0.0.1:8000", tok)  # doctest: +SKIP
        >>> trajs = rollout(policy, "AgentR1/HotpotQA-v0", task_indices=[0, 1], group_size=4)  # doctest: +SKIP
    """

    def __init__(
        self, client: Any, tokenizer: PreTrainedTokenizerBase, *, seed: int = 0, max_concurrency: int = 64
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 (got {max_concurrency})")
        warnings.warn(_EXPERIMENTAL.format(name="VLLMServerPolicy"), stacklevel=2)
        self.client, self.tokenizer = client, tokenizer
        self.seed, self.calls, self.max_concurrency = seed, 0, max_concurrency
        self._end_ids = end_token_ids(tokenizer)

    @classmethod
    def connect(
        cls, base_url: str, tokenizer: PreTrainedTokenizerBase, *, seed: int = 0, connection_timeout: float = 0.0
    ) -> VLLMServerPolicy:
        """Open TRL's ``VLLMClient`` on ``base_url`` (e.g. ``http://127.0.0.1:8000``) and wrap it.

        Raises:
            ImportError: TRL's client refuses to start without vLLM installed (``pip install 'agent-r1-gym[vllm]'``).
            ConnectionError: The server did not answer ``/health`` within ``connection_timeout`` seconds.
        """
        from trl.generation.vllm_client import VLLMClient

        return cls(VLLMClient(base_url=base_url, connection_timeout=connection_timeout), tokenizer, seed=seed)

    def _request(self, prompt: list[int], params: SamplingParams, seed: int) -> Generation:
        extra = {
            "seed": seed,
            "stop_token_ids": sorted(self._end_ids),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if params.stop:
            extra["stop"] = list(params.stop)
        out = self.client.generate(
            prompts=[list(prompt)],
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k or -1,
            max_tokens=params.max_new_tokens,
            logprobs=0,
            generation_kwargs=extra,
        )
        (ids,) = out["completion_ids"]
        if out.get("logprobs") is None:
            raise RuntimeError("the vLLM server returned no log-probs (it was asked for logprobs=0)")
        (per_position,), (per_position_ids,) = out["logprobs"], out["logprob_token_ids"]
        positions = zip(ids, per_position, per_position_ids, strict=False)  # a short list fails in _finish
        lps = [_sampled_logprob(tok, lp, lp_ids) for tok, lp, lp_ids in positions]
        return _finish(ids, lps, self.tokenizer, params, self._end_ids, engine_stopped=False)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt (concurrent requests, results in prompt order)."""
        call, self.calls = self.calls, self.calls + 1
        seeds = [request_seed(self.seed, call, i) for i in range(len(prompts))]
        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            jobs = [(p, params, s) for p, s in zip(prompts, seeds, strict=True)]
            return list(pool.map(lambda job: self._request(*job), jobs))


def _sampled_logprob(token: int, logprobs: Sequence[float | None], token_ids: Sequence[int]) -> float:
    """The log-prob of the sampled ``token`` among a position's ranked entries (TRL's ``parse_logprobs`` layout)."""
    for tid, lp in zip(token_ids, logprobs, strict=True):
        if int(tid) == int(token):
            if lp is None:
                raise RuntimeError(f"the vLLM server returned NaN as the log-prob of sampled token {token}")
            return float(lp)
    raise RuntimeError(f"the vLLM server returned no log-prob for sampled token {token}")
