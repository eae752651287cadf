"""Cold-start SFT on oracle trajectories (TRL's ``SFTTrainer`` on pre-tokenized rows): :mod:`.cold_start`; the
trainer, its LM head on the taught positions only where TRL's runs on every one: :mod:`.trainer`.

Names are imported lazily (``from agent_trainers.algorithms.sft import run_sft``).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "cold_start": ["OracleEpisode", "make_sft_config", "oracle_episodes", "run_sft", "tokenize_episode"],
        "trainer": ["AgentSFTTrainer", "TaughtPositionsPolicy"],
    },
)
