"""Cold-start SFT on oracle trajectories (TRL's ``SFTTrainer`` on pre-tokenized rows): :mod:`.cold_start`.

Names are imported lazily (``from agent_trainers.algorithms.sft import run_sft``).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "OracleEpisode": "cold_start",
    "make_sft_config": "cold_start",
    "oracle_episodes": "cold_start",
    "run_sft": "cold_start",
    "tokenize_episode": "cold_start",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
