"""Our PPO (TRL 1.x has none): a critic, GAE over the agent's tokens, the clipped losses.

* :mod:`.config` - :class:`PPOConfig` (the ``ppo:`` section);
* :mod:`.trainer` - :class:`PPOTrainer`, read top to bottom like CleanRL's ``ppo.py`` (it reads the one
  batch type, :class:`~agent_trainers.algorithms.shared.batch.AgentBatch`, as it is);
* :mod:`.core` - GAE, whitening, the clipped losses, KL estimators (pure tensor functions);
* :mod:`.actor_critic` - the policy and its critic as one module.

It reads :mod:`..shared` only; it never imports the TRL adapter (:mod:`..trl_adapter`).
Names are imported lazily (``from agent_trainers.algorithms.ppo import PPOConfig`` loads no trainer).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "config": ["CriticKind", "KLPlacement", "PPOConfig", "ValueLevel"],
        "trainer": ["PPOTrainer"],
    },
)
