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

from agent_trainers.policies.loader import (
    MODEL_NAMES,
    Device,
    cache_root,
    load_model,
    load_tokenizer,
    prepare_tokenizer,
    resolve_device,
    resolve_dtype,
    smollm2_gguf_path,
    tiny_random_model,
    tool_chat_template,
)
from agent_trainers.policies.openai_policy import EndpointError, OpenAIPolicy
from agent_trainers.policies.sampling import (
    ChatPolicy,
    FinishReason,
    Generation,
    SamplingParams,
    SessionPolicy,
    TokenPolicy,
    cut_at_stop,
    end_of_turn_id,
    end_token_ids,
)
from agent_trainers.policies.scripted import ScriptedPolicy
from agent_trainers.policies.transformers_policy import TransformersPolicy
from agent_trainers.policies.vllm_policy import VLLMPolicy, VLLMServerPolicy

__all__ = [
    "MODEL_NAMES",
    "ChatPolicy",
    "Device",
    "EndpointError",
    "FinishReason",
    "Generation",
    "OpenAIPolicy",
    "SamplingParams",
    "ScriptedPolicy",
    "SessionPolicy",
    "TokenPolicy",
    "TransformersPolicy",
    "VLLMPolicy",
    "VLLMServerPolicy",
    "cache_root",
    "cut_at_stop",
    "end_of_turn_id",
    "end_token_ids",
    "load_model",
    "load_tokenizer",
    "prepare_tokenizer",
    "resolve_device",
    "resolve_dtype",
    "smollm2_gguf_path",
    "tiny_random_model",
    "tool_chat_template",
]
