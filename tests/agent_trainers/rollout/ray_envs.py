"""Test env ids for Ray actors, registered by a light import (no torch): ``Test/RaySlowLookup-v0``."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from agent_gym.envs import _STOP_REASON
from tests.conftest import LookupEnv

SLOW_ID = "Test/RaySlowLookup-v0"


class SlowLookupEnv(LookupEnv):
    """LookupEnv whose every step first sleeps ``latency_s`` seconds."""

    def __init__(self, latency_s: float = 0.1, **kwargs: Any):
        super().__init__(**kwargs)
        self.latency_s = latency_s

    def step(self, action: str):
        time.sleep(self.latency_s)
        return super().step(action)


def register() -> None:
    """Register :data:`SLOW_ID` (idempotent; the pool runs it in each actor)."""
    if SLOW_ID not in gym.registry:
        gym.register(SLOW_ID, entry_point=SlowLookupEnv, max_episode_steps=4, additional_wrappers=(_STOP_REASON,))
