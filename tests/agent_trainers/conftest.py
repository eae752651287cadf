"""Shared fixtures for agent_trainers tests: SmolLM2's tokenizer, a tiny random model, test envs.

The tokenizer is loaded once per session from the safetensors cache (the first
run ever converts the shipped GGUF file, ~20 s). ``Test/Lookup-v0`` is the
LookupEnv of ``tests/conftest.py`` registered like our envs (TimeLimit + stop
reason); ``Test/SlowLookup-v0`` sleeps ``latency_s`` in every step;
``Test/UnevenLookup-v0`` cuts task ``i`` after ``i + 1`` steps.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from agent_gym.envs import _STOP_REASON
from agent_trainers.policies import load_tokenizer, tiny_random_model
from tests.conftest import LookupEnv, SlowLookupEnv, torch_threads

LOOKUP_ID = "Test/Lookup-v0"
SLOW_LOOKUP_ID = "Test/SlowLookup-v0"
UNEVEN_ID = "Test/UnevenLookup-v0"


class UnevenLookupEnv(LookupEnv):
    """LookupEnv whose task ``i`` is cut (truncated) after ``i + 1`` steps: episodes end at different turns."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.steps_left = int((options or {}).get("task_index", 0)) + 1
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps_left -= 1
        return obs, reward, terminated, truncated or self.steps_left == 0, info


def register_test_envs() -> None:
    """Register the test envs with Gymnasium (idempotent)."""
    for env_id, cls in ((LOOKUP_ID, LookupEnv), (SLOW_LOOKUP_ID, SlowLookupEnv), (UNEVEN_ID, UnevenLookupEnv)):
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=cls, max_episode_steps=4, additional_wrappers=(_STOP_REASON,))


register_test_envs()


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer with the ChatML tool template (session-cached)."""
    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def tiny_model(smollm2_tokenizer):
    """``(model, tokenizer)``: a 2-layer random Llama over SmolLM2's tokenizer (session-cached)."""
    return tiny_random_model(smollm2_tokenizer, seed=0)


@pytest.fixture(scope="module")
def one_thread():
    """Run torch on one thread for a module's tests: a tiny model is several times faster so on a busy 2-core box."""
    with torch_threads(1):
        yield


def advantages_of(batch: Any, algorithm: str, *, kl_coef: float = 0.0, kl: Any = None, **section: Any) -> Any:
    """``compute_advantages`` with the algorithm's section built from ``section`` (its fields: ``advantage``,
    ``gamma``, ``scale_rewards``, ``step_weight``, ...); ``advantage`` defaults to ``outcome`` here."""
    from agent_trainers.algorithms.shared.advantages import ESTIMATORS, compute_advantages

    if algorithm not in ESTIMATORS:
        return compute_advantages(batch, algorithm, None, kl_coef=kl_coef, kl=kl)
    section_type = ESTIMATORS[algorithm].settings
    given = {"advantage": "outcome", **section}  # rft has no advantage mode: its section takes what it has
    settings = section_type(**{k: v for k, v in given.items() if k in section_type.model_fields})
    return compute_advantages(batch, algorithm, settings, kl_coef=kl_coef, kl=kl)
