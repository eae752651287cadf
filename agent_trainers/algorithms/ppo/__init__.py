"""Our PPO (TRL 1.x has none): a critic, GAE over the agent's tokens, the clipped losses.

* :mod:`.config` - :class:`PPOConfig` (the ``ppo:`` section);
* :mod:`.trainer` - :class:`PPOTrainer`, read top to bottom like CleanRL's ``ppo.py``;
* :mod:`.batch` - :class:`PPOBatch`, one step's episodes as tensors, and a stale batch's importance weights;
* :mod:`.core` - GAE, whitening, the clipped losses, KL estimators (pure tensor functions);
* :mod:`.actor_critic` - the policy and its critic as one module.

It reads :mod:`..shared` only; it never imports the TRL adapter (:mod:`..trl_adapter`).
Names are imported lazily (``from agent_trainers.algorithms.ppo import PPOConfig`` loads no trainer).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "PPOTrainer": "trainer",
    "PPOBatch": "batch",
    "PPOConfig": "config",
    "KLPlacement": "config",
    "CriticKind": "config",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
