"""Shared helpers for the adapter tests: the native reference run each adapter must reproduce."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import pytest

import agent_gym
from agent_gym.envs import REGISTRY

ENV_IDS = [entry.id for entry in REGISTRY]


@dataclass
class NativeRun:
    """The oracle's episode on ``gymnasium.make(env_id)``, played directly."""

    actions: list[str]
    rewards: list[float]
    raw_totals: dict[str, float]
    metrics: dict[str, float] | None
    stop_reason: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def episode_return(self) -> float:
        return sum(self.rewards)


def native_oracle_run(env_id: str, task_index: int, seed: int = 0, **env_kwargs: Any) -> NativeRun:
    """Play the env's oracle on the plain Gymnasium env (the reference for every adapter)."""
    assert agent_gym  # registers the ids
    env = gym.make(env_id, **env_kwargs)
    _, info = env.reset(seed=seed, options={"task_index": task_index})
    run = NativeRun([], [], {t.name: 0.0 for t in env.unwrapped.rubric.terms}, None, None, list(info["messages"]))
    done = False
    while not done:
        action = env.unwrapped.oracle_action()
        _, reward, terminated, truncated, info = env.step(action)
        run.actions.append(action)
        run.rewards.append(reward)
        for name, value in info["reward_raw"].items():
            run.raw_totals[name] += value
        done = terminated or truncated
    run.metrics, run.stop_reason = info.get("metrics"), info["stop_reason"]
    env.close()
    return run


@pytest.fixture(params=ENV_IDS)
def env_id(request: pytest.FixtureRequest) -> str:
    return request.param
