"""Generation backends behind one sampling type, and the one model loader (the lowest trainer layer).

* :class:`SamplingParams`, :class:`Generation`, the :class:`TokenPolicy` /
  :class:`SessionPolicy` / :class:`ChatPolicy` protocols and the stop rules (:mod:`.sampling`);
* :class:`TransformersPolicy` (any ``transformers`` causal LM; per-episode KV
  caches across turns, :mod:`.kv_cache`), :class:`VLLMPolicy`
  and :class:`VLLMServerPolicy` (experimental, GPU), :class:`OpenAIPolicy` (any OpenAI-compatible server,
  evaluation only), :class:`ScriptedPolicy` (tests, scripted baselines);
* :func:`load_model` / :func:`load_tokenizer`: ``smollm2``, ``tiny-random``, a
  folder or a Hugging Face id, with chat template, padding, dtype and device set.

This layer imports nothing else from ``agent_trainers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from agent_trainers.policies.cache import (
        cache_root as cache_root,
    )
    from agent_trainers.policies.device import (
        Device as Device,
    )
    from agent_trainers.policies.device import (
        bf16_enabled as bf16_enabled,
    )
    from agent_trainers.policies.device import (
        cpu_has_native_bf16 as cpu_has_native_bf16,
    )
    from agent_trainers.policies.device import (
        resolve_device as resolve_device,
    )
    from agent_trainers.policies.loader import (
        MODEL_NAMES as MODEL_NAMES,
    )
    from agent_trainers.policies.loader import (
        load_model as load_model,
    )
    from agent_trainers.policies.loader import (
        load_tokenizer as load_tokenizer,
    )
    from agent_trainers.policies.loader import (
        prepare_tokenizer as prepare_tokenizer,
    )
    from agent_trainers.policies.loader import (
        resolve_dtype as resolve_dtype,
    )
    from agent_trainers.policies.loader import (
        smollm2_gguf_path as smollm2_gguf_path,
    )
    from agent_trainers.policies.loader import (
        tiny_random_model as tiny_random_model,
    )
    from agent_trainers.policies.loader import (
        tool_chat_template as tool_chat_template,
    )
    from agent_trainers.policies.openai_policy import (
        EndpointError as EndpointError,
    )
    from agent_trainers.policies.openai_policy import (
        OpenAIPolicy as OpenAIPolicy,
    )
    from agent_trainers.policies.sampling import (
        ChatPolicy as ChatPolicy,
    )
    from agent_trainers.policies.sampling import (
        FinishReason as FinishReason,
    )
    from agent_trainers.policies.sampling import (
        Generation as Generation,
    )
    from agent_trainers.policies.sampling import (
        SamplingParams as SamplingParams,
    )
    from agent_trainers.policies.sampling import (
        SessionPolicy as SessionPolicy,
    )
    from agent_trainers.policies.sampling import (
        TokenPolicy as TokenPolicy,
    )
    from agent_trainers.policies.sampling import (
        cut_at_stop as cut_at_stop,
    )
    from agent_trainers.policies.sampling import (
        end_of_turn_id as end_of_turn_id,
    )
    from agent_trainers.policies.sampling import (
        end_token_ids as end_token_ids,
    )
    from agent_trainers.policies.scripted import (
        ScriptedPolicy as ScriptedPolicy,
    )
    from agent_trainers.policies.transformers_policy import (
        TransformersPolicy as TransformersPolicy,
    )
    from agent_trainers.policies.vllm_policy import (
        VLLMPolicy as VLLMPolicy,
    )
    from agent_trainers.policies.vllm_policy import (
        VLLMServerPolicy as VLLMServerPolicy,
    )

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "cache": ["cache_root"],
        "device": ["Device", "bf16_enabled", "cpu_has_native_bf16", "resolve_device"],
        "loader": [
            "MODEL_NAMES",
            "load_model",
            "load_tokenizer",
            "prepare_tokenizer",
            "resolve_dtype",
            "smollm2_gguf_path",
            "tiny_random_model",
            "tool_chat_template",
        ],
        "openai_policy": ["EndpointError", "OpenAIPolicy"],
        "sampling": [
            "ChatPolicy",
            "FinishReason",
            "Generation",
            "SamplingParams",
            "SessionPolicy",
            "TokenPolicy",
            "cut_at_stop",
            "end_of_turn_id",
            "end_token_ids",
        ],
        "scripted": ["ScriptedPolicy"],
        "transformers_policy": ["TransformersPolicy"],
        "vllm_policy": ["VLLMPolicy", "VLLMServerPolicy"],
    },
)
