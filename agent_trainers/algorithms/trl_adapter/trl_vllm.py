"""Our rollouts on TRL's vLLM engine (``GRPOConfig(use_vllm=True, vllm_mode=...)``), experimental.

When the trainer runs with ``use_vllm=True``, TRL builds and owns the engine
and, before every call of the rollout function, pushes the current weights
into it. :func:`trl_vllm_policy` hands that engine to the rollout engine as a
:class:`~agent_trainers.policies.TokenPolicy`:

* ``vllm_mode="colocate"``: :class:`~agent_trainers.policies.VLLMPolicy` over
  ``trainer.vllm_generation.llm`` (one ``vllm.LLM`` per training process);
* ``vllm_mode="server"`` (``trl vllm-serve``): :class:`~agent_trainers.policies.VLLMServerPolicy`
  over TRL's ``VLLMClient``. TRL opens that client on the main process only, so
  the other processes open their own (HTTP only: the weights travel over the
  main process's NCCL group). All processes first wait for each other, so no
  process samples before the main one has pushed the new weights.

Not supported: ``vllm_enable_sleep_mode`` (TRL wakes its sleeping engine only
inside its own generate call).
"""

from __future__ import annotations

from typing import Any

from agent_trainers.policies.sampling import TokenPolicy
from agent_trainers.policies.vllm_policy import VLLMPolicy, VLLMServerPolicy

__all__ = ["trl_vllm_policy"]

_CLIENTS: dict[str, Any] = {}
"""One ``VLLMClient`` per server URL on processes where TRL opened none (they hold a connection pool)."""


def _server_url(generation: Any) -> str:
    if getattr(generation, "server_base_url", None):
        return str(generation.server_base_url)
    return f"http://{generation.server_host}:{generation.server_port}"


def _server_client(trainer: Any) -> Any:
    generation = trainer.vllm_generation
    client = getattr(generation, "vllm_client", None)
    if client is not None:
        return client
    url = _server_url(generation)
    if url not in _CLIENTS:
        from trl.generation.vllm_client import VLLMClient

        _CLIENTS[url] = VLLMClient(base_url=url, connection_timeout=float(generation.server_timeout))
    return _CLIENTS[url]


def trl_vllm_policy(trainer: Any, seed: int) -> TokenPolicy:
    """The token policy over the vLLM engine of a TRL trainer built with ``use_vllm=True``.

    Args:
        trainer: A ``GRPOTrainer`` (or subclass) whose ``use_vllm`` is True.
        seed: Base sampling seed of this rollout call (offset by the process index).

    Raises:
        ValueError: ``use_vllm`` is off, the mode is unknown, or sleep mode is on.
    """
    if not getattr(trainer, "use_vllm", False):
        raise ValueError("trl_vllm_policy needs a trainer built with use_vllm=True")
    generation = trainer.vllm_generation
    tokenizer = trainer.processing_class
    seed += 7_919 * int(trainer.accelerator.process_index)  # processes never share a request seed
    if generation.mode == "colocate":
        if getattr(generation, "enable_sleep_mode", False):
            raise ValueError(
                "vllm_enable_sleep_mode=True is not supported with EnvRolloutFunc: TRL wakes a sleeping engine only "
                "inside its own generate call; set vllm_enable_sleep_mode=False"
            )
        return VLLMPolicy(generation.llm, tokenizer, seed=seed)
    if generation.mode == "server":
        trainer.accelerator.wait_for_everyone()  # the main process has pushed the weights before anyone samples
        return VLLMServerPolicy(_server_client(trainer), tokenizer, seed=seed)
    raise ValueError(f"vllm_mode must be 'colocate' or 'server' (got {generation.mode!r})")
