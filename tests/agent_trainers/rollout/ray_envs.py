"""Test env ids for Ray actors, registered by a light import (no torch): ``Test/RaySlowLookup-v0``,
``Test/RayFaultyLookup-v0`` (task 0 kills its actor's process or hangs on its first step)."""

from __future__ import annotations

import os
import time

import gymnasium as gym

from agent_gym.envs import _STOP_REASON
from tests.conftest import SlowLookupEnv

SLOW_ID = "Test/RaySlowLookup-v0"
FAULTY_ID = "Test/RayFaultyLookup-v0"


class FaultyLookupEnv(SlowLookupEnv):
    """On task 0 the first step ``fault``s: ``"die"`` ends the process (as ``kill -9`` would), ``"hang"`` sleeps
    ``hang_s``; every other task is a plain lookup."""

    def __init__(self, fault: str = "die", hang_s: float = 30.0, **kwargs):
        super().__init__(latency_s=0.0, **kwargs)
        self.fault, self.hang_s, self.task_index = fault, hang_s, None

    def reset(self, *, seed=None, options=None):
        self.task_index = (options or {}).get("task_index", 0)
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        if self.task_index == 0:
            if self.fault == "die":
                os._exit(1)
            time.sleep(self.hang_s)
        return super().step(action)


def register() -> None:
    """Register :data:`SLOW_ID` and :data:`FAULTY_ID` (idempotent; the pool runs it in each actor)."""
    for env_id, cls in ((SLOW_ID, SlowLookupEnv), (FAULTY_ID, FaultyLookupEnv)):
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=cls, max_episode_steps=4, additional_wrappers=(_STOP_REASON,))
