"""Test env ids for Ray actors, registered by a light import (no torch): ``Test/RaySlowLookup-v0``."""

from __future__ import annotations

import gymnasium as gym

from agent_gym.envs import _STOP_REASON
from tests.conftest import SlowLookupEnv

SLOW_ID = "Test/RaySlowLookup-v0"


def register() -> None:
    """Register :data:`SLOW_ID` (idempotent; the pool runs it in each actor)."""
    if SLOW_ID not in gym.registry:
        gym.register(SLOW_ID, entry_point=SlowLookupEnv, max_episode_steps=4, additional_wrappers=(_STOP_REASON,))
