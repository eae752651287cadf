"""Cold-start SFT on oracle trajectories (TRL's ``SFTTrainer`` on pre-tokenized rows): :mod:`.cold_start`.

Names are imported lazily (``from agent_trainers.algorithms.sft import run_sft``).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "cold_start": ["OracleEpisode", "make_sft_config", "oracle_episodes", "run_sft", "tokenize_episode"],
    },
)
