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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from agent_trainers.policies.cache import (
        cache_root as cache_root,
    )
    from agent_trainers.policies.device import (
        Device as Device,
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

_LAZY = {
    "ChatPolicy": "sampling",
    "Device": "device",
    "EndpointError": "openai_policy",
    "FinishReason": "sampling",
    "Generation": "sampling",
    "MODEL_NAMES": "loader",
    "OpenAIPolicy": "openai_policy",
    "SamplingParams": "sampling",
    "ScriptedPolicy": "scripted",
    "SessionPolicy": "sampling",
    "TokenPolicy": "sampling",
    "TransformersPolicy": "transformers_policy",
    "VLLMPolicy": "vllm_policy",
    "VLLMServerPolicy": "vllm_policy",
    "cache_root": "cache",
    "cut_at_stop": "sampling",
    "end_of_turn_id": "sampling",
    "end_token_ids": "sampling",
    "load_model": "loader",
    "load_tokenizer": "loader",
    "prepare_tokenizer": "loader",
    "resolve_device": "device",
    "resolve_dtype": "loader",
    "smollm2_gguf_path": "loader",
    "tiny_random_model": "loader",
    "tool_chat_template": "loader",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
