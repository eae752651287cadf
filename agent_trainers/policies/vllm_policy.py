"""vLLM generation for GPU users: :class:`VLLMPolicy` (experimental).

Written against vLLM's documented API but never run by this project's CI (no
GPU, no vLLM wheel there); it warns when constructed.
"""

from __future__ import annotations

import warnings
from typing import Any

from transformers import PreTrainedTokenizerBase

from agent_trainers.policies.sampling import FinishReason, Generation, SamplingParams, cut_at_stop, end_token_ids

__all__ = ["VLLMPolicy"]


class VLLMPolicy:
    """vLLM generation (extra ``vllm==0.31.0``) behind the :class:`~agent_trainers.policies.TokenPolicy` interface.

    Prompts go in as ``TokensPrompt`` s and the sampled ``token_ids`` come back
    unchanged; ``SamplingParams(logprobs=0)`` returns the sampled token's
    log-prob, with ``logprobs_mode="processed_logprobs"`` so that it is taken
    after temperature scaling, matching :class:`~agent_trainers.policies.TransformersPolicy`
    (vLLM also applies top-p before its processed log-probs; with ``top_p=1`` both agree).

    Args:
        model: A model name or path for ``vllm.LLM``, or a ready ``vllm.LLM``.
        tokenizer: The matching Hugging Face tokenizer (from :func:`~agent_trainers.policies.load_tokenizer`).
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
        self.tokenizer, self.seed, self.calls = tokenizer, seed, 0
        if isinstance(model, str):
            llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
            model = vllm.LLM(model=model, seed=seed, **llm_kwargs)
        self.llm = model
        self._end_ids = end_token_ids(tokenizer)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt with ``vllm.LLM.generate``."""
        vllm_params = self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            stop=list(params.stop) or None,
            stop_token_ids=sorted(self._end_ids),
            include_stop_str_in_output=True,
            skip_special_tokens=False,
            logprobs=0,
            seed=self.seed + self.calls,
        )
        self.calls += 1
        token_prompts = [self._tokens_prompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(token_prompts, vllm_params, use_tqdm=False)
        return [self._convert(o.outputs[0], params) for o in outputs]

    def _convert(self, completion: Any, params: SamplingParams) -> Generation:
        ids = list(completion.token_ids)
        lps = [float(step[tok].logprob) for tok, step in zip(ids, completion.logprobs or [], strict=False)]
        if len(lps) != len(ids):
            raise RuntimeError(f"vLLM returned {len(lps)} log-probs for {len(ids)} tokens")
        n, stopped = cut_at_stop(ids, self.tokenizer, params.stop, self._end_ids)
        finish = FinishReason.STOP if stopped or completion.finish_reason == "stop" else FinishReason.LENGTH
        return Generation(token_ids=ids[:n], logprobs=lps[:n], finish_reason=finish)
