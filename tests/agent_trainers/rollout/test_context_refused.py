"""Until the trainers train per step, a context policy other than ``append`` is refused where the history is
concatenated (the engine would show the model the whole history while the env and the trajectory record the
policy's view)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agent_gym.integrations.session import EnvSession
from agent_trainers.policies import tiny_random_model
from agent_trainers.policies.transformers_policy import TransformersPolicy
from agent_trainers.rollout import RolloutConfig, rollout

VIEWS = [{"context": "window", "context_turns": 2}, {"context": "fold", "context_turns": 1}]


@pytest.mark.parametrize("context", VIEWS)
def test_the_engine_refuses_a_view_it_would_not_show(context, one_thread):
    model, tok = tiny_random_model(seed=0)
    with pytest.raises(ValueError, match=rf"the rollout engine .* this env's context is '{context['context']}'"):
        rollout(TransformersPolicy(model, tok), "AgentR1/Calculator-v0", task_indices=[0], env_kwargs=context,
                config=RolloutConfig(max_new_tokens_per_turn=4))  # fmt: skip
    assert rollout(TransformersPolicy(model, tok), "AgentR1/Calculator-v0", task_indices=[0],
                   env_kwargs={"context": "append"}, config=RolloutConfig(max_new_tokens_per_turn=4))  # fmt: skip


def test_the_adapters_session_refuses_it_too():
    with pytest.raises(ValueError, match=r"EnvSession .* this env's context is 'window'"):
        EnvSession(gym.make("AgentR1/Calculator-v0", context="window", context_turns=2))
    assert EnvSession(gym.make("AgentR1/Calculator-v0")).done is False
