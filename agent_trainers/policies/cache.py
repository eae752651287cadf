"""Where the package keeps files it makes once (the SmolLM2 checkpoint converted from its GGUF file).

Imports nothing heavy, so that a command that only reads the cache (``agent-r1 view``) starts at once.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SMOLLM2_CACHE", "cache_root", "smollm2_cache_dir", "smollm2_tokenizer_cache_dir"]

SMOLLM2_CACHE = "smollm2-135m-instruct"
"""The folder, under :func:`cache_root`, of the SmolLM2 checkpoint converted from the shipped GGUF file."""


def cache_root() -> Path:
    """``$AGENT_R1_CACHE`` if set, else ``~/.cache/agent-r1``."""
    env = os.environ.get("AGENT_R1_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agent-r1"


def smollm2_cache_dir() -> Path:
    """The SmolLM2 checkpoint's folder (it may not exist yet: the first load of ``smollm2`` writes it)."""
    return cache_root() / SMOLLM2_CACHE


def smollm2_tokenizer_cache_dir() -> Path:
    """SmolLM2's tokenizer alone, converted from the GGUF file (~20 s on 2 cores, where the whole checkpoint takes
    ~75 s): what loading the tokenizer (and ``tiny-random``) reads until the checkpoint's folder exists."""
    return cache_root() / f"{SMOLLM2_CACHE}-tokenizer"
